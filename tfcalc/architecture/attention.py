"""Attention: multi-head, grouped-query or multi-query (Shazeer 2019; Ainslie et al. 2023), self or cross.

One ``Attention`` describes one layer's attention; every figure reads it (tensors, matmuls, KV cache):
H = n_head query heads of h = head_dim channels for Q and K and h_v = v_head_dim for V, and G = n_kv_head
key/value heads each serving H / G query heads.

1. projections: Q d -> H·h, K d -> G·h, V d -> G·h_v, O H·h_v -> d (biases as flagged: Qwen2 has Q/K/V
   biases and no O bias, modeling_qwen2.py);
2. scores Q·Kᵀ, H per token and key, h wide; attention·V the same, h_v wide;
3. KV cache, per layer and cached position: K (G·h) and V (G·h_v) elements; a sliding window W keeps
   a ring of W slots: a decode step writes its own K and V into the ring first, then reads the W keys it
   sees (its own and the W - 1 before it) over the ring's fixed span (Mistral's rolling buffer, Jiang et
   al. 2023, sec. 2; transformers' StaticSlidingWindowLayer allocates the same W, cache_utils.py); chunked
   attention (Llama 4's attention_chunk_size C, modeling_llama4.py) lets a query see the keys of its own
   chunk of C positions only, so its ring holds C slots, one chunk;
4. Q/K norms (Qwen3, modeling_qwen3.py): one norm h wide for Q and one for K, shared by the heads; or
   (``qk_norm_whole``, OLMo 2, modeling_olmo2.py) one over the whole Q projection, H·h wide, and one over
   K, G·h wide;
5. attention sinks (gpt-oss, modeling_gpt_oss.py ``sinks``): one learned logit per query head;
6. an output gate (Qwen3-Next, modeling_qwen3_next.py Qwen3NextAttention): Q's projection is 2·H·h wide,
   each head's h queries then its h gates; the attention output times sigmoid(gate) before O;
7. V from K's projection (Gemma 4's global layers, attention_k_eq_v, modeling_gemma4.py Gemma4TextAttention): no
   V weight and no V projection; V is K's projection before K's norm and RoPE, so both are still cached; and a
   norm over each V head without a weight (Gemma 4's v_norm), h_v wide;
8. K and V shared across layers (Gemma 4's and Gemma 3n's num_kv_shared_layers, modeling_gemma4.py
   kv_sharing_modes): a ``reader`` layer has no K or V projection, no K norm and no cache of its own: it attends
   over the K and V of the last earlier ``source`` layer of its own kind (local or global), the very tensors that
   layer attends over (at a decode step, its cache's span). The reader's score matmuls read the source's cache
   again; its state is nothing.

Both answer the token-mixer protocol (tfcalc.architecture.mixer): ``weights``, ``linears``, ``mixing`` (step 2
as the score matmuls of one sequence, full square and causal), ``state`` (step 3: K and V growing with the
context, capped by the window or the chunk), ``tp_widths`` and ``capabilities`` -- every fold calls only
those. Latent attention (DeepSeek-V2, Liu et al. 2024, sec. 2.1) is another kind, not a flag of this one: a
class of its own beside this one answering the same protocol. Pure Python: no torch, typer or rich here.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Literal, Optional

from tfcalc.architecture import saved
from tfcalc.architecture.mixer import ATTENTION, Capabilities, EagerOp, Elementwise, Mixing, StateTensor
from tfcalc.architecture.norm import Norm
from tfcalc.architecture.rope import RopeScaling
from tfcalc.architecture.tensors import Linear, Weight
from tfcalc.errors import InputError


def causal_pairs(queries: int, keys: int, window: int | None = None, chunk: int | None = None) -> int:
    """Unmasked (query, key) pairs when the queries are the last ``queries`` of ``keys`` positions:
    row i (0-based) sees keys - queries + i + 1 keys. queries == keys == T gives T·(T+1)/2. With a
    sliding window W a query at position p sees min(p + 1, W) keys: the sum of min(n, W) over
    n = keys - queries + 1 .. keys. With chunks of C (Llama 4) a query at p sees (p mod C) + 1 keys."""
    if chunk is not None:
        return _chunk_pairs(keys, chunk) - _chunk_pairs(keys - queries, chunk)
    if window is None:
        return queries * (keys - queries) + queries * (queries + 1) // 2
    lo, hi = keys - queries + 1, keys  # each query's visible keys without the window: n = lo .. hi
    top = min(hi, window)
    below = (top * (top + 1) - (lo - 1) * lo) // 2 if lo <= top else 0  # n <= W: n keys
    return below + window * (hi - max(lo - 1, window)) if hi > window else below


def _chunk_pairs(n: int, chunk: int) -> int:
    """Σ_{p < n} ((p mod C) + 1): n // C whole chunks of C·(C+1)/2 pairs, then r = n mod C rows of 1..r."""
    whole, r = divmod(n, chunk)
    return whole * chunk * (chunk + 1) // 2 + r * (r + 1) // 2


def score_mixing(heads: int, h: int, hv: int, queries: int, keys: int, pairs: int, k_state: int,
                 v_state: int) -> list[Mixing]:
    """Step 2 for one sequence: Q·Kᵀ, (queries, h) @ (h, keys), and attention·V, (queries, keys) @ (keys, h_v),
    per head; 2·h (2·h_v) FLOPs per unmasked pair, ``pairs`` of them per head. Latent attention's too.
    The state read (a fused kernel reads each cached position once): ``k_state`` (``v_state``) elements per
    position over the keys, or, for one query (a decode step), over the keys it pairs with (a window's W)."""
    read = pairs if queries == 1 else keys
    # one fused kernel (FlashAttention): Q read by Q·Kᵀ, the output written by attention·V, the scores on chip
    return [Mixing("qk", "scores Q·Kᵀ", (queries, h, keys), heads, 2 * heads * h * pairs, k_state * read,
                   io=heads * queries * h),
            Mixing("av", "attention · V", (queries, keys, hv), heads, 2 * heads * hv * pairs, v_state * read,
                   io=heads * queries * hv)]


@dataclass(frozen=True)
class Attention:
    d_model: int
    n_head: int
    n_kv_head: int
    head_dim: int
    v_head_dim: Optional[int] = None  # None: = head_dim
    kind: Literal["self", "cross"] = "self"  # cross: K and V from other states (an encoder's output)
    causal: bool = True  # self-attention in a decoder; an encoder's and cross-attention's see every key
    window: Optional[int] = None  # sliding window: each query sees at most this many keys, itself included
    chunk: Optional[int] = None  # chunked attention: a query sees the keys of its own chunk of this many positions
    rope_theta: Optional[float] = None  # rotary base (Su et al. 2021); None: no rotary in this layer (NoPE)
    rope_dim: int = 0  # channels of each head RoPE rotates (partial rotary, GPT-NeoX's rotary_ndims)
    # how its frequencies are stretched (tfcalc.architecture.rope: YaRN, linear, llama3); None: unscaled.
    # A function of the position: no count reads it, the model's rotary tables do
    rope_scaling: Optional[RopeScaling] = None
    qk_norm: Optional[Norm] = None  # its kind and eps; h wide, or the projection's width (qk_norm_whole)
    qk_norm_whole: bool = False
    qk_norm_after_rope: bool = False  # Llama 4 normalizes the rotated Q and K (modeling_llama4.py)
    # Llama 4's attention temperature on NoPE layers (arXiv 2501.19399): Q × (1 + s·log(1 + floor((p + 1) / f)))
    # at position p, (f, s) = (floor_scale, attn_scale); a function of the position only, no count changes
    temperature: Optional[tuple[int, float]] = None
    role = ATTENTION  # what the reports call its parts (tfcalc.architecture.mixer, 10.)
    scale: Optional[float] = None  # None: 1/sqrt(head_dim)
    softcap: Optional[float] = None  # scores -> c·tanh(scores / c) (Gemma 2: 50)
    sinks: bool = False
    qkv_bias: bool = False
    o_bias: bool = False
    qk_norm_heads: bool = False  # the Q/K norms' weights per head, (n_head | n_kv_head, h) (Cohere's use_qk_norm)
    # step 6: the attention output times sigmoid(gate), the gate H·h more rows of Q's projection, per head
    # [q | gate] (Qwen3NextAttention, modeling_qwen3_next.py: q_proj is 2·H·h wide), before O
    output_gate: bool = False
    v_from_k: bool = False  # step 7: V is K's projection (no V weight)
    v_norm: Optional[Norm] = None  # step 7: each V head normed (Gemma 4: RMS, no weight)
    kv_share: Optional[Literal["source", "reader"]] = None  # step 8: its K/V read by later layers, or theirs read

    def __post_init__(self) -> None:
        for name in ("d_model", "n_head", "n_kv_head", "head_dim"):
            if getattr(self, name) < 1:
                raise InputError(f"attention {name} must be positive; got {getattr(self, name)}")
        if self.n_kv_head > self.n_head or self.n_head % self.n_kv_head:
            raise InputError(f"n_head ({self.n_head}) must be a multiple of n_kv_head ({self.n_kv_head}): "
                             "each key/value head serves a whole group of query heads")
        if self.window is not None and (self.window < 1 or not self.causal or self.kind == "cross"):
            raise InputError("a sliding window applies to causal self-attention, and is at least 1 key")
        if self.chunk is not None and (self.chunk < 1 or not self.causal or self.kind == "cross"
                                       or self.window is not None):
            raise InputError("chunked attention applies to causal self-attention without a sliding window, "
                             "and a chunk is at least 1 key")
        if self.qk_norm_whole and self.qk_norm is None:
            raise InputError("qk_norm_whole says how wide the Q/K norms are: it needs Q/K norms")
        if self.rope_theta is None and (self.rope_dim or self.rope_scaling is not None):
            raise InputError("rope_dim and rope scaling need a rotary base (rope_theta)")
        if self.kv_share is not None and (self.kind != "self" or self.output_gate or self.qk_norm_whole
                                          or self.qk_norm_heads or self.qk_norm_after_rope or self.temperature):
            raise InputError("K/V shared across layers is built for self-attention with Q/K norms per head (Gemma "
                             "4's), without output gates or attention temperatures")
        if self.v_from_k and (self.v_dim != self.head_dim or self.kind != "self"):
            raise InputError("V read from K's projection needs self-attention with V heads as wide as K's")
        if self.rope_dim % 2 or self.rope_dim > self.head_dim:
            raise InputError(f"rope rotates pairs of a head's channels: rope_dim ({self.rope_dim}) must be even "
                             f"and at most d_head ({self.head_dim})")

    @property
    def v_dim(self) -> int:
        """Channels of each head's V (and of its attention output)."""
        return self.head_dim if self.v_head_dim is None else self.v_head_dim

    @property
    def q_width(self) -> int:
        return self.n_head * self.head_dim

    @property
    def q_rows(self) -> int:
        """Rows of Q's projection: the queries, and each head's output gate beside them (step 6)."""
        return self.q_width * (2 if self.output_gate else 1)

    @property
    def k_width(self) -> int:
        return self.n_kv_head * self.head_dim

    @property
    def v_width(self) -> int:
        return self.n_kv_head * self.v_dim

    @property
    def out_width(self) -> int:
        """Width the O projection reads: every query head's attention output."""
        return self.n_head * self.v_dim

    def weights(self) -> list[Weight]:
        """Q, K, V, O weights and biases (model order), then the Q/K norms and sinks (step 1, 4, 5)."""
        d, role = self.d_model, "attention" if self.kind == "self" else "cross_attention"
        label = "attention" if self.kind == "self" else "cross-attention"
        # self-attention stores [Q | K | V] as one tensor, cross-attention Q alone and [K | V] (encoder side)
        fused = {"q": "qkv", "k": "qkv", "v": "qkv"} if self.kind == "self" else {"q": None, "k": "kv", "v": "kv"}
        out: list[Weight] = []
        parts = (("q", self.q_rows), ("k", self.k_width)) + (() if self.v_from_k else (("v", self.v_width),))
        parts = parts[:1] if self.reader else parts  # step 8: a reader projects Q alone
        for part, width in parts:
            name = f"{label} {part.upper()}{' and output gate' if part == 'q' and self.output_gate else ''}"
            out.append(Weight(f"{part}_weight", (width, d), role, f"{name} weight", "rows", fused[part]))
            if self.qkv_bias:
                out.append(Weight(f"{part}_bias", (width,), role, f"{name} bias", "rows", fused[part]))
        out.append(Weight("o_weight", (d, self.out_width), role, f"{label} O weight", "cols"))
        if self.o_bias:  # added once after the row-parallel reduction: whole on every rank
            out.append(Weight("o_bias", (d,), role, f"{label} O bias"))
        if self.qk_norm is not None and self.qk_norm_heads:  # one norm's weights per head, h channels each
            out += [Weight(f"{n}_norm_{w.name.rpartition('_')[2]}", (heads, *w.shape), "norms", f"{label} {n.upper()} "
                           f"norm {w.name.rpartition('_')[2]} (per head)", "rows")  # TP: split with the heads
                    for n, heads in (("q", self.n_head), ("k", self.n_kv_head))
                    for w in self.qk_norm.weights("norm", "norm")]
        elif self.qk_norm is not None:
            q_norm, k_norm = self.qk_norms()
            out += q_norm.weights("q_norm", f"{label} Q norm")
            out += [] if self.reader else k_norm.weights("k_norm", f"{label} K norm")
        if self.sinks:
            out.append(Weight("sinks", (self.n_head,), role, f"{label} sinks", "rows"))
        return out

    def qk_norms(self) -> tuple[Norm, Norm]:
        """The Q norm and the K norm (step 4): each head's h channels, or each whole projection."""
        if not self.qk_norm_whole:
            return self.qk_norm, self.qk_norm
        return (dataclasses.replace(self.qk_norm, width=self.q_width),
                dataclasses.replace(self.qk_norm, width=self.k_width))

    def linears(self, with_kv: bool = True, step: bool = False) -> list[Linear]:
        """The projections (step 1); a cross-attention's K and V over the sources, left out when
        ``with_kv`` is false (a decode step reuses them from the cross KV cache). A decode step (``step``)
        runs the same projections."""
        role = "attention_proj" if self.kind == "self" else "cross_attention_proj"
        label = "" if self.kind == "self" else "cross-attention "
        kv_rows, kv_note = ("tokens", "") if self.kind == "self" else ("sources", " (encoder output)")
        gate = " and output gate" if self.output_gate else ""
        out = [Linear("q", role, f"{label}Q projection{gate}", self.d_model, self.q_rows)]
        if (with_kv or self.kind == "self") and not self.reader:
            out.append(Linear("k", role, f"{label}K projection{kv_note}", self.d_model, self.k_width, kv_rows))
            if not self.v_from_k:  # step 7: V is K's projection
                out.append(Linear("v", role, f"{label}V projection{kv_note}", self.d_model, self.v_width, kv_rows))
        return out + [Linear("o", role, f"{label}O projection", self.out_width, self.d_model)]

    def score_dims(self) -> tuple[int, int, int]:
        """(query heads, Q·K channels, V channels) of step 2: the score matmuls are H per sequence, (Tq, h) @
        (h, Tk) and (Tq, Tk) @ (Tk, h_v)."""
        return self.n_head, self.head_dim, self.v_dim

    @property
    def reader(self) -> bool:
        """Step 8: it reads another layer's K and V (no K/V projection, no cache of its own)."""
        return self.kv_share == "reader"

    def kv_elements(self) -> int:
        """K and V elements cached per layer and position (step 3); a reader's: none (step 8)."""
        return 0 if self.reader else self.k_width + self.v_width

    def kv_positions(self, context: int, spare: int = 0) -> int:
        """Positions this layer's cache keeps at a context of this many tokens (step 3); a ring with ``spare``
        slots more where a speculative run asks for them (StateTensor.positions)."""
        span = self.chunk if self.chunk is not None else self.window
        return context if span is None else min(context, span + spare)

    # --- the token-mixer protocol (tfcalc.architecture.mixer) ---
    def mixing(self, queries: int, keys: int, step: bool = False) -> list[Mixing]:
        """Step 2 for one sequence of ``queries`` tokens over ``keys`` positions: each layer's unmasked pairs
        (a window or a chunk shrinks them; an encoder's and a cross-attention's see every key). A decode step
        (``step``) runs the same matmuls."""
        pairs = causal_pairs(queries, keys, self.window, self.chunk) if self.causal else queries * keys
        return score_mixing(self.n_head, self.head_dim, self.v_dim, queries, keys, pairs, self.k_width, self.v_width)

    def elementwise(self, queries: int, keys: int, step: bool = False) -> list[Elementwise]:
        """One sequence's non-matmul work: the softmax (and soft-cap) of every score of the full square, the
        Q/K norms over Q and K, RoPE on Q's and K's rotated channels, the projections' bias adds (a
        cross-attention's K and V over its ``keys`` sources). A decode step (``step``) runs the same work."""
        scores = self.n_head * queries * keys
        out = [Elementwise("softmax", "softmax (full square)", scores)]
        if self.softcap is not None:
            out.append(Elementwise("softcap", "score soft-capping", scores))
        k_width, kv_heads = (0, 0) if self.reader else (self.k_width, self.n_kv_head)  # step 8: Q's alone
        if self.qk_norm is not None:
            out.append(Elementwise("qk_norm", f"Q/K {self.qk_norm.kind}", queries * (self.q_width + k_width),
                                   self.qk_norm))
        if self.v_norm is not None and not self.reader:
            # priced as the Q/K norms are (tfcalc.count.model.non_matmul)
            out.append(Elementwise("qk_norm", f"V {self.v_norm.kind}", queries * self.v_width, self.v_norm))
        if self.rope_theta is not None:  # a NoPE layer rotates nothing
            out.append(Elementwise("rope", "RoPE on Q and K", queries * (self.n_head + kv_heads) * self.rope_dim))
        if self.output_gate:  # sigmoid (3 FLOPs: exp, add, divide) and the product (1) per output element
            out.append(Elementwise("output_gate", "output gate sigmoid·product", queries * self.out_width,
                                   per_element=4))
        kv_rows = queries if self.kind == "self" else keys
        kv_bias = 0 if self.reader else self.k_width + (0 if self.v_from_k else self.v_width)
        bias = (queries * self.q_rows + kv_rows * kv_bias if self.qkv_bias else 0) + (
            queries * self.d_model if self.o_bias else 0)
        return out + ([Elementwise("bias", "bias adds", bias)] if bias else [])

    def kernel(self, explicit_mask: bool) -> str:
        """What tfcalc's module runs on a CPU: SDPA's fused kernel, or "math" under an explicit mask, with
        soft-capped scores or sinks (written out), or V heads of another width (SDPA's fused CPU kernel takes
        one head width)."""
        explicit = explicit_mask or self.softcap is not None or self.sinks
        return "math" if explicit or self.v_dim != self.head_dim else "flash"

    def mask_span(self, length: int) -> tuple[Optional[int], Optional[int]]:
        """The window and the chunk that hide keys at ``length`` tokens (a span of ``length`` or more hides none)."""
        return (self.window if self.window is not None and self.window < length else None,
                self.chunk if self.chunk is not None and self.chunk < length else None)

    def saved(self, batch: int, seq: int, e: int, kernel: str, dropout: bool,
              sources: Optional[int] = None) -> dict[str, int]:
        """tfcalc.count.model.activation_terms, steps 3-6 and 9 (tfcalc.architecture.saved); a cross-attention
        (``kind`` "cross") over ``sources`` positions, step 10: bytes over the micro-batch (``cross_saved``)."""
        if self.kind == "cross":
            return saved.cross_saved(self, batch, seq, seq if sources is None else sources, e, kernel)
        return saved.attention_saved(self, batch, seq, e, kernel, dropout)

    def working_set(self, kernel: str, length: int, sources: Optional[int] = None) -> int:
        """Per token (a cross-attention: per sequence, over ``sources`` positions; ``cross_working_set``)."""
        if self.kind == "cross":
            return saved.cross_working_set(self, kernel, length, length if sources is None else sources)
        return saved.working_set(self, kernel, length)

    def eager_ops(self, tokens: int, step: bool = False) -> list[EagerOp]:
        """tfcalc.count.perf.eager, 5-7: the fused QKV output's split (a cat of dQ, dK, dV back, 2 per element);
        the Q/K norms, over each whole projection (OLMo 2) or per head (one call for Q's heads, one for K's);
        RoPE, and partial rotary's cat of rotated and passed channels (forward 2, back 6 per head element);
        the Linears with a bias (Q, K, V as one; O). A cross-attention (``kind`` "cross"), over ``tokens``
        SOURCE rows: its fused [K | V]'s split (a cat of dK, dV back), and its biased Q, [K | V] and O. Not
        asked with ``step`` (its decode form is the standard one: the folds ask only a mixer with its own)."""
        if self.kind == "cross":
            return [EagerOp("moves", "qkv", 0, 2 * tokens * (self.k_width + self.v_width), 0, 1),
                    EagerOp("bias_linears", "bias", 2 * int(self.qkv_bias) + int(self.o_bias))]
        k, v, kv_heads = (0, 0, 0) if self.reader else (self.k_width, self.v_width, self.n_kv_head)  # step 8
        out = [EagerOp("moves", "qkv", 0, 2 * tokens * (self.q_width + k + v), 0, 1)]
        if self.qk_norm_whole and self.qk_norm is not None:
            out += [EagerOp("norm", "qk_norm", tokens * qk.width, norm=qk) for qk in self.qk_norms()]
        elif self.qk_norm is not None:
            out.append(EagerOp("norm", "qk_norm", tokens * (self.q_width + k), norm=self.qk_norm,
                               kernel_factor=2))
        if self.rope_theta is not None:
            heads = tokens * (self.n_head + kv_heads)
            out.append(EagerOp("rope", "rope", heads * self.rope_dim))
            if self.rope_dim < self.head_dim:
                out.append(EagerOp("moves", "rope", 2 * heads * self.head_dim, 6 * heads * self.head_dim, 2, 6))
        return out + [EagerOp("bias_linears", "bias", int(self.qkv_bias) + int(self.o_bias))]

    def state(self) -> list[StateTensor]:
        """Step 3: K and V of each position kept, in the cache dtype; a window of W keeps a ring of W slots, a
        chunk of C one chunk of C (the fixed-shape state tfcalc.model.attention_state allocates: a decode step
        writes its own K and V into the ring, then attends over it; transformers' StaticSlidingWindowLayer
        allocates the same W). A reader holds none: it reads its source's (step 8)."""
        span = self.chunk if self.chunk is not None else self.window
        if self.reader:
            return []
        return [StateTensor("k", self.k_width, span=span, shape=(self.n_kv_head, self.head_dim)),
                StateTensor("v", self.v_width, span=span, shape=(self.n_kv_head, self.v_dim))]

    def expanded_state(self) -> list[StateTensor]:
        return self.state()

    def tp_widths(self) -> list[tuple[str, int]]:
        """Megatron splits the query heads and the key/value heads (each rank whole heads)."""
        return [("n_head", self.n_head), ("n_kv_head", self.n_kv_head)]

    def tp_state_heads(self) -> Optional[int]:
        """The cache splits by KV head: a rank holds whole KV heads (replicated when TP exceeds them)."""
        return self.n_kv_head

    @property
    def capabilities(self) -> Capabilities:
        """Every layer rewinds: a window's or a chunk's ring with spare slots for the positions a verify step
        overwrites (tfcalc.model.attention_state); ring attention over a window or a chunk is not modelled
        (tfcalc.count.training.layout_pipeline)."""
        local = self.window is not None or self.chunk is not None
        op = None if self.softcap is None and not self.sinks else "written-out attention scores (soft-cap or sinks)"
        return Capabilities(rewind=True, tensor_parallel=True, context_parallel=not local and self.kind == "self",
                            op_recompute=op)

    @property
    def module(self) -> str:
        """The torch module that runs it (resolved by tfcalc.model.mixers, so no torch here)."""
        if self.reader:  # step 8
            return "tfcalc.model.kv_shared:ReaderAttention"
        return "tfcalc.model.layers:CrossAttention" if self.kind == "cross" else "tfcalc.model.layers:Attention"

    def state_tensors(self) -> tuple[tuple[str, int, int], ...]:
        """(name, heads, width) of each tensor ``state`` describes: what tfcalc.model.attention_state allocates,
        kv_positions(context) slots of each (one description for the count and the runtime)."""
        return tuple((t.name, *t.shape) for t in self.state())
