"""Lightning attention's eager work beside its matmuls (tfcalc.architecture.lightning, ``Lightning.eager_ops``): the
aten ops tfcalc's module (tfcalc.model.lightning.LightningModule.forward) runs on every token outside the block scan,
forward and backward, one EagerOp a kernel, priced as tfcalc.count.perf.eager prices them ("moves" in the
activations' dtype, "fp32" in fp32, "cast" between the two: no kernel in fp32). Elements per token of the w = H·d
wide tensors (component "qkv": split over TP ranks by heads) and of x's d_model-wide gradient (component
"residual": whole on every rank). Under --kernels eager nothing else prices them: the mixer's ``elementwise``
entries are the fused model's (tfcalc.count.training.micro_batch_time), no mixer loop is lightning's
(tfcalc.count.training.mixer_loops), and only the matmuls (qkv_proj, output_gate, out_proj, the blocks' four
bmm) are the matmul entries.

Not here: the block scan's own kernels (per block: the scores times D, Q and K times their decays, intra + inter,
S·λ^c and the update's sum; their backward; the decays of each block length), whose kernels grow with the number of
blocks of a sequence, not with the tokens the protocol passes; they stay unpriced under eager (and under fused as
the ``decay`` entry). Checked op for op against the aten ops of the module's forward and backward under a
TorchDispatchMode (tests/model/test_lightning_eager.py), fp32 and bf16. Pure Python."""

from __future__ import annotations

from typing import Any

from tfcalc.architecture.mamba1_eager import rms_norm_ops
from tfcalc.architecture.mixer import EagerOp


def _fwd(kind: str, elements: int, component: str = "qkv") -> EagerOp:
    return EagerOp(kind, component, elements, 0, 1, 0)


def _bwd(kind: str, elements: int, component: str = "qkv") -> EagerOp:
    return EagerOp(kind, component, 0, elements, 0, 1)


def ops(spec: Any, tokens: int) -> list[EagerOp]:
    """The module's per-token eager ops over ``tokens`` tokens (module docstring), in the order it runs them;
    elements per token in brackets (w = H·d)."""
    t, w = tokens, spec.width
    norm = rms_norm_ops(w, t, True, "qkv")  # MiniMaxRMSNorm over all H·d channels: weight · norm(y.float()).to(dtype)
    out = [_fwd("moves", 2 * t * 3 * w),  # SiLU on [Q | K | V] (3w in, 3w out)
           _fwd("moves", 2 * t * w), _fwd("moves", 2 * t * w), _fwd("moves", 2 * t * w),  # Q, K, V (B, H, T, d)
           _fwd("moves", 2 * t * w),  # the blocks' outputs concatenated
           _fwd("moves", 2 * t * w)]  # back to (B, T, H·d): transpose(1, 2).reshape copies
    out += [op for op in norm if op.forward_kernels]
    out += [_fwd("moves", 2 * t * w),  # sigmoid(output_gate(x))
            _fwd("moves", 3 * t * w)]  # the gate times the normed output
    out += [_bwd("moves", 3 * t * w), _bwd("moves", 3 * t * w),  # the product's two gradients
            _bwd("moves", 3 * t * w)]  # sigmoid's
    out += [op for op in norm if op.backward_kernels]
    return out + [_bwd("moves", 2 * t * w), _bwd("moves", 2 * t * w), _bwd("moves", 2 * t * w),  # dQ, dK, dV's blocks
                  _bwd("moves", 2 * t * 3 * w),  # [dQ | dK | dV] per head into qkv_proj's output gradient
                  _bwd("moves", 3 * t * 3 * w),  # SiLU's
                  _bwd("moves", 3 * t * spec.d_model, "residual")]  # x's two gradients added (qkv_proj, output_gate)
