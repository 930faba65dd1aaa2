"""For scripts: --require-fit exits 1 when the answer is 'does not fit' (memory --budget, plan, infer),
0 when it fits; every command warns on stderr, one line, past the model's context."""

from __future__ import annotations

import pytest
from conftest import assert_one_line_error


@pytest.mark.parametrize("args, code", [
    (["memory", "llama2-7b", "--budget", "24GiB"], 0),
    (["memory", "llama2-7b", "--budget", "24GiB", "--batch", "8"], 1),  # 8 × 2 GiB of KV cache + 12.55 GiB
    (["plan", "llama2-70b", "--tp", "8", "--pp", "2", "--dp", "4", "--zero", "1"], 1),  # 89 GiB per rank of 74.5
    (["plan", "llama2-70b", "--tp", "8", "--pp", "4", "--dp", "2", "--zero", "1", "--recompute", "full"], 0),
    (["infer", "llama2-7b", "--batch", "1,8,64"], 1),  # batch 64: 136 GiB of KV cache
    (["infer", "llama2-7b", "--batch", "1,8"], 0),
])
def test_require_fit_exits_1_when_it_does_not_fit(cli, args, code):
    plain = cli(*args, "--json")
    r = cli(*args, "--require-fit", "--json")
    assert r.code == code and plain.code == 0, r.err
    assert r.json() == plain.json()  # the answer is written either way
    if code:
        assert r.err.count("\n") == 1 and r.err.startswith("tfcalc: does not fit: "), r.err
    else:
        assert "does not fit" not in r.err


def test_memory_fit_is_in_the_json_and_the_row():
    import tfcalc

    r = tfcalc.memory("llama2-7b", budget="24GiB", batch=8)
    assert r.to_json()["fit"]["fits"] is False and tfcalc.memory("llama2-7b", budget="24GiB").to_json()["fit"]["fits"]


def test_require_fit_needs_a_budget(cli):
    assert_one_line_error(cli("memory", "gpt2", "--require-fit"), "--require-fit checks the fit in a --budget")


@pytest.mark.parametrize("args", [
    ["memory", "gpt2", "-s", "4096"], ["memory", "gpt2", "-s", "4096", "--training"], ["flops", "gpt2", "-s", "2k"],
    ["compare", "gpt2", "llama2-7b", "-s", "4k"],
    ["scan", "gpt2", "-s", "512,4096"], ["scan", "llama2-7b", "--decode", "-s", "8k"],
    ["infer", "gpt2", "-s", "1024", "--gen", "8"],
])  # plan refuses a --seq past the context: one error line, no warning
def test_every_command_warns_past_the_context(cli, args):
    r = cli(*args, "--json")
    warnings = [line for line in r.err.splitlines() if line.startswith("tfcalc: warning:")]
    assert len(warnings) == 1 and "context of" in warnings[0], r.err


@pytest.mark.parametrize("args, message", [
    (["memory", "gpt2", "-s", "2000000000000"], "--seq must be between"),
    (["memory", "gpt2", "-s", "4096", "--training", "--batch", "0"], "--batch must be between"),
    (["infer", "gpt2", "-s", "2000000000000"], "--seq must be between"),
    (["infer", "gpt2", "-s", "1024", "--gen", "2000000000000"], "--gen must be between"),
    (["compare", "gpt2", "llama2-7b", "-s", "2000000000000"], "--seq must be between"),
])
def test_a_refused_length_is_one_error_line_and_no_warning(cli, args, message):
    """warn_past_context range-checks the lengths before it warns: the one guard (issue 19)."""
    assert_one_line_error(cli(*args), message)


def test_no_warning_within_the_context(cli):
    assert "warning" not in cli("memory", "gpt2", "-s", "1024", "--json").err
    assert "warning" not in cli("scan", "gpt2", "--json").err  # the default sweep passes every context on purpose
