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
from eager_checks import Kernels, block_other_s, forward_backward, operands, priced_s, seeded

from tfcalc.architecture.gated_deltanet import GatedDeltaNet
from tfcalc.count.perf import eager

pytestmark = pytest.mark.filterwarnings("ignore")

MATMULS = {"mm", "addmm", "bmm", "convolution", "convolution_backward", "linalg_solve_triangular"}
FRESH = {"new_zeros", "zeros", "ones", "empty", "new_empty", "zeros_like", "new_ones"}  # write only
B = 3  # the batch: no other first dimension of a tensor here is 3


def _elements(t: torch.Tensor) -> int:
    return math.prod(s for s, st in zip(t.shape, t.stride(), strict=True) if st != 0 or s == 1)


class Ops(Kernels):
    """(op, bytes) of every kernel but the views and the matmuls (module docstring)."""

    def __init__(self):
        super().__init__(MATMULS)

    def record(self, name, args, kwargs, out):
        read, wrote = operands(name, args, kwargs, out)
        read = [] if name in FRESH else read
        self.ops.append((name, sum(_elements(t) * t.element_size() for t in read + wrote
                                   if t.dim() and t.shape[0] == B)))


def measure(spec: GatedDeltaNet, dtype, T: int):
    from tfcalc.model.gated_deltanet import GatedDeltaNetModule

    m = seeded(lambda: GatedDeltaNetModule(spec), dtype)
    return forward_backward(m, torch.randn(B, T, spec.d_model, dtype=dtype, requires_grad=True), Ops)


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
        declared, without = block_other_s(
            cfg, layout, {(arch.GatedDeltaNet, "sequence_eager_ops"): lambda self, batch, seq: []}, bw, perf)
        by_hand = layers * priced_s(spec.sequence_eager_ops(B_, T), 2, recompute, bw, perf.kernel_s) / blocks
        assert declared - without == pytest.approx(by_hand, rel=1e-9)
