"""Gated DeltaNet's eager work beside its matmuls (tfcalc.architecture.gated_deltanet, ``GatedDeltaNet.eager_ops``):
every aten op tfcalc's module (tfcalc.model.gated_deltanet.GatedDeltaNetModule.forward, ``chunked``) runs forward and
backward outside the matmul entries, one EagerOp a kernel, in the order it runs them, priced by
tfcalc.count.perf.eager: "moves" in the activations' dtype, "fp32" in fp32 whatever the dtype, "cast" a conversion
between the two (none in fp32). Under --kernels eager nothing else prices this work: the mixer's ``elementwise``
entries are the fused count's (--kernels fused|compile), and the matmul entries hold the projections, the
convolution, the chunk's products and its triangular solves (forward and backward), no more.

Elements, not per token: B sequences of T tokens (N = B·T), padded to Tp = c·⌈T/c⌉ (P = B·Tp, n = Tp / c chunks a
sequence); H value heads, Hk key heads, dk, dv, Kw = Hk·dk, Vw = H·dv, C = 2Kw + Vw. A tensor's elements are its
distinct ones (a broadcast operand counted at its own size); weight-sized operands (A_log, dt_bias, the norm's
weight, the causal mask: they do not grow with the tokens) are left out, their kernels kept. The chunk loop runs
its ops once a chunk, on (B, H, c, ·) slices and the (B, H, dk, dv) state; its backward's select_backward writes
each slice's gradient into a zeroed (B, H, n, c, ·) tensor, which the next chunk's adds into (``[:, :, i]``
indexing under autograd: n(n + 1) / 2-fold traffic in the chunks, as eager PyTorch runs transformers'
torch_chunk_gated_delta_rule too). Component "qkv" (per head: split over TP ranks), the mixer's input gradient's
sum "deltanet_input" (d-wide). Checked op for op, byte for byte, against the aten ops of the module under a
TorchDispatchMode (tests/model/test_gated_deltanet_eager.py), fp32 and bf16, the three projection layouts, one and
several chunks, padded or not. Pure Python."""

from __future__ import annotations

from typing import Any

from tfcalc.architecture.mixer import EagerOp

Q = "qkv"
X = "deltanet_input"  # the mixer input's gradient sums: d-wide, whole on every TP rank


def f(kind: str, elements: int, component: str = Q) -> EagerOp:
    return EagerOp(kind, component, elements, 0, 1, 0)


def b(kind: str, elements: int, component: str = Q) -> EagerOp:
    return EagerOp(kind, component, 0, elements, 0, 1)


def _l2norm_fwd(rows: int, w: int, scaled: bool) -> list[EagerOp]:
    """x·x (3w), its sum (w + 1), + eps (2), rsqrt (2), x·rsqrt (2w + 1), a row each; Q's × dk^-1/2 (2w)."""
    out = [f("fp32", rows * 3 * w), f("fp32", rows * (w + 1)), f("fp32", 2 * rows), f("fp32", 2 * rows),
           f("fp32", rows * (2 * w + 1))]
    return out + [f("fp32", rows * 2 * w)] * scaled


def _l2norm_bwd(rows: int, w: int, scaled: bool) -> list[EagerOp]:
    """The scale's (2w); x·rsqrt's two (3w, 2w + 1) and rsqrt's sum (w + 1); rsqrt's and eps' derivative (pow, mul,
    mul: 2, 2, 3); the sum's expand times x twice (2w + 1 each); the three gradients of x added (3w, 3w)."""
    out = [b("fp32", rows * 2 * w)] * scaled
    return out + [b("fp32", rows * 3 * w), b("fp32", rows * (2 * w + 1)), b("fp32", rows * (w + 1)),
                  b("fp32", 2 * rows), b("fp32", 2 * rows), b("fp32", 3 * rows),
                  b("fp32", rows * (2 * w + 1)), b("fp32", rows * (2 * w + 1)),
                  b("fp32", rows * 3 * w), b("fp32", rows * 3 * w)]


def _split(spec: Any, n: int) -> tuple[list[EagerOp], list[EagerOp]]:
    """Step 1's copies forward, and back the projections' input gradients (their strided ones made contiguous for
    the weight-gradient GEMMs, the mixer input's summed over the Linears reading it), per layout."""
    kw, vw, h, C, d = spec.k_width, spec.v_width, spec.n_v_head, spec.conv_dim, spec.d_model
    add = b("moves", 3 * n * d, X)
    a_b = [b("moves", 2 * n * h), b("moves", 2 * n * h), add]  # a's and b's, then the first sum
    if spec.separate_projections:  # [Q | K | V] concatenated, the three convolution weights too (weight-sized)
        return ([f("moves", 2 * n * C), f("moves", 0)],
                a_b + [add, b("moves", 2 * n * vw), add, b("moves", 2 * n * kw), add, b("moves", 2 * n * kw), add])
    if spec.split_projections:
        return [], a_b + [add, b("moves", 2 * n * C), add]
    # Qwen3-Next: q, k, v made contiguous and concatenated, Z and b, a copied out of the grouped rows; back, the
    # rows' gradients concatenated again ([b·r | a·r], then made contiguous; [q | k | v·r | z·r])
    fwd = [f("moves", 2 * n * kw), f("moves", 2 * n * kw), f("moves", 2 * n * vw), f("moves", 2 * n * C),
           f("moves", 2 * n * vw), f("moves", 2 * n * h), f("moves", 2 * n * h)]
    return fwd, [b("moves", 4 * n * h), b("moves", 4 * n * h), b("moves", 2 * n * (2 * kw + 2 * vw)), add]


def _loop_fwd(B: int, h: int, c: int, dk: int, dv: int, n: int) -> list[EagerOp]:
    """Per chunk: u - w·S, q·S + scores·v_new, S·exp(g_last), + Kᵀ·v_new."""
    s = B * h * dk * dv
    return [f("fp32", 3 * B * h * c * dv), f("fp32", 3 * B * h * c * dv), f("fp32", 2 * s + B * h),
            f("fp32", 3 * s)] * n


def _loop_bwd(B: int, h: int, c: int, dk: int, dv: int, n: int, whole: bool) -> list[EagerOp]:
    """Autograd's pass back over the chunks, last first: chunk i's update (tracked where i < n - 1) and output.
    A slice's gradient [:, :, i] (select_backward) reads (B, H, c, w) and writes (B, H, n, c, w); every one after
    the first of its tensor is added to the running gradient (3·B·H·n·c·w). Where T is whole chunks the output's
    gradient is a transposed view, and each chunk's slice of it is made contiguous for its two products (a padded
    T's comes out of the slice's slice_backward contiguous)."""
    s, o = B * h * dk * dv, B * h * c * dv
    copy = [b("fp32", 2 * o)] * whole
    out: list[EagerOp] = []

    def sel(w: int, first: bool) -> list[EagerOp]:
        return [b("fp32", B * h * w * (1 + n))] + ([] if first else [b("fp32", 3 * B * h * n * w)])

    for i in reversed(range(n)):
        upd, sg, last = i < n - 1, i >= 1, i == n - 1
        if upd:  # S_{i+1} = S_i·exp(g) + k_iᵀ·v_new
            out += sel(c * dk, i == n - 2) + [b("fp32", 3 * s)]
            out += [b("fp32", 2 * s + B * h)] * sg + [b("fp32", s + B * h)] + sel(1, i == n - 2)
        out += copy + [b("fp32", 3 * o)] * upd + sel(c * c, last)  # scores·v_new
        out += copy + [b("fp32", 3 * s)] * (sg and upd) + sel(c * dk, last)  # q·S
        out += [b("fp32", 2 * o)] + [b("fp32", 3 * s)] * sg + sel(c * dk, last) + sel(c * dv, last)  # u - w·S
    return out


def _chunk_fwd(B: int, h: int, c: int, dk: int, dv: int, n: int, tokens: int) -> list[EagerOp]:
    """``chunked`` up to its loop: the pads and copies, β's products, the decays, the masked c×c products."""
    N, P = tokens, B * n * c
    out = []
    for w in (dk, dk, dv, 1, 1):  # q, k, v, g, β padded to Tp (a fresh tensor), or cloned where T is whole chunks
        out += [f("fp32", (N + P) * h * w)] + [f("fp32", 2 * P * h * w)] * (N == P)
    out += [f("fp32", P * h * (2 * dk + 1)), f("fp32", P * h * (2 * dv + 1)),  # K_β, V_β
            f("fp32", 2 * P * h),  # cumsum
            f("fp32", 0), f("fp32", 0),  # the causal mask: ones, triu
            f("fp32", P * h * (c + 2)), f("fp32", 2 * P * h * c), f("fp32", 2 * P * h * c),  # differences, mask, exp
            f("fp32", 3 * P * h * c), f("fp32", 3 * P * h * c),  # K_β·Kᵀ and Q·Kᵀ times the decays
            f("fp32", 2 * P * h), f("fp32", P * h * (2 * dk + 1)),  # exp(cum), K_β·exp(cum)
            f("fp32", B * h * dk * dv),  # the zero state
            f("fp32", 2 * P * h), f("fp32", P * h * (2 * dk + 1))]  # exp(cum), Q·exp(cum)
    # the state updates' decays (over one chunk the same ops, out of autograd: no backward)
    out += [f("fp32", 2 * P * h + B * h * n), f("fp32", 2 * P * h),  # cum_last - cum, exp
            f("fp32", P * h * (2 * dk + 1)), f("fp32", 2 * B * h * n)]  # K·exp(...), exp(cum_last)
    return out


def _chunk_bwd(B: int, h: int, c: int, dk: int, dv: int, n: int, tokens: int) -> list[EagerOp]:
    N, P = tokens, B * n * c
    out: list[EagerOp] = []
    if n > 1:  # exp(cum_last)'s, its read's; K·exp(cum_last - cum)'s, exp's, the difference's, the two reads'
        out += [b("fp32", 3 * B * h * n), b("fp32", B * h * n + P * h),
                b("fp32", 3 * P * h * dk), b("fp32", P * h * (2 * dk + 1)), b("fp32", P * h * (dk + 1)),
                b("fp32", 3 * P * h), b("fp32", 2 * P * h), b("fp32", P * h + B * h * n), b("fp32", 3 * P * h),
                b("fp32", B * h * n + P * h), b("fp32", 3 * P * h)]
    out += [b("fp32", 3 * P * h * dk), b("fp32", P * h * (2 * dk + 1)), b("fp32", P * h * (dk + 1)),  # Q·exp(cum)
            b("fp32", 3 * P * h)] + [b("fp32", 3 * P * h)] * (n > 1) + [  # exp's; the decay's gradients added
            b("fp32", 2 * P * h * c), b("fp32", 2 * P * h * c),  # the solve for w: its system's gradient
            b("fp32", 3 * P * h * dk), b("fp32", P * h * (2 * dk + 1)), b("fp32", P * h * (dk + 1)),  # K_β·exp(cum)
            b("fp32", 3 * P * h), b("fp32", 3 * P * h),
            b("fp32", 2 * P * h * c), b("fp32", 2 * P * h * c), b("fp32", 3 * P * h * c),  # the solve for u
            b("fp32", 3 * P * h * c), b("fp32", 3 * P * h * c),  # Q·Kᵀ·decay
            b("fp32", 3 * P * h * dk)] + [b("fp32", 3 * P * h * dk)] * (n > 1) + [  # Q's, K's (its decay's too)
            b("fp32", 3 * P * h * c), b("fp32", 3 * P * h * c), b("fp32", 3 * P * h * c),  # K_β·Kᵀ·decay
            b("fp32", 3 * P * h * dk), b("fp32", 3 * P * h * dk),
            b("fp32", 3 * P * h * c), b("fp32", 2 * P * h * c),  # exp's, the mask's
            b("fp32", 2 * P * h * c), b("fp32", P * h * (c + 1)), b("fp32", P * h * (c + 1)),  # the differences'
            b("fp32", 3 * P * h), b("fp32", 3 * P * h),
            b("fp32", 2 * P * h), b("fp32", 2 * P * h), b("fp32", 2 * P * h),  # cumsum's: flip, cumsum, flip
            ] + [b("fp32", 2 * P * h * dv), b("fp32", 2 * P * h * dk)] * (n > 1) + [  # V_β's, K_β's made contiguous
            b("fp32", 3 * P * h * dv), b("fp32", P * h * (2 * dv + 1)), b("fp32", P * h * (dv + 1)),  # V_β
            b("fp32", 3 * P * h * dk), b("fp32", P * h * (2 * dk + 1)), b("fp32", P * h * (dk + 1)),  # K_β
            b("fp32", 3 * P * h * dk), b("fp32", 3 * P * h)]  # K's and β's gradients added
    for w in (1, 1, dv, dk, dk):  # the pads' (β, g, v, k, q)
        out.append(b("fp32", (N + P) * h * w))
    return out


def ops(spec: Any, batch: int, seq: int) -> list[EagerOp]:
    """The module's eager ops over ``batch`` sequences of ``seq`` tokens (module docstring), in the order it runs
    them, forward then backward."""
    B, T = batch, seq
    N = B * T
    h, dk, dv, c, K = spec.n_v_head, spec.k_head_dim, spec.v_head_dim, spec.chunk, spec.conv_kernel
    kw, vw, C = spec.k_width, spec.v_width, spec.conv_dim
    n = spec.padded(T) // c
    split_f, split_b = _split(spec, N)
    fwd = split_f + [f("moves", B * C * (2 * T + K - 1)), f("moves", 2 * N * C),  # the left pad, SiLU
                     f("moves", N * (kw + h * dk)), f("moves", N * (kw + h * dk))]  # Q, K repeated to the H heads
    fwd += [f("cast", N * h), f("fp32", 2 * N * h)]  # β = sigmoid(b.float())
    if spec.beta_scale != 1.0:
        fwd += [f("fp32", 2 * N * h)]
    fwd += [f("cast", 0), f("fp32", 0), f("fp32", 0),  # -exp(A_log.float()): weight-sized
            f("cast", N * h), f("cast", 0), f("fp32", 2 * N * h), f("fp32", 2 * N * h), f("fp32", 2 * N * h),
            f("cast", N * h * dk), f("cast", N * h * dk), f("cast", N * vw)]  # q, k, v to fp32
    fwd += _l2norm_fwd(N * h, dk, True) + _l2norm_fwd(N * h, dk, False)
    fwd += _chunk_fwd(B, h, c, dk, dv, n, N) + _loop_fwd(B, h, c, dk, dv, n)
    fwd += [f("fp32", 2 * B * n * c * h * dv),  # the chunks' outputs concatenated
            f("cast", N * vw), f("cast", N * vw),  # .to(x.dtype).float()
            f("fp32", 2 * N * vw), f("fp32", N * (vw + h)), f("fp32", 2 * N * h), f("fp32", 2 * N * h),  # rms_norm
            f("fp32", N * (2 * vw + h)), f("fp32", 2 * N * vw),
            f("cast", N * vw), f("moves", 2 * N * vw),  # to the model's dtype, × weight
            f("cast", N * vw), f("cast", N * vw), f("fp32", 2 * N * vw), f("fp32", 3 * N * vw),  # · silu(z)
            f("cast", N * vw)]
    # back: out_proj's input gradient to fp32, the gate's two products and SiLU's, Z's and y's back to the dtype
    bwd = [b("cast", N * vw), b("fp32", 3 * N * vw), b("fp32", 3 * N * vw), b("fp32", 3 * N * vw),
           b("cast", N * vw), b("cast", N * vw),
           b("moves", 3 * N * vw), b("moves", 2 * N * vw), b("moves", N * vw),  # the weight's
           # rms_norm's (tfcalc.count.perf.eager, 1), its fp32 copy's and the .to(x.dtype)'s casts back
           b("cast", N * vw), b("fp32", 3 * N * vw), b("fp32", N * (2 * vw + h)), b("fp32", N * (vw + h)),
           b("fp32", 2 * N * h), b("fp32", 2 * N * h), b("fp32", 3 * N * h), b("fp32", N * (vw + h)),
           b("fp32", 2 * N * vw), b("fp32", 2 * N * vw), b("fp32", 3 * N * vw), b("fp32", 3 * N * vw),
           b("cast", N * vw), b("cast", N * vw)]
    if N != B * n * c:  # the output's [:, :, :T]: its gradient written into a zeroed (B, H, Tp, dv)
        bwd += [b("fp32", (N + B * n * c) * vw)]
    bwd += _loop_bwd(B, h, c, dk, dv, n, N == B * n * c) + _chunk_bwd(B, h, c, dk, dv, n, N)
    bwd += _l2norm_bwd(N * h, dk, False) + _l2norm_bwd(N * h, dk, True)
    bwd += [b("cast", N * vw), b("cast", N * h * dk), b("cast", N * h * dk)]  # v, k, q back to the model's dtype
    # g = -exp(A_log)·softplus(a + dt_bias): the two products, A_log's sum, softplus', dt_bias' sum and cast, a's
    # cast, exp's and the negation's (weight-sized); β's sigmoid (OLMo-Hybrid's × 2 first)
    bwd += [b("fp32", 2 * N * h), b("fp32", 3 * N * h), b("fp32", N * h), b("fp32", 3 * N * h), b("fp32", N * h),
            b("cast", 0), b("cast", N * h), b("fp32", 0), b("fp32", 0), b("cast", 0)]
    if spec.beta_scale != 1.0:
        bwd += [b("fp32", 2 * N * h)]
    bwd += [b("fp32", 3 * N * h), b("cast", N * h)]
    # V's gradient, a transposed strided one (over several chunks) made contiguous for the split's view; the repeats'
    # sums back to the key heads; [Q | K | V]'s concatenation, SiLU's, the pad's
    bwd += [b("moves", 2 * N * vw)] * (n > 1) + [b("moves", N * (kw + h * dk)), b("moves", N * (kw + h * dk)),
            b("moves", 2 * N * C), b("moves", 3 * N * C), b("moves", B * C * (2 * T + K - 1))]
    bwd += split_b
    return fwd + bwd
