"""Where attention overtakes the FFN: the smallest sequence length at which, per layer, the attention
FLOPs reach the FFN's. Pure arithmetic, no torch."""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

from tfcalc.config import ModelConfig
from tfcalc.count.terms import ffn_matrices


@dataclass(frozen=True)
class Crossover:
    """The smallest sequence lengths at which, per layer, attention reaches the FFN's FLOPs."""

    scores_vs_ffn: int  # Q·Kᵀ + attention·V >= FFN
    attention_vs_ffn: int  # the whole attention sub-layer (projections + scores) >= FFN


def crossover_seq(cfg: ModelConfig, causal: bool = False) -> Crossover:
    """Smallest integer T >= 1 at which per-layer self-attention FLOPs reach the FFN's (batch cancels).

    Per layer and sequence, with m = 3 (gated) or 2 FFN matrices:
      scores S(T) = 4·q·T²  (causal: 2·q·T·(T+1)),  projections P(T) = 2·d·T·(2q + 2k),  FFN F(T) = 2·m·d·f·T.
      S >= F  <=>  T >= m·d·f / (2q)                  (causal: T + 1 >= m·d·f / q)
      S + P >= F  <=>  T >= d·(m·f − 2q − 2k) / (2q)  (causal: T + 1 >= d·(m·f − 2q − 2k) / q)
    GPT-3 175B (q = k = d = 12288, f = 4d, m = 2): 4·d = 49,152 and 2·d = 24,576 (causal 98,303 and
    49,151). When the projections alone already reach the FFN (m·f <= 2q + 2k), the answer is T = 1.
    A MoE's FFN is F(T) = 2·T·(k·m·d·f + d·E) (top-k experts and the router): in general, with F(T) = c·T,
    T >= c / (4q) and T >= (c − 4·d·(q + k)) / (4q). An encoder is never masked: its causal answer is the
    full one. An encoder-decoder: a decoder block's self-attention (cross-attention adds 4·q·T·S more).
    """
    d, q, k, f, m = cfg.d_model, cfg.q_dim, cfg.kv_dim, cfg.ffn_dim, ffn_matrices(cfg)
    ffn_per_token = 2 * cfg.experts_active * m * d * f + (2 * d * cfg.experts if cfg.n_expert else 0)
    scores_bound = Fraction(ffn_per_token, 4 * q)  # T >= this (full square)
    attention_bound = Fraction(ffn_per_token - 4 * d * (q + k), 4 * q)
    if causal and cfg.arch != "encoder":  # each causal inequality reads T + 1 >= 2 × the full-square bound
        return Crossover(max(1, math.ceil(2 * scores_bound) - 1), max(1, math.ceil(2 * attention_bound) - 1))
    return Crossover(max(1, math.ceil(scores_bound)), max(1, math.ceil(attention_bound)))
