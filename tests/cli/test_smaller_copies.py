"""Measured runs of models with a depth pattern, shrunk (issue 33, cause 7; issue 29): the copies the measuring
paths make are made from the description (tfcalc.architecture.copies), so a layer_pattern, nope_every or
dense-then-MoE model runs at any depth and no field of the user's is blamed for a copy the user never asked for
("field 'nope_every' (4) must be at most n_layer (1)", "layer_pattern describes 6 layers, longer than the
model (n_layer 1)" before). Each case through the CLI as a user runs it, at a tiny width (--set) so the CPU run
is quick."""

import pytest

import tfcalc.measure.params as mp
from tfcalc.presets import load

# Llama 4 Scout's every kind (chunked RoPE layers, NoPE layers with the temperature, MoE with a shared expert)
# at a width a CPU runs in milliseconds
SCOUT = ["--set", "d_model=64", "--set", "n_head=4", "--set", "n_kv_head=2", "--set", "d_head=16", "--set", "d_ff=64",
         "--set", "vocab_size=128", "--set", "n_expert=4", "--set", "n_expert_active=1", "--set",
         "shared_expert_d_ff=64", "--set", "attention_chunk_size=16", "--set", "attn_temperature_floor=16"]
# a layer_pattern model (windowed and NoPE layers, Llama 2's shape otherwise), as tiny
PATTERN = ["--set", "n_layer=6", "--set", "layer_pattern=(local, local, nope)*2", "--set", "sliding_window=8",
           "--set", "d_model=32", "--set", "n_head=4", "--set", "d_ff=64", "--set", "vocab_size=64"]


def test_memory_measure_of_llama_4_at_4_layers(cli):
    r = cli("memory", "llama-4-scout", "--set", "n_layer=4", *SCOUT, "--seq", "64", "--batch", "1", "--measure",
            "--json")
    assert r.code == 0, r.err
    out = r.json()
    assert out["measured_peak_bytes"] > 0 and out["weights_bytes"] > 0


def test_memory_measure_of_a_layer_pattern_model(cli):
    r = cli("memory", "llama2-7b", *PATTERN, "--seq", "16", "--measure", "--training", "--json")
    assert r.code == 0, r.err
    assert r.json()["measured_peak_bytes"] > 0


def test_bench_of_llama_4_at_2_layers(cli):
    r = cli("bench", "llama-4-scout", "--n-layer", "2", *SCOUT, "--seq", "16", "--min-time", "0", "--repeat", "1",
            "--rounds", "1", "--warmup", "1", "--matmul-size", "32", "--json")
    assert r.code == 0, r.err
    out = r.json()
    assert (out["n_layer"], out["n_layer_run"], out["extrapolated"]) == (48, 2, True)
    assert out["median_s"] > 0


def test_bench_n_layer_of_a_layer_pattern_model(cli):
    r = cli("bench", "llama2-7b", *PATTERN, "--n-layer", "4", "--seq", "16", "--min-time", "0", "--repeat", "1",
            "--rounds", "1", "--warmup", "1", "--matmul-size", "32", "--json")
    assert r.code == 0, r.err
    assert r.json()["n_layer_run"] == 4


@pytest.mark.parametrize("argv", [
    ["gemma-3-27b", "--set", "n_layer=300", "--set", "full_attention_every=null", "--set",
     "layer_pattern=(local*5, full)*50"],
    ["llama-4-scout", "--set", "n_layer=200"],  # nope_every 4, chunked layers, MoE
    ["deepseek-v3", "--set", "n_layer=130"],  # 3 dense layers, then MoE: refused before as "of more than one kind"
], ids=["layer-pattern", "nope-every", "dense-then-moe"])
def test_params_of_a_pattern_model_deeper_than_128_blocks(cli, argv):
    r = cli("params", *argv, "--json")
    assert r.code == 0, r.err
    out = r.json()
    assert out["empirical_method"] == "per_block" and out["empirical_total"] == out["analytic_total"]


@pytest.mark.parametrize("overrides", [
    ["n_layer=140", "full_attention_every=null", "layer_pattern=(local*5, full)*23, local*2"],
    ["n_layer=132", "d_model=256", "n_head=4", "n_kv_head=2", "d_head=64", "d_ff=128", "n_expert=4",
     "shared_expert_d_ff=128", "vocab_size=512"],
], ids=["gemma-3-pattern", "llama-4"])
def test_one_block_of_each_kind_counts_what_every_block_built_counts(overrides):
    """The per-block count against the module built whole (on meta): the same total and breakdown."""
    cfg = load("gemma-3-27b" if "layer_pattern" in overrides[2] else "llama-4-scout", overrides)
    per_kind = mp.empirical_count(cfg)
    original = mp.FULL_BUILD_BLOCKS
    mp.FULL_BUILD_BLOCKS = 10_000  # build every block
    try:
        whole = mp.empirical_count(cfg)
    finally:
        mp.FULL_BUILD_BLOCKS = original
    assert (per_kind.method, per_kind.blocks_built, whole.method) == ("per_block", 2, "full")
    assert (per_kind.total, per_kind.breakdown) == (whole.total, whole.breakdown)


def test_plan_measure_runs_the_small_copy_of_a_layer_pattern_model(cli):
    """Llama 2 7B with windowed and NoPE layers: its small copy (2 blocks: a local layer, then a NoPE one) on 2
    gloo ranks, plan == measured."""
    r = cli("plan", "llama2-7b", "--set", "layer_pattern=(local, nope)*16", "--set", "sliding_window=4096", "--dp",
            "2", "--measure", "--nproc", "2", "--json")
    assert r.code == 0, r.err
    m = r.json()["measured"]
    assert m["small_copy"] and m["config"]["n_layer"] == 2 and m["config"]["layer_pattern"] == "local, nope"
    assert m["states_exact"] and m["collectives_exact"]


def test_extrapolation_adds_each_kind_of_block_at_its_own_time():
    """Hand arithmetic: 1 s measured, 2 layers of a kind at 0.25 s and 3 of another at 0.5 s missing: 3.0 s; the
    layers missing per kind of DeepSeek-V3 at 4 blocks (1 dense + 3 MoE run): 2 dense and 55 MoE."""
    from tfcalc.measure.bench import extrapolate_kinds, kind_blocks

    assert extrapolate_kinds(1.0, [(2, 0.25), (3, 0.5)]) == 3.0 and extrapolate_kinds(1.0, []) == 1.0
    full = load("deepseek-v3").architecture
    assert kind_blocks(full.shrunk(4), full) == [(0, 2), (1, 55)]  # (first block of the kind in the run, missing)
    assert kind_blocks(full.shrunk(1), full) == [(0, 3), (0, 57)]  # no dense block run: timed as block 0


def test_bench_n_layer_of_a_dense_then_moe_model_times_each_kind(cli):
    """Llama 4 Scout's shape with its first layer dense (a DeepSeek-like prefix), 6 layers, run at 3: the
    missing layers of each kind at that kind's block time, the sum the full-depth median."""
    r = cli("bench", "llama-4-scout", "--set", "n_layer=6", "--set", "first_dense_layers=1", "--set",
            "dense_d_ff=128", *SCOUT, "--n-layer", "3", "--seq", "16", "--min-time", "0", "--repeat", "1",
            "--rounds", "1", "--warmup", "1", "--matmul-size", "32", "--json")
    assert r.code == 0, r.err
    out = r.json()
    parts = out["extrapolation"]
    assert sum(p["layers_missing"] for p in parts) == 6 - 3 and len(parts) == 3  # dense; chunked MoE; NoPE MoE
    assert all(p["block_s"] > 0 for p in parts)
    assert out["median_s"] == pytest.approx(out["measured_forward_median_s"]
                                            + sum(p["layers_missing"] * p["block_s"] for p in parts))
