"""Lightning attention's eager work beside its matmuls (tfcalc.architecture.lightning, ``Lightning.eager_ops``): the
aten ops tfcalc's module (tfcalc.model.lightning.LightningModule.forward) runs on every token outside the block scan,
forward and backward, one EagerOp a kernel, priced as tfcalc.count.perf.eager prices them ("moves" in the
activations' dtype, "fp32" in fp32, "cast" between the two: no kernel in fp32). Elements per token of the w = H·d
wide tensors (component "qkv": split over TP ranks by heads) and of x's d_model-wide gradient (component
"residual": whole on every rank). Under --kernels eager nothing else prices them: the mixer's ``elementwise``
entries are the fused model's (tfcalc.count.training.micro_batch_time), no mixer loop is lightning's
(tfcalc.count.training.mixer_loops), and only the matmuls (qkv_proj, output_gate, out_proj, the blocks' four
bmm) are the matmul entries.

The block scan's own kernels (``scan``: per block the scores times D, Q and K times their decays, intra + inter,
S·λ^c and the state's sum, and their backward; the decays once a forward per block length) grow with a sequence's
blocks, not with the tokens: ``Lightning.scan_eager_ops(batch, seq)`` declares them whole, and
tfcalc.count.perf.eager.block_terms asks a mixer that has it. Both checked op for op against the aten ops of the
module's forward and backward under a TorchDispatchMode (tests/model/test_lightning_eager.py), fp32 and bf16.
Pure Python."""

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


def _decays(h: int, c: int) -> list[EagerOp]:
    """The decays of a block of c tokens (tfcalc.model.lightning.decays), made once a forward per block length,
    in fp32 (s is), elements = bytes / 4 (int64 positions 8 bytes, the mask 1): the positions (arange), Q's λ^(i+1)
    (neg, mul, exp), K's λ^(c-1-j) (neg, rsub, mul, exp), D (sub, mul, ge, neg, a scalar -inf, where, exp) and λ^c
    (neg, mul, exp); then the four cast to the activations' dtype (none in fp32)."""
    ops = [2 * c, 2 * h, h + 2 * c + h * c, 2 * h * c,  # arange, -s, -s·i, exp
           2 * h, 4 * c, h + 2 * c + h * c, 2 * h * c,  # -s, c - i, -s·(c - i), exp
           4 * c + 2 * c * c, h + 2 * c * c + h * c * c,  # gap, s·gap
           5 * h * c * c / 4, 2 * h * c * c, 1,  # >= 0, -s·gap, -inf
           9 * h * c * c / 4 + 1, 2 * h * c * c,  # where, exp
           2 * h, 2 * h, 2 * h]  # -s, ·c, exp
    return [_fwd("fp32", n) for n in ops] + [_fwd("cast", n) for n in (h * c, h * c, h * c * c, h)]


def scan(spec: Any, batch: int, seq: int) -> list[EagerOp]:
    """The block scan's ops (tfcalc.model.lightning.blocks) over ``batch`` sequences of ``seq`` tokens in training
    (no store: the last block's update runs outside autograd), whole, in the order they run; B sequences, H heads of
    d, blocks of c_i tokens. Forward: S zero (B·H·d² written), then a block's decays where its length first comes,
    and every block's six: the scores times D (2BHc² + Hc²), Q times its decays (2BHcd + Hc), intra + inter
    (3BHcd), S·λ^c (2BHd² + H), K times its decays (2BHcd + Hc), the state's sum (3BHd²). Backward, the last block
    first: the last's output gradient and Q's made contiguous for the bmm (2BHcd each), Q's decays (2BHcd + Hc), D
    (2BHc² + Hc²), Q's two gradients added (3BHcd); every other block K's decays, S·λ^c's (2BHd² + H: not the first,
    whose S is zero) and the S gradient's two added (3BHd², neither in the first), the output gradient made
    contiguous, Q's decays, Q's contiguous copy, Q's two gradients added, D, and K's and V's two each added."""
    B, h, d = batch, spec.n_head, spec.head_dim
    sizes = [min(spec.block, seq - i * spec.block) for i in range(-(-seq // spec.block))]
    fwd, seen = [_fwd("moves", B * h * d * d)], set()
    for c in sizes:
        if c not in seen:
            seen.add(c)
            fwd += _decays(h, c)
        fwd += [_fwd("moves", 2 * B * h * c * c + h * c * c), _fwd("moves", 2 * B * h * c * d + h * c),
                _fwd("moves", 3 * B * h * c * d), _fwd("moves", 2 * B * h * d * d + h),
                _fwd("moves", 2 * B * h * c * d + h * c), _fwd("moves", 3 * B * h * d * d)]
    c = sizes[-1]
    bwd = [_bwd("moves", 2 * B * h * c * d), _bwd("moves", 2 * B * h * c * d + h * c), _bwd("moves", 2 * B * h * c * d),
           _bwd("moves", 2 * B * h * c * c + h * c * c), _bwd("moves", 3 * B * h * c * d)]
    for i in range(len(sizes) - 2, -1, -1):
        c = sizes[i]
        state = [_bwd("moves", 2 * B * h * d * d + h)] if i else []
        bwd += [_bwd("moves", 2 * B * h * c * d + h * c), *state, _bwd("moves", 2 * B * h * c * d),
                *([_bwd("moves", 3 * B * h * d * d)] if i else []), _bwd("moves", 2 * B * h * c * d + h * c),
                _bwd("moves", 2 * B * h * c * d), _bwd("moves", 3 * B * h * c * d),
                _bwd("moves", 2 * B * h * c * c + h * c * c), _bwd("moves", 3 * B * h * c * d),
                _bwd("moves", 3 * B * h * c * d)]
    return fwd + bwd
