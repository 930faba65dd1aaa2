"""Mamba2's eager ops (tfcalc.architecture.mamba2_eager, ``Mamba2.eager_ops``) against the aten ops tfcalc's module
(tfcalc.model.mamba2.Mamba2Mixer) dispatches forward and backward on the CPU, under a TorchDispatchMode, op for
op in the order it runs them: each kernel's bytes read and written, those that grow with the tokens (measured at
two lengths of whole chunks: weight-sized operands, the pad's K - 1 columns and the zero entering state a sequence
do not), less the matmuls (mm, bmm, the convolution) and the bytes of the (c + 1)² states' passing (its kernels
counted), which the declaration leaves out."""

from __future__ import annotations

from functools import partial

import pytest
import torch
from eager_checks import Kernels, block_other_s, forward_backward, operands, priced_s, seeded

from tfcalc.architecture.mamba2 import Mamba2
from tfcalc.count.perf import eager

pytestmark = pytest.mark.filterwarnings("ignore")

MATMULS = {"mm", "addmm", "bmm", "convolution", "convolution_backward"}
B, CHUNK = 2, 4  # H = 4, P = 3, G = 2, N = 5, conv_dim 32: no two per-token widths alike


class Ops(Kernels):
    """(op, bytes) of every kernel but the views and the matmuls: its tensors read and written
    (eager_checks.operands), not a bool mask (the (C_, C_) ones are weight-sized; dt_min's clamp's, a byte an
    element, left out); a kernel on the (c + 1, c + 1) passing, 0 bytes."""

    def __init__(self, chunks: int):
        super().__init__(MATMULS)
        self.square = (chunks + 1, chunks + 1)

    def record(self, name, args, kwargs, out):
        read, wrote = operands(name, args, kwargs, out)
        square = any(t.dim() >= 2 and tuple(t.shape[-2:]) == self.square for t in read + wrote)
        self.ops.append((name, 0 if square else sum(t.numel() * t.element_size() for t in read + wrote
                                                     if t.dtype != torch.bool)))


def _measure(spec: Mamba2, dtype, T: int):
    from tfcalc.model.mamba2 import Mamba2Mixer

    m = seeded(lambda: Mamba2Mixer(spec), dtype)
    x = torch.randn(B, T, spec.d_model, dtype=dtype, requires_grad=True)
    return forward_backward(m, x, partial(Ops, T // CHUNK))


LAYOUTS = {"gated": {}, "norm_then_gate": {"gate_norm": "norm_then_gate"}, "no norm": {"gate_norm": "none"},
           "muP": {"proj_scales": (1.5, 0.5, 2.0, 0.25, 3.0)}, "dt_min": {"dt_min": 0.01}}


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("dtype, a", [(torch.bfloat16, 2), (torch.float32, 4)])
def test_the_declared_ops_are_the_modules_op_for_op(layout, dtype, a):
    """Forward and backward, kernel by kernel in order: the bytes each moves per token more from 8 to 16 tokens a
    sequence (2 and 4 chunks: c + 1 never C_) is what its EagerOp prices (tfcalc.count.perf.eager.mixer_terms at
    a bytes an activation)."""
    spec = Mamba2(8, 4, 3, 2, 5, 4, CHUNK, **LAYOUTS[layout])
    short, long = _measure(spec, dtype, 8), _measure(spec, dtype, 16)
    grown = []
    for s, L in zip(short, long, strict=True):
        assert [name for name, _ in s] == [name for name, _ in L]  # the same kernels at every length
        grown.append([(b2 - b1) / (B * 8) for (_, b1), (_, b2) in zip(s, L, strict=True)])
    ops = spec.eager_ops(1 * CHUNK)  # whole chunks: the per-chunk widths (states, a value a chunk) exact
    declared = [(t.forward_kernels, t.backward_kernels, t.forward / CHUNK, t.backward / CHUNK) for t in
                (eager.mixer_terms([op], a)[0] if eager.mixer_terms([op], a) else eager.Term("", 0, 0, 0, 0)
                 for op in ops)]
    forward = [f for kf, _, f, _ in declared if kf]
    backward = [b for _, kb, _, b in declared if kb]
    assert forward == grown[0]
    assert backward == grown[1]
    # every declared op is one kernel one way, but in fp32 the casts, which do not run
    assert all(kf + kb == (0 if a == 4 and op.kind == "cast" else 1)
               for (kf, kb, _, _), op in zip(declared, ops, strict=True))
    terms = eager.mixer_terms(ops, a)
    assert sum(t.forward_kernels for t in terms) == len(short[0])
    assert sum(t.backward_kernels for t in terms) == len(short[1])


def test_the_ops_scale_with_the_tokens():
    spec = Mamba2(4096, 128, 64, 8, 128, 4, 256)
    one, many = eager.mixer_terms(spec.eager_ops(256), 2), eager.mixer_terms(spec.eager_ops(256 * 16), 2)
    assert [(t.forward * 16, t.backward * 16) for t in one] == [(t.forward, t.backward) for t in many]


def test_a_training_step_prices_them_under_eager():
    """plan's default --kernels eager: the micro-batch's non-matmul seconds rise by the declared ops' bytes at the
    bandwidth and their kernels at each kernel's cost (forward, backward; the forward again under full recompute)."""
    from tfcalc.architecture import mamba2 as arch
    from tfcalc.count.perf.hardware import perf_spec
    from tfcalc.count.training import micro_batch_time as mbt
    from tfcalc.presets import load
    from tfcalc.workload import Layout

    cfg, perf = load("granite-4.0-h-small"), perf_spec("h100-sxm")  # Mamba2, attention and MoE
    kinds = [(b.mixer, n) for _, b, n in cfg.architecture.kinds() if isinstance(b.mixer, arch.Mamba2)]
    B_, T, bw = 1, 2048, 3e12
    for recompute in ("none", "full"):
        layout = Layout(seq=T, global_batch=8, micro_batch=B_, recompute=recompute)
        declared, without = block_other_s(
            cfg, layout, {(arch.Mamba2, "eager_ops"): lambda self, tokens, step=False: []}, bw, perf)
        by_hand = sum(layers * priced_s(mixer.eager_ops(B_ * T), 2, recompute, bw, perf.kernel_s)
                      for mixer, layers in kinds)
        assert by_hand > 0
        # block_other_s is per block: the step's seconds over its blocks (micro_batch_time.total_blocks)
        assert (declared - without) * mbt.total_blocks(cfg) == pytest.approx(by_hand, rel=1e-9)
