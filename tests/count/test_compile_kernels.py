"""--kernels compile: torch.compile as torchtitan applies it, each TransformerBlock compiled on its own
(pytorch/torchtitan parallelize_llama.py, apply_compile, at the commit of its H100 benchmarks, 9dec370), so the
blocks' non-matmul work is fused and the embedding, the final norm and the loss run op by op, once forward and
once backward (tfcalc.count.perf.elementwise, step 5). Checked against the hand derivation of those eager ops
(tfcalc.count.perf.eager's docstring, steps 1, 9 and 10), not against tfcalc's own sums."""

from __future__ import annotations

import pytest

from tfcalc.count.perf.hardware import PerfSpec
from tfcalc.count.training.micro_batch_time import micro_batch_time
from tfcalc.count.training.shard import total_blocks
from tfcalc.presets import load
from tfcalc.workload import Layout

BW = 2.0e12  # bytes/s, a round figure: the test checks bytes and kernels, not a device
PERF = PerfSpec(sm_count=132, kernel_s=4e-6)


def _other_s(cfg, kernels: str, recompute: str = "none") -> float:
    # rotate-half RoPE: the blocks fused alone (torchtitan's complex RoPE, which compile leaves to aten kernels, is
    # elementwise step 6's, checked in test_complex_rope.py)
    L = Layout(seq=512, global_batch=2, micro_batch=2, recompute=recompute, kernels=kernels, rope="real")
    t = micro_batch_time(cfg, L, 989e12, BW, PERF)
    return t.block_other_s * total_blocks(cfg) + t.head_other_s


@pytest.mark.parametrize("recompute", ["none", "op", "full"])
def test_compile_is_fused_blocks_plus_the_eager_edges_by_hand(recompute):
    cfg = load("llama3-8b", {})
    N, d, V, a, F = 2 * 512, 4096, 128256, 2, 4
    again = recompute != "none"
    # the loss (step 10): cast to fp32 (a + F) and log_softmax (2F) forward; nll's zeroed gradient (F),
    # log_softmax's backward (3F) and the cast back (F + a): per logit, 3 + 3 kernels
    loss = N * V * ((a + F + 2 * F) + (F + 3 * F + F + a))
    # the token embedding (step 9): the gathered rows read and written (2a), its gradient read (a)
    embedding = N * d * (2 * a + a)
    # the final RMSNorm (step 1), bf16 in: forward 28 + 2(a + F) per element, backward 92 + 2(a + F); per row
    # 24 and 40; kernels 6 + 2 casts forward, 14 + 3 casts back
    norm = N * d * ((28 + 2 * (a + F)) + (92 + 2 * (a + F))) + N * (24 + 40)
    eager_kernels = (3 + 3) + (1 + 1) + (8 + 17)
    # what the fused mode charged for the final norm: one read and one write, 1 + 2 (+ 1 under recompute) passes
    fused_norm = 2 * N * d * a * (3 + again)
    fused_kernels = 1 + 2 + again
    hand = (loss + embedding + norm - fused_norm) / BW + (eager_kernels - fused_kernels) * PERF.kernel_s
    assert _other_s(cfg, "compile", recompute) - _other_s(cfg, "fused", recompute) == pytest.approx(hand, rel=1e-9)


def test_compile_sits_between_fused_and_eager():
    cfg = load("llama3-8b", {})
    assert _other_s(cfg, "fused") < _other_s(cfg, "compile") < _other_s(cfg, "eager")


def test_compile_is_refused_nowhere_and_named_in_the_plan(cli):
    r = cli("plan", "llama3-8b", "--dp", "8", "--zero", "3", "--seq", "4096", "--kernels", "compile")
    assert r.code == 0 and "compiled blocks" in " ".join(r.out.split())
    bad = cli("plan", "llama3-8b", "--dp", "8", "--kernels", "inductor")
    assert bad.code != 0 and "Traceback" not in bad.err + bad.out
