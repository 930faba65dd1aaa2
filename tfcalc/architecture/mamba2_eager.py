"""Mamba2's eager work beside its matmuls (tfcalc.architecture.mamba2, ``Mamba2.eager_ops``): every aten op tfcalc's
module (tfcalc.model.mamba2.Mamba2Mixer.forward and chunk_scan) runs outside the matmuls, forward and backward,
one EagerOp a kernel, as tfcalc.count.perf.eager prices them ("moves" in the activations' dtype, "fp32" in fp32
whatever the dtype, "cast" a conversion between the two, no kernel in fp32). Under --kernels eager nothing else
prices them: the mixer's ``elementwise`` entries are the fused modes' (tfcalc.count.training.micro_batch_time
reads them only under fused|compile), the scan's Mixing entries are its matmuls, and no Mixing name ends in
"qk", so no score traffic is added either.

Elements per token for sequences of whole chunks (T a multiple of C_; the scan pads to one otherwise): I = H·P,
H (dt), HN = H·N (B and C copied per head), S = H·C_ (a chunk's decays and scores: c·C_² per head and sequence),
HPN/C_ (the chunk states, c·P·N per head and sequence), H/C_ (a value per chunk), conv_dim, proj_width. Left
out, as eager's convention has it: weight-sized operands (A_log, A, D, dt's bias, the norm's weight, the (C_, C_)
masks), the K - 1 padded columns and the zero entering state per sequence, and the bytes of the states' passing
between chunks, (c + 1)² per head (its segment sum, exp and their backward: kernels here, bytes 0; under 0.1 % of
the chunk scores' at C_ = 256). All are split over TP ranks by heads (component "qkv"). Checked op for op against
the module's forward and backward under a TorchDispatchMode (tests/model/test_mamba2_eager.py), fp32 and bf16.
Pure Python."""

from __future__ import annotations

from typing import Any

from tfcalc.architecture.mixer import EagerOp


def _f(kind: str, elements: int) -> EagerOp:
    return EagerOp(kind, "qkv", elements, 0, 1, 0)


def _b(kind: str, elements: int) -> EagerOp:
    return EagerOp(kind, "qkv", 0, elements, 0, 1)


def _rms(i: int, g: int) -> list[EagerOp]:
    """The per-group RMSNorm in fp32 over h: pow, mean, + eps, rsqrt, × rsqrt, × weight."""
    return [_f("fp32", 2 * i), _f("fp32", i + g), _f("fp32", 2 * g), _f("fp32", 2 * g), _f("fp32", 2 * i + g),
            _f("fp32", 2 * i)]


def _rms_backward(i: int, g: int) -> list[EagerOp]:
    """Its backward from the gradient of g (the weight's product's done): grad·h, grad·rsqrt, the row's sum,
    rsqrt's derivative (pow, mul, mul), mean's expand divided, pow(x, 1), × 2, × grad, the two paths added."""
    return [_b("fp32", 3 * i), _b("fp32", 2 * i + g), _b("fp32", i + g), _b("fp32", 2 * g), _b("fp32", 2 * g),
            _b("fp32", 3 * g), _b("fp32", 2 * i), _b("fp32", 2 * i), _b("fp32", 2 * i), _b("fp32", 3 * i),
            _b("fp32", 3 * i)]


def _gate(spec: Any, t: int) -> list[EagerOp]:
    """Step 4 from the scan's fp32 y (its (B, T, I) view of the permuted output made contiguous), forward and
    backward: MambaRMSNormGated's norm(y·silu(z)) ("gated"), norm(y)·silu(z) ("norm_then_gate"), y·silu(z)
    ("none"); z cast to fp32 and the result back to the model's dtype for out_proj, its gradient to fp32 and z's
    back."""
    i, g = t * spec.inner, t * spec.n_groups
    gate = [_f("cast", i), _f("fp32", 2 * i), _f("fp32", 3 * i)]  # z.float(), silu, the product
    gate_back = [_b("fp32", 3 * i), _b("fp32", 3 * i), _b("fp32", 3 * i), _b("cast", i)]  # the product's, silu's
    weight_back = [_b("fp32", 2 * i), _b("fp32", 3 * i), _b("fp32", i), _b("cast", 0)]  # × weight; its grad, sum
    if spec.gate_norm == "gated":
        forward = gate + _rms(i, g)
        backward = weight_back + _rms_backward(i, g) + gate_back
    elif spec.gate_norm == "norm_then_gate":
        forward = _rms(i, g) + gate
        backward = gate_back + weight_back + _rms_backward(i, g)
    else:
        forward, backward = gate, gate_back
    return [_f("fp32", 2 * i)] + forward + [_f("cast", i), _b("cast", i)] + backward


def ops(spec: Any, tokens: int) -> list[EagerOp]:
    """The module's eager ops over ``tokens`` tokens (module docstring), in the order it runs them."""
    t, H, C = tokens, spec.n_heads, spec.chunk_size
    i, h, hn, s = t * spec.inner, t * H, t * H * spec.state_size, t * H * C
    hpn, hc = t * H * spec.head_dim * spec.state_size // C, t * H // C  # chunk states; a value per chunk
    cd, gn, scaled, floor = t * spec.conv_dim, t * spec.n_groups * spec.state_size, spec.proj_scales, spec.dt_min
    # Falcon-H1's muP multipliers: z, x, B, C, dt each times its own, then [x | B | C] concatenated
    out = [_f("moves", 2 * n) for n in (i, i, gn, gn, h, cd)] if scaled is not None else []
    out += [_f("moves", 2 * cd), _f("moves", 2 * cd),  # the convolution's left pad, SiLU
            _f("moves", 2 * hn), _f("moves", 2 * hn),  # B and C copied per head (the expand's clone)
            _f("moves", 2 * h), _f("moves", 2 * h)]  # dt + bias, softplus
    out += [_f("moves", 2 * h)] * bool(floor)  # Zamba2's clamp to dt_min
    out += [_f("cast", 0), _f("fp32", 0), _f("fp32", 0),  # A = -exp(A_log.float()): weight-sized
            _f("cast", i), _f("cast", h), _f("fp32", 2 * i + h), _f("fp32", 2 * i),  # x, dt to fp32; x·dt, its pad
            _f("cast", hn), _f("fp32", 2 * hn), _f("cast", hn), _f("fp32", 2 * hn),  # B, C to fp32, padded
            _f("fp32", 2 * h), _f("fp32", 2 * h), _f("fp32", 2 * h),  # dt·A, its pad, the cumulative sum
            _f("fp32", 0), _f("fp32", 0), _f("fp32", 0),  # the segment sum's (C_, C_) mask: ones, tril, not
            _f("fp32", 2 * s), _f("fp32", 2 * s),  # masked_fill, cumsum
            _f("fp32", 0), _f("fp32", 0), _f("fp32", 2 * s), _f("fp32", 2 * s),  # ones, triu, masked_fill, exp
            _f("fp32", 2 * hn), _f("fp32", 2 * hn),  # C and Bᵀ laid out for a's bmm
            _f("fp32", 3 * s), _f("fp32", 2 * i),  # scores × decay; x·dt laid out for b's
            _f("fp32", 2 * h + hc), _f("fp32", 2 * h),  # the decay to the chunk's end: subtract, exp
            _f("fp32", 2 * i + h), _f("fp32", 2 * i), _f("fp32", 2 * hn),  # × x·dt; c's two operands laid out
            _f("fp32", 0), _f("fp32", 2 * hpn), _f("fp32", 2 * hc)]  # zero entering state, the cat; pad of the ends
    out += [_f("fp32", 0)] * 9  # the (c + 1)² segment sum: ones, tril, not, masked_fill, cumsum, ones, triu,
    # masked_fill, exp (bytes left out: module docstring)
    out += [_f("fp32", 2 * hn), _f("fp32", 2 * hpn),  # e's operands laid out (C, the entering states)
            _f("fp32", 2 * h), _f("fp32", 2 * i + h), _f("fp32", 3 * i),  # exp(cum), × it, + the chunk's own
            _f("cast", 0), _f("fp32", 2 * i), _f("fp32", 3 * i)]  # D.float(), D·x, y + D·x
    out += _gate(spec, t)
    out += [_b("fp32", 2 * i), _b("fp32", 3 * i), _b("fp32", i), _b("cast", 0),  # D's skip: x's, D's and its sum
            _b("fp32", 3 * i), _b("fp32", 2 * i + h), _b("fp32", i + h), _b("fp32", 3 * h),  # e: × exp(cum)'s two
            _b("fp32", 2 * i),  # the output gradient laid out for e's bmm
            _b("fp32", 2 * hpn)]  # states[:, :, :-1]'s slice_backward
    out += [_b("fp32", 0)] * 7  # the (c + 1)² passing: exp's, masked_fill, flip, cumsum, flip, masked_fill, sum
    out += [_b("fp32", 2 * hc), _b("fp32", h + hc), _b("fp32", 3 * h),  # the pad's, cum[..., -1]'s select, add
            _b("fp32", 2 * hpn),  # the states' gradient laid out for c's bmm
            _b("fp32", 3 * i), _b("fp32", 2 * i + h), _b("fp32", i + h), _b("fp32", 3 * h),  # c: × to_end's, exp's
            _b("fp32", 2 * h), _b("fp32", h + hc), _b("fp32", 3 * h),  # the subtraction's: neg, its sum, added
            _b("fp32", h + hc), _b("fp32", 3 * h),  # cum[..., -1:]'s slice_backward, added
            _b("fp32", 2 * i), _b("fp32", 3 * i),  # b's operand laid out; y's two paths added
            _b("fp32", 3 * s), _b("fp32", 3 * s),  # scores × decay's two
            _b("fp32", 3 * hn), _b("fp32", 3 * hn),  # a's gradients added to e's and c's (C, B)
            _b("fp32", 3 * s),  # exp's
            _b("fp32", 2 * s), _b("fp32", 2 * s), _b("fp32", 2 * s), _b("fp32", 2 * s), _b("fp32", 2 * s),  # the
            _b("fp32", s + h),  # segment sum's: masked_fill, flip, cumsum, flip, masked_fill; the expand's sum
            _b("fp32", 2 * h), _b("fp32", 2 * h), _b("fp32", 2 * h), _b("fp32", 3 * h),  # cumsum's (flip, cumsum,
            _b("fp32", 2 * h), _b("fp32", 2 * h),  # flip), added; [..., 0]'s select_backward; the pad's
            _b("fp32", 3 * h), _b("fp32", 2 * h), _b("fp32", h),  # dt·A's: dt's (+ A's and its sum over tokens)
            _b("fp32", 2 * hn), _b("cast", hn), _b("fp32", 2 * hn), _b("cast", hn),  # C's and B's pads, casts back
            _b("fp32", 2 * i), _b("fp32", 2 * i),  # x·dt's gradient laid out, its pad's
            _b("fp32", 3 * i), _b("fp32", 2 * i + h), _b("fp32", i + h), _b("fp32", 3 * i),  # x·dt's two; x's added
            _b("fp32", 3 * h), _b("cast", h), _b("cast", i),  # dt's two added; dt, x back to the model's dtype
            _b("fp32", 0), _b("fp32", 0), _b("cast", 0)]  # A_log's: negation, exp's, cast
    # the clamp's backward: a scalar zero, dt >= dt_min (its bool mask's byte an element left out), where
    out += [_b("moves", 0), _b("moves", h), _b("moves", 2 * h)] if floor else []
    out += [_b("moves", 3 * h), _b("moves", h)]  # softplus's; the bias's sum
    out += [_b("moves", hn + gn), _b("moves", hn + gn),  # C's and B's per-head copies summed per group
            _b("moves", 2 * cd),  # [dx | dB | dC] concatenated
            _b("moves", 3 * cd),  # SiLU's
            _b("moves", 2 * cd)]  # the pad's: the slice copied
    out += [_b("moves", 2 * n) for n in (h, gn, gn, i, i)] if scaled is not None else []  # the multipliers' (dt first)
    return out + [_b("moves", 2 * t * spec.proj_width)]  # [dz | dxBC | ddt] concatenated for in_proj
