"""Lengths and counts as people type them (tfcalc.amounts): k = 1,024 for sequence lengths, as model
cards mean a '4k context'; decimal for every other count."""

from __future__ import annotations

import pytest
from conftest import assert_one_line_error

from tfcalc import amounts
from tfcalc.errors import InputError


@pytest.mark.parametrize("text, value", [("2k", 2048), ("4K", 4096), ("32k", 32768), ("1M", 2**20), ("1.5k", 1536),
                                         ("4096", 4096), (" 8k ", 8192)])
def test_lengths(text, value):
    assert amounts.length(text) == value


@pytest.mark.parametrize("text, value", [("1k", 1000), ("2T", 2 * 10**12), ("300B", 3 * 10**11), ("1.4e3", 1400),
                                         ("64", 64)])
def test_counts(text, value):
    assert amounts.count(text) == value


@pytest.mark.parametrize("text", ["2x", "k", "", "1.0001k", "2T"])
def test_what_a_length_is_not(text):
    with pytest.raises(InputError):
        amounts.length(text)


def test_the_cli_reads_them_and_states_the_rule(cli):
    assert cli("flops", "llama2-7b", "--seq", "2k", "--json").json()["seq"] == 2048
    assert cli("memory", "mistral-7b", "-s", "32k", "--json").json()["seq"] == 32768
    assert [r["seq"] for r in cli("scan", "gpt2", "-s", "1k..4k", "--json").json()["rows"]] == [1024, 2048, 4096]
    rows = cli("infer", "llama2-7b", "--batch", "1,1k", "--seq", "4k", "--json").json()
    assert [r["batch"] for r in rows] == [1, 1000] and rows[0]["seq"] == 4096
    plan = cli("plan", "llama2-70b", "--tp", "8", "--pp", "2", "--dp", "4", "--global-batch", "1k", "--tokens", "2T",
               "--json").json()
    assert plan["layout"]["global_batch"] == 1000 and plan["training"]["tokens"] == 2 * 10**12
    helped = " ".join(cli("flops", "--help").out.replace("│", " ").split())
    assert "4k = 4,096: a length's k is 1,024" in helped and "1k = 1,000: a count is decimal" in helped
    assert_one_line_error(cli("flops", "gpt2", "--seq", "2x"), "cannot read '2x' as a sequence length")
