"""Expert-parallel serving (tfcalc.count.serving.expert_parallel, `infer --ep`): each term against its hand
derivation -- weights per GPU (routed experts E ways, the rest as under --tp), KV cache per attention group, the
experts a step's tokens hit per GPU (and against a Monte-Carlo of torch.topk routing), the all-to-all bytes and
time of the worked example, the rows of one GPU's step -- then `--ep 1` as before and the hostile cases."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import pytest
import torch
from conftest import assert_one_line_error

import tfcalc
from tfcalc.count.model import quant
from tfcalc.count.model.quant import weights_bytes
from tfcalc.count.serving import expert_parallel as ep, serving_tp
from tfcalc.count.serving.roofline import decode_step, experts_touched
from tfcalc.count.training.experts_parallel import touched
from tfcalc.presets import load
from tfcalc.workload import Workload

BF16 = quant.plain("bf16")
QWEN = load("qwen3-30b-a3b")  # 48 layers, 128 experts of d 2048 × 768, k 8, 32 heads, 4 KV heads of 128


def lay(E: int, T: int = 1, R: int = 0, per_node: int = 8) -> ep.ExpertLayout:
    """An H100 node's links (tfcalc.devices h100-sxm, count.perf.hardware's α and efficiency)."""
    return ep.ExpertLayout(E, T, E // T, R, per_node, "nvlink", 450e9, 2e-6, 0.8, 50e9, 6e-6, 0.9)


def test_weights_per_gpu_by_hand():
    """Qwen3-30B-A3B: the routed experts are 48 · 128 · 3 · 2048 · 768 bf16 values; at EP 4 a GPU holds 32 of
    each layer's 128, a quarter; everything else whole (attention DP: T = 1)."""
    routed = 48 * 128 * 3 * 2048 * 768 * 2
    w = ep.weights_per_gpu(QWEN, BF16, lay(4))
    assert w["routed_experts"] == routed // 4
    assert w["rest"] == weights_bytes(QWEN, BF16) - routed
    assert w["total"] == w["rest"] + routed // 4
    # attention TP 2 × DP 2: the rest as --tp 2 stores it less its experts' half (each expert's width split there)
    w2 = ep.weights_per_gpu(QWEN, BF16, lay(4, 2))
    assert w2["rest"] == serving_tp.weights_per_gpu(QWEN, BF16, 2)["total"] - routed // 2
    assert w2["routed_experts"] == routed // 4
    # 32 redundant copies over 16 GPUs: (128 + 32) / 16 = 10 experts a GPU
    assert ep.weights_per_gpu(QWEN, BF16, lay(16, 1, 32))["routed_experts"] == routed * 10 // 128


def test_kv_per_gpu_by_hand():
    """Each attention group holds its own ⌈B/D⌉ sequences: K and V of 48 layers × 4 KV heads × 128 per position,
    bf16; under attention TP 2 the 4 KV heads split 2 ways."""
    w = Workload(batch=10, seq=1000, gen=24, dtype="bf16")
    per_seq = 2 * 1024 * 48 * 4 * 128 * 2
    assert ep.kv_per_gpu(QWEN, w, lay(4)) == 3 * per_seq  # ⌈10/4⌉ = 3 in the fullest group
    assert ep.kv_per_gpu(QWEN, w, lay(4, 2)) == 5 * per_seq // 2  # D = 2 groups of 5, the heads halved


@pytest.mark.parametrize("B", [1, 4, 32, 256])
def test_experts_hit_per_gpu_is_the_models_share(B):
    """Step 3 with R = 0: h·(1 − (1 − k/n)^B) per GPU, the roofline's n·(1 − (1 − k/n)^B) split over E."""
    assert ep.hit_per_gpu(QWEN, lay(8), B) == pytest.approx(experts_touched(128, 8, B) / 8, rel=1e-12)


@pytest.mark.parametrize("B,E", [(1, 4), (8, 4), (64, 8), (16, 16)])
def test_experts_hit_against_topk_routing(B, E):
    """A Monte-Carlo of the router: top-k of B tokens' random logits over n experts (a uniform k-subset per token,
    as exchangeable scores give), the distinct experts each GPU's contiguous n/E hold that some token chose."""
    n, k, trials = 128, 8, 4000
    gen = torch.Generator().manual_seed(0)
    chosen = torch.randn(trials, B, n, generator=gen).topk(k, dim=-1).indices  # (trials, B, k)
    hit = torch.zeros(trials, n, dtype=torch.bool).scatter_(1, chosen.view(trials, -1), True)
    per_gpu = hit.view(trials, E, n // E).sum(-1).float()  # (trials, E)
    expected = ep.hit_per_gpu(QWEN, lay(E), B)
    assert per_gpu.mean().item() == pytest.approx(expected, rel=0.01)


def test_rows_off_the_gpu_against_topk_routing():
    """Step 4 inside a node: of a token's k copies, those whose expert another GPU holds, k·(E − 1)/E."""
    n, k, E = 128, 8, 4
    chosen = torch.randn(20000, n, generator=torch.Generator().manual_seed(1)).topk(k, dim=-1).indices
    home = torch.arange(20000) % E  # each token's own GPU
    off = (chosen // (n // E) != home[:, None]).sum(-1).float().mean().item()
    a = ep.all_to_all(QWEN, lay(E), 1, 2, fp8=False)
    assert off == pytest.approx(k * (E - 1) / E, rel=0.01)
    assert a.dispatch_bytes_per_token == pytest.approx(off * 2048 * 2, rel=0.01)


def test_all_to_all_worked_example():
    """The module docstring: EP 4, B = 8, bf16: 2 tokens a GPU, 6 rows of 2,048 bf16 each way, 48 layers; two calls
    a layer at NVLink's 2 µs, the bytes at 450 GB/s × 0.8."""
    a = ep.all_to_all(QWEN, lay(4), 8 / 4, 2, fp8=False)
    assert a.dispatch_bytes_per_token == a.combine_bytes_per_token == 6 * 2048 * 2 == 24_576
    assert a.intra_bytes == 2 * 48 * 2 * 24_576 == 4_718_592 and a.network_bytes == 0
    assert a.seconds == pytest.approx(2 * 48 * 2e-6 + 4_718_592 / 360e9, rel=1e-12)
    assert a.seconds == pytest.approx(205.1e-6, rel=1e-3)


def test_all_to_all_across_nodes_node_limited():
    """DeepSeek-V3 at EP 64 on 8 nodes, FP8 dispatch: per token (ν − 1)·P_node rows cross the network and
    (E − ν)·P_gpu go over NVLink (training's step 3, tested against transformers' router there); a dispatched
    row is 7,168 FP8 bytes + 56 fp32 scales, a combined one 7,168 bf16."""
    cfg = load("deepseek-v3")
    moe = ep.moe_of(cfg)
    p_node, p_gpu = touched(256, 8, 8, 4, 8), touched(256, 8, 8, 4, 64)
    assert p_node == pytest.approx(1 - 35 / 70)  # 1 − C(7, 4)/C(8, 4) = 1/2
    a = ep.all_to_all(cfg, lay(64), 1, 2, fp8=True, decode=False)  # the prefill's normal kernels
    assert a.how == "deepep"
    rows = 7 * p_node + 56 * p_gpu
    assert a.dispatch_bytes_per_token == pytest.approx(rows * (7168 + 4 * 56), rel=1e-12)
    assert a.combine_bytes_per_token == pytest.approx(rows * 7168 * 2, rel=1e-12)
    assert a.network_bytes == pytest.approx(58 * 7 * p_node * (7168 + 224 + 2 * 7168), rel=1e-12)
    # node-limited: 3.5 rows a token cross the network, against 8 · 56/64 = 7 with one copy per (token, expert) pair
    assert 7 * p_node == pytest.approx(3.5) and moe.top_k * 56 / 64 == 7


def test_decode_across_nodes_one_message_per_pair():
    """Step 4's decode route across nodes (DeepEP's low-latency kernels): each (token, expert) pair its own message,
    k·(E − r)/E of them across nodes, k·(r − 1)/E over NVLink; DeepEP's EP 64 dispatch of 128 tokens (docs/legacy.md:
    173 µs at 43 GB/s) moves 7.4 MB, within 2 % of 128 · 8 FP8 rows of 7,168 bytes + 56 fp32 scales: one message
    per pair, not the node-limited route's."""
    cfg = load("deepseek-v3")
    a = ep.all_to_all(cfg, lay(64), 128, 2, fp8=True, decode=True)
    assert a.how == "low_latency"
    assert a.network_bytes == pytest.approx(128 * 58 * 8 * 56 / 64 * (7392 + 2 * 7168), rel=1e-12)
    assert a.intra_bytes == pytest.approx(128 * 58 * 8 * 7 / 64 * (7392 + 2 * 7168), rel=1e-12)
    assert 128 * 8 * 7392 == pytest.approx(43e9 * 173e-6, rel=0.05)  # DeepEP's own figure, all pairs counted
    assert ep.route(lay(8), True) == ep.route(lay(8), False) == "alltoall"  # one node


def test_overlap_two_half_batches():
    """Step 6: under --overlap ep the step is the longer of the two halves' compute and the whole batch's all-to-all;
    without, their sum. Across nodes the decode's low-latency kernels hold no SM, so the halves' compute is twice
    the compute of a step at B/2 exactly; the prefill's normal kernels hold 20 SMs of an H100's 132."""
    from tfcalc.count.model.quant import plain
    from tfcalc.report.infer import datasheet_ceilings

    fmt = plain("bf16")
    _, c = datasheet_ceilings("h100-sxm", fmt)
    w = Workload(batch=512, seq=1000, gen=20, dtype="bf16")
    two = lay(16)  # 2 nodes
    plain_est, plain_t = ep.estimate(QWEN, w, fmt, c, None, two)
    assert plain_est.decode_s_per_token == pytest.approx(plain_t.decode.compute_s + plain_t.decode.a2a.seconds)
    over = ep.ExpertLayout(**{**two.__dict__, "overlap": True})
    est, t = ep.estimate(QWEN, w, fmt, c, None, over)
    _, half = ep.estimate(QWEN, Workload(batch=256, seq=1000, gen=20, dtype="bf16"), fmt, c, None, two)
    assert t.decode.compute_s == pytest.approx(2 * half.decode.compute_s, rel=1e-12)
    longer, shorter = sorted((t.decode.compute_s, t.decode.a2a.seconds), reverse=True)
    # and the decode pipeline's fill: the shorter stream's one stage of 2·L (one half's layer) beside nothing
    assert est.decode_s_per_token == pytest.approx(longer + shorter / (2 * 48), rel=1e-12)
    # the prefill stage by stage (count.serving.ep_overlap): at least the longer of the two, at most their sum
    assert max(t.prefill.compute_s, t.prefill.a2a.seconds) < t.prefill.step_s < \
        t.prefill.compute_s + t.prefill.a2a.seconds
    assert t.decode.a2a == plain_t.decode.a2a  # the same bytes, only hidden
    assert (ep.held_sms(two, False, c.perf), ep.held_sms(two, True, c.perf)) == (20, 0)
    assert ep.held_sms(lay(8), True, c.perf) == c.perf.comm_sms
    assert ep.slowed(1.0, two, False, c.perf) == pytest.approx(c.perf.sm_count / (c.perf.sm_count - 20))


def test_two_batch_overlap_stage_by_stage_by_hand():
    """Step 6 (count.serving.ep_overlap), one MoE layer, halves 8 s (per half: attention 1, routed experts 2, shared
    1 in the prefill; 1 each of projections, core, shared, routed in the decode), all-to-all 4 s or 8 s (dispatch
    and combine half of it each, per half 1 s or 2 s). Prefill, delta 0, A1 B1 A2 B2 A3 B3:
    at 4 s all of it hidden: 8.0; at 8 s: A's dispatch 1→3, B's 3→5, A's experts wait to 3, end 5, its combine
    5→7, B's experts 5→7, combine 7→9, A's shared 7→8, B's 8→9, its combine done at 9: 9.0 of max 8, sum 16.
    Decode, delta 2, A0 A1 (A2 B0) (A3 B1) (A4 B2) B3 B4 at 4 s: everything hidden but B's last combine (8→9): 9.0.
    No all-to-all: the halves' 8 s; no compute: the all-to-all's 8 s."""
    from tfcalc.count.serving import ep_overlap as ov

    pre = {"prep": 0.0, "core": 0.25, "shared": 0.25, "routed": 0.5}
    assert ov.step_seconds(8.0, pre, 4.0, 1, 0.5, False) == pytest.approx(8.0)
    assert ov.step_seconds(8.0, pre, 8.0, 1, 0.5, False) == pytest.approx(9.0)
    dec = {"prep": 0.25, "core": 0.25, "shared": 0.25, "routed": 0.25}
    assert ov.step_seconds(8.0, dec, 4.0, 1, 0.5, True) == pytest.approx(9.0)
    for decode in (False, True):
        assert ov.step_seconds(8.0, dec, 0.0, 61, 0.5, decode) == pytest.approx(8.0)
        assert ov.step_seconds(0.0, dec, 8.0, 61, 0.5, decode) == pytest.approx(8.0)
        mixed = ov.step_seconds(8.0, pre, 6.0, 61, 0.4, decode)
        assert 8.0 <= mixed < 14.0


def test_stage_shares_of_the_rows():
    """ep_overlap.shares: DeepSeek-V3's rows by stage add up to the step's row seconds."""
    from tfcalc.count.serving import ep_overlap as ov
    from tfcalc.report.infer import datasheet_ceilings

    fmt = quant.plain("fp8")
    _, c = datasheet_ceilings("h100-sxm", fmt)
    step = decode_step(load("deepseek-v3"), 64, 2000, fmt, "bf16")
    part = ov.shares(step, c)
    assert sum(part.values()) == pytest.approx(1.0) and min(part.values()) > 0
    routed = sum(r.time_s(c) for r in step.rows if r.component.startswith("expert_ffn"))
    assert part["routed"] == pytest.approx(routed / step.time_s(c))


def test_one_gpus_step_rows():
    """Step 3: the attention rows are a group's b sequences (here T = 1: decode_step at b), the routed experts
    h/n of the whole step's FLOPs and activations, its hit experts' weights; over the E GPUs the experts' FLOPs
    add up to the whole step's."""
    B, E = 16, 4
    whole = decode_step(QWEN, B, 512, BF16, "bf16")
    shard = ep.Sharding(QWEN, BF16, "bf16", replace(lay(E), imbalance=1.0))  # balanced: each GPU the mean's
    mine = shard.step(whole)
    group = decode_step(QWEN, B // E, 512, BF16, "bf16")
    assert mine.batch == B // E
    for r, g, a in zip(mine.rows, group.rows, whole.rows, strict=True):
        if r.component.startswith("expert_ffn"):
            assert r.flops * E == a.flops and r.count == 32 * 48 // 48 * (a.count // 128)
            per_expert = 48 * 2048 * 768 * 2  # one matrix of each expert, every layer
            assert r.weight_bytes == pytest.approx(per_expert * ep.hit_per_gpu(QWEN, lay(E), B), abs=1)
        elif r.component != "other":
            assert r == g


def test_fullest_gpu_rows_and_all_to_all():
    """Step 7: the fullest GPU's routed rows are f times the mean's (FLOPs, activations; f from count.perf.
    expert_imbalance at the step's B tokens, EPLB's skew by default), its experts hit at f·B tokens, the rest as
    balanced; the all-to-all's wire time f times the balanced one's, its 2·L latencies as they were."""
    from tfcalc.count.perf import expert_imbalance as ei

    B, E = 16, 4
    whole = decode_step(QWEN, B, 512, BF16, "bf16")
    f = ei.factor(E, 128, 8, B, ei.SKEW["eplb"])
    assert f == pytest.approx(1 + 1.0294 * math.sqrt(4 / 3) * math.sqrt(ei.SKEW["eplb"] ** 2 + 0.75 * 120 / 127 / 32),
                              rel=1e-4)  # e_4 = 1.0294 (Harter)
    even = ep.Sharding(QWEN, BF16, "bf16", replace(lay(E), imbalance=1.0)).step(whole)
    full = ep.Sharding(QWEN, BF16, "bf16", lay(E)).step(whole)
    for a, b in zip(even.rows, full.rows, strict=True):
        if a.component.startswith("expert_ffn"):
            assert b.flops == pytest.approx(a.flops * f, rel=1e-6)
            assert b.activation_bytes == pytest.approx(a.activation_bytes * f, rel=1e-5)
            assert b.weight_bytes == pytest.approx(48 * 2048 * 768 * 2 * 32 * (1 - (1 - 8 / 128) ** (B * f)), abs=1)
        else:
            assert a == b
    fixed = ep.Sharding(QWEN, BF16, "bf16", replace(lay(E), imbalance=1.5)).step(whole)
    assert [r.flops for r in fixed.rows if r.component == "expert_ffn_up"] == \
        [round(r.flops * 1.5) for r in even.rows if r.component == "expert_ffn_up"]
    from tfcalc.report.infer import datasheet_ceilings

    _, C = datasheet_ceilings("h100-sxm", BF16)
    w = Workload(batch=B, seq=1000, gen=20, dtype="bf16")
    _, t1 = ep.estimate(QWEN, w, BF16, C, None, replace(lay(E), imbalance=1.0))
    _, tf = ep.estimate(QWEN, w, BF16, C, None, lay(E))
    latency = 2 * 48 * lay(E).intra_latency_s
    assert tf.decode.a2a.seconds - latency == pytest.approx((t1.decode.a2a.seconds - latency) * f, rel=1e-12)
    assert tf.imbalance == {"prefill": ei.factor(E, 128, 8, B * 1000, ei.SKEW["eplb"]), "decode": f}


def test_ep_1_is_as_before():
    """--ep 1 (the default) leaves every figure as it was: the same JSON with and without it, ep 1 and no
    expert_parallel object."""
    a = tfcalc.infer("qwen3-30b-a3b", batch=[1, 8], seq=256, gen=8).to_json()
    b = tfcalc.infer("qwen3-30b-a3b", batch=[1, 8], seq=256, gen=8, ep=1).to_json()
    assert a == b and a[0]["ep"] == 1 and a[0]["expert_parallel"] is None


def test_infer_ep_json_terms():
    """The JSON's terms equal the module's, per GPU; throughput per GPU and node from the whole batch's."""
    r = tfcalc.infer("qwen3-30b-a3b", batch=8, seq=1000, gen=100, ep=4, expert_imbalance=1.0,
                     ep_comm="alltoall").to_json()
    x = r["expert_parallel"]
    assert x["expert_imbalance"] == {"skew": None, "skew_cv": None, "fixed": 1.0, "prefill_factor": 1.0,
                                     "decode_factor": 1.0}
    assert (x["ep"], x["attention_tp"], x["attention_dp"], x["experts_per_gpu"], x["nodes"]) == (4, 1, 4, 32, 1)
    assert r["weights_bytes"] == x["weights_bytes_per_gpu"] == ep.weights_per_gpu(QWEN, BF16, lay(4))["total"]
    assert r["kv_cache_bytes"] == x["kv_cache_bytes_per_gpu"] == 2 * 2 * 1100 * 48 * 4 * 128 * 2
    assert x["decode_all_to_all"]["nvlink_bytes"] == 4_718_592
    assert x["a2a_s_per_decode_step"] == pytest.approx(205.1e-6, rel=1e-3)
    over = r["predicted"]["overhead"]["decode_step"]
    assert over["comm_s"] == pytest.approx(x["a2a_s_per_decode_step"], rel=1e-12)  # T = 1: no all-reduce
    assert x["decode_tokens_per_s_per_gpu"] * 4 == pytest.approx(r["decode_tokens_per_s_total"], rel=1e-12)
    assert r["max_batch"] % 4 == 0 and r["fits"] is True
    # the default under attention DP in one node, TensorRT-LLM's allgather + reduce-scatter: 2 tokens a GPU, 48
    # layers, 3 peers, rows of 2,048 bf16 + 8 int32 ids + 8 fp32 weights gathered and 2,048 bf16 scattered
    g = tfcalc.infer("qwen3-30b-a3b", batch=8, seq=1000, gen=100, ep=4, expert_imbalance=1.0).to_json()
    assert g["expert_parallel"]["decode_all_to_all"]["nvlink_bytes"] == 2 * 48 * 3 * (4096 + 64 + 4096)


@pytest.mark.parametrize("args, message", [
    (["qwen3-30b-a3b", "--ep", "0"], "--ep must be a positive integer"),
    (["qwen3-30b-a3b", "--ep", "3"], "does not divide"),
    (["qwen3-30b-a3b", "--ep", "1000000000"], "a GPU would hold none"),
    (["qwen3-30b-a3b", "--ep", "16", "--redundant-experts", "8"], "does not divide"),
    (["qwen3-30b-a3b", "--ep", "4", "--tp", "3"], "not a multiple of --tp"),
    (["qwen3-30b-a3b", "--ep", "8", "--tp", "2", "--attention-dp", "2"], "must equal E"),
    (["qwen3-30b-a3b", "--attention-dp", "2"], "give --ep E above 1"),
    (["qwen3-30b-a3b", "--overlap", "ep"], "give --ep E above 1"),
    (["qwen3-30b-a3b", "--ep", "4", "--overlap", "tp"], "--overlap takes ep"),
    (["qwen3-30b-a3b", "--ep", "4", "--redundant-experts", "-1"], "0 or more"),
    (["qwen3-30b-a3b", "--ep", "4", "--overlap", "ep", "--rate", "2", "--mean-input", "100", "--mean-output", "10"],
     "--rate with --overlap ep"),
    (["qwen3-30b-a3b", "--ep", "4", "--concurrency", "8", "--mean-input", "100", "--mean-output", "10", "--measure"],
     "--concurrency with --ep --measure"),
    (["qwen3-30b-a3b", "--ep", "4", "--tp", "2", "--measure"], "--measure --ep runs the experts on E gloo ranks"),
    (["qwen3-30b-a3b", "--ep", "16", "--measure"], "within one node"),
    (["qwen3-30b-a3b", "--ep", "12"], "does not divide"),
    (["qwen3-30b-a3b", "--ep", "32", "--tp", "16"], "node"),
    (["llama2-7b", "--ep", "2"], "no mixture of experts"),
    (["qwen3-30b-a3b", "--ep", "4", "--draft", "qwen3-30b-a3b", "--accept-rate", "0.5"], "--draft with --ep"),
])
def test_hostile(cli, args, message):
    static = [] if "--rate" in args or "--concurrency" in args else ["--seq", "128", "--gen", "4"]
    assert_one_line_error(cli("infer", *args, *static), message)


def test_does_not_fit_refused_with_require_fit(cli):
    """DeepSeek-V3 in bf16 on 8 H100s: 1.34 TB of weights, past 80 GB a GPU."""
    res = cli("infer", "deepseek-v3", "--ep", "8", "--seq", "128", "--gen", "4", "--require-fit")
    assert res.code == 1 and "does not fit" in (res.out + res.err).lower()


def test_cli_table_and_json(cli):
    res = cli("infer", "qwen3-30b-a3b", "--ep", "8", "--tp", "2", "--seq", "256", "--gen", "8", "--batch", "8")
    assert res.code == 0, (res.out + res.err)
    assert "Expert parallel: 8 GPUs" in (res.out + res.err) and "TP 2 × DP 4" in (res.out + res.err)
    res = cli("infer", "qwen3-30b-a3b", "--ep", "8", "--seq", "256", "--gen", "8", "--json")
    data = json.loads((res.out + res.err))
    assert data["expert_parallel"]["attention_dp"] == 8 and data["tensor_parallel"] is None
