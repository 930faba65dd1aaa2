"""tfcalc.count.perf.moe_dispatch against its docstring's hand derivation and against the bytes tfcalc's own
mixture of experts (tfcalc.model.experts) moves, op by op under a TorchDispatchMode, on the CPU."""

from __future__ import annotations

import math

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

import tfcalc
from tfcalc.count.perf import moe_dispatch
from tfcalc.model.experts import MixtureOfExperts
from tfcalc.presets import load

TINY = {"n_layer": 1, "d_model": 64, "n_head": 4, "n_kv_head": 4, "d_head": 16, "d_ff": 128, "vocab_size": 256,
        "n_expert": 4, "n_expert_active": 2}


def _moe(**fields):
    cfg = load("mixtral-8x7b", [f"{k}={v}" for k, v in {**TINY, **fields}.items()])
    return next(b.ffn for _, b, _ in cfg.architecture.kinds() if b.is_moe)


def test_mixtral_worked_example():
    """The module docstring's Mixtral 8x7B example (d 4096, E 8, k 2, bf16, N 4096, fused, no EP), by hand:
    top-k 4096·8·2 + 8192·(2 + 8); index 8192·(8·32 + 24 + 16 + 8 + 8 + 2·2); permute 5·2·8192·4096 + 2·4096²."""
    moe = load("mixtral-8x7b").architecture
    moe = next(b.ffn for _, b, _ in moe.kinds() if b.is_moe)
    d = moe_dispatch.layer(moe, 4096, 2, "fused", ep=1)
    assert d.forward_bytes == 147_456 + 2_588_672 + 369_098_752
    # backward: top-k's scatter 4096·8·2 + 8192·(2·2 + 8); permute's 5a and the zeroed (N, d)
    assert d.backward_bytes == 65_536 + 98_304 + 5 * 2 * 8192 * 4096 + 2 * 4096 * 4096
    # under eager kernels the 7a / 9a are tfcalc.count.perf.eager's (step 8): only the zero fills are added
    e = moe_dispatch.layer(moe, 4096, 2, "eager", ep=1)
    assert d.forward_bytes - e.forward_bytes == 5 * 2 * 8192 * 4096
    # EP 8 over 8 experts: one per rank, no chunk sort; EP 2: four per rank, two gathers of P rows each way
    assert moe_dispatch.layer(moe, 4096, 2, "fused", ep=8) == d
    assert moe_dispatch.layer(moe, 4096, 2, "fused", ep=2).forward_bytes == d.forward_bytes + 4 * 8192 * 4096 * 2


class _Ops(TorchDispatchMode):
    """Each aten op's bytes: its tensors' distinct elements (tests/count/test_eager_traffic.py's convention)."""

    def __init__(self):
        super().__init__()
        self.ops: list[tuple[str, int, int]] = []  # (name, bytes, output bytes)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func.is_view:
            return out

        def moved(t):
            return math.prod(s for s, st in zip(t.shape, t.stride(), strict=True) if st != 0) * t.element_size()

        ts = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)]
        outs = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]
        self.ops.append((func.overloadpacket.__name__, sum(map(moved, ts + outs)), sum(map(moved, outs))))
        return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("norm", ["true", "false"], ids=["topk-of-logits", "softmax-then-topk"])
def test_routing_bytes_match_tfcalc_module(norm, dtype):
    """tfcalc's MoE forward on N = 64 tokens: the top-k, the index work beside the sort (the CPU sort's own
    24 bytes per pair apart: the docstring's step 2), and the zeroed output, each as the module derives them."""
    moe = _moe(router_norm_topk=norm)
    m = MixtureOfExperts(moe).to(dtype)
    for p in m.parameters():
        torch.nn.init.normal_(p, std=0.02)
    N, a, P = 64, torch.empty((), dtype=dtype).element_size(), 64 * moe.top_k
    with _Ops() as mode:
        m.routed(torch.randn(N, moe.d_model, dtype=dtype))
    ops = {}
    for name, b, o in mode.ops:
        ops.setdefault(name, []).append((b, o))
    fp32 = not moe.renormalize
    assert ops["topk"][0][0] == moe_dispatch.topk(N, moe.n_expert, moe.top_k, 4 if fp32 else a).forward_bytes
    assert ops["sort"][0][0] == 24 * P
    index = ops["index_select"][0][0] + ops["div"][0][0] + ops["index_select"][1][0] + ops["searchsorted"][0][0]
    ends = moe.n_expert * 4 + 8  # the (E,) int32 ends and the arange of the E thresholds' bounds
    expected = moe_dispatch.index_work(P, a).forward_bytes - moe_dispatch.SORT_PASSES * 32 * P
    assert abs(index - expected) <= ends + 32
    assert ops["zeros_like"][0][1] == N * moe.d_model * a  # the zeroed (N, d) output: step 3's + a per token element


def test_plan_shows_the_dispatch_and_it_weighs_more_for_fine_grained_experts():
    """plan's --json carries moe_dispatch_s (part of compute_s); fine-grained experts (Qwen3-30B-A3B: d 2048,
    k 8, expert width 768) spend a larger share of the step on it than Mixtral's (d 4096, k 2, width 14336),
    per the docstring's bytes-per-FLOP argument (d·a per pair against 6·d·f FLOPs)."""
    share = {}
    for name in ("mixtral-8x7b", "qwen3-30b-a3b"):
        j = tfcalc.plan(name, gpus=8, tp=1, ep=8, seq=4096, micro_batch=1, global_batch=64).to_json()
        share[name] = j["step"]["moe_dispatch_s"] / j["step"]["compute_s"]
        assert 0 < share[name] < 0.2
    assert share["qwen3-30b-a3b"] > 3 * share["mixtral-8x7b"]
    dense = tfcalc.plan("llama3-8b", gpus=8, tp=1, seq=4096, micro_batch=1, global_batch=64).to_json()
    assert dense["step"]["moe_dispatch_s"] == 0


def test_serving_step_adds_topk_and_the_counting_sort():
    """A decode step of Mixtral 8x7B, batch 8 (step 5: vLLM's topk_softmax and moe_align_block_size): per
    layer the top-k of the raw bf16 logits, 8·8·2 + 16·(2 + 8) bytes, and 16 pairs' 8 bytes of the sort;
    32 layers, 2 kernels each, beside the dense step's kernels."""
    from tfcalc.count.perf import inference
    from tfcalc.count.perf.hardware import PerfSpec

    cfg = load("mixtral-8x7b")
    over = inference.overhead(cfg, 8, 1, 128, 0, "bf16", 2, 1e12, 1e13, PerfSpec())
    assert over.moe_s == pytest.approx(32 * (8 * 8 * 2 + 16 * 10 + 16 * 8) / 1e12)
    assert over.kernels == inference.kernel_count(cfg, 8, 1, 128) + 32 * 2
    assert over.total_s == pytest.approx(over.kernel_s + over.traffic_s + over.moe_s)


def test_expert_gemms_run_at_the_tokens_per_expert_shape():
    """Grouped-GEMM efficiency by tokens per expert (issue 31, c): Qwen3-30B-A3B (E 128, k 8, d 2048, expert
    width 768) on 4096 tokens routes 32,768 pairs, 256 rows per expert on average; under EP 8 a rank's 16
    experts receive 8 ranks' pairs, 2048 rows each (tp_shape). tfcalc.count.perf.grouped_gemm's worked
    example: binomial rows, σ = √(256·127/128) = 15.94, 128-row tiles: 1 + 1 + Q(0.5/15.94) = 2.4875 tiles per
    expert, not 2."""
    from tfcalc.count.model.flops import matmul_entries
    from tfcalc.count.perf import gemm, grouped_gemm
    from tfcalc.count.training.micro_batch_time import tp_shape

    cfg = load("qwen3-30b-a3b")
    up = next(e for e in matmul_entries(cfg, 1, 4096) if e.component == "expert_ffn_up")
    assert tp_shape(up, 1, 128) == (256, 2048, 768, 128)
    assert tp_shape(up, 1, 128 // 8) == (2048, 2048, 768, 16)
    q = 0.5 * math.erfc(0.5 / math.sqrt(256 * 127 / 128) / math.sqrt(2))
    assert grouped_gemm.expected_tiles(32768, 128, 128) == pytest.approx(2 + q, abs=1e-9)
    assert q == pytest.approx(0.4875, abs=1e-4)
    # an expert no pair reached runs no tile: 16 pairs over 128 experts, 16-row tiles
    assert grouped_gemm.expected_tiles(16, 128, 16) == pytest.approx(1 - (127 / 128) ** 16, abs=1e-3)
    # 128 experts of 256 rows on an H100's 132 SMs: below the evenly routed GEMMs of tfcalc.count.perf.gemm
    uneven = grouped_gemm.efficiency(32768, 128, 768, 2048, 132, 0.801)
    even = gemm.efficiency(256, 768, 2048, 132, 0.801, 128)
    assert uneven < 0.8 * even
    # one expert: the GEMM of all its rows, exactly
    assert grouped_gemm.efficiency(8192, 1, 14336, 4096, 132, 0.801) == gemm.efficiency(8192, 14336, 4096, 132,
                                                                                        0.801, 1)


def test_grouped_tiles_match_sampled_routing():
    """expected_tiles against a sample: 400 draws of 32,768 pairs routed uniformly to 128 experts, each
    expert's ⌈m/128⌉ summed (torch.multinomial, not the formula)."""
    from tfcalc.count.perf import grouped_gemm

    torch.manual_seed(0)
    counts = torch.distributions.Multinomial(32768, torch.full((128,), 1 / 128)).sample((400,))
    sampled = torch.ceil(counts / 128).sum(dim=1).mean().item() / 128
    assert grouped_gemm.expected_tiles(32768, 128, 128) == pytest.approx(sampled, rel=0.01)
