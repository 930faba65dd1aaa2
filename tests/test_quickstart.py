"""The README's Quickstart is what CI runs: its two commands, word for word, are lines .ci/run runs (in
order, each followed by a guard that stops the run when it fails), and the test command -- plain `pytest`,
which does not put the checkout on sys.path as `python -m pytest` does -- can import every test module."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def quickstart() -> list[str]:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    block = re.search(r"## Quickstart\n.*?```bash\n(.*?)```", readme, re.S)
    assert block, "README has no Quickstart block"
    return [line for line in block.group(1).splitlines() if line.strip()]


GUARD = "(exit $?)"  # after a Quickstart line: stops the run where `set -e` would not (a failure left of `&&`)


def ci_commands() -> list[str]:
    """The lines .ci/run runs, comments and blank lines dropped."""
    lines = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    return [line.strip() for line in lines if line.strip() and not line.lstrip().startswith("#")]


def test_quickstart_has_exactly_two_commands():
    assert quickstart() == ['pip install . && tfcalc params gpt3', 'pip install ".[test]" && pytest']


def test_ci_runs_the_quickstart_verbatim_in_order():
    commands = ci_commands()
    at = [commands.index(c) if c in commands else -1 for c in quickstart()]
    assert -1 not in at, f".ci/run does not run {quickstart()[at.index(-1)]!r} as written"
    assert at == sorted(at), "the Quickstart's commands run out of order in .ci/run"


def test_each_quickstart_line_in_ci_stops_the_run_when_it_fails():
    raw = [line.strip() for line in (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()]
    assert "set -euo pipefail" in raw
    commands = ci_commands()
    for command in quickstart():
        after = commands[commands.index(command) + 1]
        assert after == GUARD, f"{command!r}: set -e alone ignores a failed install left of &&"


def test_the_guard_stops_a_failure_left_of_and_that_set_e_ignores():
    """The guard's premise, run: under `set -e` a failure left of `&&` goes on to the next line, and the
    guard line stops the script there with that failure's status."""
    import subprocess

    def run(guard: str) -> subprocess.CompletedProcess:
        script = f"set -euo pipefail\n(exit 3) && true\n{guard}\necho reached\n"
        return subprocess.run(["bash", "-c", script], capture_output=True, text=True)

    assert run(":").stdout == "reached\n"  # set -e alone: on past the failed install
    unguarded, guarded = run(":"), run(GUARD)
    assert unguarded.returncode == 0 and guarded.returncode == 3 and guarded.stdout == ""


def test_no_test_module_imports_the_tests_folder_as_a_package():
    """`from tests.conftest import ...` works under `python -m pytest` (the checkout on sys.path) and fails
    under plain `pytest` with "No module named 'tests'": the helpers are imported by their own names
    (`from conftest import ...`), as pytest's rootdir-relative sys.path puts tests/ there."""
    offenders = []
    for path in sorted(ROOT.joinpath("tests").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
            offenders += [f"{path.relative_to(ROOT)}: {n}" for n in names if n.split(".")[0] == "tests"]
    assert not offenders, offenders
