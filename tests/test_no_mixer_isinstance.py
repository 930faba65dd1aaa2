"""No ``isinstance`` on a mixer kind outside the mixer's own module (issue 29; tfcalc.architecture.mixer): every
other module asks the mixer through its protocol, or asks its torch module (tfcalc.model.mixers), and never
tells the kinds apart by class. An AST scan of tfcalc/ finds the mixer classes -- every component class that
defines the whole of ``Mixer``'s methods, and every torch module class derived from ``MixerModule`` -- and
fails on ``isinstance`` / ``issubclass`` against one of them, or ``type(x) is/== K``, in any file but the ones
that define a class of that name (imports under another name followed)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "tfcalc"


def _trees(root: Path) -> dict[Path, ast.Module]:
    return {p: ast.parse(p.read_text(), str(p)) for p in sorted(root.rglob("*.py"))}


def _protocol_methods(trees: dict[Path, ast.Module]) -> set[str]:
    for tree in trees.values():
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef) and node.name == "Mixer":
                return {f.name for f in node.body if isinstance(f, ast.FunctionDef)}
    raise AssertionError("tfcalc.architecture.mixer.Mixer not found")


def _base_names(node: ast.ClassDef) -> set[str]:
    return {b.id if isinstance(b, ast.Name) else b.attr for b in node.bases if isinstance(b, (ast.Name, ast.Attribute))}


def mixer_classes(trees: dict[Path, ast.Module]) -> dict[str, set[Path]]:
    """{class name: the files defining a class of that name} for every mixer component and torch module class."""
    methods = _protocol_methods(trees)
    classes = [(p, n) for p, t in trees.items() for n in ast.walk(t) if isinstance(n, ast.ClassDef)]
    kinds: dict[str, set[Path]] = {}
    for path, node in classes:
        defined = {f.name for f in node.body if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))}
        if node.name != "Mixer" and methods <= defined:  # a component answering the whole protocol
            kinds.setdefault(node.name, set()).add(path)
    modules, grew = {"MixerModule"}, True
    while grew:  # torch mixer modules: MixerModule's subclasses, transitively
        grew = False
        for _, node in classes:
            if node.name not in modules and _base_names(node) & modules:
                modules.add(node.name)
                grew = True
    for path, node in classes:
        if node.name in modules - {"MixerModule"}:
            kinds.setdefault(node.name, set()).add(path)
    return kinds


def _aliases(tree: ast.Module, kinds: dict[str, set[Path]]) -> dict[str, str]:
    """{local name: mixer class} for the names this file binds to a mixer class (``import K as Alias``)."""
    out = {k: k for k in kinds}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            for a in node.names:
                if a.name in kinds and a.asname:
                    out[a.asname] = a.name
    return out


def _named(expr: ast.AST, names: dict[str, str]) -> list[str]:
    """The mixer classes an isinstance target names (a name, a module attribute, a tuple of them)."""
    parts = expr.elts if isinstance(expr, ast.Tuple) else [expr]
    out = []
    for e in parts:
        name = e.id if isinstance(e, ast.Name) else e.attr if isinstance(e, ast.Attribute) else None
        if name in names:
            out.append(names[name])
    return out


def violations(root: Path = ROOT) -> list[str]:
    trees = _trees(root)
    kinds = mixer_classes(trees)
    found = []
    for path, tree in trees.items():
        names = _aliases(tree, kinds)
        for node in ast.walk(tree):
            targets: list[ast.AST] = []
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in (
                    "isinstance", "issubclass") and len(node.args) == 2:
                targets = [node.args[1]]
            elif isinstance(node, ast.Compare) and isinstance(node.left, ast.Call) and isinstance(
                    node.left.func, ast.Name) and node.left.func.id == "type":
                targets = [c for op, c in zip(node.ops, node.comparators, strict=True)
                           if isinstance(op, (ast.Is, ast.Eq, ast.IsNot, ast.NotEq, ast.In))]
            for target in targets:
                for kind in _named(target, names):
                    if path not in kinds[kind]:
                        found.append(f"{path.relative_to(root.parent)}:{node.lineno}: {kind}")
    return found


def test_the_scan_finds_every_mixer_class():
    kinds = mixer_classes(_trees(ROOT))
    files = {k: sorted(str(p.relative_to(ROOT)) for p in v) for k, v in kinds.items()}
    assert files["LatentAttention"] == ["architecture/latent.py", "model/latent.py"]
    assert files["Attention"] == ["architecture/attention.py", "model/layers.py"]
    assert files["CrossAttention"] == ["model/layers.py"]


def test_no_isinstance_on_a_mixer_kind_outside_its_own_module():
    assert violations() == []


def test_the_scan_fails_on_a_planted_dispatch(tmp_path):
    """A copy of tfcalc/ with the dispatch Block had before the protocol (and two more ways to write it)."""
    planted = tmp_path / "tfcalc"
    for p in ROOT.rglob("*.py"):
        dest = planted / p.relative_to(ROOT)
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_text(p.read_text())
    (planted / "model" / "planted.py").write_text(
        "from tfcalc.architecture import LatentAttention as LatentSpec\n"
        "from tfcalc.model import layers\n\n\n"
        "def build(spec, module):\n"
        "    latent = isinstance(spec.attention, LatentSpec)\n"
        "    cross = isinstance(module, (int, layers.CrossAttention))\n"
        "    return latent, cross, type(module) is layers.Attention\n")
    assert violations(planted) == ["tfcalc/model/planted.py:6: LatentAttention",
                                   "tfcalc/model/planted.py:7: CrossAttention",
                                   "tfcalc/model/planted.py:8: Attention"]
