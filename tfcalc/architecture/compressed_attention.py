"""DeepSeek-V4's attention: shared-KV multi-query attention over a sliding window of raw keys plus keys COMPRESSED
m to one, dense (HCA) or picked per query by a lightning indexer (CSA). Sources: transformers 5.24
models/deepseek_v4/modeling_deepseek_v4.py (DeepseekV4Attention, DeepseekV4HCACompressor, DeepseekV4CSACompressor,
DeepseekV4Indexer, DeepseekV4IndexerScorer, DeepseekV4GroupedLinear; the caches DeepseekV4HCACache,
DeepseekV4CSACache) and configuration_deepseek_v4.py, which cite the DeepSeek-V4 technical report (§2.3.1
"Compressed Sparse Attention", eqs. 9-17; §2.3.2 "Heavily Compressed Attention", eqs. 20-23; §2.3.1 "Grouped
Output Projection"; §2.2 manifold-constrained hyper-connections, Xie et al. 2026; §2.1 hash-routed MoE).

d = hidden_size, H = num_attention_heads, h = head_dim (512), h_r = qk_rope_head_dim (head_dim ·
partial_rotary_factor, 64), c_q = q_lora_rank, g = o_groups, d_g = o_lora_rank, W = sliding_window (128),
m = the layer's compress rate (compress_rates: 4 for CSA, 128 for HCA), H_i = index_n_heads, D_i =
index_head_dim, k = index_topk. Every layer (``layer_types``: sliding_attention, compressed_sparse_attention,
heavily_compressed_attention):

1. queries through a low-rank bottleneck: q_res = RMSNorm(W_qa·x) (d -> c_q, ``q_a_proj``, ``q_a_norm``), q =
   W_qb·q_res (c_q -> H·h, ``q_b_proj``), each head RMS-normed WITHOUT weight (``q_b_norm``);
2. ONE key-value head, K = V (shared-KV MQA): kv = RMSNorm(W_kv·x) (d -> h, ``kv_proj``, ``kv_norm``);
3. RoPE on the LAST h_r channels of each head ([nope | rope]), on interleaved pairs (2i, 2i+1), of q and kv,
   θ = rope_theta on sliding-only layers, compress_rope_theta (with the config's YaRN, attention factor forced
   to 1) on compressed layers;
4. keys = the sliding window's raw kv (a query at p sees p - W < s <= p: transformers' sliding-window mask)
   followed by the compressed entries (steps 7-8); per head a learnable SINK logit joins the softmax's
   denominator (``sinks``, as gpt-oss), scale h^-1/2; the output o = softmax · V over the same keys;
5. V = K carries RoPE on its rope channels: the output's last h_r channels are rotated back by the query's own
   position (RoPE at -p), so each key's contribution depends on its distance only;
6. grouped output projection: the H·h output split in g groups, each (H·h/g) -> d_g (``o_a_proj``, a
   block-diagonal Linear run as one bmm), then g·d_g -> d (``o_b_proj``).

Compression (the layers with a compressor):

7. HCA (eqs. 20-23): C = W_C·x and Z = W_Z·x (d -> h each, ``compressor.kv_proj``, ``compressor.gate_proj``);
   each CLOSED window of m tokens gives one entry Σ_j softmax_j(Z_j + B_j) ⊙ C_j (softmax over the window's m
   tokens per channel, B = ``position_bias`` (m, h) in fp32), RMS-normed (``compressor.kv_norm``), RoPE at
   the window's first position (compress θ); a query at p sees entry w when w < (p + 1) // m (its window is
   complete). Windows do not overlap; no indexer.
8. CSA (eqs. 9-17): C and Z are 2h wide (series Ca = [:h], Cb = [h:]); entry w pools 2m slots: window w - 1's
   Ca and window w's Cb (width 2m, stride m; entry 0's Ca half is empty, weight 0). A LIGHTNING INDEXER with
   its own compressor at D_i (``indexer.kv_proj``, ``gate_proj`` d -> 2·D_i, ``position_bias`` (m, 2·D_i),
   ``kv_norm``) keeps index keys K^I (one per entry); its queries q^I = W^I_qb·q_res (c_q -> H_i·D_i,
   ``indexer.q_b_proj``, RoPE compress θ); scores I(t, s) = Σ_h w_h(t)·ReLU(D_i^-1/2·q^I_h(t)·K^I_s), w =
   W_w·x·H_i^-1/2 (d -> H_i, ``indexer.scorer.weights_proj``); each query attends to the window plus the top
   min(k, visible) entries among those w < (p + 1) // m.

Not part of this mixer (the block's and the MoE's, in the family: tfcalc.hf_config.deepseek_v4): the
hyper-connections (hc_mult residual streams mixed by Sinkhorn-projected doubly-stochastic matrices, each
sub-layer reading a sigmoid-weighted collapse of them), hash-routed experts (tid2eid), the SwiGLU clamp.

**FLOPs** (``mixing``), the project's full-square convention: what transformers' eager path computes and
FlopCounterMode sees on it. A pass of T queries whose context reaches ``keys`` positions reads S = min(keys -
T, W - 1) + T raw keys (transformers' sliding cache keeps W - 1) and C = keys // m compressed entries; Q·Kᵀ and
attention·V are (T, h) @ (h, S + C) per head, 2·H·h·T·(S + C) each; the indexer's q^I·K^I is (T, D_i) @ (D_i, C)
per indexer head. Causal-effective: per query its window's keys, plus (p + 1) // m entries (HCA) or min(k, (p +
1) // m) (CSA); the indexer over its (p + 1) // m. The compressors' pooling (softmax over the window, the
weighted sum), the indexer's weighted head sum, ReLU and top-k are non-matmul work (``elementwise``), as in
transformers, where FlopCounterMode sees no matmul for them. Projections: step 1, 2, 6 and the compressors'
and indexer's Linears (``linears``); o_a_proj counted as g matmuls (T, H·h/g) @ (H·h/g, d_g).

**A decode step** (one query at position p, keys = p + 1): ``mixing(1, keys)`` counts what transformers computes,
min(keys, W) raw keys and keys // m entries. tfcalc's fixed-shape step (tfcalc.model.compressed_attention) reads
the W ring slots and the entries of its span (the runtime's bucket of positions, a power of two at least the
context: span // m), masked: the same keys seen, at most a bucket's worth more read and multiplied.

**State** (``state``), per sequence and layer: the window's kv, a ring of W positions (the project's ring,
tfcalc.model.attention_state; transformers' DynamicSlidingWindowLayer keeps W - 1, one position fewer), h each,
cache dtype; the compressed entries, h per m positions (``StateTensor.stride``), cache dtype; CSA also the index
keys, D_i per m positions. Fixed, in the model's dtype: the open window's raw C and Z (m tokens × c·h each, c =
2 for CSA, 1 for HCA: transformers' ``buffer_kv``/``buffer_gate`` hold the up to m - 1 tokens between calls)
and, for CSA, the previous window's Ca and Z_a (m × h each: transformers' ``overlap_kv``/``overlap_gate``,
whose gate transformers keeps in fp32, the position bias added; tfcalc keeps the raw gate and adds the bias
when it pools: the same values); the indexer's the same at D_i. Rewind: refused (transformers'
``_is_stateful``: the compressor's windows are not rewound). TP: not split (transformers' TP plan keeps this
attention replicated: one shared KV head).

Pure Python: no torch, typer or rich here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Optional

from tfcalc.architecture.attention import causal_pairs
from tfcalc.architecture.mixer import Capabilities, EagerOp, Elementwise, Mixing, StateTensor
from tfcalc.architecture.tensors import Linear, Weight
from tfcalc.errors import InputError

Compression = Literal["none", "hca", "csa"]


def entries_seen(queries: int, keys: int, m: int, topk: Optional[int] = None) -> int:
    """Σ over the queries at positions keys - queries .. keys - 1 of the compressed entries each sees: (p + 1) // m,
    at most ``topk`` of them where given."""
    def upto(n: int) -> int:  # Σ_{p < n} (p + 1) // m = Σ_{j=1..n} j // m
        q, r = divmod(n + 1, m)  # j = 0 .. n: whole blocks of m contribute m·(0 + 1 + ... + q-1), then r·q
        return m * q * (q - 1) // 2 + r * q
    if topk is None:
        return upto(keys) - upto(keys - queries)
    cap = min(keys, topk * m - 1)  # (p + 1) // m < topk exactly for p + 1 < topk·m
    below = upto(min(cap, keys)) - upto(min(cap, keys - queries)) if keys - queries < cap else 0
    return below + topk * (keys - max(keys - queries, cap))


@dataclass(frozen=True)
class CompressedAttention:
    d_model: int
    n_head: int
    head_dim: int
    rope_dim: int  # h_r: the last h_r channels of each head rotate
    q_lora_rank: int
    o_groups: int
    o_lora_rank: int
    window: int  # W: sliding_window
    compression: Compression = "none"
    ratio: int = 1  # m: tokens per compressed entry (1 where compression is "none")
    index_n_heads: int = 64
    index_head_dim: int = 128
    index_topk: int = 512
    rope_theta: float = 10000.0  # the sliding-only layers' θ ("main")
    compress_rope_theta: float = 160000.0  # the compressed layers' θ ("compress"), their YaRN with it
    yarn: Any = None  # tfcalc.architecture.latent.Yarn of the compressed layers' rotary, or None
    eps: float = 1e-6
    causal: bool = True

    module = "tfcalc.model.compressed_attention:CompressedAttention"  # resolved by tfcalc.model.mixers

    def __post_init__(self) -> None:
        for name in ("d_model", "n_head", "head_dim", "q_lora_rank", "o_groups", "o_lora_rank", "window", "ratio",
                     "index_n_heads", "index_head_dim", "index_topk"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InputError(f"compressed attention's {name} must be a positive integer; got {value!r}")
        if self.compression not in ("none", "hca", "csa"):
            raise InputError(f"compressed attention's compression must be none, hca or csa; got {self.compression!r}")
        if (self.compression == "none") != (self.ratio == 1):
            raise InputError(f"compressed attention: a compression ratio of 1 means none (got {self.compression}, "
                             f"ratio {self.ratio})")
        if self.rope_dim % 2 or not 0 < self.rope_dim <= self.head_dim:
            raise InputError(f"compressed attention rotates pairs: qk_rope_head_dim must be even, in 2 .. head_dim "
                             f"({self.head_dim}); got {self.rope_dim}")
        if self.compression == "csa" and self.index_head_dim < self.rope_dim:
            raise InputError(f"index_head_dim ({self.index_head_dim}) must be at least qk_rope_head_dim "
                             f"({self.rope_dim}): the indexer rotates that many of its channels")
        if (self.n_head * self.head_dim) % self.o_groups:
            raise InputError(f"o_groups ({self.o_groups}) must divide the attention width n_head·head_dim "
                             f"({self.n_head * self.head_dim})")
        if not self.causal:
            raise InputError("compressed attention is a decoder's causal self-attention: it has no encoder form")

    @property
    def compressed(self) -> bool:
        return self.compression != "none"

    @property
    def sparse(self) -> bool:
        return self.compression == "csa"

    @property
    def series(self) -> int:
        """c: the compressor's width in heads (CSA's two series Ca, Cb; HCA's one)."""
        return 2 if self.sparse else 1

    def weights(self) -> list[Weight]:
        """DeepseekV4Attention.__init__'s tensors, in its order; the compressor's and indexer's after (rotary
        buffers are not parameters), each named by its module path in transformers and in tfcalc's module (so a
        checkpoint and the empirical count map by name). Every tensor whole under TP (transformers' plan keeps
        them replicated)."""
        d, H, h, cq, g, dg, r = (self.d_model, self.n_head, self.head_dim, self.q_lora_rank, self.o_groups,
                                 self.o_lora_rank, "attention")
        out = [Weight("q_a_proj_weight", (cq, d), r, "Q down-projection weight"),
               Weight("q_a_norm_weight", (cq,), r, "Q latent norm weight"),
               Weight("q_b_proj_weight", (H * h, cq), r, "Q up-projection weight"),
               Weight("kv_proj_weight", (h, d), r, "shared K=V weight"),
               Weight("kv_norm_weight", (h,), r, "K=V norm weight"),
               Weight("o_a_proj_weight", (g * dg, H * h // g), r, "grouped output projection weight"),
               Weight("o_b_proj_weight", (d, g * dg), r, "output projection weight"),
               Weight("sinks", (H,), r, "attention sinks")]
        if not self.compressed:
            return out
        c, m = self.series, self.ratio
        out += [Weight("compressor_kv_proj_weight", (c * h, d), r, "compressor C weight"),
                Weight("compressor_gate_proj_weight", (c * h, d), r, "compressor gate weight"),
                Weight("compressor_position_bias", (m, c * h), r, "compressor position bias"),
                Weight("compressor_kv_norm_weight", (h,), r, "compressor norm weight")]
        if not self.sparse:
            return out
        Hi, Di = self.index_n_heads, self.index_head_dim
        return out + [Weight("compressor_indexer_kv_proj_weight", (2 * Di, d), r, "indexer compressor C weight"),
                      Weight("compressor_indexer_gate_proj_weight", (2 * Di, d), r, "indexer compressor gate weight"),
                      Weight("compressor_indexer_position_bias", (m, 2 * Di), r, "indexer position bias"),
                      Weight("compressor_indexer_kv_norm_weight", (Di,), r, "indexer key norm weight"),
                      Weight("compressor_indexer_q_b_proj_weight", (Hi * Di, cq), r, "indexer Q weight"),
                      Weight("compressor_indexer_scorer_weights_proj_weight", (Hi, d), r, "indexer head weights")]

    def linears(self, with_kv: bool = True, step: bool = False) -> list[Linear]:
        """Steps 1, 2, the compressor's and indexer's projections, then step 6 (the output projection last)."""
        d, H, h, cq, role = self.d_model, self.n_head, self.head_dim, self.q_lora_rank, "attention_proj"
        out = [Linear("q_a", role, "Q down-projection", d, cq), Linear("q_b", role, "Q up-projection", cq, H * h),
               Linear("kv", role, "shared K=V", d, h)]
        if self.compressed:
            c = self.series
            out += [Linear("compressor_kv", role, "compressor C", d, c * h),
                    Linear("compressor_gate", role, "compressor gate", d, c * h)]
        if self.sparse:
            Hi, Di = self.index_n_heads, self.index_head_dim
            out += [Linear("indexer_kv", role, "indexer compressor C", d, 2 * Di),
                    Linear("indexer_gate", role, "indexer compressor gate", d, 2 * Di),
                    Linear("indexer_q", role, "indexer Q", cq, Hi * Di),
                    Linear("indexer_w", role, "indexer head weights", d, Hi)]
        g = self.o_groups
        return out + [Linear("o_a", role, "grouped output projection", H * h // g, self.o_lora_rank, count=g),
                      Linear("o", role, "output projection", g * self.o_lora_rank, d)]

    def keys_read(self, queries: int, keys: int) -> tuple[int, int]:
        """(raw keys S, compressed entries C) a pass of ``queries`` over a context of ``keys`` reads (module
        docstring, FLOPs)."""
        raw = min(keys - queries, self.window - 1) + queries
        return raw, keys // self.ratio if self.compressed else 0

    def mixing(self, queries: int, keys: int, step: bool = False) -> list[Mixing]:
        """Q·Kᵀ and attention·V over the raw and compressed keys, H heads of one shared head; CSA's indexer
        scores (module docstring). State read: each raw key and entry once (K = V: read for both)."""
        H, h, T = self.n_head, self.head_dim, queries
        raw, entries = self.keys_read(queries, keys)
        topk = self.index_topk if self.sparse else None
        pairs = causal_pairs(T, keys, self.window) + (entries_seen(T, keys, self.ratio, topk) if self.compressed
                                                      else 0)
        read = h * (raw + entries)
        out = [Mixing("qk", "scores Q·Kᵀ (window and compressed keys)", (T, h, raw + entries), H, 2 * H * h * pairs,
                      read, io=H * T * h),
               Mixing("av", "attention · V (K = V)", (T, raw + entries, h), H, 2 * H * h * pairs, 0, io=H * T * h)]
        if self.sparse:
            Hi, Di = self.index_n_heads, self.index_head_dim
            seen = entries_seen(T, keys, self.ratio)
            out.insert(0, Mixing("index_qk", "indexer scores q^I·K^I", (T, Di, entries), Hi, 2 * Hi * Di * seen,
                                 Di * entries, io=Hi * T * (Di + entries)))
        return out

    def elementwise(self, queries: int, keys: int, step: bool = False) -> list[Elementwise]:
        """The softmax over the keys and the sink; RoPE on q, kv and the output's rope channels; the compressors'
        pooling over the windows this pass closes (softmax and weighted sum, ~5 FLOPs a pooled element); the
        indexer's ReLU and weighted head sum (3 a score) and its top-k (traffic, 0 FLOPs)."""
        H, h, T = self.n_head, self.head_dim, queries
        raw, entries = self.keys_read(queries, keys)
        out = [Elementwise("softmax", "softmax with sinks (full square)", H * T * (raw + entries + 1)),
               Elementwise("rope", "RoPE on Q, K=V and the output", T * (2 * H + 1) * self.rope_dim)]
        if not self.compressed:
            return out
        closed = keys // self.ratio - (keys - queries) // self.ratio
        pooled = closed * self.ratio * self.series * h
        out.append(Elementwise("pool", "compressor softmax-pooling", pooled, per_element=5))
        if self.sparse:
            Hi, Di = self.index_n_heads, self.index_head_dim
            out += [Elementwise("pool", "indexer compressor pooling", closed * self.ratio * 2 * Di, per_element=5),
                    Elementwise("relu", "indexer ReLU and head sum", Hi * T * entries, per_element=3),
                    Elementwise("copy", "top-k selection", T * entries, per_element=0)]
        return out

    def kernel(self, explicit_mask: bool) -> str:
        return "math"  # sinks and a per-query mask over the compressed keys: the scores are written out

    def mask_span(self, length: int) -> tuple[Optional[int], Optional[int]]:
        return (self.window if self.window < length else None), None

    def saved(self, batch: int, seq: int, e: int, kernel: str, dropout: bool,
              sources: Optional[int] = None) -> dict[str, int]:
        """Bytes per token autograd keeps in tfcalc's module (tfcalc.model.compressed_attention) over a sequence of
        T = ``seq``, e bytes an element, its norms and softmax pooling in fp32 (f = 4), as that module computes them
        (each storage once; checked against autograd in fp32, tests/test_deepseek_v4.py):

        - ``qkv``: the Q latent's norm (its fp32 input, rsqrt, normed product: 2·f·c_q + f) and output (e·c_q), q's
          unweighted norm (f·H·h + f·H), the RoPE tables (cos, sin, -sin: 3·f·h_r/2), kv's norm (2·f·h + f), the
          rotated q (e·H·h) and kv (e·h: the keys), and with compression the compressor's C (e·c·h for HCA, whose
          pooling reads C's storage whole; CSA pools a new (2m)-slot tensor);
        - ``attn_scores``: the probabilities over the T raw keys, C = T // m entries and the sink (e·H·(T + C + 1));
        - ``attn_output``: the output rotated back (e·H·h, o_a's input) and o_a's output (e·g·d_g);
        - ``compressor``: per sequence, divided by T and rounded up to a whole byte: the entries as keys (e·h·C),
          the pooling's operands (HCA: the fp32 softmax over n·m·h; CSA: the 2m-slot C and its softmax, (e + f)·
          n·2m·h), the entries' norm (2·f·n·h + f·n) and RoPE tables (f·n·h_r), n = T // m windows.
        The indexer runs without gradient and keeps nothing."""
        f, H, h, cq, T = 4, self.n_head, self.head_dim, self.q_lora_rank, seq
        raw, entries = self.keys_read(T, T)
        n, m = entries, self.ratio
        qkv = 2 * f * cq + f + e * cq + f * H * (h + 1) + 3 * f * self.rope_dim // 2 + 2 * f * h + f + e * H * h + e * h
        out = {"qkv": qkv + (e * h if self.compression == "hca" and n else 0),
               "attn_scores": e * H * (raw + entries + 1),
               "attn_output": e * (H * h + self.o_groups * self.o_lora_rank)}
        if self.compressed:
            pooled = f * n * m * h if self.compression == "hca" else (e + f) * n * 2 * m * h
            per_sequence = e * h * n + pooled + 2 * f * n * h + f * n + f * n * self.rope_dim
            out["compressor"] = -(-per_sequence // T)
        return out

    def working_set(self, kernel: str, length: int, sources: Optional[int] = None) -> int:
        raw, entries = self.keys_read(length, length)
        return 2 * self.q_lora_rank + 3 * self.n_head * self.head_dim + 2 * self.n_head * (raw + entries)

    def eager_ops(self, tokens: int, step: bool = False) -> list[EagerOp]:
        return [EagerOp("rope", "rope", tokens * (2 * self.n_head + 1) * self.rope_dim),
                EagerOp("bias_linears", "bias", 0)]

    def state(self) -> list[StateTensor]:
        """Module docstring, State: the window ring, the compressed entries (every m positions), the open
        window's raw C and Z, CSA's previous-window Ca and Z_a; the indexer's at D_i."""
        h, m, W = self.head_dim, self.ratio, self.window
        out = [StateTensor("kv", h, span=W, shape=(1, h))]
        if not self.compressed:
            return out
        c = self.series
        out += [StateTensor("compressed_kv", h, stride=m, shape=(1, h)),
                StateTensor("window_kv", fixed=m * c * h, dtype="model", shape=(m, c * h)),
                StateTensor("window_gate", fixed=m * c * h, dtype="model", shape=(m, c * h))]
        if not self.sparse:
            return out
        Di = self.index_head_dim
        return out + [StateTensor("overlap_kv", fixed=m * h, dtype="model", shape=(m, h)),
                      StateTensor("overlap_gate", fixed=m * h, dtype="model", shape=(m, h)),
                      StateTensor("index_k", Di, stride=m, shape=(1, Di)),
                      StateTensor("index_window_kv", fixed=m * 2 * Di, dtype="model", shape=(m, 2 * Di)),
                      StateTensor("index_window_gate", fixed=m * 2 * Di, dtype="model", shape=(m, 2 * Di)),
                      StateTensor("index_overlap_kv", fixed=m * Di, dtype="model", shape=(m, Di)),
                      StateTensor("index_overlap_gate", fixed=m * Di, dtype="model", shape=(m, Di))]

    def expanded_state(self) -> list[StateTensor]:
        return self.state()

    def tp_widths(self) -> list[tuple[str, int]]:
        return [("n_head", self.n_head)]

    def tp_state_heads(self) -> Optional[int]:
        return None  # one shared K=V head: kept whole on every rank

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities(rewind=False, tensor_parallel=False, context_parallel=False,
                            op_recompute="written-out attention scores (sinks)")
