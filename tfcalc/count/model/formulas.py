"""The published training-FLOPs formulas (Kaplan et al. 2020, Hoffmann et al. 2022, PaLM, Megatron),
each evaluated as its source writes it, to set beside tfcalc's exact count. Pure arithmetic, no torch."""

from __future__ import annotations

from dataclasses import dataclass

from tfcalc.config import ModelConfig
from tfcalc.count.model import params as params_count
from tfcalc.count.model.terms import check_sizes as _check_sizes

# Tables that are read by lookup, not multiplied: not part of Kaplan's N (nor of PaLM's).
POSITION_TABLES = ("token_type_embedding", "position_embedding", "relative_position_bias")


@dataclass(frozen=True)
class FormulaEstimate:
    """A published training-FLOPs formula evaluated for B sequences of T tokens."""

    key: str
    name: str
    formula: str
    source: str
    n_params: int | None  # N as that source defines it (None where the formula has no N)
    training_flops: int

    def rel_error(self, exact: int) -> float:
        return (self.training_flops - exact) / exact


def _summed(b: dict[str, int], *suffixes: str) -> int:
    """Parameters of the components named by suffix (each stack's: 'encoder_position_embedding' too)."""
    return sum(n for c, n in b.items() if c.endswith(suffixes))


def kaplan_params(cfg: ModelConfig) -> int:
    """Kaplan et al. 2020, sec. 2.1: N is the number of parameters "excluding all vocabulary and
    positional embeddings": the token embedding, the position embedding and an untied LM head go
    (token-type tables too, and each stack's tables in an encoder-decoder). For a mixture of experts, N is
    the parameters active per token, as MoE papers quote 6·N_active·D."""
    b = params_count.breakdown(cfg)
    lookups = _summed(b, "token_embedding", "lm_head", *POSITION_TABLES)
    return params_count.active_total(cfg) - lookups


def palm_params(cfg: ModelConfig) -> int:
    """The N of PaLM's 6N (Chowdhery et al. 2022, App. B) as nanoGPT's estimate_mfu and torchtitan apply
    it: every parameter that multiplies an activation. A position table and an untied token embedding
    are lookups and go; a tied embedding stays, counted once, as the LM head (PaLM ties them). Without
    an LM head every token embedding is a lookup. Active parameters for a mixture of experts."""
    b = params_count.breakdown(cfg)
    lookups = _summed(b, *POSITION_TABLES)
    head = cfg.architecture.head
    if not (head.lm_head and head.tied):
        lookups += _summed(b, "token_embedding")
    return params_count.active_total(cfg) - lookups


def standard_formulas(cfg: ModelConfig, batch: int, seq: int) -> list[FormulaEstimate]:
    """The textbook training-FLOPs formulas, each as its source writes it, for B sequences of T tokens."""
    _check_sizes(batch=batch, seq=seq)
    B, T, D = batch, seq, batch * seq  # D: tokens in the step
    # Front-end reads, on purpose: each formula takes the model's published hyperparameters (one d, one
    # d_ff, one head count for every layer), as its source writes it -- not the per-layer description,
    # which the exact count folds over. The difference is what these estimates are shown to measure.
    d, q, f, L, V, H = cfg.d_model, cfg.q_dim, cfg.ffn_dim, cfg.n_layer, cfg.vocab_size, cfg.n_head
    n_kaplan, n_palm = kaplan_params(cfg), palm_params(cfg)

    # Kaplan et al. 2020, sec. 2.1: C ≈ 6N per training token (2N forward, 4N backward).
    kaplan_6nd = 6 * n_kaplan * D
    # Kaplan et al. 2020, Table 1: C_forward ≈ 2N + 2·n_layer·n_ctx·d_attn per token (embedding and
    # de-embedding dropped as sub-leading); training = 3 × forward (sec. 2.1). d_attn = n_head·d_head.
    kaplan_table1 = 3 * (2 * n_kaplan + 2 * L * T * q) * D
    # Hoffmann et al. 2022 (Chinchilla), Appendix F, per sequence, as written: multi-head attention
    # (3 equal projections) and an ungated FFN; the embedding counted as a matmul; backward = 2 × forward.
    chin_attention = (
        2 * 3 * T * d * q  # key, query and value projections
        + 2 * T * T * q  # key @ query logits
        + 3 * H * T * T  # softmax
        + 2 * T * T * q  # softmax @ query reductions
        + 2 * T * q * d  # final linear
    )
    chin_dense = 2 * T * (d * f + d * f)
    chin_forward = 2 * T * V * d + L * (chin_attention + chin_dense) + 2 * T * d * V
    chinchilla = 3 * chin_forward * B
    # Chowdhery et al. 2022 (PaLM), Appendix B: 6N + 12·L·H·Q·T per token (Q = d_head), full square.
    palm = (6 * n_palm + 12 * L * H * cfg.head_dim * T) * D
    # Korthikanti et al. 2022 (Megatron model FLOPs without recompute; Narayanan et al. 2021, eq. 3, has
    # the recompute variant 96·B·s·l·h²·(...)), written for q = d, f = 4d and multi-head attention:
    # 72·B·s·l·h²·(1 + s/(6h) + V/(12·h·l)), here multiplied out to stay in integers.
    korthikanti = 72 * B * T * L * d * d + 12 * B * T * T * L * d + 6 * B * T * V * d
    return [
        FormulaEstimate("kaplan_6nd", "Kaplan 6ND", "6·N·D", "Kaplan et al. 2020, sec. 2.1",
                        n_kaplan, kaplan_6nd),
        FormulaEstimate("kaplan_table1", "Kaplan Table 1", "3·(2N + 2·L·T·d_attn)·D", "Kaplan et al. 2020, Table 1",
                        n_kaplan, kaplan_table1),
        FormulaEstimate("chinchilla", "Chinchilla", "3·(embed + L·(attn + dense) + logits)·B",
                        "Hoffmann et al. 2022, App. F", None, chinchilla),
        FormulaEstimate("palm", "PaLM", "(6N + 12·L·H·Q·T)·D", "Chowdhery et al. 2022, App. B",
                        n_palm, palm),
        FormulaEstimate("korthikanti", "Megatron", "72·B·s·l·h²·(1 + s/6h + V/12hl)",
                        "Korthikanti et al. 2022", None, korthikanti),
    ]
