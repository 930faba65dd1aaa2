"""Mamba-1's costs outside the counts of FLOPs and saved activations (tfcalc.architecture.mamba1), each against what a
tiny model's forward actually does on torch, under a TorchDispatchMode:

- the prefill's working set (tfcalc.count.model.memory.forward_working_set): the peak of the bytes the storages its
  ops allocate hold at once (torch keeps no peak counter for CPU memory; each storage counted once, from the op
  that creates it until the last tensor on it dies), where the scan's two (T, I, N) tensors are fp32 whatever the
  activations' dtype.
"""

from __future__ import annotations

import weakref

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from tfcalc.workload import Workload

pytestmark = pytest.mark.filterwarnings("ignore")


class LiveBytes(TorchDispatchMode):
    """The peak of the bytes alive in storages that ops allocate: a storage counts from the first op output on it
    until the last tensor on it is gone (a finalizer per tensor); storages in ``skip`` (weights, the input) never."""

    def __init__(self, skip=()):
        super().__init__()
        self.skip, self.refs, self.size, self.live, self.peak = set(skip), {}, {}, 0, 0

    def _drop(self, ptr: int) -> None:
        self.refs[ptr] -= 1
        if not self.refs[ptr]:
            del self.refs[ptr]
            self.live -= self.size.pop(ptr)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            if not isinstance(t, torch.Tensor) or t.untyped_storage().data_ptr() in self.skip:
                continue
            ptr = t.untyped_storage().data_ptr()
            if ptr not in self.refs:
                self.refs[ptr], self.size[ptr] = 0, t.untyped_storage().nbytes()
                self.live += self.size[ptr]
                self.peak = max(self.peak, self.live)
            self.refs[ptr] += 1
            weakref.finalize(t, self._drop, ptr)
        return out


def _cfg(**changes):
    from tfcalc.config import from_mapping

    base = dict(n_layer=2, d_model=32, n_head=4, vocab_size=61, max_seq_len=512, pos_encoding="none", norm="rmsnorm",
                hybrid_pattern="MM", hybrid_m_mixer="mamba_one", ssm_inner=64, ssm_state_size=16)
    return from_mapping({**base, **changes})


@pytest.mark.parametrize("norm", ["none", "weighted"])
@pytest.mark.parametrize("dtype, e", [("bf16", 2), ("fp32", 4)])
@pytest.mark.parametrize("seq", [64, 200])
def test_prefill_working_set_is_the_measured_peak(norm, dtype, e, seq):
    """The no-grad forward's peak (LiveBytes) against forward_working_set, to the byte up to what the count's
    convention adds or leaves out by hand: its stage counts the block's output projection beside x and the norm
    output (3h; out_proj has not run at the scan's peak: e·h a token more), not the layer's A = -exp(A_log)
    (4·I·N bytes whatever the tokens), and with dt/B/C norms x_proj's output where the normed dt is already freed
    (e·R a token more). Peak: x and the norm output (2h), in_proj's, the convolution's and x_proj's outputs
    (2I + I + R + 2N) in e; dt, exp(dt·A) and the states, h·C, D·x, their sum and below fp32 x's copy in fp32
    (I + 2·I·N + 3I + I). Before: the count was 0.48x the peak in bf16 (the (T, I, N) tensors at 2 bytes)."""
    from tfcalc.count.model import memory as mem
    from tfcalc.model import build_model

    cfg = _cfg(ssm_bcdt_norm=norm)
    torch.manual_seed(0)
    model = build_model(cfg, "cpu").to(torch.bfloat16 if e == 2 else torch.float32).eval()
    idx = torch.randint(0, 61, (2, seq))
    skip = {t.untyped_storage().data_ptr() for t in [*model.parameters(), *model.buffers(), idx]}
    with torch.no_grad(), LiveBytes(skip) as live:
        model(idx)
    spec = cfg.architecture.output.layer(0).mixer
    h, i, n, r = cfg.d_model, spec.inner, spec.state_size, spec.dt_rank
    tokens = 2 * seq
    by_hand = e * tokens * h - 4 * i * n + (e * tokens * r if norm != "none" else 0)
    assert mem.forward_working_set(cfg, Workload(batch=2, seq=seq, dtype=dtype)) - live.peak == by_hand


VIEWS = {"view", "_unsafe_view", "unflatten", "slice", "select", "expand", "unsqueeze", "squeeze", "split",
         "split_with_sizes", "chunk", "t", "transpose", "permute", "detach", "alias", "as_strided", "lift_fresh",
         "_reshape_alias", "unbind"}


class Dispatched(TorchDispatchMode):
    """Kernels (every aten op but views) and the bytes they read and write of the (..., I, N)-shaped tensors, or
    (..., N, I) (h transposed, which the read's gradient bmm reads): its tensor inputs read, a list's too (stack's),
    its outputs written; not an out= tensor nor copy_'s destination."""

    def __init__(self, i: int, n: int):
        super().__init__()
        self.i, self.n, self.kernels, self.bytes = i, n, 0, 0

    def _moved(self, tensors) -> int:
        flat = [u for t in tensors for u in (t if isinstance(t, (list, tuple)) else [t])]
        return sum(t.numel() * t.element_size() for t in flat if isinstance(t, torch.Tensor) and t.dim() >= 3
                   and tuple(t.shape[-2:]) in ((self.i, self.n), (self.n, self.i)))

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        name = func.__name__.split(".")[0]
        if name not in VIEWS:
            self.kernels += 1
            read = [*args[name == "copy_":], *(v for k, v in (kwargs or {}).items() if k != "out")]
            self.bytes += self._moved(read) + self._moved(out if isinstance(out, tuple) else [out])
        return out


@pytest.mark.parametrize("batch, lengths", [(1, (17, 33)), (2, (20, 40)), (3, (13, 21))])
def test_training_loop_runs_the_counted_kernels_and_bytes(batch, lengths):
    """A training step's forward and backward of a tiny two-layer model (autograd: the position loop) dispatch
    the (..., I, N) bytes the loop's count says (Mamba1.autograd_loop, two layers), to the byte: every such tensor
    of the model is the scan's (the lengths chosen so that neither T nor T + K - 1 is I or N: no (B, T, N) nor
    convolution input matches); and from one length to the other as many more kernels: 3 a position forward, 5
    backward. The parameters' gradients are dropped between the lengths: a second backward into kept .grad
    tensors adds one in-place accumulation (add_) a parameter, which the count had taken for fewer than one
    run-time accumulation a position (a bound, 5 to 6 a position, where it is 5). Before: the backward's 23T - 8
    passes were fitted on an instrument that read no list (stack's inputs) nor hᵀ (the read's gradient bmm):
    26T - 9 and the A gradient's I·N, derived."""
    cfg = _cfg(ssm_state_size=8)
    spec = cfg.architecture.output.layer(0).mixer
    torch.manual_seed(0)
    from tfcalc.model import build_model

    model = build_model(cfg, "cpu").train()
    ran = []
    for T in lengths:
        idx = torch.randint(0, 61, (batch, T))
        model.zero_grad(set_to_none=True)
        with Dispatched(spec.inner, spec.state_size) as fwd:
            loss = model(idx).float().sum()
        with Dispatched(spec.inner, spec.state_size) as bwd:
            loss.backward()
        ran.append((fwd.bytes, bwd.bytes, fwd.kernels, bwd.kernels))
    counted = [spec.autograd_loop(batch, T) for T in lengths]
    for r, c in zip(ran, counted, strict=True):  # the bytes each way, whole
        assert r[:2] == (cfg.n_layer * c[0], cfg.n_layer * c[1])
    for k in (2, 3):  # the kernels, from one length to the other
        assert ran[1][k] - ran[0][k] == cfg.n_layer * (counted[1][k] - counted[0][k]), k


def test_a_training_step_prices_the_loop():
    """micro_batch_time adds the loop's seconds (tfcalc.count.training.mixer_loops) to the blocks' other work:
    forward, backward and the replayed forward under full recompute, at the bandwidth and each kernel's cost."""
    from tfcalc.count.perf.hardware import perf_spec
    from tfcalc.count.training import micro_batch_time as mbt, mixer_loops
    from tfcalc.presets import load
    from tfcalc.workload import Layout

    cfg = load("falcon-mamba-7b")
    perf = perf_spec("h100-sxm")
    for recompute in ("none", "full"):
        layout = Layout(seq=4096, global_batch=8, micro_batch=1, recompute=recompute)
        with_loop = mbt.micro_batch_time.__wrapped__(cfg, layout, 1e15, 3e12, perf)
        lf, lb, kf, kb = mixer_loops.loop_costs(cfg, 1, 4096)
        again = recompute == "full"
        loop_s = (lf * (1 + again) + lb) / 3e12 + (kf * (1 + again) + kb) * perf.kernel_s
        assert kf == 64 * 3 * 4096 and kb == 64 * 5 * 4096
        zero = mixer_loops.loop_costs
        try:
            mixer_loops.loop_costs = lambda *a, **k: (0.0, 0.0, 0, 0)
            without = mbt.micro_batch_time.__wrapped__(cfg, layout, 1e15, 3e12, perf)
        finally:
            mixer_loops.loop_costs = zero
        assert with_loop.block_other_s - without.block_other_s == pytest.approx(loop_s / 64, rel=1e-12)


@pytest.mark.parametrize("kernels", ["fused", "compile"])
def test_a_training_step_counts_the_scan_once(kernels):
    """Under autograd the module runs the position loop, not the chunked scan (tfcalc.model.mamba1._scan), so a
    training step's non-matmul work is the loop's (Mamba1.autograd_loop: every fp32 pass over (T, I, N), dt·A and
    its exp included) plus one read and one write of the mixer's other elementwise entries; the scan's entry keeps
    its one fused kernel each way (exp(dt·A): the loop's 3T and 5T kernels are the recurrence's, the reads and the
    stacks) and no bytes of its own. Hand derivation for a micro-batch of B sequences of T tokens on one rank, per
    layer, at bandwidth b and each kernel's cost k (seconds): the step's non-matmul seconds minus the same step's
    with the Mamba-1 entries' bytes all zero is the other entries' bytes, 2·a·(I + I + I)·B·T for SiLU, the
    softplus and the gate (+ the norms' 2·a·(R + 2N)·B·T where the model has them), times 1 + 2 passes, over b,
    exactly: no scan_passes(T) term, the chunked prefill's (before: about 12T more fp32 passes a layer forward,
    2 × that backward, the scan counted beside its loop). And the inference passes must not enter at all."""
    from tfcalc.architecture import mamba1 as arch
    from tfcalc.architecture.mixer import Elementwise
    from tfcalc.count.perf.hardware import perf_spec
    from tfcalc.count.training import micro_batch_time as mbt
    from tfcalc.presets import load
    from tfcalc.workload import Layout

    cfg, perf = load("falcon-mamba-7b"), perf_spec("h100-sxm")
    spec = cfg.architecture.output.layer(0).mixer
    B, T, a, bw = 1, 2048, 2, 3e12
    layout = Layout(seq=T, global_batch=8, micro_batch=B, kernels=kernels)
    step = mbt.micro_batch_time.__wrapped__(cfg, layout, 1e15, bw, perf)
    # the inference scan's passes (out of autograd only) play no part in a training step
    passes = arch.scan_passes
    try:
        arch.scan_passes = lambda queries: 10**6 * passes(queries)
        inflated = mbt.micro_batch_time.__wrapped__(cfg, layout, 1e15, bw, perf)
    finally:
        arch.scan_passes = passes
    assert inflated.block_other_s == step.block_other_s
    # the mixer's other entries, by hand: SiLU, softplus and the D skip / gate over I, the weightless norms over
    # R + 2N, one read and one write each, forward and twice backward
    inner, R, N = spec.inner, spec.dt_rank, spec.state_size
    assert spec.bcdt_norm == "weightless"
    others = 2 * a * B * T * (3 * inner + R + 2 * N) * 3 / bw
    real = arch.Mamba1.elementwise
    try:  # the mixer's entries kept, their bytes zero: what remains is everything but them
        arch.Mamba1.elementwise = lambda self, q, k: [Elementwise(e.work, e.label, e.elements, e.norm, e.per_element,
                                                                  e.kernels, 0) for e in real(self, q, k)]
        without = mbt.micro_batch_time.__wrapped__(cfg, layout, 1e15, bw, perf)
    finally:
        arch.Mamba1.elementwise = real
    assert step.block_other_s - without.block_other_s == pytest.approx(others, rel=1e-12)
