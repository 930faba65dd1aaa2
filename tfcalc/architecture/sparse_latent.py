"""DeepSeek Sparse Attention (DSA: DeepSeek-V3.2, DeepSeek-AI 2025, "DeepSeek-V3.2: Pushing the Frontier of Open
Large Language Models", sec. 2.1; transformers 5.24 modeling_deepseek_v32.py, DeepseekV32Indexer): multi-head
latent attention (tfcalc.architecture.latent) whose queries each attend to the ``index_topk`` keys a lightning
indexer picks, the indexer keeping a cache of its own keys beside the latent.

H_i = index_n_heads indexer heads of D_i = index_head_dim channels, the first h_r (qk_rope_head_dim) of them
rotary (rotate-half in DeepSeek-V3.2, unlike its main attention's interleaved pairs; interleaved in GLM-5,
modeling_glm_moe_dsa.py: ``index_interleave``); c_q = q_lora_rank, k = index_topk.

1. indexer queries from the main attention's normed Q latent: q_I = W_qb^I · norm(W_qa · x) (c_q -> H_i·D_i,
   ``wq_b``), RoPE on each head's first h_r channels;
2. one indexer key per token, shared by the heads: k_I = LayerNorm(W_k^I · x) (d -> D_i, ``wk``; ``k_norm`` a
   LayerNorm with its bias), RoPE likewise; CACHED beside the latent: D_i elements per token and layer, in the
   cache dtype (transformers' DynamicIndexedLayer.indexer_keys (B, S, D_i), the model's dtype);
3. index scores I(t, s) = Σ_h w_h(t) · ReLU(D_i^-1/2 · q_I,h(t) · k_I(s)), w = W_w · x · H_i^-1/2 (d -> H_i,
   ``weights_proj``): H_i matmuls (1, D_i) @ (D_i, S) per query (2·H_i·D_i per pair) and the weighted sum over
   the heads, a (1, H_i) @ (H_i, S) per query (2·H_i per pair), in fp32; causal keys only;
4. top-k: the k best keys per query (ties as torch.topk breaks them); the main latent attention then sees, of
   its causal keys, only those.

FLOPs, the convention (both figures shown): ``forward_flops`` counts what transformers' torch path runs and
FlopCounterMode sees on it -- the main attention DENSE over the full T×T square under a mask that hides the
unselected keys (eager and SDPA build a boolean (B, 1, T, T) mask from the indices), plus the indexer's full
square; ``forward_flops_causal`` counts the pairs that matter: the indexer over its causal pairs and the main
attention over min(k, t + 1) keys for the query at position t (what a sparse kernel, FlashMLA's, computes).
A decode step (one query) runs sparse in tfcalc's module: the k selected rows of the cached [c | k_r] are gathered
and attended to (absorbed form), so its main-attention FLOPs and reads are over min(k, S) keys; the indexer reads
every cached indexer key. The top-k selection and the ReLU are non-matmul work (``elementwise``).

GLM-5's shared layers (``index_shared``; modeling_glm_moe_dsa.py, GlmMoeDsaAttention with indexer_types[i]
"shared"; IndexCache, arXiv 2603.12201) run no indexer: they take the top-k of the last earlier full layer, so they
have none of steps 1-4's weights, FLOPs or cached indexer keys, only latent attention's under that top-k.

Training: transformers runs the indexer under torch.no_grad (no gradient to it, no activation kept for it); the
main attention's explicit mask makes SDPA run its math kernel, which keeps the scores; the mask itself, added to
the scores, is not kept. Pure Python: no torch, typer or rich here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from tfcalc.architecture.attention import causal_pairs, score_mixing
from tfcalc.architecture.latent import LatentAttention
from tfcalc.architecture.mixer import Elementwise, Mixing, StateTensor
from tfcalc.architecture.norm import Norm
from tfcalc.architecture.tensors import Linear, Weight
from tfcalc.errors import InputError


def topk_pairs(queries: int, keys: int, topk: int) -> int:
    """(query, key) pairs a top-k attention keeps when the queries are the last ``queries`` of ``keys`` positions:
    the query at row i sees n = keys - queries + i + 1 causal keys and keeps min(n, k) of them: Σ min(n, k)."""
    lo, hi = keys - queries + 1, keys
    top = min(hi, topk)
    below = (top * (top + 1) - (lo - 1) * lo) // 2 if lo <= top else 0  # n <= k: all n kept
    return below + topk * (hi - max(lo - 1, topk)) if hi > topk else below


@dataclass(frozen=True)
class SparseLatentAttention(LatentAttention):
    index_topk: int = 2048
    index_n_heads: int = 64
    index_head_dim: int = 128
    index_interleave: bool = False  # the indexer's rotary pairs (2i, 2i+1), GLM-5's; false: rotate-half, V3.2's
    # GLM-5's "shared" indexer layer (modeling_glm_moe_dsa.py, GlmMoeDsaAttention: indexer None when
    # config.indexer_types[i] == "shared"): it reuses the previous full layer's top-k, so it has no indexer weights,
    # FLOPs or indexer-key cache of its own (transformers' update_indexer is never called for it)
    index_shared: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("index_topk", "index_n_heads", "index_head_dim"):
            if getattr(self, name) < 1:
                raise InputError(f"sparse attention {name} must be positive; got {getattr(self, name)}")
        if self.q_lora_rank is None:
            raise InputError("sparse attention's indexer reads the compressed query: give q_lora_rank")
        if self.index_head_dim < self.qk_rope_head_dim:
            raise InputError(f"index_head_dim ({self.index_head_dim}) must be at least qk_rope_head_dim "
                             f"({self.qk_rope_head_dim}): the indexer rotates that many of its channels")

    def index_norm(self) -> Norm:
        return Norm("layernorm", self.index_head_dim, True, 1e-6)  # nn.LayerNorm(index_head_dim, eps=1e-6)

    def weights(self) -> list[Weight]:
        """Latent attention's, then the indexer's (DeepseekV32Indexer.__init__): wq_b, wk, k_norm (weight and
        bias), weights_proj; kept whole under TP (transformers' TP plan splits none of them)."""
        Hi, Di, role = self.index_n_heads, self.index_head_dim, "attention"
        if self.index_shared:
            return super().weights()
        return super().weights() + [
            Weight("indexer_wq_b_weight", (Hi * Di, self.q_lora_rank), role, "indexer Q weight"),
            Weight("indexer_wk_weight", (Di, self.d_model), role, "indexer K weight"),
            *self.index_norm().weights("indexer_k_norm", "indexer K norm"),
            Weight("indexer_weights_proj_weight", (Hi, self.d_model), role, "indexer head weights"),
        ]

    def _index_linears(self) -> list[Linear]:
        role, Hi, Di = "attention_proj", self.index_n_heads, self.index_head_dim
        return [Linear("index_q", role, "indexer Q", self.q_lora_rank, Hi * Di),
                Linear("index_k", role, "indexer K", self.d_model, Di),
                Linear("index_w", role, "indexer head weights", self.d_model, Hi)]

    def linears(self, with_kv: bool = True, step: bool = False) -> list[Linear]:
        """Latent attention's, the indexer's three before W_o (the last); a step's absorbed form (latent
        attention's ``decode_linears``, which reads these) keeps them before its W_UK, W_UV and W_o."""
        if step:
            return self.decode_linears()
        out = super().linears(with_kv)
        return out if self.index_shared else out[:-1] + self._index_linears() + out[-1:]

    def selected(self, queries: int, keys: int) -> int:
        """Keys the main attention reads in a decode step (one query): min(k, keys)."""
        return min(self.index_topk, keys)

    def mixing(self, queries: int, keys: int, step: bool = False) -> list[Mixing]:
        """Steps 3 and the main attention (module docstring). Forward: full square as transformers runs it,
        causal over the top-k pairs. A decode step: the indexer over every key (reading each cached indexer key
        once), the absorbed attention over the min(k, keys) gathered rows."""
        Hi, Di = self.index_n_heads, self.index_head_dim
        pairs = causal_pairs(queries, keys)
        index = [Mixing("index_qk", "indexer scores q_I·k_I", (queries, Di, keys), Hi, 2 * Hi * Di * pairs,
                        Di * keys, io=Hi * queries * (Di + keys)),
                 Mixing("index_sum", "indexer weighted sum over heads", (1, Hi, keys), queries, 2 * Hi * pairs)]
        index = [] if self.index_shared else index
        heads, h, hv = self.decode_score_dims() if step else self.score_dims()
        if step and queries == 1:  # the min(k, keys) rows gathered, each read once
            n = self.selected(queries, keys)
            return index + score_mixing(heads, h, hv, 1, n, n, self.kv_elements(), 0)
        sparse = topk_pairs(queries, keys, self.index_topk)  # dense over the square, top-k pairs effective
        main = score_mixing(heads, h, hv, queries, keys, sparse, self.kv_elements(), 0)
        return index + [Mixing(m.name, m.label + " (top-k keys effective)", m.shape, m.copies, m.causal_flops,
                               m.state_read, m.state_dtype, m.io) for m in main]

    def elementwise(self, queries: int, keys: int, step: bool = False) -> list[Elementwise]:
        """Latent attention's, plus the indexer's: the K LayerNorm, RoPE on its H_i query heads' and its one key's
        h_r channels, the ReLU over H_i·queries·keys scores (1 FLOP each), the top-k selection over the
        queries·keys index scores (counted as traffic, 0 FLOPs)."""
        Hi = self.index_n_heads
        if self.index_shared:
            return super().elementwise(queries, keys, step)
        return super().elementwise(queries, keys, step) + [
            Elementwise("qk_norm", "indexer K norm", queries * self.index_head_dim, self.index_norm()),
            Elementwise("rope", "RoPE on the indexer's Q and K", queries * (Hi + 1) * self.qk_rope_head_dim),
            Elementwise("relu", "indexer ReLU", Hi * queries * keys, per_element=1),
            Elementwise("copy", "top-k selection", queries * keys, per_element=0)]

    def kernel(self, explicit_mask: bool) -> str:
        """The top-k mask is explicit: SDPA runs its math kernel (the scores written out)."""
        return "math"

    def saved(self, batch: int, seq: int, e: int, kernel: str, dropout: bool,
              sources: Optional[int] = None) -> dict[str, int]:
        """Latent attention's under the math kernel (the scores kept); the indexer runs without gradient and keeps
        nothing, and the top-k mask, built without gradient and added to the scores, is not kept either."""
        return super().saved(batch, seq, e, "math", dropout)

    def working_set(self, kernel: str, length: int, sources: Optional[int] = None) -> int:
        """Latent attention's (math kernel), plus the indexer's queries and its fp32 scores, H_i·length per
        token, and its (1 per key) index scores."""
        Hi = self.index_n_heads
        if self.index_shared:
            return super().working_set("math", length)
        return super().working_set("math", length) + Hi * self.index_head_dim + (Hi + 1) * length

    def state(self) -> list[StateTensor]:
        """Latent attention's [c | k_r] and the indexer key (D_i) of every position, in the cache dtype; a shared
        layer's [c | k_r] alone."""
        if self.index_shared:
            return super().state()
        return super().state() + [StateTensor("index_k", self.index_head_dim, shape=(1, self.index_head_dim))]

    def expanded_state(self) -> list[StateTensor]:
        """What a runtime without MLA keeps: the expanded K and V heads, and the indexer keys still."""
        return super().expanded_state() + ([] if self.index_shared else self.state()[-1:])

    module = "tfcalc.model.sparse_latent:SparseLatentAttention"
