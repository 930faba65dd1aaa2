"""`tfcalc plan --etp` and --sp with experts (tfcalc.count.training.experts_folded): the JSON and notes they add,
the search with --etp, and each hostile value in one line (exit 2)."""

import pytest
from conftest import assert_one_line_error


def test_ep_over_tp_and_dp_reaches_the_json(cli):
    """Qwen3-30B-A3B, EP 8 = TP 2 × DP 4 (EP does not divide dp: folding implied, ETP 1)."""
    r = cli("plan", "qwen3-30b-a3b", "--tp", "2", "--dp", "4", "--ep", "8", "--sequence-parallel", "--seq", "4096",
            "--global-batch", "32", "--json")
    assert r.code == 0, r.err
    j = r.json()
    assert (j["layout"]["ep"], j["layout"]["etp"], j["layout"]["sequence_parallel"]) == (8, 1, True)
    assert "ep_tokens_all_to_all" in j["comm_bytes_per_step"]
    assert not any(k.startswith(("etp_", "expert_grads")) for k in j["comm_bytes_per_step"])  # ETP 1, EDP 1
    assert any("experts folded over tp × cp × dp = 8 ranks" in n for n in j["notes"])


def test_etp_adds_its_gathers_and_the_table_names_them(cli):
    r = cli("plan", "qwen3-30b-a3b", "--tp", "2", "--dp", "4", "--ep", "4", "--etp", "2", "--sequence-parallel",
            "--seq", "4096", "--global-batch", "32")
    assert r.code == 0, r.err
    assert "etp 2" in r.out and "edp 1" in r.out


def test_the_legacy_grid_stays_where_ep_divides_dp(cli):
    r = cli("plan", "mixtral-8x7b", "--dp", "8", "--ep", "4", "--seq", "4096", "--json")
    assert r.code == 0, r.err
    assert r.json()["layout"]["etp"] is None
    assert any("expert parallel over 4 ranks of the data-parallel group" in n for n in r.json()["notes"])


def test_a_search_with_etp_tries_sp_for_experts(cli):
    r = cli("plan", "qwen3-30b-a3b", "--gpus", "16", "--etp", "1", "--ep", "8", "--seq", "4096", "--json")
    assert r.code == 0, r.err
    layouts = [x["layout"] for x in r.json()["search"]["layouts"]]
    assert layouts and all(x["etp"] == 1 for x in layouts)
    assert all(x["sequence_parallel"] for x in layouts if x["tp"] > 1)


@pytest.mark.parametrize("model, args, message", [
    ("qwen3-30b-a3b", ["--tp", "2", "--dp", "2", "--etp", "0", "--sequence-parallel"], "--etp must be between"),
    ("qwen3-30b-a3b", ["--tp", "2", "--dp", "2", "--etp", "3", "--sequence-parallel"], "must divide tp × cp × dp"),
    ("qwen3-30b-a3b", ["--tp", "2", "--dp", "2", "--ep", "8", "--sequence-parallel"], "must divide tp × cp × dp = 4"),
    ("qwen3-30b-a3b", ["--tp", "2", "--dp", "4", "--ep", "8"], "need --sp"),
    ("qwen3-30b-a3b", ["--tp", "2", "--dp", "4", "--ep", "6", "--sequence-parallel"], "does not divide the 128"),
    ("llama2-7b", ["--tp", "2", "--dp", "2", "--etp", "1", "--sequence-parallel"], "is dense"),
    ("qwen3-30b-a3b", ["--tp", "2", "--dp", "2", "--ep", "4", "--sequence-parallel", "--measure"], "planned, not run"),
])
def test_hostile_folded_flags(cli, model, args, message):
    assert_one_line_error(cli("plan", model, "--seq", "4096", "--global-batch", "16", *args), message)


def test_a_search_with_an_ep_only_tp_times_dp_holds_folds_the_experts(cli):
    """Qwen3-235B on 256 GPUs with --ep 32: the legacy grid needs 32 | dp (tp·pp ≤ 8); the search now also
    lays EP 32 over TP × DP (ETP 1, SP) where dp alone cannot hold it, as Megatron's recipe does."""
    r = cli("plan", "qwen3-235b-a22b", "--gpus", "256", "--ep", "32", "--seq", "4096", "--global-batch", "2048",
            "--top", "1000", "--json")
    assert r.code == 0, r.err
    layouts = [x["layout"] for x in r.json()["search"]["layouts"]]
    folded = [x for x in layouts if x["etp"] == 1]
    assert folded and all(x["dp"] % 32 or x["cp"] > 1 for x in folded)
    assert all(x["sequence_parallel"] for x in folded if x["tp"] > 1)
    assert all(x["dp"] % 32 == 0 for x in layouts if x["etp"] is None)
