"""Analytic parameter counts of a ModelConfig: pure arithmetic, no torch.

Derivation for one decoder block (d = d_model, q = n_head * d_head, k = n_kv_head * d_head, f = d_ff):

1. attention Q, K, V projections: d*q + d*k + d*k weights, q + k + k biases (if attn_bias);
2. attention output projection: q*d weights, d bias;
3. FFN: up d*f and down f*d weights (plus a gate d*f when gated, SwiGLU/GeGLU), f (+f) + d biases;
4. two norms (before or after each sub-layer): d weights each, d biases each for LayerNorm with bias.

Outside the blocks: token embedding V*d; learned positions max_seq_len*d (sinusoidal, RoPE and ALiBi
have none); a final norm d (+d); the LM head V*d, counted once when tied to the token embedding.

With q = k = d, no biases and f = 4d this is the textbook 12*d^2 per layer (4d^2 attention + 8d^2 FFN);
the "seeds' approximation" is 12*L*d^2 + V*d (+ V*d for an untied head).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from tfcalc.config import ModelConfig, replace

GROUPS = ("embeddings", "attention", "ffn", "norms", "lm_head")


@dataclass(frozen=True)
class ParamEntry:
    """One kind of parameter tensor: its shape, and how many copies the model holds."""

    component: str  # stable key in the JSON breakdown
    group: str  # one of GROUPS
    label: str  # what a reader calls it
    shape: tuple[int, ...]
    copies: int = 1  # n_layer for per-block tensors
    tied_to: str | None = None  # shares storage with that component: counted there, not here

    @property
    def per_copy(self) -> int:
        return math.prod(self.shape)

    @property
    def total(self) -> int:
        return 0 if self.tied_to else self.per_copy * self.copies


def param_entries(cfg: ModelConfig) -> list[ParamEntry]:
    """Every parameter tensor of the model built by tfcalc.model, in model order."""
    d, q, k, f, L, V = cfg.d_model, cfg.q_dim, cfg.kv_dim, cfg.ffn_dim, cfg.n_layer, cfg.vocab_size
    out = [ParamEntry("token_embedding", "embeddings", "token embedding", (V, d))]
    if cfg.pos_encoding == "learned":
        out.append(ParamEntry("position_embedding", "embeddings", "position embedding", (cfg.max_seq_len, d)))

    def block(component: str, group: str, label: str, shape: tuple[int, ...], present: bool = True) -> None:
        if present:
            out.append(ParamEntry(component, group, label, shape, copies=L))

    block("attn_norm_weight", "norms", "attention norm weight", (d,))
    block("attn_norm_bias", "norms", "attention norm bias", (d,), cfg.norm_bias)
    for name, width in (("q", q), ("k", k), ("v", k)):
        block(f"attn_{name}_weight", "attention", f"attention {name.upper()} weight", (width, d))
        block(f"attn_{name}_bias", "attention", f"attention {name.upper()} bias", (width,), cfg.attn_bias)
    block("attn_o_weight", "attention", "attention O weight", (d, q))
    block("attn_o_bias", "attention", "attention O bias", (d,), cfg.attn_bias)
    block("ffn_norm_weight", "norms", "FFN norm weight", (d,))
    block("ffn_norm_bias", "norms", "FFN norm bias", (d,), cfg.norm_bias)
    block("ffn_gate_weight", "ffn", "FFN gate weight", (f, d), cfg.gated_ffn)
    block("ffn_gate_bias", "ffn", "FFN gate bias", (f,), cfg.gated_ffn and cfg.ffn_bias)
    block("ffn_up_weight", "ffn", "FFN up weight", (f, d))
    block("ffn_up_bias", "ffn", "FFN up bias", (f,), cfg.ffn_bias)
    block("ffn_down_weight", "ffn", "FFN down weight", (d, f))
    block("ffn_down_bias", "ffn", "FFN down bias", (d,), cfg.ffn_bias)

    if cfg.final_norm:
        out.append(ParamEntry("final_norm_weight", "norms", "final norm weight", (d,)))
        if cfg.norm_bias:
            out.append(ParamEntry("final_norm_bias", "norms", "final norm bias", (d,)))
    tied = "token_embedding" if cfg.tie_embeddings else None
    out.append(ParamEntry("lm_head", "lm_head", "LM head", (V, d), tied_to=tied))
    return out


def breakdown(cfg: ModelConfig) -> dict[str, int]:
    """{component: parameters}, in model order; sums to total(cfg). A tied LM head shows 0."""
    return {e.component: e.total for e in param_entries(cfg)}


def group_totals(cfg: ModelConfig, counts: dict[str, int]) -> dict[str, int]:
    """Sum a breakdown of cfg's model (analytic or measured) into GROUPS; unknown keys go to 'other'."""
    group_of = {e.component: e.group for e in param_entries(cfg)}
    out = dict.fromkeys(GROUPS, 0)
    for component, n in counts.items():
        group = group_of.get(component, "other")
        out[group] = out.get(group, 0) + n
    return out


def total(cfg: ModelConfig) -> int:
    return sum(e.total for e in param_entries(cfg))


def seeds_approximation(cfg: ModelConfig) -> int:
    """12*L*d^2 + V*d, plus V*d more when the LM head is not tied (Kaplan et al. 2020, sec. 2.1)."""
    embeddings = cfg.vocab_size * cfg.d_model * (1 if cfg.tie_embeddings else 2)
    return 12 * cfg.n_layer * cfg.d_model**2 + embeddings


def seeds_formula(cfg: ModelConfig) -> str:
    return "12·L·d² + V·d" if cfg.tie_embeddings else "12·L·d² + 2·V·d"


_SUFFIX = {"K": 1e3, "M": 1e6, "B": 1e9, "T": 1e12}


def nominal_value(nominal: str | None) -> float | None:
    """'175B' -> 1.75e11; None (or something unreadable) -> None."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([KMBT])\s*", nominal or "", re.IGNORECASE)
    return float(m.group(1)) * _SUFFIX[m.group(2).upper()] if m else None


@dataclass(frozen=True)
class WidthNote:
    """The attention width differs from d_model: the count as given, and the two readings that agree."""

    q_dim: int
    d_model: int
    total_as_given: int
    total_attention_d_model_wide: int  # d_head taken as d_model / n_head (possibly fractional)
    total_d_model_as_width: int  # d_model taken as n_head * d_head
    nominal: float | None

    def text(self, n_head: int, d_head: int) -> str:
        def rel(n: int) -> str:
            return f" ({(n - self.nominal) / self.nominal:+.1%} vs the named size)" if self.nominal else ""

        return (
            f"attention width n_head·d_head = {n_head}·{d_head} = {self.q_dim} differs from d_model = "
            f"{self.d_model}. As given: {self.total_as_given:,} params{rel(self.total_as_given)}; "
            f"with attention {self.d_model} wide (d_head {self.d_model / n_head:.4g}): "
            f"{self.total_attention_d_model_wide:,}{rel(self.total_attention_d_model_wide)}; "
            f"with d_model = {self.q_dim}: {self.total_d_model_as_width:,}{rel(self.total_d_model_as_width)}."
        )


def width_note(cfg: ModelConfig) -> WidthNote | None:
    """When n_head*d_head != d_model (GPT-3 XL and 13B as printed in Brown et al. 2020, Table 2.1),
    what the count would be under either reading that makes the table consistent."""
    if cfg.q_dim == cfg.d_model:
        return None
    as_given = total(cfg)

    def attention_params(q: float, k: float) -> float:
        d = cfg.d_model
        return cfg.n_layer * (2 * d * q + 2 * d * k + (q + 2 * k + d if cfg.attn_bias else 0))

    ratio = cfg.kv_heads / cfg.n_head
    d_model_wide = as_given - attention_params(cfg.q_dim, cfg.kv_dim) + attention_params(
        cfg.d_model, cfg.d_model * ratio
    )
    return WidthNote(
        q_dim=cfg.q_dim,
        d_model=cfg.d_model,
        total_as_given=as_given,
        total_attention_d_model_wide=round(d_model_wide),
        total_d_model_as_width=total(replace(cfg, d_model=cfg.q_dim)),
        nominal=nominal_value(cfg.nominal_params),
    )
