"""Analytic FLOPs of a ModelConfig: pure arithmetic, no torch.

Conventions (../shared/DESIGN.md). A FLOP is one floating-point operation; a multiply-add is 2 FLOPs; a
matmul (m, k) @ (k, n) is 2·m·k·n. ``forward_flops`` counts matmul FLOPs only, the attention scores over
the full T×T square (the convention of PyTorch's FlopCounterMode, Megatron and PaLM) and the LM head
over all T positions. ``forward_flops_causal`` counts, exactly, only the unmasked score elements. A bias
add is not part of a matmul (FlopCounterMode counts ``addmm`` as 2·m·k·n too): it goes, with the other
non-matmul work, into ``non_matmul_flops``, which is reported separately and never added to the above.

Derivation, one block, B sequences of T tokens (d = d_model, q = n_head·d_head, k = n_kv_head·d_head,
f = d_ff, H = n_head, h = d_head, L = n_layer, V = vocab_size):

1. Q projection: (B·T, d) @ (d, q) -> 2·B·T·d·q.
2. K and V projections: (B·T, d) @ (d, k) each -> 2·B·T·d·k each. Grouped-query attention (k < q) makes
   these two smaller, and nothing else.
3. Scores Q·Kᵀ: B·H matmuls (T, h) @ (h, T) -> 2·B·H·T²·h = 2·B·T²·q. Every query head scores against
   its group's K, so GQA does not shrink this term.
4. Attention · V: B·H matmuls (T, T) @ (T, h) -> 2·B·T²·q.
5. O projection: (B·T, q) @ (q, d) -> 2·B·T·q·d.
6. FFN: up (B·T, d) @ (d, f) and down (B·T, f) @ (f, d); a gated FFN (SwiGLU, GeGLU) adds a gate
   (B·T, d) @ (d, f): 2·m·B·T·d·f with m = 3 gated, 2 otherwise.

Outside the blocks: the LM head (B·T, d) @ (d, V) -> 2·B·T·d·V; the token and position embeddings are
lookups, 0 FLOPs (a one-hot matmul, as Hoffmann et al. 2022 count it, would be 2·B·T·V·d).

Causal count: query row i (0-based) sees i + 1 keys, so the score matrix has T·(T+1)/2 unmasked
elements, not T²; steps 3 and 4 become B·q·T·(T+1) each. With Tq queries against Tk keys (the last Tq
positions of Tk, as in decoding or chunked prefill) the count is Tq·(Tk − Tq) + Tq·(Tq+1)/2. A sliding
window W (Mistral) lets query p see min(p + 1, W) keys: the causal count sums that; the full-square count
stays T² (the masked kernel computes the square); a decode step scores min(context, W) cached keys.

Totals: forward = L·(blocks) + LM head; training = 3 × forward (the backward pass of a matmul computes
the gradient of both its inputs: two matmuls of the same size); full activation recompute runs the
forward once more: 4 × forward. With the GPT-2 shapes this is Korthikanti et al. 2022's
72·B·s·l·h²·(1 + s/(6h) + V/(12·h·l)), term for term.

Crossover (see ``crossover_seq``): per layer and per sequence, scores 4·q·T² against FFN 2·m·d·f·T, so
scores reach the FFN at T = m·d·f / (2q); the whole attention sub-layer (scores plus projections
2·d·T·(2q + 2k)) at T = d·(m·f − 2q − 2k) / (2q). With q = k = d, f = 4·d, m = 2 (GPT-3): T = 4·d and
T = 2·d. Causal: T = m·d·f/q − 1 and T = d·(m·f − 2q − 2k)/q − 1.

Non-matmul work, approximate conventions (one transcendental function = 1 FLOP; per-row reductions of
O(B·T) operations ignored), per element of the tensor named:

- softmax: 5 per score element over the full T×T square: scale by 1/√h, subtract the row max, exp, sum,
  divide (taking the max is a comparison, not counted);
- norms: LayerNorm 7 per element of (B·T, d) (mean, subtract, square, sum, normalize, ×γ, +β; 6 without
  β), RMSNorm 4 (square, sum, normalize, ×γ); two per block, plus the final norm;
- activation, per element of the FFN hidden (B·T, f): relu 1, gelu (erf) 5, gelu_tanh 9 (x³ is two,
  ×0.044715, +x, ×√(2/π), tanh, +1, ×x, ×0.5), silu 4 (negate, exp, +1, divide); a gated FFN adds 1
  for the product act(gate)·up;
- rope: 3 per element of Q and K (x·cos, rotate_half(x)·sin, add; the sign flip is not counted);
- residual adds: 1 per element of (B·T, d), two per block;
- bias adds: 1 per output element of every Linear with a bias;
- positions: a learned or sinusoidal table added once, 1 per element of (B·T, d); ALiBi adds its bias
  to every score element of every layer.

Other kinds (tfcalc.config):

7. mixture of experts: the router (B·T, d) @ (d, E), then each token runs its top-k experts only, so
   the experts multiply B·T·k token rows in all, whichever way the router spreads them: 2·m·B·T·k·d·f
   (the FFN of step 6 times k, not times E), plus 2·B·T·d·E for the router. Experts that a token is not
   routed to do no work for it, and none is counted;
8. encoder (BERT): no mask, so the causal count equals the full square; BERT's pooler multiplies the
   first token of each sequence, 2·B·d·d; BertModel has no LM head;
9. encoder-decoder, S source and T target tokens: the encoder's blocks run over B·S tokens (steps 1-6
   with T = S, no mask); each decoder block adds cross-attention: Q and O projections over B·T tokens,
   K and V over the B·S encoder outputs, and scores of T queries against S keys, 2·B·T·S·q twice
   (never masked). The LM head runs over the B·T target tokens. Decoding reuses the encoder output and
   the cross-attention K and V (the cross KV cache): one step does neither again.

Public names (the benchmark imports these):

- ``breakdown(cfg, batch, seq) -> FlopBreakdown``: every matmul as a ``MatmulEntry`` and every non-matmul
  term as a ``NonMatmulEntry``; ``.per_layer()``, ``.totals()`` ({attention_proj, attention_scores, ffn,
  lm_head, embeddings}), ``.components()``, ``.forward``, ``.forward_causal``, ``.non_matmul_total``.
- ``forward_flops(cfg, batch, seq)``, ``forward_flops_causal(cfg, batch, seq)``,
  ``training_flops(cfg, batch, seq, recompute=False)``.
- One block's sub-layers: ``attention_proj_flops``, ``attention_score_flops(..., causal=False)``,
  ``attention_flops(..., causal=False)`` (projections + scores), ``ffn_flops``; and ``lm_head_flops``.
- ``non_matmul_flops(cfg, batch, seq) -> dict`` (whole forward, by kind).
- ``crossover_seq(cfg, causal=False) -> Crossover(scores_vs_ffn, attention_vs_ffn)``.
- ``decode_flops(cfg, batch, context)``: one generated token per sequence against a KV cache.
- ``standard_formulas(cfg, batch, seq) -> list[FormulaEstimate]`` with ``kaplan_params``, ``palm_params``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

from tfcalc.config import ModelConfig
from tfcalc.errors import InputError
from tfcalc.count import params as params_count

GROUPS = ("attention_proj", "attention_scores", "cross_attention_proj", "cross_attention_scores", "ffn", "pooler",
          "lm_head", "embeddings")
SUBLAYER_GROUPS = {"attention": ("attention_proj", "attention_scores"), "ffn": ("ffn",)}
BLOCK_GROUPS = ("attention_proj", "attention_scores", "ffn")
CROSS_GROUPS = ("cross_attention_proj", "cross_attention_scores")

# Non-matmul FLOPs per element (see the module docstring for what each counts).
SOFTMAX_PER_SCORE = 5
NORM_PER_ELEMENT = {("layernorm", True): 7, ("layernorm", False): 6, ("rmsnorm", False): 4}
ACTIVATION_PER_ELEMENT = {"relu": 1, "gelu": 5, "gelu_tanh": 9, "silu": 4}
ROPE_PER_ELEMENT = 3


def ffn_matrices(cfg: ModelConfig) -> int:
    """How many d×f matrices the FFN multiplies by: 3 for a gated FFN (gate, up, down), else 2."""
    return 3 if cfg.gated_ffn else 2


def causal_pairs(queries: int, keys: int, window: int | None = None) -> int:
    """Unmasked (query, key) pairs when the queries are the last ``queries`` of ``keys`` positions:
    row i (0-based) sees keys - queries + i + 1 keys. queries == keys == T gives T·(T+1)/2. With a
    sliding window W, query p (0-based position) sees min(p + 1, W) keys."""
    if window is None or window >= keys:
        return queries * (keys - queries) + queries * (queries + 1) // 2
    first = keys - queries  # position of the first query
    ramp = max(0, min(window - 1, keys) - first)  # queries at positions p < W - 1 see p + 1 keys
    return ramp * (2 * first + ramp + 1) // 2 + (queries - ramp) * window


@dataclass(frozen=True)
class MatmulEntry:
    """One kind of matmul of the forward pass: ``count`` matmuls (m, k) @ (k, n) per copy."""

    component: str  # stable key: attn_q, attn_k, attn_v, attn_qk, attn_av, attn_o, ffn_gate, ffn_up, ffn_down, lm_head
    group: str  # one of GROUPS
    label: str
    shape: tuple[int, int, int]  # (m, k, n)
    count: int  # matmuls of this shape per copy: B·H for the score matmuls, 1 for a Linear over B·T rows
    copies: int  # n_layer for the blocks, 1 for the LM head
    causal_per_copy: int  # FLOPs per copy counting only unmasked score elements (= per_copy off the scores)
    stack: str = ""  # "encoder" or "decoder" in an encoder-decoder, "" otherwise

    @property
    def per_copy(self) -> int:
        m, k, n = self.shape
        return 2 * m * k * n * self.count

    @property
    def total(self) -> int:
        return self.per_copy * self.copies

    @property
    def causal_total(self) -> int:
        return self.causal_per_copy * self.copies


@dataclass(frozen=True)
class NonMatmulEntry:
    """Approximate non-matmul FLOPs: ``per_element`` FLOPs on each of ``elements`` elements, ``copies`` times."""

    component: str  # softmax, norms, activation, rope, residual, bias, positions, moe, pooler (repeated per stack)
    label: str
    per_element: int
    elements: int
    copies: int

    @property
    def total(self) -> int:
        return self.per_element * self.elements * self.copies


def matmul_entries(
    cfg: ModelConfig, batch: int, queries: int, keys: int | None = None, src: int | None = None,
    encoder: bool = True,
) -> list[MatmulEntry]:
    """Every matmul of a forward pass over ``queries`` new tokens per sequence attending to ``keys``
    positions (keys = queries for a full forward, keys = context with queries = 1 for decoding).

    An encoder-decoder's encoder reads ``src`` tokens per sequence (default: queries), and every decoder
    block's cross-attention scores its queries against them. ``encoder=False`` leaves out what a decode
    step reuses: the encoder, and the cross-attention K and V projections (the cross KV cache)."""
    keys = queries if keys is None else keys
    d, rows = cfg.d_model, batch * queries
    out: list[MatmulEntry] = []
    if cfg.arch == "encoder-decoder":
        src = queries if src is None else src
        if encoder:
            out += _stack_matmuls(cfg, batch, src, src, cfg.encoder_layers, causal=False, stack="encoder")
        out += _stack_matmuls(cfg, batch, queries, keys, cfg.n_layer, causal=True, stack="decoder",
                              src=src, cross_kv=encoder)
    else:
        out += _stack_matmuls(cfg, batch, queries, keys, cfg.n_layer, causal=cfg.arch == "decoder")
    stack = "decoder" if cfg.arch == "encoder-decoder" else ""
    if cfg.pooler:  # BERT: tanh(W h[:, 0] + b), the first token of each sequence only
        out.append(MatmulEntry("pooler", "pooler", "pooler", (batch, d, d), 1, 1, 2 * batch * d * d, stack))
    if cfg.lm_head:
        V = cfg.vocab_size
        out.append(MatmulEntry("lm_head", "lm_head", "LM head", (rows, d, V), 1, 1, 2 * rows * d * V, stack))
    return out


def _stack_matmuls(
    cfg: ModelConfig, batch: int, queries: int, keys: int, L: int, causal: bool, stack: str = "",
    src: int | None = None, cross_kv: bool = True,
) -> list[MatmulEntry]:
    """The matmuls of L blocks of one stack (steps 1-9 of the module docstring); cross-attention when
    src (the source length) is given."""
    d, q, k, f, h = cfg.d_model, cfg.q_dim, cfg.kv_dim, cfg.ffn_dim, cfg.head_dim
    heads, rows, prefix = batch * cfg.n_head, batch * queries, "encoder_" if stack == "encoder" else ""
    out: list[MatmulEntry] = []

    stack_label = f"{stack} " if stack else ""

    def linear(component: str, group: str, label: str, n_in: int, n_out: int, m: int = rows) -> None:
        flops = 2 * m * n_in * n_out
        out.append(MatmulEntry(prefix + component, group, stack_label + label, (m, n_in, n_out), 1, L, flops, stack))

    def scores(component: str, group: str, label: str, shape: tuple[int, int, int], pairs: int) -> None:
        causal_flops = 2 * heads * h * pairs  # 2·h FLOPs per unmasked (query, key) pair
        out.append(MatmulEntry(prefix + component, group, stack_label + label, shape, heads, L, causal_flops, stack))

    pairs = causal_pairs(queries, keys, cfg.sliding_window) if causal else queries * keys
    linear("attn_q", "attention_proj", "Q projection", d, q)
    linear("attn_k", "attention_proj", "K projection", d, k)
    linear("attn_v", "attention_proj", "V projection", d, k)
    scores("attn_qk", "attention_scores", "scores Q·Kᵀ", (queries, h, keys), pairs)
    scores("attn_av", "attention_scores", "attention · V", (queries, keys, h), pairs)
    linear("attn_o", "attention_proj", "O projection", q, d)
    if src is not None:
        group, sources = "cross_attention_proj", batch * src
        linear("cross_attn_q", group, "cross-attention Q projection", d, q)
        if cross_kv:
            linear("cross_attn_k", group, "cross-attention K projection (encoder output)", d, k, sources)
            linear("cross_attn_v", group, "cross-attention V projection (encoder output)", d, k, sources)
        scores("cross_attn_qk", "cross_attention_scores", "cross-attention scores Q·Kᵀ", (queries, h, src),
               queries * src)
        scores("cross_attn_av", "cross_attention_scores", "cross-attention · V", (queries, src, h), queries * src)
        linear("cross_attn_o", group, "cross-attention O projection", q, d)
    name, label, routed = "ffn", "FFN", rows
    if cfg.n_expert:
        linear("router", "ffn", "MoE router", d, cfg.experts)
        name, routed = "expert_ffn", rows * cfg.experts_active  # each token runs its top-k experts only
        label = f"expert FFN (top-{cfg.experts_active} of {cfg.experts})"
    if cfg.gated_ffn:
        linear(f"{name}_gate", "ffn", f"{label} gate", d, f, routed)
    linear(f"{name}_up", "ffn", f"{label} up", d, f, routed)
    linear(f"{name}_down", "ffn", f"{label} down", f, d, routed)
    return out


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


@dataclass(frozen=True)
class FlopBreakdown:
    """The FLOPs of one forward pass of B sequences of T tokens, by matmul and by group."""

    cfg: ModelConfig
    batch: int
    seq: int
    entries: tuple[MatmulEntry, ...]
    non_matmul: tuple[NonMatmulEntry, ...]
    src_seq: int | None = None  # source tokens per sequence of an encoder-decoder

    @property
    def tokens(self) -> int:
        """B·T: the tokens the model outputs (an encoder-decoder's target tokens)."""
        return self.batch * self.seq

    def components(self, causal: bool = False) -> dict[str, int]:
        """{component: FLOPs over the whole model}, in model order."""
        return {e.component: e.causal_total if causal else e.total for e in self.entries}

    def per_layer(self, causal: bool = False) -> dict[str, int]:
        """{attention_proj, attention_scores, ffn}: one block's FLOPs; an encoder-decoder's decoder block,
        with its cross_attention_proj and cross_attention_scores."""
        keys = BLOCK_GROUPS + (CROSS_GROUPS if self.cfg.arch == "encoder-decoder" else ())
        out = dict.fromkeys(keys, 0)
        for e in self.entries:
            if e.group in out and e.stack != "encoder":
                out[e.group] += e.causal_per_copy if causal else e.per_copy
        return out

    def totals(self, causal: bool = False) -> dict[str, int]:
        """{group: FLOPs over the whole model} for every group of GROUPS (embeddings: 0, a lookup)."""
        out = dict.fromkeys(GROUPS, 0)
        for e in self.entries:
            out[e.group] += e.causal_total if causal else e.total
        return out

    @property
    def forward(self) -> int:
        return sum(e.total for e in self.entries)

    @property
    def forward_causal(self) -> int:
        return sum(e.causal_total for e in self.entries)

    def non_matmul_by_kind(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for e in self.non_matmul:  # a kind may repeat (each stack of an encoder-decoder): summed
            out[e.component] = out.get(e.component, 0) + e.total
        return out

    @property
    def non_matmul_total(self) -> int:
        return sum(e.total for e in self.non_matmul)

    def per_token(self, flops: int) -> int:
        """flops / (B·T), per output token. Exact for a decoder or an encoder without a pooler: every
        term carries a factor B·T (the scores B·T², causal B·T·(T+1)). Rounded to the nearest FLOP where
        work is not per output token: BERT's pooler (once per sequence), an encoder-decoder's encoder and
        cross-attention (per source token)."""
        return round(Fraction(flops, self.tokens))


def _check_sizes(**sizes: int) -> None:
    for name, value in sizes.items():
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise InputError(f"{name} must be a positive integer; got {value!r}")


def _source_length(cfg: ModelConfig, seq: int, src_seq: int | None) -> int | None:
    """The source length of an encoder-decoder (default: seq); None for the other kinds."""
    if cfg.arch != "encoder-decoder":
        if src_seq is not None:
            raise InputError(f"a source length applies to encoder-decoder models only ({cfg.name} is {cfg.arch})")
        return None
    if src_seq is not None:
        _check_sizes(src_seq=src_seq)
    return seq if src_seq is None else src_seq


def breakdown(cfg: ModelConfig, batch: int, seq: int, src_seq: int | None = None) -> FlopBreakdown:
    """B sequences of T tokens (an encoder-decoder: T target tokens, src_seq source tokens, default T)."""
    _check_sizes(batch=batch, seq=seq)
    src = _source_length(cfg, seq, src_seq)
    return FlopBreakdown(
        cfg, batch, seq, tuple(matmul_entries(cfg, batch, seq, src=src)),
        tuple(non_matmul_entries(cfg, batch, seq, src)), src,
    )


def forward_flops(cfg: ModelConfig, batch: int, seq: int, src_seq: int | None = None) -> int:
    """Matmul FLOPs of one forward pass, scores over the full T×T square."""
    return breakdown(cfg, batch, seq, src_seq).forward


def forward_flops_causal(cfg: ModelConfig, batch: int, seq: int, src_seq: int | None = None) -> int:
    """Matmul FLOPs of one forward pass, scores over the T·(T+1)/2 unmasked elements only (an encoder's
    and cross-attention's scores are never masked: counted whole)."""
    return breakdown(cfg, batch, seq, src_seq).forward_causal


TRAINING_MULTIPLIER = 3  # forward + backward (2 × forward)
RECOMPUTE_MULTIPLIER = 4  # ... + the forward run again by full activation recompute


def training_flops(
    cfg: ModelConfig, batch: int, seq: int, recompute: bool = False, causal: bool = False, src_seq: int | None = None
) -> int:
    """One training step on B sequences of T tokens: 3 × forward, or 4 × with full activation recompute."""
    fwd = forward_flops_causal(cfg, batch, seq, src_seq) if causal else forward_flops(cfg, batch, seq, src_seq)
    return (RECOMPUTE_MULTIPLIER if recompute else TRAINING_MULTIPLIER) * fwd


def _group_sum(cfg: ModelConfig, batch: int, seq: int, groups: tuple[str, ...], causal: bool) -> int:
    """One block of the output stack (an encoder-decoder's decoder, source length = seq)."""
    _check_sizes(batch=batch, seq=seq)
    entries = matmul_entries(cfg, batch, seq)
    return sum(e.causal_per_copy if causal else e.per_copy for e in entries if e.group in groups and e.stack != "encoder")


def attention_proj_flops(cfg: ModelConfig, batch: int, seq: int) -> int:
    """One block's Q, K, V and O projections: 2·B·T·d·(2q + 2k)."""
    return _group_sum(cfg, batch, seq, ("attention_proj",), False)


def attention_score_flops(cfg: ModelConfig, batch: int, seq: int, causal: bool = False) -> int:
    """One block's Q·Kᵀ and attention·V: 4·B·T²·q (causal: 2·B·q·T·(T+1))."""
    return _group_sum(cfg, batch, seq, ("attention_scores",), causal)


def attention_flops(cfg: ModelConfig, batch: int, seq: int, causal: bool = False) -> int:
    """One block's whole attention sub-layer: projections + scores."""
    return _group_sum(cfg, batch, seq, SUBLAYER_GROUPS["attention"], causal)


def ffn_flops(cfg: ModelConfig, batch: int, seq: int) -> int:
    """One block's FFN sub-layer: 2·m·B·T·d·f (m = 3 gated, 2 otherwise); a MoE: k experts' worth and the
    router, 2·B·T·(k·m·d·f + d·E)."""
    return _group_sum(cfg, batch, seq, SUBLAYER_GROUPS["ffn"], False)


def lm_head_flops(cfg: ModelConfig, batch: int, seq: int) -> int:
    """The LM head over all T positions: 2·B·T·d·V."""
    return _group_sum(cfg, batch, seq, ("lm_head",), False)


def non_matmul_flops(cfg: ModelConfig, batch: int, seq: int) -> dict[str, int]:
    """Approximate non-matmul FLOPs of one forward pass, by kind (conventions in the module docstring)."""
    return breakdown(cfg, batch, seq).non_matmul_by_kind()


# ---------- crossover: when does attention overtake the FFN? ----------


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
    T >= c / (4q) and T >= (c − 4·d·(q + k)) / (4q). An encoder is never masked: its causal answer is the
    full one. An encoder-decoder: a decoder block's self-attention (cross-attention adds 4·q·T·S more).
    """
    d, q, k, f, m = cfg.d_model, cfg.q_dim, cfg.kv_dim, cfg.ffn_dim, ffn_matrices(cfg)
    ffn_per_token = 2 * cfg.experts_active * m * d * f + (2 * d * cfg.experts if cfg.n_expert else 0)
    scores_bound = Fraction(ffn_per_token, 4 * q)  # T >= this (full square)
    attention_bound = Fraction(ffn_per_token - 4 * d * (q + k), 4 * q)
    if causal and cfg.arch != "encoder":  # each causal inequality reads T + 1 >= 2 × the full-square bound
        if cfg.sliding_window is not None:
            return Crossover(*(_windowed_crossover(4 * q * b, q, cfg.sliding_window) for b in (scores_bound, attention_bound)))
        return Crossover(max(1, math.ceil(2 * scores_bound) - 1), max(1, math.ceil(2 * attention_bound) - 1))
    return Crossover(max(1, math.ceil(scores_bound)), max(1, math.ceil(attention_bound)))


def _windowed_crossover(per_token: Fraction, q: int, window: int) -> int | None:
    """Smallest T with causal windowed scores 4·q·pairs(T) >= per_token·T (see causal_pairs), or None.
    Up to T = W the pairs are T·(T+1)/2: T + 1 >= per_token / (2q). Beyond, pairs = W·(W+1)/2 + (T − W)·W,
    and the inequality reads T·(4qW − per_token) >= 2qW·(W − 1): never when 4qW <= per_token."""
    short = max(1, math.ceil(per_token / (2 * q)) - 1)
    if short <= window:
        return short
    slope = 4 * q * window - per_token
    if slope <= 0:
        return None
    return max(window + 1, math.ceil(Fraction(2 * q * window * (window - 1)) / slope))


# ---------- decoding with a KV cache ----------


def decode_entries(cfg: ModelConfig, batch: int, context: int, src_seq: int | None = None) -> list[MatmulEntry]:
    """The matmuls that generate one token per sequence at context length ``context`` with a KV cache:
    projections, FFN and LM head for 1 token; scores of that token against ``context`` cached keys
    (itself included), so no square and no causal discount. An encoder-decoder's step also scores
    against the src_seq cached cross-attention keys (default: context); the encoder does not run again.
    An encoder generates nothing: ValueError."""
    _check_sizes(batch=batch, context=context)
    if cfg.arch == "encoder":
        raise InputError(f"{cfg.name} is an encoder: it generates no tokens, so it has no decode step")
    keys = cfg.kv_positions(context)  # a sliding window's cache holds the last W positions only
    return matmul_entries(cfg, batch, 1, keys, src=_source_length(cfg, context, src_seq), encoder=False)


def decode_flops(cfg: ModelConfig, batch: int, context: int, src_seq: int | None = None) -> int:
    """FLOPs to generate one token per sequence with a KV cache at context length ``context``."""
    return sum(e.total for e in decode_entries(cfg, batch, context, src_seq))


# ---------- the standard formulas ----------


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
    lookups = _summed(b, "token_embedding", "token_type_embedding", "position_embedding", "lm_head")
    return params_count.active_total(cfg) - lookups


def palm_params(cfg: ModelConfig) -> int:
    """The N of PaLM's 6N (Chowdhery et al. 2022, App. B) as nanoGPT's estimate_mfu and torchtitan apply
    it: every parameter that multiplies an activation. A position table and an untied token embedding
    are lookups and go; a tied embedding stays, counted once, as the LM head (PaLM ties them). Without
    an LM head every token embedding is a lookup. Active parameters for a mixture of experts."""
    b = params_count.breakdown(cfg)
    lookups = _summed(b, "position_embedding", "token_type_embedding")
    if not (cfg.lm_head and cfg.tie_embeddings):
        lookups += _summed(b, "token_embedding")
    return params_count.active_total(cfg) - lookups


def standard_formulas(cfg: ModelConfig, batch: int, seq: int) -> list[FormulaEstimate]:
    """The textbook training-FLOPs formulas, each as its source writes it, for B sequences of T tokens."""
    _check_sizes(batch=batch, seq=seq)
    B, T, D = batch, seq, batch * seq  # D: tokens in the step
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
