"""Ring attention's own work under context parallelism (issue 31; tfcalc.count.training.context_parallel, step 5):
the log-sum-exp merges measured on PyTorch's own merger (torch's _SDPAMerger, the bytes each aten op reads and
writes), the per-layer sums against a hand derivation, and their place in the micro-batch's time."""

import dataclasses

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from tfcalc.count.model.flops import matmul_entries
from tfcalc.count.training import context_parallel as cp, micro_batch_time as mbt
from tfcalc.count.training.layout import Layout
from tfcalc.count.training.steptime import Hardware, micro_batch_at
from tfcalc.presets import load

VIEWS = ("aten::view", "aten::unsqueeze", "aten::split", "aten::slice", "aten::squeeze", "aten::detach")


class Traffic(TorchDispatchMode):
    """Bytes every non-view aten op reads (its tensor arguments) and writes (its outputs)."""

    def __init__(self):
        super().__init__()
        self.bytes, self.kernels = 0, 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))

        def size(x):
            if isinstance(x, torch.Tensor):
                return x.numel() * x.element_size()
            return sum(size(y) for y in x) if isinstance(x, (list, tuple)) else 0

        if func._schema.name not in VIEWS:
            self.bytes += size(args) + size(out)
            self.kernels += 1
        return out


def _merger():
    from torch.distributed.tensor.experimental._context_parallel._attention import _SDPAMerger

    return _SDPAMerger(True, seq_dim=2)


B, H, S, D = 1, 4, 512, 128  # (B, nh, T, hs)
N = B * H * S * D


def test_a_whole_merge_step_is_38_bytes_an_element_in_9_kernels():
    m = _merger()
    m.step(torch.randn(B, H, S, D, dtype=torch.bfloat16), torch.randn(B, H, S), False)
    out, lse = torch.randn(B, H, S, D, dtype=torch.bfloat16), torch.randn(B, H, S)
    with Traffic() as t:
        m.step(out, lse, False)
    lse_share = t.bytes - cp.MERGE_BYTES * N  # the log-sum-exp's small ops: 15 fp32 values a row
    assert 0 <= lse_share <= 16 * 4 * B * H * S  # under half a byte an element at d_head 128
    assert t.kernels == cp.MERGE_KERNELS


def test_first_step_and_result_each_convert_once():
    m = _merger()
    out, lse = torch.randn(B, H, S, D, dtype=torch.bfloat16), torch.randn(B, H, S)
    with Traffic() as t:
        m.step(out, lse, False)
    assert t.bytes == pytest.approx(cp.CONVERT * N, rel=0.01)
    with Traffic() as t:
        m.results()
    assert t.bytes == pytest.approx(cp.CONVERT * N, rel=0.01)


def layout(**over) -> Layout:
    return Layout(**dict(dict(dp=1, cp=4, seq=8192, global_batch=1, micro_batch=1, recompute="none"), **over))


def test_ring_merges_by_hand():
    """Llama 3 8B on 2 layers, C = 4, TP 2: N_q = 2 layers × 2,048 positions × 32/2 heads × 128; N_kv = 2 layers ×
    2,048 × (8/2 K + 8/2 V heads) × 128."""
    cfg = load("llama3-8b", ["n_layer=2"])
    L = layout(tp=2)
    n_q = 2 * 2048 * 16 * 128
    n_kv = 2 * 2048 * 8 * 128
    assert cp.kv_elements(cfg, L) == n_kv
    f, b, fk, bk = cp.ring_merges(matmul_entries(cfg, 1, 8192), L, n_kv)
    assert f == n_q * (6 + 6 + 38 * 3)
    assert b == n_q * (10 * 4 + 6) + n_kv * (18 * 4 + 6)
    assert (fk, bk) == (2 * 3 * 10, 2 * (4 * 4 + 3))
    assert cp.ring_merges(matmul_entries(cfg, 1, 8192), layout(cp=1), 0) == (0.0, 0.0, 0, 0)


H100 = Hardware(989e12, 80 * 10**9, 450e9, 50e9, 8)


@pytest.mark.parametrize("recompute, reruns", [("none", 0), ("full", 1), ("selective", 1)])
def test_the_merges_are_memory_bound_time_of_the_micro_batch(monkeypatch, recompute, reruns):
    cfg = load("llama3-8b", ["n_layer=2"])
    L = layout(recompute=recompute)
    with_ring = micro_batch_at(cfg, L, H100)
    f, b, fk, bk = cp.ring_merges(matmul_entries(cfg, 1, 8192), L, cp.kv_elements(cfg, L))
    monkeypatch.setattr(mbt, "ring_merges", lambda *a: (0.0, 0.0, 0, 0))
    mbt.micro_batch_time.cache_clear()
    without = micro_batch_at(cfg, dataclasses.replace(L), H100)
    mbt.micro_batch_time.cache_clear()
    bw = 3.35e12 * H100.perf.bandwidth_efficiency
    added = ((f * (1 + reruns) + b) / bw + (fk * (1 + reruns) + bk) * H100.perf.kernel_s) / 2  # per block
    assert with_ring.block_other_s - without.block_other_s == pytest.approx(added, rel=1e-9)
