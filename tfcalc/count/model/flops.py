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

Crossover, where attention's FLOPs reach the FFN's (T = 4·d and 2·d for GPT-3): derived in
tfcalc.count.model.crossover. Non-matmul work (softmax, norms, activations, RoPE, bias adds, ...):
tfcalc.count.model.non_matmul, apart.

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
   the cross-attention K and V (the cross KV cache): one step does neither again. A decoder-only stack
   with cross_attention (GPT-2's add_cross_attention) does the same against S external states;
10. a shared expert (Qwen2-MoE) runs on every token: 2·m·B·T·d·f_s, its gate 2·B·T·d; with a capacity
    factor c (Fedus et al. 2022, sec. 2.2) each expert multiplies a buffer of C = ceil(c·k·B·T / E) rows,
    2·m·E·C·d·f whatever the routing: padding when c > 1, dropped tokens when c < 1;
11. BERT's MLM-head transform: 2·B·T·d·d before the LM head. No matmul changes with sandwich and Q/K
    norms, parallel blocks, partial rotary, soft-capping, T5's bias (a lookup), OPT's offset; a sliding
    window changes the causal count only (``causal_pairs`` per layer: Gemma 2 alternates two kinds);
12. latent attention (DeepSeek's MLA, tfcalc.architecture.latent): a forward pass in the naive form (W_kvb
    over every key), a decode step in the absorbed form the module runs then (tfcalc.model.latent_absorbed).

Public names (the benchmark imports these), each taking a ``Workload`` (tfcalc.workload: batch B, seq T,
an encoder-decoder's src_seq S): ``breakdown(cfg, w) -> FlopBreakdown`` (every matmul a ``MatmulEntry``, every
non-matmul term a ``NonMatmulEntry``; ``.per_layer()``, ``.totals()``, ``.components()``, ``.forward``,
``.forward_causal``, ``.non_matmul_total``); ``forward_flops``, ``forward_flops_causal``, ``training_flops(cfg, w,
recompute=False)``; one block's ``attention_proj_flops``, ``attention_score_flops``, ``attention_flops`` (projections
+ scores), ``ffn_flops``, and ``lm_head_flops``;
``non_matmul_flops``; ``decode_flops(cfg, w)`` (one token per sequence against w.seq cached positions);
crossover_seq and standard_formulas (re-exported from tfcalc.count.model.crossover and .formulas)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from fractions import Fraction

from tfcalc.architecture import Head, Linear, MoE, Stack
from tfcalc.architecture.mixer import Mixer, role_of
from tfcalc.config import ModelConfig
from tfcalc.count.model.crossover import Crossover, crossover_seq  # noqa: F401 (re-exported: part of this API)
from tfcalc.count.model.formulas import FormulaEstimate, kaplan_params, palm_params, standard_formulas  # noqa: F401 (API)
from tfcalc.count.model.non_matmul import non_matmul_entries
from tfcalc.count.model.terms import NonMatmulEntry, causal_pairs, check_sizes, workload_sizes  # noqa: F401 (re-exported)
from tfcalc.errors import InputError
from tfcalc.workload import Workload

GROUPS = ("attention_proj", "attention_scores", "cross_attention_proj", "cross_attention_scores", "ffn", "pooler",
          "lm_head", "embeddings")
SUBLAYER_GROUPS = {"attention": ("attention_proj", "attention_scores"), "ffn": ("ffn",)}
BLOCK_GROUPS = ("attention_proj", "attention_scores", "ffn")
CROSS_GROUPS = ("cross_attention_proj", "cross_attention_scores")


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
    # the causal FLOPs over all copies when they differ by copy (Gemma 2's windowed and full layers);
    # causal_per_copy is then the first layer's
    causal_sum: int | None = None
    state_read: int = 0  # generation-state elements the copies read (tfcalc.architecture.mixer.Mixing.state_read)
    state_dtype: str | None = None  # the state's dtype; None: the cache dtype
    # a position-mixing matmul (a mixer's ``mixing()``: attention's Q·Kᵀ and ·V, a scan's products): no
    # weights, split by heads under TP; ``io``: the activation elements it reads and writes over all copies
    mixing: bool = False
    io: int = 0
    part: str = ""  # the reports' group: its mixer's declared role, "ssm_scan" (tfcalc.count.model.parts); "": group

    @property
    def per_copy(self) -> int:
        m, k, n = self.shape
        return 2 * m * k * n * self.count

    @property
    def total(self) -> int:
        return self.per_copy * self.copies

    @property
    def causal_total(self) -> int:
        return self.causal_per_copy * self.copies if self.causal_sum is None else self.causal_sum


def matmul_entries(
    cfg: ModelConfig, batch: int, queries: int, keys: int | None = None, src: int | None = None,
    encoder: bool = True, absorbed: bool = False,
) -> list[MatmulEntry]:
    """Every matmul of a forward pass over ``queries`` new tokens per sequence attending to ``keys``
    positions (keys = queries for a full forward, keys = context with queries = 1 for decoding): a fold
    over ``cfg.architecture`` (tfcalc.architecture), each layer kind's matmuls times the layers of it.

    An encoder-decoder's encoder reads ``src`` tokens per sequence (default: queries), and every decoder
    block's cross-attention scores its queries against them. ``encoder=False`` leaves out what a decode
    step reuses: the encoder, and the cross-attention K and V projections (the cross KV cache).
    ``absorbed``: a decode step's form where a mixer has one (step 12: ``decode_linears``, ``decode_score_dims``)."""
    keys = queries if keys is None else keys
    arch = cfg.architecture
    out: list[MatmulEntry] = []
    if arch.kind == "encoder-decoder":
        src = queries if src is None else src
        if encoder:
            out += _stack_matmuls(arch.stacks[0], batch, src, src, "encoder")
        out += _stack_matmuls(arch.output, batch, queries, keys, "decoder", src=src, cross_kv=encoder,
                              absorbed=absorbed)
    else:
        src = (queries if src is None else src) if arch.has_cross_attention else None
        out += _stack_matmuls(arch.output, batch, queries, keys, src=src, cross_kv=encoder, absorbed=absorbed)
    rows = batch * queries  # OPT-350m's project_in, Gemma 4's per-layer projection: (B·T, k) @ (k, n)
    for lin in arch.output.embeddings.linears():
        out.append(MatmulEntry(lin.name, lin.role, lin.label, (rows, lin.n_in, lin.n_out), lin.count, 1,
                               2 * rows * lin.n_in * lin.n_out * lin.count))
    return out + _head_matmuls(arch.head, batch, batch * queries, "decoder" if arch.kind == "encoder-decoder" else "")


def _head_matmuls(head: Head, batch: int, rows: int, stack: str) -> list[MatmulEntry]:
    """BERT's pooler (the first token of each sequence) and MLM transform, and the LM head over all rows."""
    d, n = head.d_model, head.hyper.streams if head.hyper is not None else 0  # DeepSeek-V4's hc_head: n·d -> n
    out = [MatmulEntry("hc_head", "lm_head", "hc head", (rows, n * d, n), 1, 1, 2 * rows * n * d * n, stack)][:n]
    if head.pooler:  # BERT: tanh(W h[:, 0] + b)
        out.append(MatmulEntry("pooler", "pooler", "pooler", (batch, d, d), 1, 1, 2 * batch * d * d, stack))
    if head.transform is not None:  # BERT's MLM head: dense d -> d before the vocabulary projection
        flops = 2 * rows * d * d
        out.append(MatmulEntry("lm_head_transform", "lm_head", "LM head transform", (rows, d, d), 1, 1, flops, stack))
    if head.project_dim is not None:  # OPT-350m's project_out: (B·T, d) @ (d, p) before the vocabulary
        p = head.project_dim
        out.append(MatmulEntry("lm_head_project_out", "lm_head", "LM head projection out", (rows, d, p), 1, 1,
                               2 * rows * d * p, stack))
    if head.lm_head:
        V, k = head.vocab_size, head.in_dim
        out.append(MatmulEntry("lm_head", "lm_head", "LM head", (rows, k, V), 1, 1, 2 * rows * k * V, stack))
    return out


def _stack_matmuls(
    stack: Stack, batch: int, queries: int, keys: int, stack_name: str = "", src: int | None = None,
    cross_kv: bool = True, absorbed: bool = False,
) -> list[MatmulEntry]:
    """The matmuls of one stack's blocks (steps 1-12 of the module docstring), each layer kind's times the
    layers of that kind; cross-attention against ``src`` sources where the blocks have it."""
    prefix, stack_label = ("encoder_" if stack_name == "encoder" else ""), (f"{stack_name} " if stack_name else "")
    rows = batch * queries
    entries: dict[tuple[str, tuple[int, int, int], str], MatmulEntry] = {}

    def add(name: str, group: str, label: str, shape: tuple[int, int, int], count: int, layers: int,
            causal_per_copy: int, state: int = 0, state_dtype: str | None = None, io: int | None = None, part=None):
        key = (prefix + name, shape, part or group)  # two mixers' matmuls of one name and shape stay apart
        if key in entries:  # the same matmul in another layer kind: more copies, its causal FLOPs summed
            e = entries[key]
            entries[key] = replace(e, copies=e.copies + layers, causal_sum=e.causal_total + causal_per_copy * layers,
                                   state_read=e.state_read + state * layers, io=e.io + (io or 0) * layers)
        else:
            entries[key] = MatmulEntry(prefix + name, group, stack_label + label, shape, count, layers,
                                       causal_per_copy, stack_name, state_read=state * layers, state_dtype=state_dtype,
                                       mixing=io is not None, io=(io or 0) * layers, part=part or group)

    def linear(m: Linear, layers: int, moe: MoE | None) -> None:
        n = {"tokens": rows, "sources": batch * (src or 0), "first": batch, "keys": batch * keys,
             "routed": moe.routed_rows(rows) if moe else rows}[m.rows]
        add(m.name, m.role, m.label, (n, m.n_in, m.n_out), m.count, layers, 2 * n * m.n_in * m.n_out * m.count,
            part=m.part)

    def mixing(mixer: Mixer, prefix: str, group: str, label: str, n_keys: int, layers: int) -> None:
        # the mixer's position-mixing matmuls of one sequence (tfcalc.architecture.mixer), times the batch: full square
        # as FlopCounterMode sees them, causal over the pairs its mask leaves; a decode step's in its form (step 12)
        for mm in mixer.mixing(queries, n_keys, step=absorbed):
            text = mm.label if prefix == "attn_" or mm.name != "av" else "· V"
            add(prefix + mm.name, group, label + text, mm.shape, batch * mm.copies, layers, batch * mm.causal_flops,
                0 if stack_name == "encoder" else batch * mm.state_read, mm.state_dtype,  # an encoder keeps none
                batch * mm.io_elements, role_of(mixer).mixing if prefix == "attn_" else group)

    for block, layers in stack.kinds():
        moe = block.ffn if block.is_moe else None
        linears = block.linears(cross_kv, step=absorbed)  # a decode step's form (step 12)
        if moe is not None:  # the label names the capacity buffers at this many tokens
            linears = [m for m in linears if m not in moe.linears()] + moe.linears(rows)
        # the mixer's mixing sits before its output projection, the last of its linears (tfcalc.architecture.mixer)
        out = max(0, len(block.mixer.linears(step=absorbed)) - 1)
        for i, m in enumerate(linears):
            if i == out:
                mixing(block.mixer, "attn_", "attention_scores", "", keys, layers)
            if m.name == "cross_attn_o":
                mixing(block.cross_attention, "cross_attn_", "cross_attention_scores", "cross-attention ", src,
                       layers)
            linear(m, layers, moe)
    return list(entries.values())


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
        """{component: FLOPs over the whole model}, in model order (a matmul of two shapes summed)."""
        out: dict[str, int] = {}
        for e in self.entries:
            out[e.component] = out.get(e.component, 0) + (e.causal_total if causal else e.total)
        return out

    def per_layer(self, causal: bool = False) -> dict[str, int]:
        """{attention_proj, attention_scores, ffn}: one block's FLOPs; an encoder-decoder's decoder block,
        with its cross_attention_proj and cross_attention_scores."""
        keys = BLOCK_GROUPS + (CROSS_GROUPS if self.cfg.architecture.kind == "encoder-decoder" else ())
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
        """flops / (B·T), per output token. Exact for a decoder or an encoder without a pooler: every term
        carries a factor B·T (the scores B·T², causal B·T·(T+1)). Rounded to the nearest FLOP where work is
        not per output token: BERT's pooler, an encoder-decoder's encoder and cross-attention."""
        return round(Fraction(flops, self.tokens))


def _source_length(cfg: ModelConfig, seq: int, src_seq: int | None) -> int | None:
    """An encoder-decoder's source length, or the states a stack with cross_attention reads (default: seq)."""
    if not cfg.architecture.has_cross_attention:  # no block reads a source
        if src_seq is not None:
            raise InputError(f"a source length applies to encoder-decoder models only, or to stacks with "
                             f"cross_attention ({cfg.name} is {cfg.architecture.kind})")
        return None
    if src_seq is not None:
        check_sizes(src_seq=src_seq)
    return seq if src_seq is None else src_seq


def breakdown(cfg: ModelConfig, w: Workload) -> FlopBreakdown:
    """w.batch sequences of w.seq tokens (an encoder-decoder: T target tokens, w.src_seq source ones, default T)."""
    batch, seq = workload_sizes(w)
    src = _source_length(cfg, seq, w.src_seq)
    return FlopBreakdown(cfg, batch, seq, tuple(matmul_entries(cfg, batch, seq, src=src)),
                         tuple(non_matmul_entries(cfg, batch, seq, src)), src)


def forward_flops(cfg: ModelConfig, w: Workload) -> int:
    """Matmul FLOPs of one forward pass, scores over the full T×T square."""
    return breakdown(cfg, w).forward


def forward_flops_causal(cfg: ModelConfig, w: Workload) -> int:
    """Matmul FLOPs of one forward pass, scores over the T·(T+1)/2 unmasked elements only (an encoder's and
    cross-attention's scores, never masked, whole)."""
    return breakdown(cfg, w).forward_causal


TRAINING_MULTIPLIER = 3  # forward + backward (2 × forward)
RECOMPUTE_MULTIPLIER = 4  # ... + the forward run again by full activation recompute


def training_flops(cfg: ModelConfig, w: Workload, recompute: bool = False, causal: bool = False) -> int:
    """One training step on B sequences of T tokens: 3 × forward, or 4 × with full activation recompute."""
    fwd = (forward_flops_causal if causal else forward_flops)(cfg, w)
    return (RECOMPUTE_MULTIPLIER if recompute else TRAINING_MULTIPLIER) * fwd


def _group_sum(cfg: ModelConfig, w: Workload, groups: tuple[str, ...], causal: bool) -> int:
    """One block of the output stack (an encoder-decoder's decoder, source length = seq); causal, where the
    layers differ (Gemma 2), their mean rounded down: it reaches n exactly when their sum reaches n·L."""
    batch, seq = workload_sizes(w)
    chosen = [e for e in matmul_entries(cfg, batch, seq) if e.group in groups and e.stack != "encoder"]
    if not causal:
        return sum(e.per_copy for e in chosen)
    return sum(e.causal_total for e in chosen) // cfg.architecture.output.n_layer


def attention_proj_flops(cfg: ModelConfig, w: Workload) -> int:
    """One block's Q, K, V and O projections: 2·B·T·d·(2q + 2k)."""
    return _group_sum(cfg, w, ("attention_proj",), False)


def attention_score_flops(cfg: ModelConfig, w: Workload, causal: bool = False) -> int:
    """One block's Q·Kᵀ and attention·V: 4·B·T²·q (causal: 2·B·q·T·(T+1))."""
    return _group_sum(cfg, w, ("attention_scores",), causal)


def attention_flops(cfg: ModelConfig, w: Workload, causal: bool = False) -> int:
    """One block's whole attention sub-layer: projections + scores."""
    return _group_sum(cfg, w, SUBLAYER_GROUPS["attention"], causal)


def ffn_flops(cfg: ModelConfig, w: Workload) -> int:
    """One block's FFN sub-layer: 2·m·B·T·d·f (m = 3 gated, 2 otherwise); a MoE: k experts' worth and the
    router, 2·B·T·(k·m·d·f + d·E)."""
    return _group_sum(cfg, w, SUBLAYER_GROUPS["ffn"], False)


def lm_head_flops(cfg: ModelConfig, w: Workload) -> int:
    """The LM head over all T positions: 2·B·T·d·V."""
    return _group_sum(cfg, w, ("lm_head",), False)


def non_matmul_flops(cfg: ModelConfig, w: Workload) -> dict[str, int]:
    """Approximate non-matmul FLOPs of one forward pass, by kind (conventions in the module docstring)."""
    return breakdown(cfg, w).non_matmul_by_kind()


def decode_entries(cfg: ModelConfig, w: Workload) -> list[MatmulEntry]:
    """The matmuls that generate one token per sequence at context length ``w.seq`` with a KV cache:
    projections, FFN and LM head for 1 token; scores of that token against the ``w.seq`` cached keys
    (itself included), so no square and no causal discount. An encoder-decoder's step also scores
    against the w.src_seq cached cross-attention keys (default: the context); the encoder does not run
    again. A latent attention's step in its absorbed form (step 12). An encoder generates nothing: InputError."""
    check_sizes(batch=w.batch, context=w.seq)
    if cfg.architecture.kind == "encoder":
        raise InputError(f"{cfg.name} is an encoder: it generates no tokens, so it has no decode step")
    # one query: its causal pairs are the keys it reads, at most W in a windowed layer (terms.causal_pairs)
    src = _source_length(cfg, w.seq, w.src_seq)
    return matmul_entries(cfg, w.batch, 1, w.seq, src=src, encoder=False, absorbed=True)


def decode_flops(cfg: ModelConfig, w: Workload) -> int:
    """FLOPs to generate one token per sequence with a KV cache at context length ``w.seq``."""
    return sum(e.causal_total for e in decode_entries(cfg, w))
