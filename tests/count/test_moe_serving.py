"""tfcalc.count.perf.moe_serving against its docstring's hand derivation, a sampled reference for the grouped GEMM's
tiles, and the rows tfcalc's own mixture of experts (tfcalc.model.experts) copies, measured under a
TorchDispatchMode on the CPU."""

from __future__ import annotations

import random

import pytest
import torch
from test_moe_dispatch import _moe, _Ops

import tfcalc
from tfcalc.count.perf import gemm, grouped_gemm, moe_serving
from tfcalc.count.perf.hardware import perf_spec
from tfcalc.model.experts import MixtureOfExperts
from tfcalc.presets import load


def test_worked_example_permute():
    """Qwen3-235B at EP 8, every group decoding 700: 5,600 pairs a GPU and layer, 5,600·4,096·(2 + 1) bytes a layer
    (bf16 rows read, FP8 rows written), 94 layers, 2 kernels each."""
    d = moe_serving.permute(8 * 700 * 8 * 16 / 128, 4096, 2, 1, 94)
    assert 8 * 700 * 8 * 16 / 128 == 5600
    assert d.forward_bytes == 68_812_800 * 94 and d.forward_kernels == 188 and d.backward_bytes == 0
    assert d.forward_bytes / (4.8e12 * 0.85) == pytest.approx(1.586e-3, rel=1e-3)


def test_step_permute_pairs_from_the_rows():
    """step_permute reads the GPU's pairs off its first routed row: FLOPs 2·k·n per pair and layer."""
    from tfcalc.count.serving.roofline import Row
    rows = (Row("attn_q", "q", 10, 0, 0, 0, (5, 4, 4)),
            Row("expert_ffn_gate", "gate", 2 * 300 * 64 * 32 * 3, 0, 0, 0, (19, 64, 32), 16))
    d = moe_serving.step_permute(rows, 64, 3, 2, 2)
    assert d.forward_bytes == 3 * 300 * 64 * 4 and d.forward_kernels == 6
    assert moe_serving.step_permute(rows[:1], 64, 3, 2, 2).forward_bytes == 0


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_permute_copy_matches_tfcalc_module(dtype):
    """tfcalc's MoE on N tokens copies every (token, expert) pair's row once into expert order (its index_select
    of the tokens' rows): P·d·a written, P·d·a read from the rows it gathers -- step 1's P·d·(a + a) at 16-bit
    GEMM inputs (on the CPU the reads of repeated rows are counted once: the input is N·d·a)."""
    moe = _moe()
    m = MixtureOfExperts(moe).to(dtype)
    for p in m.parameters():
        torch.nn.init.normal_(p, std=0.02)
    N, a = 64, torch.empty((), dtype=dtype).element_size()
    P = N * moe.top_k
    with _Ops() as mode:
        m.routed(torch.randn(N, moe.d_model, dtype=dtype))
    rows = [o for name, _, o in mode.ops if name == "index_select" and o == P * moe.d_model * a]
    assert rows, "the module's copy of the pairs' rows"
    assert 2 * rows[0] == moe_serving.permute(P, moe.d_model, a, a, 1).forward_bytes


@pytest.mark.parametrize("rows, groups, tm", [(2048, 16, 128), (5632, 16, 128), (512, 128, 16), (96, 8, 64)])
def test_grouped_tiles_against_sampled_routing(rows, groups, tm):
    """The tiles the grouped GEMM runs: each expert's binomial row count rounded up to the tile, sampled."""
    rng = random.Random(0)
    trials, total = 300, 0
    for _ in range(trials):
        counts = [0] * groups
        for _ in range(rows):
            counts[rng.randrange(groups)] += 1
        total += sum(-(-c // tm) for c in counts)
    assert grouped_gemm.expected_tiles(rows, groups, tm) == pytest.approx(total / trials / groups, rel=0.02)


def test_routed_rows_at_the_grouped_efficiency():
    """A routed row's efficiency is grouped_gemm's at m × E rows over E experts (not gemm's at the mean m), and it
    is lower where the uneven counts spill into another tile (128 rows per expert: 1.5 tiles of 128 on average)."""
    perf = perf_spec("h100-sxm")
    shape, count = (128, 2048, 768), 128
    mine = moe_serving.efficiency(shape, count, perf.sm_count, perf.matmul_ceiling)
    assert mine == grouped_gemm.efficiency(128 * 128, 128, 768, 2048, perf.sm_count, perf.matmul_ceiling)
    assert mine < gemm.efficiency(128, 768, 2048, perf.sm_count, perf.matmul_ceiling, 128)
    r = tfcalc.infer("qwen3-30b-a3b", batch=16, seq=128, gen=2, device_spec="h100-sxm").to_json()
    up = next(x for x in r["roofline"]["prefill"] if x["component"] == "expert_ffn_up")
    # 16·128 tokens × top 8 over 128 experts: 128 rows each on average, the JSON's row at the grouped efficiency
    assert up["matmul_efficiency"] == pytest.approx(
        grouped_gemm.efficiency(16 * 128 * 8, 128, 768, 2048, perf.sm_count, perf.matmul_ceiling), rel=1e-12)


def test_infer_ep_json_carries_the_permute():
    """--ep: the step's moe_permute_s is step 1's bytes over the achievable bandwidth, at the GPU's pairs
    (Qwen3-30B-A3B, EP 4, even routing: B·q·k/4 pairs a GPU and layer, 48 layers, d 2,048, bf16); no EP: 0."""
    r = tfcalc.infer("qwen3-30b-a3b", batch=8, seq=1000, gen=100, ep=4, expert_imbalance=1.0,
                     device_spec="h100-sxm").to_json()
    over = r["predicted"]["overhead"]
    perf = perf_spec("h100-sxm")
    bw = 3.35e12 * perf.bandwidth_efficiency
    pairs = 8 * 1000 * 8 / 4
    assert over["prefill"]["moe_permute_s"] == pytest.approx(pairs * 2048 * 4 * 48 / bw, rel=1e-6)
    assert over["decode_step"]["moe_permute_s"] == pytest.approx(8 * 8 / 4 * 2048 * 4 * 48 / bw, rel=1e-6)
    plain = tfcalc.infer("qwen3-30b-a3b", batch=8, seq=1000, gen=100, device_spec="h100-sxm").to_json()
    assert plain["predicted"]["overhead"]["prefill"]["moe_permute_s"] == 0
    assert load("qwen3-30b-a3b").n_layer == 48


def test_no_copy_under_deepep_low_latency_decode():
    """Across nodes the decode runs DeepEP's low-latency kernels, which write the experts' layout themselves: no
    permute in the decode step; the prefill (DeepEP's normal kernels) still copies."""
    r = tfcalc.infer("qwen3-30b-a3b", batch=64, seq=1000, gen=10, ep=16, expert_imbalance=1.0,
                     device_spec="h100-sxm").to_json()
    over = r["predicted"]["overhead"]
    assert r["expert_parallel"]["nodes"] == 2
    assert over["decode_step"]["moe_permute_s"] == 0
    assert over["prefill"]["moe_permute_s"] == pytest.approx(
        64 * 1000 * 8 / 16 * 2048 * 4 * 48 / (3.35e12 * perf_spec("h100-sxm").bandwidth_efficiency), rel=1e-6)
