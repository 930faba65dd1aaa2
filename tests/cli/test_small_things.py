"""The smaller things a newcomer met (issue 32): the busy-host warning of every timed command, rows moved below
a narrow table indented, warnings wrapped between words at a terminal, `show` without null fields."""

from __future__ import annotations

import io
import os

import pytest

from tfcalc.cli import render
from tfcalc.presets import load, preset_names

TINY = ("--set", "n_layer=1", "--set", "d_model=48", "--set", "vocab_size=64", "--set", "max_seq_len=64")


@pytest.mark.parametrize("command", [
    ("bench", "gpt2", *TINY, "--seq", "8", "--min-time", "0", "--repeat", "2", "--warmup", "1"),
    ("bench", "decode", "gpt2", *TINY, "--seq", "8", "--steps", "2", "--repeat", "1", "--warmup", "0",
     "--copy-size", "1MiB"),
], ids=["bench", "bench-decode"])
def test_a_busy_host_is_said_by_every_timed_command(cli, monkeypatch, command):
    monkeypatch.setattr(os, "getloadavg", lambda: (64.0, 64.0, 64.0))
    monkeypatch.setattr("tfcalc.cli.render.host.load_average", lambda: os.getloadavg()[0])
    r = cli(*command, "--json")
    assert r.code == 0, r.err
    lines = [line for line in r.err.splitlines() if "host was busy" in line]
    assert len(lines) == 1 and "load average 64.0 on" in lines[0] and lines[0].startswith("tfcalc: warning:")
    monkeypatch.setattr(os, "getloadavg", lambda: (0.0, 0.0, 0.0))
    assert "busy" not in cli(*command, "--json").err


@pytest.mark.parametrize("columns", [60, 80])
def test_rows_moved_below_a_table_are_indented(cli, monkeypatch, columns, width):
    width(columns)
    out = cli("presets").out.splitlines()
    start = next(i for i, line in enumerate(out) if line.rstrip().endswith("as columns)"))
    below = []
    for line in out[start + 1:]:
        if not line.strip() or not line.startswith(" "):
            break
        below.append(line)
    items = [line for line in below if not line.startswith("    ")]
    assert items and all(line.startswith("  ") and "(" in line for line in items)
    assert len(below) > len(items)  # some rows wrap: their continuations indented under them
    assert all(len(line) <= columns for line in below)


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_warning_at_a_terminal_wraps_between_words(monkeypatch):
    monkeypatch.setenv("COLUMNS", "40")
    err = _Terminal()
    monkeypatch.setattr("sys.stderr", err)
    text = "llama2-7b: --seq 2,048 tokens go past the context of 1,024 tokens; counted anyway"
    render.warn(text)
    lines = err.getvalue().splitlines()
    assert len(lines) > 1 and all(len(line) <= 40 for line in lines)
    assert " ".join(w for line in lines for w in line.split()) == f"tfcalc: warning: {text}"  # no word split
    assert all(line.startswith("  ") for line in lines[1:])
    piped = io.StringIO()
    monkeypatch.setattr("sys.stderr", piped)
    render.warn(text)
    assert piped.getvalue() == f"tfcalc: warning: {text}\n"  # one line for scripts


def test_show_leaves_out_null_fields_unless_all(cli, tmp_path):
    shown = cli("show", "gpt2").out
    assert "null" not in shown and "n_expert" not in shown
    everything = cli("show", "gpt2", "--all").out
    assert everything.count(": null") > 20
    assert "null" in cli("show", "gpt2", "--json").out  # the JSON lists every field, as before


@pytest.mark.parametrize("name", preset_names())
def test_show_without_nulls_rebuilds_the_same_model(cli, tmp_path, name):
    path = tmp_path / f"{name}.yaml"
    path.write_text(cli("show", name).out)
    assert load(str(path)).resolved() | {"name": None} == load(name).resolved() | {"name": None}
