"""One report, four renderers: --format table|json|markdown|csv (and --json), --exact, titles with overrides."""

from __future__ import annotations

import csv
import io
import json

import pytest
from conftest import assert_one_line_error


def test_json_alias_equals_format_json(cli):
    assert cli("flops", "gpt2", "--json").json() == cli("flops", "gpt2", "--format", "json").json()


def test_markdown_is_a_pipe_table_with_every_column(cli):
    r = cli("flops", "gpt2", "--format", "markdown", "--verbose")
    assert r.code == 0, r.err
    lines = r.out.splitlines()
    assert "**gpt2: forward FLOPs at B = 1, T = 1,024 (matmuls, full T×T square)**" in lines
    header = next(line for line in lines if line.startswith("| Component"))
    assert "Matmul (m×k @ k×n)" in header and "Per layer" in header  # nothing hidden in Markdown
    assert any(line.startswith("|:---|") for line in lines)
    assert "| **Forward, full square** |" in r.out and "291.6 GFLOP" in r.out


def test_csv_has_raw_exact_values_and_named_units(cli):
    r = cli("params", "gpt2", "--format", "csv")
    assert r.code == 0, r.err
    rows = list(csv.reader(io.StringIO(r.out)))
    assert rows[0] == ["Component", "Parameters", "Share (fraction)"]  # the header first: no title line
    totals = {row[0]: row[1] for row in rows[1:] if row}
    assert totals["Total, analytic"] == "124439808"
    flops = list(csv.reader(io.StringIO(cli("flops", "gpt2", "--format", "csv").out)))
    assert "Total (FLOP)" in flops[0]
    forward = [row for row in flops if row and row[0] == "Forward, full square"][0]
    assert forward[flops[0].index("Total (FLOP)")] == "291648307200"


def test_exact_writes_whole_numbers(cli):
    human = cli("memory", "llama2-7b").out
    exact = cli("memory", "llama2-7b", "--exact").out
    assert "12.55 GiB" in human and "2 GiB" in human
    assert "13,476,831,232" in exact and "2,147,483,648" in exact and "GiB" not in exact.split("KiB, MiB")[0]


def test_titles_show_every_override_and_drop_the_named_size(cli):
    out = cli("params", "gpt2", "--set", "n_layer=6", "--set", "tie_embeddings=false", "--no-measure").out
    assert "gpt2 + n_layer=6, tie_embeddings=false: parameters" in out
    assert "named 124M" not in out and "(before the --set overrides)" in " ".join(out.split())
    data = cli("params", "gpt2", "--set", "n_layer=6", "--json").json()
    assert data["preset"] == "gpt2" and data["label"] == "gpt2 + n_layer=6" and data["overrides"] == ["n_layer=6"]


def test_json_with_another_format_is_refused(cli):
    assert_one_line_error(cli("params", "gpt2", "--json", "--format", "csv"), "ask for two formats")


def test_a_flag_given_a_value_says_it_takes_none(cli):
    assert_one_line_error(cli("flops", "gpt2", "--json", "true"), "--json and the other flags take no value")


def test_flags_show_no_bool_metavar(cli):
    for command in ("params", "flops", "memory", "bench", "scan", "compare", "snapshot", "check", "presets"):
        r = cli(command, "--help")
        assert r.code == 0 and "<bool>" not in r.out, command
        assert "--format" in r.out, command


def test_seq_is_s_everywhere(cli):
    for command in ("flops", "memory", "bench", "scan", "compare"):
        lines = [line for line in cli(command, "--help").out.splitlines() if "--seq" in line and "│" in line]
        assert lines and " -s " in lines[0], command


def test_json_never_carries_nan_or_infinity(capsys):
    """The last guard (issue 23, cause 8): a non-finite figure is null, with the reason beside it."""
    from tfcalc.cli import render

    def strict(text):
        return json.loads(text, parse_constant=lambda c: (_ for _ in ()).throw(ValueError(c)))

    render.print_json({"step_time_s": float("inf"), "nested": {"ratio": float("nan"), "ok": 1.5}})
    data = strict(capsys.readouterr().out)
    assert data["step_time_s"] is None and data["nested"] == {"ratio": None, "ok": 1.5}
    assert data["null_because"] == {"step_time_s": "infinite (too large for a float)",
                                    "nested.ratio": "NaN (undefined)"}
    render.print_json([{"a": 1.0}, {"a": float("-inf")}])
    rows = strict(capsys.readouterr().out)
    assert rows[0] == {"a": 1.0} and rows[1] == {"a": None, "null_because": {"a": "infinite (too large for a float)"}}


@pytest.mark.parametrize("args", [["plan", "gpt2", "--dp", "2", "--mfu", "0.0001", "--tokens", "1e30", "--json"],
                                  ["infer", "gpt2", "--gen", "100000", "--batch", "1,1048576", "--json"]])
def test_extreme_but_valid_inputs_give_strict_json(cli, args):
    r = cli(*args)
    assert r.code == 0, r.err
    json.loads(r.out, parse_constant=lambda c: (_ for _ in ()).throw(ValueError(c)))
