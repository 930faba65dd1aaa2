"""The package's shape: imports go one way (cli -> report -> measure -> count -> config -> architecture), no import
circle among tfcalc/ and benchmarks/ (imports inside functions included), no module over 400 lines, nothing under
report/ prints, nothing below the model imports torch."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "tfcalc"
# rank of each layer: a module may import modules of its own rank or lower, never higher
RANKS = {
    "tfcalc.errors": 0, "tfcalc.units": 0, "tfcalc.amounts": 0, "tfcalc.name_lists": 0,
    "tfcalc.reading": 0, "tfcalc.writing": 0, "tfcalc.config_rules": 0, "tfcalc.config_moe": 0,
    "tfcalc.config_latent": 0, "tfcalc.config_derived": 0, "tfcalc.config_layers": 0, "tfcalc.config_gemma": 0,
    "tfcalc.config_quant": 0, "tfcalc.config_rope": 0,
    "tfcalc.architecture": 0,  # the description: below config, which builds it (imports tfcalc.errors only)
    "tfcalc.yaml_load": 1, "tfcalc.config": 1, "tfcalc.config_copies": 1,
    "tfcalc.config_groups": 0, "tfcalc.device_constants": 1, "tfcalc.devices": 1, "tfcalc.workload": 2,
    "tfcalc.hf_config": 2, "tfcalc.hub_cache": 2, "tfcalc.presets": 2, "tfcalc.count": 3, "tfcalc.checkpoint": 3,
    "tfcalc.model": 3, "tfcalc.measure": 4,
    "tfcalc.report": 5, "tfcalc.cli": 6, "tfcalc.notebook": 7, "tfcalc.__main__": 7, "tfcalc.api_args": 7, "tfcalc": 7,
}
# no torch, typer or rich: counting never pays for them (checkpoint headers are read with safetensors'
# numpy framework, no torch)
PURE = ("tfcalc.errors", "tfcalc.amounts", "tfcalc.name_lists",
        "tfcalc.architecture", "tfcalc.units", "tfcalc.reading", "tfcalc.writing", "tfcalc.yaml_load",
        "tfcalc.config_rules", "tfcalc.config_moe", "tfcalc.config_latent", "tfcalc.config_derived",
        "tfcalc.config_quant", "tfcalc.config_rope",
        "tfcalc.config_layers", "tfcalc.config_gemma", "tfcalc.config", "tfcalc.config_copies",
        "tfcalc.config_groups", "tfcalc.devices",
        "tfcalc.device_constants", "tfcalc.workload",
        "tfcalc.hf_config",
        "tfcalc.hub_cache", "tfcalc.presets", "tfcalc.count", "tfcalc.checkpoint")


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def rank(name: str) -> int:
    best = max((p for p in RANKS if name == p or name.startswith(p + ".")), key=len, default=None)
    assert best is not None, f"{name}: not in any layer of tests/test_layers.py; give it one"
    return RANKS[best]


def target_rank(target: str) -> int:
    """The root package is imported only for __version__ (its API imports lazily): no layer."""
    return 0 if target == "tfcalc" else rank(target)


def imports(path: Path, top_level_only: bool = False, known: dict[str, Path] | None = None) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    nodes = tree.body if top_level_only else list(ast.walk(tree))
    out = []
    for node in nodes:
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            # `from tfcalc import units` imports the module tfcalc.units; `from tfcalc.x import y`, tfcalc.x
            out += [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in (known or MODULES) else node.module
                    for a in node.names]
    return out


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


@pytest.mark.parametrize("name", sorted(MODULES))
def test_imports_go_one_way(name):
    for target in imports(MODULES[name]):
        if target.startswith("tfcalc") and (target in MODULES or target.rsplit(".", 1)[0] in MODULES):
            target = target if target in MODULES else target.rsplit(".", 1)[0]
            assert target_rank(target) <= rank(name), f"{name} (layer {rank(name)}) imports {target}"


@pytest.mark.parametrize("name", [n for n in sorted(MODULES) if n.startswith(PURE)])
def test_pure_layers_import_no_torch_typer_or_rich(name):
    heavy = [t for t in imports(MODULES[name]) if t.split(".")[0] in ("torch", "typer", "rich", "matplotlib")]
    assert not heavy, f"{name} imports {heavy}"


def import_graph(modules: dict[str, Path]) -> dict[str, set[str]]:
    """module -> the modules of ``modules`` it imports anywhere in its file: at the top, under TYPE_CHECKING
    and inside functions alike (an import deferred into a function is still a circle: issue 29 found four
    that the top-level view missed). ``from a import b`` is the module a.b where there is one, else a; a
    package's own ancestors (its __init__, run first by Python anyway) are no edge."""
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        targets = set()
        for t in imports(path, known=modules):
            while t and t not in modules:
                t = t.rpartition(".")[0]
            if t and t != name and not name.startswith(t + "."):
                targets.add(t)
        graph[name] = targets
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


# the scripts under benchmarks/ import each other by bare name (each puts its own folder on sys.path)
BENCHMARKS = {p.stem: p for p in sorted((PACKAGE.parent / "benchmarks").glob("*.py"))}


def test_no_import_circle():
    graph = import_graph({**MODULES, **BENCHMARKS})
    found = circles(graph)
    assert not found, "import circles (each: modules that import each other, at any depth): " + "; ".join(
        " <-> ".join(c) + " (" + ", ".join(f"{a} -> {b}" for a in c for b in sorted(graph[a]) if b in c) + ")"
        for c in found)


def test_the_circle_check_sees_imports_inside_functions_and_type_checking(tmp_path):
    """The check itself: a circle closed by a function-level import, one closed under TYPE_CHECKING, and a
    package importing its own submodule (no circle)."""
    files = {"a": "import b\n", "b": "def f():\n    from a import x\n",
             "c": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from d import y\n", "d": "import c\n",
             "e": "import f\n", "f": "import os\n",
             "pkg.__init__": "from pkg import sub\n", "pkg.sub": "from pkg import VALUE\n"}
    paths = {}
    for name, text in files.items():
        path = tmp_path / (name.replace(".", "_") + ".py")
        path.write_text(text)
        paths[name.removesuffix(".__init__")] = path
    graph = import_graph(paths)
    assert graph["pkg"] == {"pkg.sub"} and graph["pkg.sub"] == set()
    assert circles(graph) == [["a", "b"], ["c", "d"]]


# tfcalc.count's sub-packages, each importing only those before it (tfcalc/count/__init__.py)
COUNT_ORDER = ("model", "perf", "training", "serving")


@pytest.mark.parametrize("name", [n for n in sorted(MODULES) if n.startswith("tfcalc.count.")])
def test_count_sub_packages_import_one_way(name):
    own = COUNT_ORDER.index(name.split(".")[2])
    for target in imports(MODULES[name]):
        if target.startswith("tfcalc.count."):
            part = target.split(".")[2]
            assert COUNT_ORDER.index(part) <= own, f"{name} (tfcalc.count.{COUNT_ORDER[own]}) imports {target}"


@pytest.mark.parametrize("name", sorted(MODULES))
def test_no_module_over_400_lines(name):
    lines = MODULES[name].read_text(encoding="utf-8").count("\n")
    assert lines <= 400, f"{name}: {lines} lines"


@pytest.mark.parametrize("name", [n for n in sorted(MODULES) if n.startswith("tfcalc.report")])
def test_nothing_under_report_prints(name):
    tree = ast.parse(MODULES[name].read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            assert node.func.id != "print", f"{name}: print()"
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "sys":
            assert node.attr not in ("stdout", "stderr"), f"{name}: sys.{node.attr}"
    assert not [t for t in imports(MODULES[name]) if t.startswith(("rich", "typer", "tfcalc.cli"))], name


def test_every_package_ships():
    """pyproject.toml lists the packages by hand (the presets folder maps onto tfcalc.presets): a new
    package missing there would work in a source checkout and be absent from `pip install .`."""
    import tomllib

    listed = set(tomllib.loads((PACKAGE.parent / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    on_disk = {module_name(p) for p in PACKAGE.rglob("__init__.py")}
    assert on_disk <= listed, f"add to pyproject.toml [tool.setuptools] packages: {sorted(on_disk - listed)}"
