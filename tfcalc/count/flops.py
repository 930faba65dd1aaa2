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
positions of Tk, as in decoding or chunked prefill) the count is Tq·(Tk − Tq) + Tq·(Tq+1)/2.

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
from tfcalc.count import params as params_count

GROUPS = ("attention_proj", "attention_scores", "ffn", "lm_head", "embeddings")
SUBLAYER_GROUPS = {"attention": ("attention_proj", "attention_scores"), "ffn": ("ffn",)}

# Non-matmul FLOPs per element (see the module docstring for what each counts).
SOFTMAX_PER_SCORE = 5
NORM_PER_ELEMENT = {("layernorm", True): 7, ("layernorm", False): 6, ("rmsnorm", False): 4}
ACTIVATION_PER_ELEMENT = {"relu": 1, "gelu": 5, "gelu_tanh": 9, "silu": 4}
ROPE_PER_ELEMENT = 3


def ffn_matrices(cfg: ModelConfig) -> int:
    """How many d×f matrices the FFN multiplies by: 3 for a gated FFN (gate, up, down), else 2."""
    return 3 if cfg.gated_ffn else 2


def causal_pairs(queries: int, keys: int) -> int:
    """Unmasked (query, key) pairs when the queries are the last ``queries`` of ``keys`` positions:
    row i (0-based) sees keys - queries + i + 1 keys. queries == keys == T gives T·(T+1)/2."""
    return queries * (keys - queries) + queries * (queries + 1) // 2


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

    component: str  # softmax, norms, activation, rope, residual, bias, positions
    label: str
    per_element: int
    elements: int
    copies: int

    @property
    def total(self) -> int:
        return self.per_element * self.elements * self.copies


def matmul_entries(cfg: ModelConfig, batch: int, queries: int, keys: int | None = None) -> list[MatmulEntry]:
    """Every matmul of a forward pass over ``queries`` new tokens per sequence attending to ``keys``
    positions (keys = queries for a full forward, keys = context with queries = 1 for decoding)."""
    keys = queries if keys is None else keys
    d, q, k, f, L = cfg.d_model, cfg.q_dim, cfg.kv_dim, cfg.ffn_dim, cfg.n_layer
    h, heads, rows = cfg.head_dim, batch * cfg.n_head, batch * queries
    out: list[MatmulEntry] = []

    def linear(component: str, group: str, label: str, n_in: int, n_out: int, copies: int = L) -> None:
        flops = 2 * rows * n_in * n_out
        out.append(MatmulEntry(component, group, label, (rows, n_in, n_out), 1, copies, flops))

    def scores(component: str, label: str, shape: tuple[int, int, int]) -> None:
        causal = 2 * heads * h * causal_pairs(queries, keys)  # 2·h FLOPs per unmasked (query, key) pair
        out.append(MatmulEntry(component, "attention_scores", label, shape, heads, L, causal))

    linear("attn_q", "attention_proj", "Q projection", d, q)
    linear("attn_k", "attention_proj", "K projection", d, k)
    linear("attn_v", "attention_proj", "V projection", d, k)
    scores("attn_qk", "scores Q·Kᵀ", (queries, h, keys))
    scores("attn_av", "attention · V", (queries, keys, h))
    linear("attn_o", "attention_proj", "O projection", q, d)
    if cfg.gated_ffn:
        linear("ffn_gate", "ffn", "FFN gate", d, f)
    linear("ffn_up", "ffn", "FFN up", d, f)
    linear("ffn_down", "ffn", "FFN down", f, d)
    linear("lm_head", "lm_head", "LM head", d, cfg.vocab_size, copies=1)
    return out


def non_matmul_entries(cfg: ModelConfig, batch: int, seq: int) -> list[NonMatmulEntry]:
    """The approximate non-matmul work of a forward pass (conventions in the module docstring)."""
    d, q, k, f, L = cfg.d_model, cfg.q_dim, cfg.kv_dim, cfg.ffn_dim, cfg.n_layer
    tokens, score_elements = batch * seq, batch * cfg.n_head * seq * seq
    norm = NORM_PER_ELEMENT[(cfg.norm, cfg.norm_bias)]
    act = ACTIVATION_PER_ELEMENT[cfg.activation] + (1 if cfg.gated_ffn else 0)
    attn_bias_outputs = q + 2 * k + d if cfg.attn_bias else 0  # qkv and out
    ffn_bias_outputs = (ffn_matrices(cfg) - 1) * f + d if cfg.ffn_bias else 0  # (gate,) up and down
    biased_outputs = attn_bias_outputs + ffn_bias_outputs
    out = [
        NonMatmulEntry("softmax", "softmax (full square)", SOFTMAX_PER_SCORE, score_elements, L),
        NonMatmulEntry("norms", f"{cfg.norm} ×2 per block", norm, tokens * d, 2 * L),
        NonMatmulEntry("activation", f"{cfg.activation}{' · gate' if cfg.gated_ffn else ''}", act, tokens * f, L),
        NonMatmulEntry("residual", "residual adds ×2 per block", 1, tokens * d, 2 * L),
    ]
    if cfg.final_norm:
        out.append(NonMatmulEntry("final_norm", f"final {cfg.norm}", norm, tokens * d, 1))
    if biased_outputs:
        out.append(NonMatmulEntry("bias", "bias adds", 1, tokens * biased_outputs, L))
    if cfg.pos_encoding == "rope":
        out.append(NonMatmulEntry("rope", "RoPE on Q and K", ROPE_PER_ELEMENT, tokens * (q + k), L))
    elif cfg.pos_encoding in ("learned", "sinusoidal"):
        out.append(NonMatmulEntry("positions", f"{cfg.pos_encoding} positions added", 1, tokens * d, 1))
    elif cfg.pos_encoding == "alibi":
        out.append(NonMatmulEntry("positions", "ALiBi bias on the scores", 1, score_elements, L))
    return out


@dataclass(frozen=True)
class FlopBreakdown:
    """The FLOPs of one forward pass of B sequences of T tokens, by matmul and by group."""

    cfg: ModelConfig
    batch: int
    seq: int
    entries: tuple[MatmulEntry, ...]
    non_matmul: tuple[NonMatmulEntry, ...]

    @property
    def tokens(self) -> int:
        return self.batch * self.seq

    def components(self, causal: bool = False) -> dict[str, int]:
        """{component: FLOPs over the whole model}, in model order."""
        return {e.component: e.causal_total if causal else e.total for e in self.entries}

    def per_layer(self, causal: bool = False) -> dict[str, int]:
        """{attention_proj, attention_scores, ffn}: one block's FLOPs."""
        out = {"attention_proj": 0, "attention_scores": 0, "ffn": 0}
        for e in self.entries:
            if e.group in out:
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
        return {e.component: e.total for e in self.non_matmul}

    @property
    def non_matmul_total(self) -> int:
        return sum(e.total for e in self.non_matmul)

    def per_token(self, flops: int) -> int:
        """flops / (B·T). Exact: every term above carries a factor B·T (the scores B·T², causal B·T·(T+1))."""
        if flops % self.tokens:
            raise AssertionError(f"{flops} FLOPs do not divide over {self.tokens} tokens")
        return flops // self.tokens


def _check_sizes(**sizes: int) -> None:
    for name, value in sizes.items():
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{name} must be a positive integer; got {value!r}")


def breakdown(cfg: ModelConfig, batch: int, seq: int) -> FlopBreakdown:
    _check_sizes(batch=batch, seq=seq)
    return FlopBreakdown(
        cfg, batch, seq, tuple(matmul_entries(cfg, batch, seq)), tuple(non_matmul_entries(cfg, batch, seq))
    )


def forward_flops(cfg: ModelConfig, batch: int, seq: int) -> int:
    """Matmul FLOPs of one forward pass, scores over the full T×T square."""
    return breakdown(cfg, batch, seq).forward


def forward_flops_causal(cfg: ModelConfig, batch: int, seq: int) -> int:
    """Matmul FLOPs of one forward pass, scores over the T·(T+1)/2 unmasked elements only."""
    return breakdown(cfg, batch, seq).forward_causal


TRAINING_MULTIPLIER = 3  # forward + backward (2 × forward)
RECOMPUTE_MULTIPLIER = 4  # ... + the forward run again by full activation recompute


def training_flops(cfg: ModelConfig, batch: int, seq: int, recompute: bool = False, causal: bool = False) -> int:
    """One training step on B sequences of T tokens: 3 × forward, or 4 × with full activation recompute."""
    fwd = forward_flops_causal(cfg, batch, seq) if causal else forward_flops(cfg, batch, seq)
    return (RECOMPUTE_MULTIPLIER if recompute else TRAINING_MULTIPLIER) * fwd


def _group_sum(cfg: ModelConfig, batch: int, seq: int, groups: tuple[str, ...], causal: bool) -> int:
    _check_sizes(batch=batch, seq=seq)
    return sum(e.causal_per_copy if causal else e.per_copy for e in matmul_entries(cfg, batch, seq) if e.group in groups)


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
    """One block's FFN sub-layer: 2·m·B·T·d·f (m = 3 gated, 2 otherwise)."""
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

    scores_vs_ffn: int  # Q·Kᵀ + attention·V >= FFN
    attention_vs_ffn: int  # the whole attention sub-layer (projections + scores) >= FFN


def crossover_seq(cfg: ModelConfig, causal: bool = False) -> Crossover:
    """Smallest integer T >= 1 at which per-layer attention FLOPs reach the FFN's (batch cancels).

    Per layer and sequence, with m = 3 (gated) or 2 FFN matrices:
      scores S(T) = 4·q·T²  (causal: 2·q·T·(T+1)),  projections P(T) = 2·d·T·(2q + 2k),  FFN F(T) = 2·m·d·f·T.
      S >= F  <=>  T >= m·d·f / (2q)                  (causal: T + 1 >= m·d·f / q)
      S + P >= F  <=>  T >= d·(m·f − 2q − 2k) / (2q)  (causal: T + 1 >= d·(m·f − 2q − 2k) / q)
    GPT-3 175B (q = k = d = 12288, f = 4d, m = 2): 4·d = 49,152 and 2·d = 24,576 (causal 98,303 and
    49,151). When the projections alone already reach the FFN (m·f <= 2q + 2k), the answer is T = 1.
    """
    d, q, k, f, m = cfg.d_model, cfg.q_dim, cfg.kv_dim, cfg.ffn_dim, ffn_matrices(cfg)
    scores_bound = Fraction(m * d * f, 2 * q)  # T >= this (full square)
    attention_bound = Fraction(d * (m * f - 2 * q - 2 * k), 2 * q)
    if causal:  # each causal inequality reads T + 1 >= 2 × the full-square bound
        return Crossover(max(1, math.ceil(2 * scores_bound) - 1), max(1, math.ceil(2 * attention_bound) - 1))
    return Crossover(max(1, math.ceil(scores_bound)), max(1, math.ceil(attention_bound)))


# ---------- decoding with a KV cache ----------


def decode_entries(cfg: ModelConfig, batch: int, context: int) -> list[MatmulEntry]:
    """The matmuls that generate one token per sequence at context length ``context`` with a KV cache:
    projections, FFN and LM head for 1 token; scores of that token against ``context`` cached keys
    (itself included), so no square and no causal discount."""
    _check_sizes(batch=batch, context=context)
    return matmul_entries(cfg, batch, 1, context)


def decode_flops(cfg: ModelConfig, batch: int, context: int) -> int:
    """FLOPs to generate one token per sequence with a KV cache at context length ``context``."""
    return sum(e.total for e in decode_entries(cfg, batch, context))


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


def kaplan_params(cfg: ModelConfig) -> int:
    """Kaplan et al. 2020, sec. 2.1: N is the number of parameters "excluding all vocabulary and
    positional embeddings": the token embedding, the position embedding and an untied LM head go."""
    b = params_count.breakdown(cfg)
    return params_count.total(cfg) - b["token_embedding"] - b.get("position_embedding", 0) - b["lm_head"]


def palm_params(cfg: ModelConfig) -> int:
    """The N of PaLM's 6N (Chowdhery et al. 2022, App. B) as nanoGPT's estimate_mfu and torchtitan apply
    it: every parameter that multiplies an activation. A position table and an untied token embedding
    are lookups and go; a tied embedding stays, counted once, as the LM head (PaLM ties them)."""
    b = params_count.breakdown(cfg)
    lookups = b.get("position_embedding", 0) + (0 if cfg.tie_embeddings else b["token_embedding"])
    return params_count.total(cfg) - lookups


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
