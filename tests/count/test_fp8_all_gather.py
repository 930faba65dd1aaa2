"""--fp8-all-gather (torchao's enable_fsdp_float8_all_gather with tensorwise scaling, torchtitan's
--float8.enable_fsdp_float8_all_gather and precompute_float8_dynamic_scale_for_fsdp): each FP8 linear's
weight gathered in FP8 (tfcalc.count.training.fp8, step 4). Checked against Llama 3 8B's shapes by hand:
per block the fused QKV (6,144 × 4,096), O (4,096²), gate|up (28,672 × 4,096) and down (4,096 × 14,336)
weights, 4,096 · 53,248 = 218,103,808 elements, four FP8 linears; 32 blocks."""

from __future__ import annotations

import dataclasses

import pytest
from conftest import assert_one_line_error

import tfcalc
from tfcalc.count.perf.fp8_recipes import casts
from tfcalc.count.training.comm import step_collectives
from tfcalc.count.training.layout import Layout
from tfcalc.count.training.rank_memory import gathered_bytes
from tfcalc.presets import load

FP8_PER_BLOCK = 6144 * 4096 + 4096 * 4096 + 28672 * 4096 + 4096 * 14336  # = 218,103,808
BLOCKS, N = 32, 8
L = Layout(dp=N, zero=3, seq=8192, global_batch=2 * N, micro_batch=1, compute_dtype="fp8", fp8_recipe="tensorwise")
AG = dataclasses.replace(L, fp8_all_gather=True)


def _by_key(layout):
    cfg = load("llama3-8b", {})
    return {c.key: c for c in step_collectives(cfg, layout, 0, 0)}


def test_the_gathers_carry_the_fp8_weights_at_one_byte():
    plain, fp8 = _by_key(L), _by_key(AG)
    m, again = 2, 2  # micro-batches; gathered before each block's forward and again before its backward
    saved = m * again * BLOCKS * FP8_PER_BLOCK * (2 - 1)  # N shards of fp8/N elements, one byte less each
    assert plain["zero_params_all_gather"].payload_bytes - fp8["zero_params_all_gather"].payload_bytes == saved
    assert fp8["zero_params_all_gather"].calls == plain["zero_params_all_gather"].calls
    assert fp8["dp_grads_reduce_scatter"] == plain["dp_grads_reduce_scatter"]  # gradients stay in --grad-dtype


def test_the_amaxes_are_one_all_reduce_a_step():
    c = _by_key(AG)["fp8_amax_all_reduce"]
    assert (c.payload_bytes, c.calls, c.group_size) == (4 * 4 * BLOCKS, 1, N)  # one fp32 per FP8 weight
    assert "fp8_amax_all_reduce" not in _by_key(L)


def test_without_resharding_one_gather_a_micro_batch():
    plain, fp8 = (_by_key(dataclasses.replace(x, reshard_after_forward=False)) for x in (L, AG))
    saved = 2 * 1 * BLOCKS * FP8_PER_BLOCK
    assert plain["zero_params_all_gather"].payload_bytes - fp8["zero_params_all_gather"].payload_bytes == saved


def test_the_gathered_unit_holds_the_fp8_weights_in_one_byte():
    cfg = load("llama3-8b", ["vocab_size=256"])  # a block, not the root, is the largest unit
    norms = 2 * 4096
    assert gathered_bytes(cfg, L) == 2 * 2 * (FP8_PER_BLOCK + norms)
    assert gathered_bytes(cfg, AG) == 2 * (1 * FP8_PER_BLOCK + 2 * norms)


def test_the_weight_casts_run_on_the_shard():
    m, k, n, e, ew = 8192, 4096, 14336, 2, 2
    kn = k * n
    plain = casts("tensorwise", m, k, n, e, ew)
    fp8 = casts("tensorwise", m, k, n, e, ew, shards=N)
    # forward: the 16-bit weight's amax (read 2) and cast (read 2, write 1) go; the shard's amax (read 2) and
    # cast (read 2, write 1) come. backward: the 16-bit weight's second cast (read 2, write 1) goes; the
    # re-gathered shard's cast (3 / N) and the gathered FP8 weight's transpose (read 1, write 1) come
    assert plain.forward_bytes - fp8.forward_bytes == pytest.approx(5 * kn - 5 * kn / N, rel=1e-12)
    assert fp8.backward_bytes - plain.backward_bytes == pytest.approx(-3 * kn + 2 * kn + 3 * kn / N, rel=1e-12)
    assert (fp8.forward_kernels, fp8.backward_kernels) == (plain.forward_kernels - 1, plain.backward_kernels + 1)
    once = casts("tensorwise", m, k, n, e, ew, shards=N, regathered=False)
    assert fp8.backward_bytes - once.backward_bytes == pytest.approx(3 * kn / N, rel=1e-12)


def test_the_plan_is_faster_and_says_so(cli):
    args = ("plan", "llama3-8b", "--dp", "8", "--zero", "3", "--global-batch", "8", "--seq", "8192",
            "--compute-dtype", "fp8", "--fp8-recipe", "tensorwise", "--json")
    plain, fp8 = cli(*args).json(), cli(*args, "--fp8-all-gather").json()
    assert fp8["layout"]["fp8_all_gather"] is True and plain["layout"]["fp8_all_gather"] is False
    assert fp8["step"]["compute_s"] < plain["step"]["compute_s"]
    assert fp8["step"]["fsdp_copy_s"] < plain["step"]["fsdp_copy_s"]
    text = " ".join(cli(*args[:-1], "--fp8-all-gather").out.split())
    assert "FP8 weight amaxes (FP8 gathers)" in text


@pytest.mark.parametrize("extra", [("--compute-dtype", "fp8"), ("--compute-dtype", "fp8", "--fp8-recipe", "rowwise"),
                                   ("--zero", "1", "--compute-dtype", "fp8", "--fp8-recipe", "tensorwise"), ()])
def test_refused_where_torchao_has_no_fp8_gather(cli, extra):
    r = cli("plan", "llama3-8b", "--dp", "8", "--fp8-all-gather", *extra)
    assert_one_line_error(r, "--fp8-all-gather needs ZeRO-3 (FSDP) with --compute-dtype fp8 --fp8-recipe tensorwise")


def test_the_api_takes_it():
    r = tfcalc.plan("llama3-8b", dp=8, zero=3, global_batch=8, seq=8192, compute_dtype="fp8", fp8_recipe="tensorwise",
                    fp8_all_gather=True)
    assert r.plan.layout.fp8_all_gather
    with pytest.raises(tfcalc.errors.InputError, match="True or False"):
        tfcalc.plan("llama3-8b", dp=8, zero=3, compute_dtype="fp8", fp8_recipe="tensorwise", fp8_all_gather="yes")
