"""Mamba-1's eager ops (tfcalc.architecture.mamba1_eager, ``Mamba1.eager_ops``) against the aten ops tfcalc's module
(tfcalc.model.mamba1.Mamba1Mixer) dispatches forward and backward on the CPU, under a TorchDispatchMode, op for
op in the order it runs them: each kernel's bytes read and written, those that grow with the tokens (measured at
two lengths: weight-sized operands and the pad's K - 1 columns a sequence do not), less what others price: the
matmuls (mm, bmm, the convolution), the position loop's kernels (those on a position's (B, I, N), (B, I, 1) or
(B, N, 1) tensors: Mamba1.autograd_loop's 3T and 5T, tests/model/test_mamba1_costs.py) and every (..., I, N) fp32
tensor's bytes (that loop's count holds them: dt·A's and exp's outputs and their gradients)."""

from __future__ import annotations

import pytest
import torch
from eager_checks import Kernels, block_other_s, forward_backward, operands, priced_s, seeded

from tfcalc.architecture.mamba1 import Mamba1
from tfcalc.count.perf import eager

pytestmark = pytest.mark.filterwarnings("ignore")

MATMULS = {"mm", "addmm", "bmm", "convolution", "convolution_backward"}
B, I_, N, R = 2, 12, 5, 3  # no dimension a multiple of the lengths below, nor equal to another


class Ops(Kernels):
    """(op, bytes) of every kernel but the views, the matmuls and the loop's: its tensors read and written
    (eager_checks.operands); the (..., I, N) tensors left out."""

    def __init__(self):
        super().__init__(MATMULS)

    def record(self, name, args, kwargs, out):
        read, wrote = operands(name, args, kwargs, out)
        if any(tuple(t.shape) in {(B, I_, N), (B, N, I_), (B, I_, 1), (B, N, 1)} for t in read + wrote):
            return  # a position's: the loop's kernel
        self.ops.append((name, sum(t.numel() * t.element_size() for t in read + wrote
                                   if not (t.dim() >= 3 and tuple(t.shape[-2:]) in ((I_, N), (N, I_))))))


def _measure(spec: Mamba1, dtype, T: int):
    from tfcalc.model.mamba1 import Mamba1Mixer

    m = seeded(lambda: Mamba1Mixer(spec), dtype)
    return forward_backward(m, torch.randn(B, T, spec.d_model, dtype=dtype, requires_grad=True), Ops)


@pytest.mark.parametrize("norm", ["none", "weightless", "weighted"])
@pytest.mark.parametrize("dtype, a", [(torch.bfloat16, 2), (torch.float32, 4)])
def test_the_declared_ops_are_the_modules_op_for_op(norm, dtype, a):
    """Forward and backward, kernel by kernel in order: the bytes each moves per token more from 7 to 11 tokens a
    sequence is what its EagerOp prices (tfcalc.count.perf.eager.mixer_terms at a bytes an activation)."""
    spec = Mamba1(8, I_, R, N, 4, True, False, norm)
    short, long = _measure(spec, dtype, 7), _measure(spec, dtype, 11)
    grown = []
    for s, L in zip(short, long, strict=True):
        assert [name for name, _ in s] == [name for name, _ in L]  # the same kernels at every length
        grown.append([(b2 - b1) / (B * 4) for (_, b1), (_, b2) in zip(s, L, strict=True)])
    ops = [op for op in spec.eager_ops(1) if op.kind != "bias_linears"]
    declared = [(t.forward_kernels, t.backward_kernels, t.forward, t.backward) for t in
                (eager.mixer_terms([op], a)[0] if eager.mixer_terms([op], a) else eager.Term("", 0, 0, 0, 0)
                 for op in ops)]
    forward = [f for kf, _, f, _ in declared if kf]
    backward = [b for _, kb, _, b in declared if kb]
    assert forward == grown[0]
    assert backward == grown[1]
    # every declared op is one kernel one way, but in fp32 the casts, which do not run
    assert all(kf + kb == (0 if a == 4 and op.kind == "cast" else 1)
               for (kf, kb, _, _), op in zip(declared, ops, strict=True))
    # the kernels themselves, weight-sized ones included (casts of A_log, D, dt's bias; A's exp and negation)
    assert sum(t.forward_kernels for t in eager.mixer_terms(ops, a)) == len(short[0])
    assert sum(t.backward_kernels for t in eager.mixer_terms(ops, a)) == len(short[1])


def test_the_ops_scale_with_the_tokens():
    spec = Mamba1(4096, 8192, 256, 16, 4, True, False, "weightless")
    one, many = eager.mixer_terms(spec.eager_ops(1), 2), eager.mixer_terms(spec.eager_ops(4096), 2)
    assert [(t.forward * 4096, t.backward * 4096) for t in one] == [(t.forward, t.backward) for t in many]


def test_a_training_step_prices_them_under_eager():
    """plan's default --kernels eager: the micro-batch's non-matmul seconds rise by the declared ops' bytes at the
    bandwidth and their kernels at each kernel's cost (forward, backward; the forward again under full recompute,
    as every block op), beside the loop's (mixer_loops), which they do not repeat (the test above)."""
    from tfcalc.architecture import mamba1 as arch
    from tfcalc.count.perf.hardware import perf_spec
    from tfcalc.presets import load
    from tfcalc.workload import Layout

    cfg, perf = load("falcon-mamba-7b"), perf_spec("h100-sxm")
    spec = cfg.architecture.output.layer(0).mixer
    B_, T, bw = 1, 2048, 3e12
    for recompute in ("none", "full"):
        layout = Layout(seq=T, global_batch=8, micro_batch=B_, recompute=recompute)
        declared, without = block_other_s(
            cfg, layout, {(arch.Mamba1, "eager_ops"): lambda self, tokens, step=False: []}, bw, perf)
        by_hand = priced_s(spec.eager_ops(B_ * T), 2, recompute, bw, perf.kernel_s)
        assert declared - without == pytest.approx(by_hand, rel=1e-9)
