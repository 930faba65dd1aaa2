"""The approximate non-matmul work of a forward pass (softmax, norms, activations, RoPE, residual and
bias adds), reported apart from the matmul FLOPs and never added to them. Pure arithmetic, no torch."""

from __future__ import annotations

from tfcalc.config import ModelConfig
from tfcalc.count.terms import ffn_matrices

from tfcalc.count.terms import (
    ACTIVATION_PER_ELEMENT, NORM_PER_ELEMENT, ROPE_PER_ELEMENT, SOFTMAX_PER_SCORE, NonMatmulEntry,
)


def non_matmul_entries(cfg: ModelConfig, batch: int, seq: int, src: int | None = None) -> list[NonMatmulEntry]:
    """The approximate non-matmul work of a forward pass (conventions in the module docstring)."""
    if cfg.arch == "encoder-decoder":
        src = seq if src is None else src
        out = _stack_non_matmul(cfg, batch, src, cfg.encoder_layers, "encoder ")
        out += _stack_non_matmul(cfg, batch, seq, cfg.n_layer, "decoder ", src=src)
    else:
        out = _stack_non_matmul(cfg, batch, seq, cfg.n_layer)
    if cfg.pooler:
        out.append(NonMatmulEntry("pooler", "pooler bias and tanh", 2, batch * cfg.d_model, 1))
    return out


def _stack_non_matmul(
    cfg: ModelConfig, batch: int, seq: int, L: int, stack: str = "", src: int | None = None
) -> list[NonMatmulEntry]:
    """One stack's non-matmul work; stack is "" or "encoder "/"decoder " (labels only)."""
    d, q, k, f = cfg.d_model, cfg.q_dim, cfg.kv_dim, cfg.ffn_dim
    tokens, score_elements = batch * seq, batch * cfg.n_head * seq * seq
    cross = src is not None
    cross_scores = batch * cfg.n_head * seq * src if cross else 0
    routed = tokens * cfg.experts_active  # token rows the FFN (or the top-k experts) runs on
    norm = NORM_PER_ELEMENT[(cfg.norm, cfg.norm_bias)]
    act = ACTIVATION_PER_ELEMENT[cfg.activation] + (1 if cfg.gated_ffn else 0)
    sublayers = 3 if cross else 2
    bias_elements = 0
    if cfg.attn_bias:  # qkv and out; cross: q and out per token, k and v per source token
        bias_elements += tokens * (q + 2 * k + d) + (tokens * (q + d) + batch * src * 2 * k if cross else 0)
    if cfg.ffn_bias:  # (gate,) up and down
        bias_elements += routed * ((ffn_matrices(cfg) - 1) * f + d)
    out = [
        NonMatmulEntry("softmax", f"{stack}softmax (full square)", SOFTMAX_PER_SCORE, score_elements + cross_scores, L),
        NonMatmulEntry("norms", f"{stack}{cfg.norm} ×{sublayers} per block", norm, tokens * d, sublayers * L),
        NonMatmulEntry("activation", f"{stack}{cfg.activation}{' · gate' if cfg.gated_ffn else ''}", act, routed * f, L),
        NonMatmulEntry("residual", f"{stack}residual adds ×{sublayers} per block", 1, tokens * d, sublayers * L),
    ]
    if cfg.n_expert:  # softmax over the k chosen logits; scale each expert output and add it in
        out.append(NonMatmulEntry("moe", f"{stack}softmax of the top-k router logits", SOFTMAX_PER_SCORE, routed, L))
        out.append(NonMatmulEntry("moe", f"{stack}weight and add the expert outputs", 2, routed * d, L))
    if cfg.final_norm:
        out.append(NonMatmulEntry("final_norm", f"{stack}final {cfg.norm}", norm, tokens * d, 1))
    if bias_elements:
        out.append(NonMatmulEntry("bias", f"{stack}bias adds", 1, bias_elements, L))
    if cfg.pos_encoding == "rope":
        out.append(NonMatmulEntry("rope", f"{stack}RoPE on Q and K", ROPE_PER_ELEMENT, tokens * (q + k), L))
    elif cfg.pos_encoding in ("learned", "sinusoidal"):
        out.append(NonMatmulEntry("positions", f"{stack}{cfg.pos_encoding} positions added", 1, tokens * d, 1))
    elif cfg.pos_encoding == "alibi":
        out.append(NonMatmulEntry("positions", f"{stack}ALiBi bias on the scores", 1, score_elements, L))
    embedding_extras = [("token types added", cfg.type_vocab_size > 0), ("embeddings × √d_model", cfg.embedding_scale)]
    for label, present in embedding_extras:
        if present:
            out.append(NonMatmulEntry("embeddings", f"{stack}{label}", 1, tokens * d, 1))
    if cfg.embedding_norm:
        out.append(NonMatmulEntry("norms", f"{stack}embedding {cfg.norm}", norm, tokens * d, 1))
    return out
