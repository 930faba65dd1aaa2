"""The README's tour, re-run: every command of "A short tour" that this machine can run is run, and
exits 0 with an answer. Skipped, each with its reason: the ones that need CUDA, and the ones that name
files only the reader has (their own YAML, a downloaded model folder or Hub id). A command that writes a
file (`> mine.yaml`, --plot) writes it in a temporary folder.

The measured runs (--measure, bench) take minutes on a loaded 2-core machine (bench ranks alone took
6 minutes beside four other test suites), so by default they are parsed, not run: TFCALC_TOUR_MEASURED=1
runs them too (CI's nightly job, or before a release)."""

from __future__ import annotations

import os
import re
import shlex
from pathlib import Path

import pytest

README = (Path(__file__).resolve().parent.parent / "README.md").read_text(encoding="utf-8")
TOUR = re.search(r"## A short tour\n\n```bash\n(.*?)```", README, re.S).group(1)


def tour_commands() -> list[str]:
    return [line.split(" #")[0].strip() for line in TOUR.splitlines() if line.startswith("tfcalc ")]


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


COMMANDS = tour_commands()


def test_the_tour_is_found_and_mostly_runnable():
    runnable = [c for c in COMMANDS if why_skipped(c) is None]
    assert len(COMMANDS) >= 40 and len(runnable) >= len(COMMANDS) - 8, [c for c in COMMANDS if why_skipped(c)]


@pytest.mark.parametrize("command", COMMANDS)
def test_tour_command_runs(cli, command, tmp_path, monkeypatch):
    reason = why_skipped(command)
    if reason:
        pytest.skip(reason)
    monkeypatch.chdir(tmp_path)
    words = shlex.split(command.split(" > ")[0])
    assert words[0] == "tfcalc"
    if measured(command) and not os.environ.get("TFCALC_TOUR_MEASURED"):
        parses(words[1:])
        return
    r = cli(*words[1:])
    assert r.code == 0, (command, r.err)
    assert r.out.strip(), command
    assert "error" not in r.err, (command, r.err)
