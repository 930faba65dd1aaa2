"""Gated DeltaNet's eager ops (tfcalc.architecture.gated_deltanet_eager, ``GatedDeltaNet.eager_ops``) against the aten
ops tfcalc's module (tfcalc.model.gated_deltanet.GatedDeltaNetModule) dispatches forward and backward on the CPU,
under a TorchDispatchMode, op for op in the order it runs them: each kernel's bytes read and written (a tensor's
distinct elements: a stride-0 broadcast counted once), those of tensors with the batch as their first dimension
(weight-sized operands and outputs -- A_log, dt_bias, the norm's weight and their gradients, the causal mask -- do
not grow with the tokens), less what the matmul entries price: mm, bmm, the convolution, the triangular solves."""

from __future__ import annotations

import math

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from tfcalc.architecture.gated_deltanet import GatedDeltaNet
from tfcalc.count.perf import eager

pytestmark = pytest.mark.filterwarnings("ignore")

VIEWS = {"view", "_unsafe_view", "unflatten", "slice", "select", "expand", "unsqueeze", "squeeze", "split",
         "split_with_sizes", "chunk", "t", "transpose", "permute", "detach", "alias", "as_strided", "lift_fresh",
         "_reshape_alias", "unbind"}
MATMULS = {"mm", "addmm", "bmm", "convolution", "convolution_backward", "linalg_solve_triangular"}
FRESH = {"new_zeros", "zeros", "ones", "empty", "new_empty", "zeros_like", "new_ones"}  # write only
B = 3  # the batch: no other first dimension of a tensor here is 3


def _elements(t: torch.Tensor) -> int:
    return math.prod(s for s, st in zip(t.shape, t.stride(), strict=True) if st != 0 or s == 1)


class Ops(TorchDispatchMode):
    """(op, bytes) of every kernel but the views and the matmuls (module docstring)."""

    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        name = func.__name__.split(".")[0]
        if name in VIEWS or name in MATMULS:
            return out
        read = [] if name in FRESH else [*args[name == "copy_":], *(v for k, v in (kwargs or {}).items()
                                                                     if k != "out")]
        read = [u for t in read for u in (t if isinstance(t, (list, tuple)) else [t]) if isinstance(u, torch.Tensor)]
        wrote = [t for t in (out if isinstance(out, (list, tuple)) else [out]) if isinstance(t, torch.Tensor)]
        self.ops.append((name, sum(_elements(t) * t.element_size() for t in read + wrote
                                   if t.dim() and t.shape[0] == B)))
        return out


def measure(spec: GatedDeltaNet, dtype, T: int):
    from tfcalc.model.gated_deltanet import GatedDeltaNetModule

    torch.manual_seed(0)
    m = GatedDeltaNetModule(spec)
    for p in m.parameters():
        torch.nn.init.normal_(p, std=0.1)
    m = m.to(dtype)
    x = torch.randn(B, T, spec.d_model, dtype=dtype, requires_grad=True)
    with Ops() as fwd:
        y = m(x)
    grad = torch.randn_like(y)
    with Ops() as bwd:
        y.backward(grad)
    return fwd.ops, bwd.ops


def declared(spec: GatedDeltaNet, a: int, T: int):
    """(forward bytes of each forward kernel, backward bytes of each backward kernel), as eager prices them."""
    terms = [t for op in spec.sequence_eager_ops(B, T) for t in eager.mixer_terms([op], a)]
    return [t.forward for t in terms if t.forward_kernels], [t.backward for t in terms if t.backward_kernels]


def spec_for(layout: str) -> GatedDeltaNet:
    # 2 key heads of 3 value heads each, dk 5, dv 7, chunks of 4, 3 taps: no two sizes equal, none equal to B
    return GatedDeltaNet(8, 2, 6, 5, 7, 3, chunk=4, split_projections=layout == "split",
                         separate_projections=layout == "separate",
                         beta_scale=2.0 if layout == "separate" else 1.0)


@pytest.mark.parametrize("layout", ["grouped", "split", "separate"])
@pytest.mark.parametrize("dtype, a", [(torch.bfloat16, 2), (torch.float32, 4)])
@pytest.mark.parametrize("T", [3, 4, 10, 12])
def test_the_declared_ops_are_the_modules_op_for_op(layout, dtype, a, T):
    """One chunk (padded, whole), several (padded, whole): kernel by kernel, forward and backward, the bytes each
    moves are what its EagerOp prices (tfcalc.count.perf.eager.mixer_terms at a bytes an activation)."""
    spec = spec_for(layout)
    fwd, bwd = measure(spec, dtype, T)
    f, b = declared(spec, a, T)
    assert f == [float(by) for _, by in fwd]
    assert b == [float(by) for _, by in bwd]


def test_kimi_delta_declares_none_of_them():
    """Kimi Delta Attention's module (tfcalc.model.kimi_delta) runs its own ops: it does not inherit these."""
    from tfcalc.architecture.kimi_delta import KimiDeltaAttention

    kda = KimiDeltaAttention(8, 2, 2, 4, 4, 3, chunk=4)
    assert kda.eager_ops(64) == [] and getattr(kda, "sequence_eager_ops", None) is None


def test_a_training_step_prices_them_under_eager():
    """plan's default --kernels eager: the micro-batch's non-matmul seconds rise by the declared ops' bytes at the
    bandwidth and their kernels at each kernel's cost (forward, backward; the forward again under full recompute),
    per sequence of the micro-batch (the chunk loop's kernels are a sequence's chunks), once a DeltaNet layer."""
    from tfcalc.architecture import gated_deltanet as arch
    from tfcalc.count.perf.hardware import perf_spec
    from tfcalc.count.training import micro_batch_time as mbt
    from tfcalc.presets import load
    from tfcalc.workload import Layout

    cfg, perf = load("qwen3-next-80b-a3b"), perf_spec("h100-sxm")
    kinds = [(block.mixer, layers) for _, block, layers in cfg.architecture.kinds()
             if isinstance(block.mixer, arch.GatedDeltaNet)]
    assert len(kinds) == 1
    spec, layers = kinds[0]
    blocks = sum(n for _, _, n in cfg.architecture.kinds())
    B_, T, bw = 2, 1000, 3e12  # 1000 tokens: padded to 16 chunks of 64
    for recompute in ("none", "full"):
        layout = Layout(seq=T, global_batch=8, micro_batch=B_, recompute=recompute)
        eager.terms.cache_clear()
        step = mbt.micro_batch_time.__wrapped__(cfg, layout, 1e15, bw, perf)
        real = arch.GatedDeltaNet.sequence_eager_ops
        try:
            arch.GatedDeltaNet.sequence_eager_ops = lambda self, batch, seq: []
            eager.terms.cache_clear()
            without = mbt.micro_batch_time.__wrapped__(cfg, layout, 1e15, bw, perf)
        finally:
            arch.GatedDeltaNet.sequence_eager_ops = real
            eager.terms.cache_clear()
        again = recompute == "full"
        terms = eager.mixer_terms(spec.sequence_eager_ops(B_, T), 2)
        f, b = sum(t.forward for t in terms), sum(t.backward for t in terms)
        kf, kb = sum(t.forward_kernels for t in terms), sum(t.backward_kernels for t in terms)
        by_hand = layers * ((f * (1 + again) + b) / bw + (kf * (1 + again) + kb) * perf.kernel_s) / blocks
        assert step.block_other_s - without.block_other_s == pytest.approx(by_hand, rel=1e-9)
