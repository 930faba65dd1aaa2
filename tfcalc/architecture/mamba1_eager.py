"""Mamba-1's eager work beside its matmuls (tfcalc.architecture.mamba1, ``Mamba1.eager_ops``): every aten op
tfcalc's module (tfcalc.model.mamba1.Mamba1Mixer.forward) runs outside the position loop and the matmuls, forward
and backward, one EagerOp a kernel, as tfcalc.count.perf.eager prices them: "moves" in the activations' dtype (a
bytes an element), "fp32" in fp32 whatever the dtype, "cast" a conversion between the two (a + 4 bytes an element,
no kernel in fp32, where .float() and .to(x.dtype) return the tensor itself). Elements per token of the I-wide
tensors (component "qkv": split over TP ranks by channels, as the mixer's) and of the (R + 2N)-wide x_proj output
(whole on every rank). Weight-sized operands (A_log, A, D, dt's bias, the norms' weights: they do not grow with
the tokens) and the K - 1 padded columns per sequence are left out, as eager's convention has it; their casts and
A's exp and negation are kernels here. Not here: the matmuls (in_proj, x_proj, dt_proj, the convolution, the
update's bmm, out_proj: the matmul entries), the loop's kernels (tfcalc.count.training.mixer_loops:
``Mamba1.autograd_loop``) and the bytes of the (..., I, N) fp32 tensors, which that loop's count holds (dt·A's and
exp's outputs, their gradients): dt·A's and exp's kernels are here, with only their other operands' bytes (dt read,
dt's gradient summed over N). Checked op for op against the aten ops of the module's forward and backward under a
TorchDispatchMode (tests/model/test_mamba1_eager.py), fp32 and bf16, each norm layout. Pure Python."""

from __future__ import annotations

from typing import Any

from tfcalc.architecture.mixer import EagerOp

XP = "ssm_x_proj"  # x_proj's (R + 2N)-wide output: whole on every TP rank


def _fwd(kind: str, elements: int, component: str = "qkv") -> EagerOp:
    return EagerOp(kind, component, elements, 0, 1, 0)


def _bwd(kind: str, elements: int, component: str = "qkv") -> EagerOp:
    return EagerOp(kind, component, 0, elements, 0, 1)


def rms_norm_ops(w: int, t: int, weighted: bool, component: str = XP) -> list[EagerOp]:
    """One BCdtNorm over w channels (tfcalc.model.mamba1): forward x.float(), pow(2) (2w), mean (w in, 1 out),
    + eps (2), rsqrt (2), h·rsqrt (2w + 1), .to(x.dtype), and with a weight weight·h in the model's dtype (2w);
    back: the weight's two products and its sum over the rows (2w, 3w, w, in the model's dtype), the cast, grad·rsqrt
    (3w), grad·h (2w + 1), its sum over the row (w + 1), rsqrt's derivative (pow, mul, mul: 2, 2, 3), mean's expand
    divided (2w), pow's pow(x, 1) and × 2 (2w, 2w), × grad (3w), the two paths added (3w), the cast back. Lightning
    attention's output norm runs the same (tfcalc.architecture.lightning_eager)."""
    def f(kind: str, n: int) -> EagerOp:
        return _fwd(kind, n, component)

    def b(kind: str, n: int) -> EagerOp:
        return _bwd(kind, n, component)

    fw = [f("cast", t * w), f("fp32", 2 * t * w), f("fp32", t * (w + 1)), f("fp32", 2 * t), f("fp32", 2 * t),
          f("fp32", t * (2 * w + 1)), f("cast", t * w)] + [f("moves", 2 * t * w)] * weighted
    bw = [b("moves", 2 * t * w), b("moves", 3 * t * w), b("moves", t * w)] * weighted
    bw += [b("cast", t * w), b("fp32", 3 * t * w), b("fp32", t * (2 * w + 1)), b("fp32", t * (w + 1)), b("fp32", 2 * t),
           b("fp32", 2 * t), b("fp32", 3 * t), b("fp32", 2 * t * w), b("fp32", 2 * t * w), b("fp32", 2 * t * w),
           b("fp32", 3 * t * w), b("fp32", 3 * t * w), b("cast", t * w)]
    return fw + bw


def ops(spec: Any, tokens: int) -> list[EagerOp]:
    """The module's eager ops over ``tokens`` tokens (module docstring), in the order it runs them. I = inner, N
    the state size, R dt's rank; elements per token in brackets."""
    t, i, n, r = tokens, spec.inner, spec.state_size, spec.dt_rank
    out = [_fwd("moves", 2 * t * i),  # the convolution's left pad (I in, I out)
           _fwd("moves", 2 * t * i),  # its output made contiguous (.mT.contiguous())
           _fwd("moves", 2 * t * i)]  # SiLU
    if spec.bcdt_norm != "none":
        for w in (r, n, n):
            out += [op for op in rms_norm_ops(w, t, spec.bcdt_norm == "weighted") if op.forward_kernels]
    out += [_fwd("cast", t * i), _fwd("cast", 0),  # dt_proj's output and its bias to fp32
            _fwd("fp32", 2 * t * i), _fwd("fp32", 2 * t * i),  # + bias, softplus
            _fwd("cast", 0), _fwd("fp32", 0), _fwd("fp32", 0),  # A = -exp(A_log.float()): weight-sized
            _fwd("fp32", t * i),  # dt·A: dt read (its (T, I, N) output the loop's bytes)
            _fwd("fp32", 0),  # exp(dt·A): (T, I, N) in and out, the loop's bytes
            _fwd("cast", t * i), _fwd("fp32", 3 * t * i),  # x.float(), dt·x
            _fwd("cast", t * n, XP), _fwd("cast", t * n, XP),  # B.float(), C.float()
            _fwd("cast", 0), _fwd("fp32", 2 * t * i), _fwd("fp32", 3 * t * i),  # D.float(), D·x, y + D·x
            _fwd("cast", t * i), _fwd("fp32", 2 * t * i), _fwd("fp32", 3 * t * i),  # z.float(), silu(z), the gate
            _fwd("cast", t * i)]  # back to the model's dtype for out_proj
    out += [_bwd("cast", t * i),  # out_proj's input gradient to fp32
            _bwd("fp32", 3 * t * i), _bwd("fp32", 3 * t * i), _bwd("fp32", 3 * t * i),  # the gate's two, silu's
            _bwd("cast", t * i),  # z's gradient back to the model's dtype
            _bwd("fp32", 2 * t * i), _bwd("fp32", 3 * t * i), _bwd("fp32", t * i), _bwd("cast", 0),  # D's skip, D's sum
            _bwd("fp32", 2 * t * i),  # the read's [..., 0]: select_backward (T, I) -> (T, I, 1)
            _bwd("fp32", 0),  # a scalar zero
            _bwd("cast", t * n, XP), _bwd("cast", t * n, XP),  # C's and B's gradients back
            _bwd("fp32", 3 * t * i), _bwd("fp32", 3 * t * i), _bwd("fp32", 3 * t * i),  # dt·x's two, x's sum
            _bwd("cast", t * i),  # x's fp32 gradient back
            _bwd("fp32", 0), _bwd("fp32", t * i), _bwd("fp32", 0),  # exp's, dt·A's (dt read), dA·A
            _bwd("fp32", t * i), _bwd("fp32", 0),  # the sums over N (dt's) and the tokens (A's)
            _bwd("fp32", 3 * t * i),  # dt's two gradients added
            _bwd("fp32", 0), _bwd("fp32", 0), _bwd("cast", 0),  # A_log's: negation, exp's, cast
            _bwd("fp32", 3 * t * i), _bwd("fp32", t * i), _bwd("cast", 0),  # softplus's, the bias's sum and cast
            _bwd("cast", t * i)]  # dt_proj's output gradient back
    if spec.bcdt_norm != "none":
        for w in (n, n, r):  # autograd runs them back from the last used (C, B, dt)
            out += [op for op in rms_norm_ops(w, t, spec.bcdt_norm == "weighted") if op.backward_kernels]
    return out + [_bwd("moves", 2 * t * spec.proj_width, XP),  # [ddt | dB | dC] concatenated for x_proj
                  _bwd("moves", 3 * t * i),  # x's two gradients added (x_proj's, the fp32 copy's)
                  _bwd("moves", 3 * t * i),  # SiLU's
                  _bwd("moves", 2 * t * i),  # the pad's: the slice copied
                  _bwd("moves", 4 * t * i)]  # [dx | dz] concatenated for in_proj
