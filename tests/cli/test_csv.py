"""--format csv of every command is one rectangular RFC 4180 table: a header row first, raw values, no
title, no blank line; --table picks another of the report's tables (their names in --help), Markdown
keeps every title and table. Before issue 21 a title line came first and several tables ran together,
so pandas read one garbage column."""

from __future__ import annotations

import csv
import io

import pytest
from conftest import assert_one_line_error

TINY = ["--set", "n_layer=1", "--set", "d_model=32", "--set", "n_head=2", "--set", "n_kv_head=2",
        "--set", "vocab_size=64", "--set", "max_seq_len=32", "--set", "d_ff=64"]
COMMANDS = {
    "params": ["params", "gpt2"],
    "params-several": ["params", "gpt2", "llama2-7b", "--no-measure"],
    "params-verbose": ["params", "llama2-7b", "--verbose", "--no-measure"],
    "flops": ["flops", "gpt2", "--training", "--decode"],
    "flops-several": ["flops", "gpt2", "mixtral-8x7b"],
    "memory": ["memory", "llama2-7b", "--budget", "24GiB"],
    "memory-several": ["memory", "gpt2", "t5-base"],
    "plan": ["plan", "llama2-70b", "--tp", "8", "--pp", "2", "--dp", "4", "--zero", "1", "--tokens", "2T"],
    "plan-search": ["plan", "llama2-70b", "--gpus", "64"],
    "infer": ["infer", "llama2-7b", "--batch", "1,8,64"],
    "scan": ["scan", "gpt2"],
    "scan-decode": ["scan", "llama2-7b", "--decode"],
    "compare": ["compare", "gpt2", "llama2-7b", "mixtral-8x7b"],
    "presets": ["presets"],
    "devices": ["devices"],
    "bench": ["bench", "gpt2", *TINY, "--seq", "16", "--warmup", "0", "--repeat", "2"],
}


def rectangular(text: str) -> list[list[str]]:
    rows = list(csv.reader(io.StringIO(text), strict=True))
    assert rows and all(rows), "a blank line"
    assert len({len(r) for r in rows}) == 1, [len(r) for r in rows]
    return rows


@pytest.mark.parametrize("key", COMMANDS)
def test_every_command_writes_one_rectangular_table(cli, key):
    r = cli(*COMMANDS[key], "--format", "csv")
    assert r.code == 0, r.err
    rows = rectangular(r.out)
    header = rows[0]
    assert len(header) > 1 and len(set(header)) == len(header) and all(h.strip() for h in header), header
    assert len(rows) > 1
    import pandas  # the `test` extra's (pyproject.toml): not a dependency of tfcalc itself

    frame = pandas.read_csv(io.StringIO(r.out))
    assert list(frame.columns) == header and len(frame) == len(rows) - 1


def test_values_are_raw_and_exact(cli):
    rows = rectangular(cli("memory", "llama2-7b", "--format", "csv").out)
    weights = next(r for r in rows if r[0] == "Weights")
    assert weights[rows[0].index("Bytes (bytes)")] == "13476831232"
    several = rectangular(cli("params", "gpt2", "llama2-7b", "--no-measure", "-f", "csv").out)
    assert several[0][0] == "Model" and [r[0] for r in several[1:]] == ["gpt2", "llama2-7b"]  # the summary


def test_table_picks_another_and_names_the_choices(cli):
    rows = rectangular(cli("plan", "llama2-70b", "--tp", "8", "--pp", "2", "--dp", "4", "--table", "communication",
                           "-f", "csv").out)
    assert rows[0][0] == "Cause" and any(r[0] == "DP gradients" for r in rows)
    stacked = rectangular(cli("params", "gpt2", "llama2-7b", "--no-measure", "--table", "components", "-f", "csv").out)
    assert stacked[0][0] == "Table" and {r[0].split(":")[0] for r in stacked[1:]} == {"gpt2", "llama2-7b"}
    assert_one_line_error(cli("flops", "gpt2", "--table", "nope", "-f", "csv"), "it has: forward")
    assert_one_line_error(cli("flops", "gpt2", "--table", "forward", "--json"), "JSON holds everything")
    helped = " ".join(cli("plan", "--help").out.replace("│", " ").split())
    assert "layouts, memory, communication, step" in helped
    only = cli("plan", "llama2-70b", "--tp", "8", "--pp", "2", "--dp", "4", "--table", "step", "-f", "markdown").out
    assert "**Step time" in only and "Communication per step" not in only


def test_markdown_keeps_every_title_and_table(cli):
    md = cli("plan", "llama2-70b", "--tp", "8", "--pp", "2", "--dp", "4", "-f", "markdown").out
    for title in ("memory of one rank", "Communication per step", "Step time"):
        assert title in md
    assert md.count("|---") + md.count("|:---") >= 3
