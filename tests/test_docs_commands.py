"""Every command of the README and the docs/ pages, re-run: each `tfcalc ...` line of a ```bash block, each
`$ tfcalc ...` line of a ```text block (a pasted output) and each `tfcalc ...` example in a README table
that this machine can run is run, and exits 0 with an answer. Skipped, each with its reason: the ones that
need CUDA, and the ones that name files only the reader has (their own YAML, a downloaded model folder or
Hub id). The commands of one page share a temporary folder: a command that writes a file (`> mine.yaml`,
`-o counts.json`, --plot) writes it there, and one that reads a file an earlier command of the page
writes (`tfcalc check counts.json`) has that command run first.

The measured runs (--measure, bench) take minutes on a loaded 2-core machine (bench ranks alone took
6 minutes beside four other test suites), so by default they are parsed, not run: TFCALC_TOUR_MEASURED=1
runs them too (CI's nightly job, or before a release)."""

from __future__ import annotations

import os
import re
import shlex
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def page_commands(text: str) -> list[str]:
    """The page's commands in page order, comments dropped (a redirection `> FILE` kept)."""
    commands = []
    for lang, block in re.findall(r"```(\w*)\n(.*?)```", text, re.S):
        for line in block.splitlines():
            if lang == "bash" and line.startswith("tfcalc "):
                commands.append(line.split(" #")[0].strip())
            elif lang == "text" and line.startswith("$ tfcalc "):
                commands.append(line[2:].strip())
    for line in re.sub(r"```.*?```", "", text, flags=re.S).splitlines():
        if line.startswith("|"):
            commands += [c.strip() for c in re.findall(r"`(tfcalc [^`]+)`", line)]
    return commands


COMMANDS = {path.relative_to(ROOT).as_posix(): page_commands(path.read_text(encoding="utf-8")) for path in PAGES}
CASES = [(name, command) for name, commands in COMMANDS.items() for command in commands]


def why_skipped(command: str) -> str | None:
    if "--device cuda" in command:
        return "needs a CUDA device"
    if "~/models" in command or "my-model.yaml" in command:
        return "names the reader's own files"
    if re.search(r"\s[\w.-]+/[\w.-]+(\s|$)", command) and "--plot" not in command:  # a Hugging Face id
        return "a Hub id read from the reader's Hugging Face cache"
    return None


def measured(command: str) -> bool:
    return "--measure" in command or command.startswith("tfcalc bench")


def written(command: str) -> str | None:
    """The file a command writes by `> FILE` or `-o FILE`."""
    words = shlex.split(command)
    for flag in (">", "-o", "--output"):
        if flag in words[:-1]:
            return words[words.index(flag) + 1]
    return None


def parses(words: list[str]) -> None:
    """Parse a command line as `tfcalc` would, without running it: every option known, every value read."""
    import typer

    from tfcalc.cli.app import make_app

    if words[0] == "bench" and words[1] in ("decode", "ranks"):
        words = [f"bench {words[1]}", *words[2:]]
    group = typer.main.get_command(make_app())
    ctx = group.make_context("tfcalc", list(words))
    protected = getattr(ctx, "_protected_args", None) or getattr(ctx, "protected_args", [])  # Click 8.2 renamed it
    name, command, rest = group.resolve_command(ctx, [*protected, *ctx.args])
    command.make_context(name, rest, parent=ctx)


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """One temporary folder per page, shared by its commands."""
    made: dict[str, Path] = {}

    def get(name: str) -> Path:
        if name not in made:
            made[name] = tmp_path_factory.mktemp(name.replace("/", "-"))
        return made[name]

    return get


def run(cli, command: str, folder: Path) -> None:
    words = shlex.split(command)
    assert words[0] == "tfcalc"
    target = written(command) if " > " in command else None
    words = words[:words.index(">")] if target else words
    r = cli(*words[1:])
    assert r.code == 0, (command, r.err)
    assert r.out.strip() or written(command), command
    assert "error" not in r.err, (command, r.err)
    if target:
        (folder / target).write_text(r.out, encoding="utf-8")


def test_every_page_with_a_command_block_is_found():
    assert len(COMMANDS["docs/commands.md"]) >= 40  # the tour
    assert len(COMMANDS["README.md"]) >= 15  # the table of commands and the one output
    assert len(COMMANDS["docs/plans.md"]) >= 10
    runnable = [c for _, c in CASES if why_skipped(c) is None]
    assert len(runnable) >= len(CASES) - 10, [c for _, c in CASES if why_skipped(c)]


@pytest.mark.parametrize(("page", "command"), CASES, ids=[f"{p}: {c}" for p, c in CASES])
def test_doc_command_runs(cli, page, command, folders, monkeypatch):
    reason = why_skipped(command)
    if reason:
        pytest.skip(reason)
    folder = folders(page)
    monkeypatch.chdir(folder)
    if measured(command) and not os.environ.get("TFCALC_TOUR_MEASURED"):
        parses(shlex.split(command)[1:])
        return
    for word in shlex.split(command)[1:]:  # a file an earlier command of the page writes: that command first
        writers = [c for c in COMMANDS[page] if written(c) == word and c != command]
        if word.endswith((".json", ".yaml")) and not (folder / word).exists() and writers:
            run(cli, writers[0], folder)
    run(cli, command, folder)
