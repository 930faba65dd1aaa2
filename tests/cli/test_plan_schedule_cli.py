"""`tfcalc plan`'s --schedule, --virtual-stages, --overlap and --cp on the command line: the JSON gains their
keys (none lost), each bad value is one line and exit 2, and the search stays fast."""

import time

import pytest
from conftest import assert_one_line_error

import tfcalc

LAYOUT = ("llama2-7b", "--tp", "2", "--pp", "4", "--dp", "2", "--global-batch", "64")


def test_json_gains_schedule_overlap_and_cp_keys(cli):
    plain = cli("plan", *LAYOUT, "--json").json()
    j = cli("plan", *LAYOUT, "--sequence-parallel", "--schedule", "interleaved", "--virtual-stages", "2",
            "--overlap", "tp,pp", "--json").json()
    assert set(plain) <= set(j) and set(plain["layout"]) <= set(j["layout"])
    assert {k: j["layout"][k] for k in ("schedule", "virtual_stages", "overlap", "cp")} == \
        {"schedule": "interleaved", "virtual_stages": 2, "overlap": ["tp", "pp"], "cp": 1}
    assert plain["layout"]["schedule"] == "1f1b" and plain["layout"]["overlap"] == []
    assert j["step"]["bubble"] == pytest.approx((3 / 2) / (32 + 3 / 2))  # p 4, V 2, m = 64 / (dp 2 × 1)
    assert j["step_time_s"] < plain["step_time_s"]
    assert set(j["step"]["comm_s"]) == {"dp", "tp", "pp", "cp"}


def test_cp_multiplies_the_gpus_and_adds_the_ring(cli):
    j = cli("plan", "llama2-7b", "--tp", "2", "--cp", "2", "--dp", "2", "--seq", "4096", "--global-batch", "8",
            "--json").json()
    assert j["gpus"] == 8 and j["layout"]["cp"] == 2
    assert j["comm_bytes_per_step"]["cp_kv_send_recv"] > 0
    assert_one_line_error(cli("plan", "llama2-7b", "--gpus", "8", "--tp", "2", "--cp", "2", "--dp", "4"),
                          "must equal tp × cp × pp × dp")


@pytest.mark.parametrize("args, message", [
    (["--pp", "2", "--schedule", "gpipe"], "'gpipe' is not one of"),
    (["--pp", "2", "--virtual-stages", "2"], "needs --schedule interleaved"),
    (["--pp", "2", "--schedule", "interleaved", "--virtual-stages", "0"], "--virtual-stages must be between 1"),
    (["--pp", "3", "--schedule", "interleaved"], "divisible by pp × V = 3 × 2 = 6"),
    (["--pp", "2", "--schedule", "interleaved", "--global-batch", "3"], "a multiple of pp (2)"),
    (["--schedule", "zero-bubble", "--dp", "2"], "needs pp > 1"),
    (["--pp", "2", "--overlap", "dp"], "--overlap takes tp, pp"),
    (["--pp", "2", "--overlap", "pp,pp"], "each of tp, pp, ep, cp once"),
    (["--pp", "2", "--overlap", "tp"], "--overlap tp needs tp > 1 with --sequence-parallel"),
    (["--dp", "2", "--overlap", "pp"], "it needs pp > 1"),
    (["--dp", "2", "--cp", "0"], "--cp must be between 1"),
    (["--dp", "2", "--cp", "3"], "divisible by 6"),
    (["--dp", "2", "--cp", "2", "--attention", "math"], "needs --attention flash"),
    (["--gpus", "4", "--cp", "2", "--attention", "math"], "needs --attention flash"),  # a search: said once
    (["--dp", "2", "--cp", "99999999999999999999"], "--cp"),
])
def test_hostile_values_are_one_line(cli, args, message):
    assert_one_line_error(cli("plan", "llama2-7b", *args), message)


def test_api_takes_the_same_fields():
    r = tfcalc.plan("llama2-7b", tp=2, pp=4, dp=2, global_batch=64, schedule="zero-bubble", overlap=["pp"])
    assert r.plan.layout.schedule == "zero-bubble" and r.plan.layout.overlap == ("pp",)
    for bad, words in ((dict(schedule=3), "^schedule must be one of"), (dict(overlap=5), "must be a list"),
                       (dict(cp=True), "^cp must be")):  # the Python argument's name (issue 32)
        with pytest.raises(tfcalc.errors.InputError, match=words):
            tfcalc.plan("llama2-7b", pp=2, dp=2, **bad)


def test_auto_search_stays_fast():
    tfcalc.plan("llama2-7b", gpus="auto")  # warm the imports and caches a first call builds
    start = time.process_time()
    tfcalc.plan("gpt3", gpus="auto")
    assert time.process_time() - start < 0.6 * 1.5  # issue 20: `plan --gpus auto` under 0.6 s (margin for load)


def test_a_search_past_the_positions_says_so(cli):
    """(Before: 'no tensor-parallel degree up to 8 splits gpt3-175b evenly', from the search's floor.)"""
    assert_one_line_error(cli("plan", "gpt3", "--seq", "4096"), "learned positions for at most 2048 tokens")


def test_cp_is_searched_only_where_it_is_modelled():
    """gpt-oss has sliding windows: the search tries no CP (its floor read every tensor-parallel degree as
    refused while it tried CP 16: 'no tensor-parallel degree splits gpt-oss-120b')."""
    from tfcalc.count.training.search_space import SearchSpace, cp_applies, cp_degrees
    from tfcalc.presets import load

    assert not cp_applies(load("gpt-oss-120b"), "flash") and cp_applies(load("llama3-70b"), "flash")
    assert not cp_applies(load("llama3-70b"), "math")
    assert cp_degrees(131072, 1024, SearchSpace(), cp_applies(load("gpt-oss-120b"), "flash")) == [1]
    r = tfcalc.plan("llama3-70b", gpus=64, seq=32768, max_seq_len=131072)
    assert {c.layout.cp for c in r.candidates} >= {1, 2, 4}
