"""Approximate non-matmul FLOPs of a forward pass: pure arithmetic, no torch. Reported beside the matmul
count of tfcalc.count.flops, never added to it.

Conventions (one transcendental function = 1 FLOP; per-row reductions of O(B·T) operations ignored),
per element of the tensor named:

- softmax: 5 per score element over the full T×T square: scale by 1/√h, subtract the row max, exp, sum,
  divide (taking the max is a comparison, not counted);
- norms: LayerNorm 7 per element of (B·T, d) (mean, subtract, square, sum, normalize, ×γ, +β; 6 without
  β), RMSNorm 4 (square, sum, normalize, ×γ); two per block (four with sandwich norms, one in a parallel
  block with a shared norm), plus the final norm; Q/K norms the same per element of Q and K;
- activation, per element of the FFN hidden (B·T, f): relu 1, gelu (erf) 5, gelu_tanh 9 (x³ is two,
  ×0.044715, +x, ×√(2/π), tanh, +1, ×x, ×0.5), silu 4 (negate, exp, +1, divide); a gated FFN adds 1
  for the product act(gate)·up;
- rope: 3 per rotated element of Q and K (x·cos, rotate_half(x)·sin, add; the sign flip is not
  counted): all of them, or the first rope_dim channels of each head with partial rotary;
- soft-capping (Gemma 2): 3 per capped element (divide, tanh, multiply): every score element of every
  layer, and every logit;
- residual adds: 1 per element of (B·T, d), two per block (a parallel block too: x + attn + ffn); Granite's
  residual_multiplier 1 more per sub-layer output, its embedding_multiplier and a logit_scale 1 per element;
- bias adds: 1 per output element of every Linear with a bias;
- positions: a learned or sinusoidal table added once, 1 per element of (B·T, d); ALiBi and T5's
  relative bias add a bias to every score element of every layer;
- mixture of experts: the softmax of the k chosen router logits (5 each; of all E logits when the top k
  are not renormalized), weighting and adding each expert output (2 per element of (B·T·k, d)); a
  shared expert's activation as the FFN's, and its gate, sigmoid (4 per token), product and add (2 per
  element of (B·T, d)).
"""

from __future__ import annotations

from tfcalc.architecture import FFN, MoE, Stack
from tfcalc.config import ModelConfig
from tfcalc.count.terms import (
    ACTIVATION_PER_ELEMENT,
    NORM_PER_ELEMENT,
    ROPE_PER_ELEMENT,
    SIGMOID_PER_ELEMENT,
    SOFTCAP_PER_ELEMENT,
    SOFTMAX_PER_SCORE,
    NonMatmulEntry,
)


def non_matmul_entries(cfg: ModelConfig, batch: int, seq: int, src: int | None = None) -> list[NonMatmulEntry]:
    """The approximate non-matmul work of a forward pass (conventions in the module docstring). src: the
    source length of an encoder-decoder, or the external states a cross-attention stack reads."""
    if cfg.arch == "encoder-decoder":
        src = seq if src is None else src
        out = _stack_non_matmul(cfg, batch, src, cfg.architecture.stacks[0], "encoder ")
        out += _stack_non_matmul(cfg, batch, seq, cfg.architecture.output, "decoder ", src=src)
    else:
        src = (seq if src is None else src) if cfg.cross_attention else None
        out = _stack_non_matmul(cfg, batch, seq, cfg.architecture.output, src=src)
    if cfg.pooler:
        out.append(NonMatmulEntry("pooler", "pooler bias and tanh", 2, batch * cfg.d_model, 1))
    return out + _head_non_matmul(cfg, batch * seq)


def _head_non_matmul(cfg: ModelConfig, tokens: int) -> list[NonMatmulEntry]:
    """BERT's MLM-head transform (bias, activation, norm), the vocabulary bias, logit soft-capping."""
    out, d, V = [], cfg.d_model, cfg.vocab_size
    if cfg.lm_head_transform:
        per = 1 + ACTIVATION_PER_ELEMENT[cfg.activation] + NORM_PER_ELEMENT[(cfg.norm, cfg.norm_has_bias)]
        out.append(NonMatmulEntry("head", f"LM head transform: bias, {cfg.activation}, {cfg.norm}", per, tokens * d, 1))
    if cfg.lm_head_bias:
        out.append(NonMatmulEntry("bias", "LM head bias add", 1, tokens * V, 1))
    if cfg.logit_softcap is not None:
        out.append(NonMatmulEntry("softcap", "logit soft-capping", SOFTCAP_PER_ELEMENT, tokens * V, 1))
    if cfg.logit_scale is not None:  # Cohere, Granite
        out.append(NonMatmulEntry("head", "logits × logit_scale", 1, tokens * V, 1))
    return out


def _ffn_kinds(stack: Stack) -> list[tuple[FFN | MoE, int]]:
    """(FFN or mixture of experts, layers that have it) of a stack, first seen first (tfcalc.architecture)."""
    counts: dict[FFN | MoE, int] = {}
    for block, layers in stack.kinds():
        counts[block.ffn] = counts.get(block.ffn, 0) + layers
    return list(counts.items())


def _bias_elements(cfg: ModelConfig, ffn: FFN | MoE, batch: int, seq: int, src: int | None) -> int:
    """Output elements of the Linears with a bias, per block with this FFN."""
    d, q, k, tokens = cfg.d_model, cfg.q_dim, cfg.kv_dim, batch * seq
    cross = src is not None
    out = 0
    if cfg.attn_bias:  # Q, K, V; cross: Q per token, K and V per source token
        out += tokens * (q + 2 * k) + (tokens * q + batch * src * 2 * k if cross else 0)
    if cfg.o_bias:
        out += tokens * d * (2 if cross else 1)
    if cfg.ffn_bias:  # (gate,) up and down, for each routed copy (each buffer row); a shared expert on every token
        moe = ffn if isinstance(ffn, MoE) else None
        expert = moe.expert if moe else ffn
        rows = moe.routed_rows(tokens) if moe else tokens
        out += rows * ((expert.matrices - 1) * expert.d_ff + d)
        if moe is not None and moe.shared is not None:
            out += tokens * ((moe.shared.matrices - 1) * moe.shared.d_ff + d)
    return out


def _ffn_non_matmul(cfg: ModelConfig, ffn: FFN | MoE, layers: int, tokens: int, stack: str,
                    ) -> tuple[list[NonMatmulEntry], list[NonMatmulEntry]]:
    """(the activation, the mixture's routing work) of the layers with this FFN."""
    act = ACTIVATION_PER_ELEMENT[cfg.activation] + (1 if cfg.gated_ffn else 0)
    moe = ffn if isinstance(ffn, MoE) else None
    expert = moe.expert if moe else ffn
    rows = moe.routed_rows(tokens) if moe else tokens  # token rows the FFN (or the experts' buffers) runs on
    activation = [NonMatmulEntry("activation", f"{stack}{cfg.activation}{' · gate' if cfg.gated_ffn else ''}", act,
                                 rows * expert.d_ff, layers)]
    if moe is None:
        return activation, []
    routed = tokens * moe.top_k
    out = []  # softmax over the k chosen logits (or all E); scale each expert output and add it in
    logits, which = (routed, "top-k") if moe.renormalize else (tokens * moe.n_expert, "all")
    out.append(NonMatmulEntry("moe", f"{stack}softmax of the {which} router logits", SOFTMAX_PER_SCORE, logits, layers))
    out.append(NonMatmulEntry("moe", f"{stack}weight and add the expert outputs", 2, routed * cfg.d_model, layers))
    if moe.shared is not None:
        out.append(NonMatmulEntry("activation", f"{stack}shared expert {cfg.activation}", act,
                                  tokens * moe.shared.d_ff, layers))
        out.append(NonMatmulEntry("moe", f"{stack}add the shared expert", 1, tokens * cfg.d_model, layers))
    if moe.shared_gate:
        out.append(NonMatmulEntry("moe", f"{stack}shared expert gate: sigmoid", SIGMOID_PER_ELEMENT, tokens, layers))
        out.append(NonMatmulEntry("moe", f"{stack}shared expert gate: product", 1, tokens * cfg.d_model, layers))
    return activation, out


def _stack_non_matmul(
    cfg: ModelConfig, batch: int, seq: int, arch_stack: Stack, stack: str = "", src: int | None = None
) -> list[NonMatmulEntry]:
    """One stack's non-matmul work, its FFN terms folded over its layers; stack is "" or "encoder "/"decoder "
    (labels only)."""
    d, L = cfg.d_model, arch_stack.n_layer
    tokens, score_elements = batch * seq, batch * cfg.n_head * seq * seq
    cross = src is not None
    cross_scores = batch * cfg.n_head * seq * src if cross else 0
    norm = NORM_PER_ELEMENT[(cfg.norm, cfg.norm_has_bias)]
    sublayers = 3 if cross else 2
    norms = cfg.norms_per_block + ((2 if cfg.norm_placement == "sandwich" else 1) if cross else 0)
    ffns = [_ffn_non_matmul(cfg, ffn, n, tokens, stack) for ffn, n in _ffn_kinds(arch_stack)]
    out = [
        NonMatmulEntry("softmax", f"{stack}softmax (full square)", SOFTMAX_PER_SCORE, score_elements + cross_scores, L),
        NonMatmulEntry("norms", f"{stack}{cfg.norm} ×{norms} per block", norm, tokens * d, norms * L),
        *[e for activation, _ in ffns for e in activation],
        NonMatmulEntry("residual", f"{stack}residual adds ×{sublayers} per block", 1, tokens * d, sublayers * L),
    ]
    if cfg.residual_multiplier is not None:  # Granite: each sub-layer's output (a parallel block's sum) scaled
        scaled = 1 if cfg.parallel_block != "none" else sublayers
        out.append(NonMatmulEntry("residual", f"{stack}× residual_multiplier", 1, tokens * d, scaled * L))
    if cfg.qk_norm:
        out.append(NonMatmulEntry("norms", f"{stack}Q/K {cfg.norm}", norm, tokens * (cfg.q_dim + cfg.kv_dim), L))
    if cfg.attn_softcap is not None:
        out.append(NonMatmulEntry("softcap", f"{stack}score soft-capping", SOFTCAP_PER_ELEMENT,
                                  score_elements + cross_scores, L))
    out += [e for _, routing in ffns for e in routing]
    if cfg.final_norm:
        out.append(NonMatmulEntry("final_norm", f"{stack}final {cfg.norm}", norm, tokens * d, 1))
    for ffn, n in _ffn_kinds(arch_stack):
        bias_elements = _bias_elements(cfg, ffn, batch, seq, src)
        if bias_elements:
            out.append(NonMatmulEntry("bias", f"{stack}bias adds", 1, bias_elements, n))
    if cfg.pos_encoding == "rope":
        rotated = tokens * (cfg.n_head + cfg.kv_heads) * cfg.rope_dim
        out.append(NonMatmulEntry("rope", f"{stack}RoPE on Q and K", ROPE_PER_ELEMENT, rotated, L))
    elif cfg.pos_encoding in ("learned", "sinusoidal"):
        out.append(NonMatmulEntry("positions", f"{stack}{cfg.pos_encoding} positions added", 1, tokens * d, 1))
    elif cfg.pos_encoding in ("alibi", "relative"):
        name = "ALiBi" if cfg.pos_encoding == "alibi" else "relative position"
        out.append(NonMatmulEntry("positions", f"{stack}{name} bias on the scores", 1, score_elements, L))
    embedding_extras = [("token types added", cfg.type_vocab_size > 0), ("embeddings × √d_model", cfg.embedding_scale),
                        ("embeddings × embedding_multiplier", cfg.embedding_multiplier is not None)]
    for label, present in embedding_extras:
        if present:
            out.append(NonMatmulEntry("embeddings", f"{stack}{label}", 1, tokens * d, 1))
    if cfg.embedding_norm:
        out.append(NonMatmulEntry("norms", f"{stack}embedding {cfg.norm}", norm, tokens * d, 1))
    return out
