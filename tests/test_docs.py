"""The README a newcomer reads in five minutes, and the docs/ pages it links: the README stays short, links
every page (and every link of every page resolves), its one output is what the command prints today, its
model list covers every preset and every Hugging Face type tfcalc reads; docs/api.md's example prints what
its comments say; docs/contributing.md names files that exist. (The commands of every page are run by
tests/test_docs_commands.py; the calibration table and the README's summary of it by test_calibration.py.)"""

from __future__ import annotations

import contextlib
import io
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")
PAGES = sorted((ROOT / "docs").glob("*.md"))
MAX_WORDS = 3500  # issue 32: a README read in five minutes


def page(name: str) -> str:
    return (ROOT / "docs" / name).read_text(encoding="utf-8")


def section(text: str, heading: str) -> str:
    """The text under a heading (any level), up to the next heading of the same or a higher level."""
    m = re.search(rf"^(#+) {re.escape(heading)}$", text, re.M)
    assert m, f"no heading {heading!r}"
    body = text[m.end():]
    end = re.search(rf"^#{{1,{len(m.group(1))}}} ", body, re.M)
    return body[:end.start()] if end else body


def test_readme_is_read_in_five_minutes():
    words = len(README.split())
    assert words <= MAX_WORDS, f"README.md has {words} words; at most {MAX_WORDS}: move detail to a docs/ page"


def test_the_expected_pages_exist_and_the_readme_links_each():
    names = {p.name for p in PAGES}
    assert {"plans.md", "serving.md", "predictions.md", "models.md", "api.md", "ci.md", "contributing.md",
            "commands.md"} <= names
    linked = set(re.findall(r"\]\(docs/([\w-]+\.md)(?:#[\w-]+)?\)", README))
    assert names <= linked, f"pages the README does not link: {sorted(names - linked)}"


def _anchors(text: str) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation but - and _ dropped, spaces as -."""
    heads = re.findall(r"^#+ (.+)$", re.sub(r"```.*?```", "", text, flags=re.S), re.M)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in heads}


def test_every_relative_link_resolves():
    broken = []
    for path in [ROOT / "README.md", *PAGES]:
        text = path.read_text(encoding="utf-8")
        for target in re.findall(r"\]\(([^)\s]+)\)", re.sub(r"```.*?```", "", text, flags=re.S)):
            if re.match(r"\w+://", target):
                continue
            file, _, anchor = target.partition("#")
            dest = (path.parent / file).resolve() if file else path
            if not dest.exists():
                broken.append(f"{path.relative_to(ROOT)}: {target}")
            elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest.read_text(encoding="utf-8")):
                broken.append(f"{path.relative_to(ROOT)}: {target} (no such heading)")
    assert not broken, broken


def _numbers(text: str) -> list[str]:
    return re.findall(r"-?\d[\d,.]*%?", text)


def test_readme_output_is_what_the_command_prints():
    """The README's one output, re-run at the width it was pasted at: the same figures in the same order,
    and every word of it still printed (lines may wrap or indent differently)."""
    block = re.search(r"```text\n\$ (tfcalc [^\n]+)\n(.*?)```", README, re.S)
    assert block, "the README has no ```text block opening with a $ tfcalc command"
    command, pasted = block.group(1), block.group(2)
    width = max(len(line) for line in pasted.splitlines())
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "FORCE_COLOR")}
    env.update(COLUMNS=str(max(width, 80)), TERM="dumb")
    run = subprocess.run([sys.executable, "-m", "tfcalc", *command.split()[1:]], capture_output=True, text=True,
                         env=env, cwd=ROOT, timeout=120)
    assert run.returncode == 0, run.stderr
    assert _numbers(run.stdout) == _numbers(pasted), f"re-run `{command}` and paste its output into README.md"
    missing = set(pasted.split()) - set(run.stdout.split())
    assert not missing, f"words of the README's output no longer printed: {sorted(missing)}"


def test_readme_lists_every_preset_and_hugging_face_type():
    from tfcalc.hf_config import SUPPORTED_MODEL_TYPES
    from tfcalc.presets import preset_names

    listed = section(README, "Supported models")
    lines = [line for line in listed.splitlines() if line.startswith("- ")]
    named = {n for line in lines for n in re.findall(r"`([\w.-]+)`", line)}
    missing = sorted((set(preset_names()) | set(SUPPORTED_MODEL_TYPES)) - named)
    assert not missing, f"missing from the README's Supported models: {missing}"
    assert all(len(line) <= 160 for line in lines), "one family a line, kept short"


def test_python_example_prints_what_it_says():
    code = re.search(r"# Python API\n\n```python\n(.*?)```", page("api.md"), re.S).group(1)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "docs/api.md", "exec"), {})
    printed = out.getvalue().splitlines()
    expected = [line.split("# ", 1)[1].split(",")[0].split(" (")[0] for line in code.splitlines()
                if line.startswith("print(")]
    assert printed[0] == "291648307200" == expected[0]
    assert printed[1] == expected[1] == "gpt2 + n_layer=6 81912576 True"
    assert printed[2] == "13476831232 2147483648" == expected[2]
    assert printed[3] == "149" == expected[3]  # the performance model: 0.85 of 3.35 TB/s and 450 kernels of 2.67 µs


def test_where_a_change_goes_names_files_that_exist():
    """The worked example of adding an attention kind ("Where a change goes", docs/contributing.md) names the
    files a reader opens: each exists, so the walk-through cannot rot as modules move."""
    text = section(page("contributing.md"), "Where a change goes (the layers)")
    named = set(re.findall(r"`((?:tfcalc/|tests/)?[\w/]+\.py)`", text))
    assert len(named) > 15
    missing = [p for p in named if not any((ROOT / base / p).exists() for base in ("", "tfcalc"))]
    assert not missing, missing
