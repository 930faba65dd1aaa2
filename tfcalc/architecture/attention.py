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
5. attention sinks (gpt-oss, modeling_gpt_oss.py ``sinks``): one learned logit per query head.

Latent attention (DeepSeek-V2, Liu et al. 2024, sec. 2.1) is another kind, not a flag of this one: a
class of its own beside this one with the same four methods (``weights``, ``linears``, ``score_dims``,
``kv_elements``) -- every fold calls only those. Pure Python: no torch, typer or rich here.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Literal, Optional

from tfcalc.architecture.norm import Norm
from tfcalc.architecture.tensors import Linear, Weight
from tfcalc.errors import InputError


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
    qk_norm: Optional[Norm] = None  # its kind and eps; h wide, or the projection's width (qk_norm_whole)
    qk_norm_whole: bool = False
    qk_norm_after_rope: bool = False  # Llama 4 normalizes the rotated Q and K (modeling_llama4.py)
    # Llama 4's attention temperature on NoPE layers (arXiv 2501.19399): Q × (1 + s·log(1 + floor((p + 1) / f)))
    # at position p, (f, s) = (floor_scale, attn_scale); a function of the position only, no count changes
    temperature: Optional[tuple[int, float]] = None
    scale: Optional[float] = None  # None: 1/sqrt(head_dim)
    softcap: Optional[float] = None  # scores -> c·tanh(scores / c) (Gemma 2: 50)
    sinks: bool = False
    qkv_bias: bool = False
    o_bias: bool = False
    qk_norm_heads: bool = False  # the Q/K norms' weights per head, (n_head | n_kv_head, h) (Cohere's use_qk_norm)

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
        if self.rope_theta is None and self.rope_dim:
            raise InputError("rope_dim needs a rotary base (rope_theta)")
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
        for part, width in (("q", self.q_width), ("k", self.k_width), ("v", self.v_width)):
            name = f"{label} {part.upper()}"
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
            out += q_norm.weights("q_norm", f"{label} Q norm") + k_norm.weights("k_norm", f"{label} K norm")
        if self.sinks:
            out.append(Weight("sinks", (self.n_head,), role, f"{label} sinks", "rows"))
        return out

    def qk_norms(self) -> tuple[Norm, Norm]:
        """The Q norm and the K norm (step 4): each head's h channels, or each whole projection."""
        if not self.qk_norm_whole:
            return self.qk_norm, self.qk_norm
        return (dataclasses.replace(self.qk_norm, width=self.q_width),
                dataclasses.replace(self.qk_norm, width=self.k_width))

    def linears(self, with_kv: bool = True) -> list[Linear]:
        """The projections (step 1); a cross-attention's K and V over the sources, left out when
        ``with_kv`` is false (a decode step reuses them from the cross KV cache)."""
        role = "attention_proj" if self.kind == "self" else "cross_attention_proj"
        label = "" if self.kind == "self" else "cross-attention "
        kv_rows, kv_note = ("tokens", "") if self.kind == "self" else ("sources", " (encoder output)")
        out = [Linear("q", role, f"{label}Q projection", self.d_model, self.q_width)]
        if with_kv or self.kind == "self":
            out.append(Linear("k", role, f"{label}K projection{kv_note}", self.d_model, self.k_width, kv_rows))
            out.append(Linear("v", role, f"{label}V projection{kv_note}", self.d_model, self.v_width, kv_rows))
        return out + [Linear("o", role, f"{label}O projection", self.out_width, self.d_model)]

    def score_dims(self) -> tuple[int, int, int]:
        """(query heads, Q·K channels, V channels) of step 2: the score matmuls are H per sequence, (Tq, h) @
        (h, Tk) and (Tq, Tk) @ (Tk, h_v)."""
        return self.n_head, self.head_dim, self.v_dim

    def kv_elements(self) -> int:
        """K and V elements cached per layer and position (step 3)."""
        return self.k_width + self.v_width

    def kv_positions(self, context: int) -> int:
        """Positions this layer's cache keeps at a context of this many tokens (step 3)."""
        span = self.chunk if self.chunk is not None else self.window
        return context if span is None else min(context, span)

    def state_tensors(self) -> tuple[tuple[str, int, int], ...]:
        """The generation state a self-attention layer keeps per cached position, (name, heads, width) of
        each tensor, in the cache's dtype: K (G heads of h) and V (G of h_v); kv_positions(context) slots of
        each, allocated once (tfcalc.model.attention_state). Nothing of fixed size besides."""
        return (("k", self.n_kv_head, self.head_dim), ("v", self.n_kv_head, self.v_dim))
