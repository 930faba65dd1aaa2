"""Where attention overtakes the FFN: the smallest sequence length at which, per layer, the attention
FLOPs reach the FFN's. Pure arithmetic, no torch."""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from fractions import Fraction

from tfcalc.config import ModelConfig
from tfcalc.count.terms import causal_pairs


@dataclass(frozen=True)
class Crossover:
    """The smallest sequence lengths at which, per layer, attention reaches the FFN's FLOPs."""

    scores_vs_ffn: int | None  # Q·Kᵀ + attention·V >= FFN
    attention_vs_ffn: int | None  # the whole attention sub-layer (projections + scores) >= FFN
    # None: never -- only for the causal count under a sliding window, whose scores grow like W·T, not T²


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
    """
    d, q, k = cfg.d_model, cfg.q_dim, cfg.kv_dim
    ffn_per_token = _ffn_per_token(cfg)
    scores_bound = Fraction(ffn_per_token, 4 * q)  # T >= this (full square)
    attention_bound = Fraction(ffn_per_token - 4 * d * (q + k), 4 * q)
    if causal and cfg.arch != "encoder":  # each causal inequality reads T + 1 >= 2 × the full-square bound
        if cfg.windowed_layers:  # a sliding window or chunks in some layers
            return Crossover(*(_windowed(cfg, 4 * q * b, q) for b in (scores_bound, attention_bound)))
        return Crossover(max(1, math.ceil(2 * scores_bound) - 1), max(1, math.ceil(2 * attention_bound) - 1))
    return Crossover(max(1, math.ceil(scores_bound)), max(1, math.ceil(attention_bound)))


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


def _windowed(cfg: ModelConfig, per_token: Fraction, q: int) -> int | None:
    """Smallest T >= 1 at which the causal scores of all the decoder's layers, 4·q·Σ_l pairs_l(T)
    (terms.causal_pairs, each layer with its own window or chunk: Gemma 2 alternates windowed and full
    layers, Llama 4 chunked and full), reach L·per_token·T, or None when they never do.

    g(T) = 4·q·Σ_l pairs_l(T) − L·per_token·T has increments that never shrink (a query's visible keys,
    p + 1 or min(p + 1, W), never shrink as p grows) except where a chunk of C starts ((p mod C) + 1
    drops to 1). So g is convex on each chunk period [mC, mC + C − 1] (without chunks: C = ∞, one
    period), and its values at a fixed offset r of the period, g(mC + r), are convex in m. g(0) = 0.
    First period m whose larger end value reaches 0 (max of two convex functions of m: doubling, then
    bisection), then the first T within it (convex there: bisection). Never, when the last increments
    of a period's sum stop growing (every layer local) and it is still below 0."""
    windows: Counter = Counter()
    for block, n in cfg.architecture.decoder.kinds():  # (window, chunk) of each layer kind
        windows[(block.attention.window, block.attention.chunk)] += n
    chunks = {c for _, c in windows if c is not None}
    C = chunks.pop() if len(chunks) == 1 else None  # one chunk size is all a config can give

    def g(t: int) -> Fraction:
        pairs = sum(n * causal_pairs(t, t, w, c) for (w, c), n in windows.items())
        return 4 * q * pairs - cfg.decoder_layers * per_token * t

    def first(lo: int, hi: int) -> int:
        """Smallest t in (lo, hi] with g(t) >= 0, given g(lo) < 0 <= g(hi) and g convex on [lo, hi]."""
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (lo, mid) if g(mid) >= 0 else (mid, hi)
        return hi

    if C is None:
        # every layer local: its scores per query stay below W keys, so they may never catch up
        if (None, None) not in windows and 4 * q * max(w for w, _ in windows) <= per_token:
            return None
        hi = 1
        while g(hi) < 0:
            hi *= 2
        return hi if hi == 1 else first(hi // 2, hi)
    if C > 1 and g(C - 1) >= 0:  # within the first chunk (g(0) = 0, convex there: g(t)/t never decreases)
        return 1 if g(1) >= 0 else first(1, C - 1)

    def top(m: int) -> Fraction:  # the larger end of period m: its largest value (convex there)
        return max(g(m * C), g(m * C + C - 1))

    if (None, None) not in windows:  # every layer local: once every window is full, top is linear in m
        m = 1 + -(-max((w or 0) for w, _ in windows) // C)
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
