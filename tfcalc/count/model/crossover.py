"""Where attention overtakes the FFN: the smallest sequence length at which, per layer, the attention
FLOPs reach the FFN's. Pure arithmetic, no torch."""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from fractions import Fraction

from tfcalc.architecture.mixer import Mixer, is_local
from tfcalc.config import ModelConfig

FAR = 2**62  # a context past every window: one query's causal FLOPs there are a local mixer's per-token slope


@dataclass(frozen=True)
class Crossover:
    """The smallest sequence lengths at which, per layer, attention reaches the FFN's FLOPs."""

    scores_vs_ffn: int | None  # Q·Kᵀ + attention·V >= FFN
    attention_vs_ffn: int | None  # the whole attention sub-layer (projections + scores) >= FFN
    # None: never -- for the causal count under a sliding window, whose scores grow like W·T, not T², or
    # where no mixer's position mixing grows like T² (a fixed-state scan)


def crossover_seq(cfg: ModelConfig, causal: bool = False) -> Crossover:
    """Smallest integer T >= 1 at which per-layer self-attention FLOPs reach the FFN's (batch cancels).

    Per layer and sequence, with m = 3 (gated) or 2 FFN matrices:
      scores S(T) = 4·q·T²  (causal: 2·q·T·(T+1)),  projections P(T) = 2·d·T·(2q + 2k),  FFN F(T) = 2·m·d·f·T.
      S >= F  <=>  T >= m·d·f / (2q)                  (causal: T + 1 >= m·d·f / q)
      S + P >= F  <=>  T >= d·(m·f − 2q − 2k) / (2q)  (causal: T + 1 >= d·(m·f − 2q − 2k) / q)
    GPT-3 175B (q = k = d = 12288, f = 4d, m = 2): 4·d = 49,152 and 2·d = 24,576 (causal 98,303 and
    49,151). When the projections alone already reach the FFN (m·f <= 2q + 2k), the answer is T = 1.
    A MoE's FFN is F(T) = 2·T·(k·m·d·f + d·E) (top-k experts and the router): in general, with F(T) = c·T,
    T >= c / (4q) and T >= (c − 4·d·(q + k)) / (4q); a shared expert adds to c. An encoder is never
    masked: its causal answer is the
    full one. An encoder-decoder: a decoder block's self-attention (cross-attention adds 4·q·T·S more).
    A sliding window W makes a windowed layer's causal scores grow like W·T beyond W (see _windowed): they
    may never reach the FFN. An expert capacity makes the FFN a step function of T; not modelled here.
    Layers that differ (heads, head widths, FFN widths, dense and MoE) are folded over the description:
    with S(T) = a·T², P(T) = p·T and F(T) = c·T, each coefficient the mean over the output stack's layers,
    T >= c / a and T >= (c − p) / a (_attention_per_layer, _ffn_per_token). A mixer whose position mixing
    grows like T (a fixed-state scan: S(T) = a·T² + s·T with a = 0 for it) adds s: T >= (c − s) / a, and
    with no quadratic mixer at all (a = 0) the answer is T = 1 where s (+ p) reaches c, never (None) else.
    """
    score_coef, linear_scores, proj_per_token = _attention_per_layer(cfg)
    ffn_per_token = _ffn_per_token(cfg)
    masked = cfg.architecture.kind != "encoder"  # an encoder's scores are never masked: causal is the full count
    if causal and masked and any(is_local(b.mixer) for b, _ in cfg.architecture.output.kinds()):
        # a window, chunks or a fixed state somewhere: each layer's causal mixing summed (_windowed)
        return Crossover(_windowed(cfg, ffn_per_token), _windowed(cfg, ffn_per_token - proj_per_token))
    if score_coef == 0:  # no mixer grows like T²: per token, linear against linear, at every length
        return Crossover(1 if linear_scores >= ffn_per_token else None,
                         1 if linear_scores + proj_per_token >= ffn_per_token else None)
    scores_bound = (ffn_per_token - linear_scores) / score_coef  # T >= this (full square)
    attention_bound = (ffn_per_token - linear_scores - proj_per_token) / score_coef
    if causal and masked:  # each causal inequality reads T + 1 >= 2 × the full-square bound
        return Crossover(max(1, math.ceil(2 * scores_bound) - 1), max(1, math.ceil(2 * attention_bound) - 1))
    return Crossover(max(1, math.ceil(scores_bound)), max(1, math.ceil(attention_bound)))


# the lengths the mixing is read at, t and 2t: exact for a mixing quadratic in T (attention) and for a chunked scan
# whose chunk divides t (gated DeltaNet pads T to whole chunks of 64, tfcalc.architecture.gated_deltanet: linear
# in T at multiples of the chunk, its cost at T = 1 and 2 that of a whole chunk)
SAMPLE = 4096


def _attention_per_layer(cfg: ModelConfig) -> tuple[Fraction, Fraction, Fraction]:
    """(a, s, p): the full-square position mixing of one layer is a·T² + s·T per sequence, its projections
    p·T, each the mean over the output stack's layers (tfcalc.architecture: layers of other heads or widths
    each count their own), read from each mixer's full-square ``mixing`` FLOPs at T = t and 2t (``SAMPLE``;
    f1 = a·t² + s·t, f2 = 4a·t² + 2s·t): attention's a = 2·H·(h + h_v) (4·q for q = H·h, h_v = h) and s = 0;
    a fixed-state scan's a = 0; p = 2·Σ n_in·n_out over its projections (4·d·(q + k) for Q, K, V, O)."""
    stack, a, s, p = cfg.architecture.output, Fraction(0), Fraction(0), 0
    t = SAMPLE  # f1 = a·t² + s·t, f2 = 4a·t² + 2s·t
    for block, layers in stack.kinds():
        f1, f2 = (sum(mm.flops for mm in block.mixer.mixing(n, n)) for n in (t, 2 * t))
        a += layers * Fraction(f2 - 2 * f1, 2 * t * t)
        s += layers * (Fraction(f1, t) - Fraction(f2 - 2 * f1, 2 * t))
        p += layers * sum(2 * m.n_in * m.n_out for m in block.mixer.linears())
    return a / stack.n_layer, s / stack.n_layer, Fraction(p, stack.n_layer)


def _ffn_per_token(cfg: ModelConfig) -> Fraction:
    """c of F(T) = c·T: the FFN matmul FLOPs per token of one layer of the output stack, folded over its
    layers (tfcalc.architecture): a dense FFN's 2·m·d·f, a MoE's router and top-k experts (and a shared
    expert); the mean over the layers where they differ (DeepSeek-V3's first dense layers)."""
    stack, total = cfg.architecture.output, 0
    for block, layers in stack.kinds():
        for mm in block.linears():
            if mm.role == "ffn":
                per_token = block.ffn.top_k if mm.rows == "routed" else 1  # routed rows: k per token
                total += layers * 2 * mm.n_in * mm.n_out * per_token
    return Fraction(total, stack.n_layer)


def _windowed(cfg: ModelConfig, per_token: Fraction) -> int | None:
    """Smallest T >= 1 at which the causal scores of all the decoder's layers, Σ_l a_l·pairs_l(T)
    (terms.causal_pairs, each layer with its own window or chunk and its own a_l = 2·H·(h + h_v): Gemma 2
    alternates windowed and full layers, Llama 4 chunked and full), reach L·per_token·T, or None when they
    never do.

    g(T) = Σ_l a_l·pairs_l(T) − L·per_token·T has increments that never shrink (a query's visible keys,
    p + 1 or min(p + 1, W), never shrink as p grows) except where a chunk of C starts ((p mod C) + 1 drops
    to 1). Without chunks g is convex and g(0) = 0, so g(T)/T never decreases: doubling, then bisection;
    when every layer is windowed, pairs_l(T) <= W_l·T (equal only for W_l = 1), so it never comes when
    Σ_l a_l·W_l < L·per_token, nor at equality unless every window is 1. With chunks g is convex on each
    period [mC, mC + C − 1] and g(mC + r) is convex in m: the first period whose larger end reaches 0
    (doubling, then bisection over m), then the first T within it (bisection); never, when every layer is
    local, the period's top has stopped rising and is below 0."""
    stack = cfg.architecture.output
    kinds: Counter = Counter()  # (mixer, window, chunk) -> layers; a_l·pairs_l(t) is the mixer's causal mixing
    for block, n in stack.kinds():  # the window and chunk of its mask, as the mixer says (None: none)
        kinds[(block.mixer, *block.mixer.mask_span(FAR))] += n
    target = stack.n_layer * per_token
    local = all(is_local(m) for m, _, _ in kinds)
    chunks = {c for _, _, c in kinds if c is not None}
    C = chunks.pop() if len(chunks) == 1 else None  # one chunk size is all a config can give

    def causal(mixer: Mixer, queries: int, keys: int) -> int:
        return sum(mm.causal_flops for mm in mixer.mixing(queries, keys))

    def g(t: int) -> Fraction:
        return sum(n * causal(m, t, t) for (m, _, _), n in kinds.items()) - target * t

    def first(lo: int, hi: int) -> int:
        """Smallest t in (lo, hi] with g(t) >= 0, given g(lo) < 0 <= g(hi) and g convex on [lo, hi]."""
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (lo, mid) if g(mid) >= 0 else (mid, hi)
        return hi

    if C is None:
        if local:  # each layer's slope a_l·W_l: one query's causal FLOPs far into the context
            slope = sum(n * causal(m, 1, FAR) for (m, _, _), n in kinds.items())
            if slope < target or (slope == target and any(causal(m, 1, 1) < causal(m, 1, FAR) for m, _, _ in kinds)):
                return None
        hi = 1
        while g(hi) < 0:
            hi *= 2
        return hi if hi == 1 else first(hi // 2, hi)
    if C > 1 and g(C - 1) >= 0:  # within the first chunk (g(0) = 0, convex there: g(t)/t never decreases)
        return 1 if g(1) >= 0 else first(1, C - 1)

    def top(m: int) -> Fraction:  # the larger end of period m: its largest value (convex there)
        return max(g(m * C), g(m * C + C - 1))

    if local:  # every layer local: once every window is full, top is linear in m
        m = 1 + -(-max((w or 0) for _, w, _ in kinds) // C)
        if top(m + 1) <= top(m) and top(1) < 0:  # convex, its last slope <= 0: it never rises again
            return None
    hi = 1
    while top(hi) < 0:
        hi *= 2
    lo = hi // 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if top(mid) >= 0 else (mid, hi)
    start = hi * C
    return start if g(start) >= 0 else first(start, start + C - 1)
