"""The roofline and serving estimates (pure arithmetic), against hand-worked figures."""

from __future__ import annotations

import math

import pytest
from conftest import tiny

from tfcalc import devices
from tfcalc.config import replace
from tfcalc.count.model import flops as count_flops, memory as count_memory, quant
from tfcalc.count.model.params import total as param_total
from tfcalc.count.serving import roofline, static as serving
from tfcalc.errors import InputError
from tfcalc.presets import load
from tfcalc.workload import Workload

BF16 = quant.plain("bf16")


def h100(dtype="bf16"):
    spec = devices.by_key("h100-sxm")
    return roofline.Ceilings(spec.peak(dtype), spec.bandwidth_bytes_per_s, "h100-sxm datasheet")


def test_llama2_7b_decode_on_h100_by_hand():
    """reference.md: bf16, batch 1, context 4096, 3.35 TB/s: weights 13,476,831,232 + KV 2,147,483,648
    bytes per token, at most ≈ 214 tokens/s, memory-bound, intensity ≈ 1 FLOP/byte against a ridge ≈ 295."""
    step = roofline.decode_step(load("llama2-7b"), 1, 4096, BF16, "bf16")
    assert step.weight_bytes == 13_476_831_232 == 2 * 6_738_415_616
    assert step.kv_bytes == 2_147_483_648 == 2 * 4096 * 32 * 4096 * 2
    assert step.bytes_per_token == 15_624_314_880
    c = h100()
    assert 1 / step.time_s(c) == pytest.approx(214, abs=0.5)
    assert step.time_s(c) >= step.bytes_per_token / c.bytes_per_s  # activations add a little, never less
    assert step.bound(c) == "memory" and step.intensity < 1 and c.ridge == pytest.approx(295.2, abs=0.1)
    assert all(row.bound(c) == "memory" for row in step.rows)
    assert step.flops == count_flops.decode_flops(load("llama2-7b"), Workload(batch=1, seq=4096))


def test_one_row_by_hand():
    """The Q projection of a decode step: 2·B·d·q FLOPs per layer, the d×q matrix once, the (B, d) input
    and (B, q) output in bf16; Q·Kᵀ reads K of every cached position once per KV head."""
    cfg = load("llama2-70b")  # GQA: 8 KV heads for 64 query heads
    rows = {r.component: r for r in roofline.decode_step(cfg, 4, 1000, BF16, "fp8").rows}
    q = rows["attn_q"]
    assert q.flops == 80 * 2 * 4 * 8192 * 8192 and q.weight_bytes == 80 * 8192 * 8192 * 2
    assert q.activation_bytes == 80 * 2 * (4 * 8192 + 4 * 8192) and q.kv_bytes == 0
    qk = rows["attn_qk"]
    assert qk.kv_bytes == 80 * 4 * 8 * 1000 * 128 * 1  # fp8 cache: 1 byte, only the 8 KV heads
    assert qk.flops == 80 * 2 * 4 * 64 * 128 * 1000 and qk.weight_bytes == 0


def test_sliding_window_reads_the_window():
    windowed = load("mistral-7b")  # Jiang et al. 2023: W = 4096
    assert windowed.sliding_window == 4096
    mistral = replace(windowed, sliding_window=None)
    full = roofline.decode_step(mistral, 1, 8192, BF16, "bf16")
    short = roofline.decode_step(windowed, 1, 8192, BF16, "bf16")
    assert full.kv_bytes == 2 * short.kv_bytes == 2 * 8192 * 32 * 1024 * 2  # a step reads W keys, its own too
    # the cache is a ring of those W (tfcalc.model.attention_state; transformers' StaticSlidingWindowLayer)
    assert count_memory.kv_cache_bytes(windowed, Workload(batch=1, seq=8192, dtype="bf16")) == 2 * 4096 * 32 * 1024 * 2
    short_context = Workload(seq=1000, dtype="bf16")
    assert count_memory.kv_cache_bytes(windowed, short_context) == count_memory.kv_cache_bytes(mistral, short_context)
    assert short.flops < full.flops and short.weight_bytes == full.weight_bytes


def test_causal_pairs_with_a_window_by_brute_force():
    for queries in range(1, 9):
        for keys in range(queries, 14):
            for window in (None, 1, 2, 3, 5, 8, 20):
                expected = sum(min(p + 1, window or keys) for p in range(keys - queries, keys))
                assert count_flops.causal_pairs(queries, keys, window) == expected


def test_moe_decode_reads_the_experts_it_routes_to():
    mixtral = load("mixtral-8x7b")
    one = roofline.decode_step(mixtral, 1, 100, BF16, "bf16")
    def expert(step):
        return sum(r.weight_bytes for r in step.rows if r.component.startswith("expert_ffn"))

    all_experts = 32 * 8 * 3 * 4096 * 14336 * 2
    assert expert(one) == all_experts // 4  # batch 1: top-2 of 8
    assert one.weight_bytes == 2 * 12_879_925_248  # batch 1 reads the active parameters, in bf16
    big = roofline.decode_step(mixtral, 256, 100, BF16, "bf16")
    assert expert(big) == pytest.approx(all_experts, rel=1e-9)  # 256 tokens touch every expert
    assert roofline.experts_touched(8, 2, 2) == pytest.approx(8 * (1 - 0.75**2))


def test_int4_weights_by_hand():
    """Llama 2 7B, int4, group 128, fp16 scales, int4 zero points, the rest bf16 (tfcalc.count.model.quant)."""
    cfg = load("llama2-7b")
    fmt = quant.weight_format("int4")
    assert (fmt.group_size, fmt.zero_point) == (128, True)
    parts = quant.breakdown(cfg, fmt)
    matrices = 32 * (4 * 4096 * 4096 + 3 * 4096 * 11008)
    assert matrices == 6_476_005_376 and parts["quantized"] == matrices // 2 == 3_238_002_688
    assert parts["scales"] == 2 * matrices // 128 == 101_187_584
    assert parts["zero_points"] == matrices // 128 // 2 == 25_296_896
    assert parts["unquantized"] == 2 * (param_total(cfg) - matrices) == 524_820_480
    assert quant.weights_bytes(cfg, fmt) == 3_889_307_648
    assert quant.bits_per_weight(fmt) == 4 + 20 / 128
    step = roofline.decode_step(cfg, 1, 4096, fmt, "bf16")
    assert step.weight_bytes == 3_889_307_648  # the roofline reads the same bytes
    assert 1 / step.time_s(h100()) == pytest.approx(3.35e12 / (3_889_307_648 + 2_147_483_648), rel=1e-3)


def test_int8_per_channel_and_plain_formats():
    cfg = load("llama2-7b")
    rows = 32 * (4 * 4096 + 2 * 11008 + 4096)  # output rows of q, k, v, o, gate, up, down
    assert quant.breakdown(cfg, quant.weight_format("int8"))["scales"] == 2 * rows
    assert quant.weights_bytes(cfg, quant.plain("bf16")) == count_memory.weights_bytes(cfg, "bf16")
    assert quant.weight_format("int8").compute_dtype == "bf16" and quant.weight_format("fp8").compute_dtype == "fp8"
    odd = tiny(d_model=40, n_head=4)  # rows of 40 inputs: a group of 32 and one of 8; down's 160 inputs: 5
    fmt = quant.weight_format("int4", group_size=32)
    groups = 2 * (4 * 40 * 2 + 160 * 2 + 40 * 5)  # 2 layers: q, k, v, o (40 rows each), up (160), down (40)
    assert quant.breakdown(odd, fmt)["scales"] == 2 * groups and quant.breakdown(odd, fmt)["zero_points"] == groups // 2
    with pytest.raises(InputError, match="group-size applies"):
        quant.weight_format("bf16", group_size=128)
    with pytest.raises(InputError, match="positive"):
        quant.weight_format("int4", group_size=0)


def test_prefill_is_compute_bound_at_4096_and_counts_causal_pairs():
    cfg, c = load("llama2-7b"), h100()
    step = roofline.prefill_step(cfg, 1, 4096, BF16, "bf16")
    assert step.bound(c) == "compute"
    head = next(r for r in step.rows if r.component == "lm_head")
    assert head.flops == 2 * 4096 * 32000  # the last position's logits only
    causal = count_flops.forward_flops_causal(cfg, Workload(batch=1, seq=4096))
    assert step.flops == causal - count_flops.lm_head_flops(cfg, Workload(batch=1, seq=4096)) + head.flops
    assert step.time_s(c) >= step.flops / c.flops_per_s


def test_serving_estimate_averages_every_decode_step():
    cfg, c = load("llama2-7b"), h100()
    est = serving.estimate(cfg, Workload(batch=8, seq=4096, gen=5), BF16, c, devices.by_key("h100-sxm").memory_bytes)
    steps = [roofline.decode_step(cfg, 8, 4096 + j, BF16, "bf16") for j in range(1, 5)]
    assert est.first_decode_step.context == est.seq + 1
    assert est.decode_s_per_token == pytest.approx(sum(s.time_s(c) for s in steps) / 4, rel=1e-12)
    assert est.decode_tokens_per_s_total == pytest.approx(8 * est.decode_tokens_per_s)
    assert est.kv_cache_bytes == count_memory.kv_cache_bytes(cfg, Workload(batch=8, seq=4101, dtype="bf16"))
    assert est.fits and est.bound == "memory"
    assert est.total_s == pytest.approx(est.prefill_s + 4 * est.decode_s_per_token)
    one = serving.estimate(cfg, Workload(seq=16, gen=1), BF16, c)
    assert one.decode_s_per_token is None and one.fits is None and one.bound is None


def test_largest_batch_that_fits():
    cfg = load("llama2-7b")
    memory = devices.by_key("h100-sxm").memory_bytes
    b = serving.max_batch(cfg, Workload(seq=4096, gen=256), BF16, memory)
    need = [
        13_476_831_232 + count_memory.kv_cache_bytes(cfg, Workload(batch=n, seq=4352, dtype="bf16")) for n in (b, b + 1)
    ]
    assert need[0] <= memory < need[1] and b == 29  # 66.5 GB left / 2.28 GB per sequence
    assert serving.max_batch(cfg, Workload(seq=4096, gen=256), BF16, 10**9) == 0


def test_compute_bound_batches():
    cfg, c = load("llama2-7b"), h100()
    # multi-head attention at 4096: the KV cache grows with the batch as the FLOPs do -- never
    assert serving.compute_bound_batch(cfg, Workload(seq=4096), BF16, c) is None
    # the weight matmuls alone: a (B, k) @ (k, n) matmul in bf16 does 2·B·k·n FLOPs on 2·(k·n + B·(k + n))
    # bytes, intensity B / (1 + B·(k + n)/(k·n)): about the ridge, raised ~15% by the activations at
    # B ≈ 300 and 2% by the embedding table read beside them
    b = serving.weight_matmuls_compute_bound_batch(cfg, Workload(seq=4096), BF16, c)
    assert c.ridge < b < 1.2 * c.ridge
    k = n = 4096
    assert b / (1 + b * (k + n) / (k * n)) == pytest.approx(c.ridge, rel=0.05)
    # a short context and GQA: the whole step does turn compute-bound, and the batch is the first one
    gqa = load("llama2-70b")
    first = serving.compute_bound_batch(gqa, Workload(seq=128), BF16, c)
    assert first is not None
    assert roofline.decode_step(gqa, first, 128, BF16, "bf16").bound(c) == "compute"
    assert roofline.decode_step(gqa, first - 1, 128, BF16, "bf16").bound(c) == "memory"


def test_encoders_do_not_decode_and_sizes_are_checked():
    with pytest.raises(InputError, match="nothing to decode"):
        roofline.decode_step(load("bert-base"), 1, 16, BF16, "bf16")
    with pytest.raises(InputError, match="context must be a positive integer"):
        roofline.decode_step(load("gpt2"), 1, 0, BF16, "bf16")


def test_encoder_decoder_decode_skips_the_encoder():
    cfg = load("transformer-base")
    step = roofline.decode_step(cfg, 1, 50, BF16, "bf16", src_seq=60)
    components = {r.component for r in step.rows}
    assert "cross_attn_qk" in components and not any(c.startswith("encoder_") for c in components)
    assert "cross_attn_k" not in components  # the cross K/V are cached once per source
    cross_kv = next(r for r in step.rows if r.component == "cross_attn_qk").kv_bytes
    assert cross_kv == cfg.n_layer * cfg.kv_dim * 60 * 2
    assert math.isfinite(step.time_s(h100()))
