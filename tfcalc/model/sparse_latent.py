"""DeepSeek Sparse Attention in the real model (tfcalc.architecture.sparse_latent has the shapes, the FLOP
convention and the source), as modeling_deepseek_v32.py's DeepseekV32Attention and DeepseekV32Indexer compute it:
latent attention (tfcalc.model.latent) whose keys are limited, per query, to the index_topk the lightning indexer
scores highest among the causal ones.

The state is latent attention's rows [c | k_r] with the indexer key beside them, one buffer (B, 1, S, c + h_r + D_i)
(tfcalc.model.attention_state, packed). Fixed shapes, nothing read back to the host: the indexer scores every
slot of the span under the step's mask (-inf where a slot is not seen), ``torch.topk`` picks k = min(index_topk,
S) slots on the device (S the span: a static shape), then
- a forward pass (prefill, training, a verify step): the main attention runs dense over the span under the
  causal mask with the unselected keys hidden too, as transformers' eager and SDPA paths do;
- a decode step (one query): the k selected rows [c | k_r] are gathered from the cache and attended to in the
  absorbed form (tfcalc.model.latent_absorbed): a sparse step whose reads are k latent rows and S indexer keys.
Ties: keys whose index scores are exactly equal (every head's ReLU at 0 gives 0) are broken as torch.topk breaks
them, which may differ between spans of different widths (a prompt's T keys, a step's bucket of slots) and from
transformers' choice: DSA leaves them undefined. The tests use enough indexer heads that no tie falls at the k-th
place (with 4 heads of random weights, rows with keys at exactly 0 do occur). Shapes as (B, nh, T, hs)."""

from __future__ import annotations

import torch
from torch import nn

from tfcalc.architecture.sparse_latent import SparseLatentAttention as SparseSpec
from tfcalc.errors import InputError
from tfcalc.model.latent import LatentAttention, deinterleave
from tfcalc.model.latent_absorbed import absorbed_attention, cache_keys
from tfcalc.model.layers import Linear, attend, make_norm, merge_heads
from tfcalc.model.positions import rotate


class Indexer(nn.Module):
    """DeepseekV32Indexer: wq_b, wk, k_norm, weights_proj (transformers' names, so checkpoints map by name)."""

    def __init__(self, spec: SparseSpec):
        super().__init__()
        self.n_head, self.dim, self.rope_dim = spec.index_n_heads, spec.index_head_dim, spec.qk_rope_head_dim
        self.interleave = spec.index_interleave
        self.wq_b = Linear(spec.q_lora_rank, self.n_head * self.dim, bias=False)
        self.wk = Linear(spec.d_model, self.dim, bias=False)
        self.k_norm = make_norm(spec.index_norm())
        self.weights_proj = Linear(spec.d_model, self.n_head, bias=False)

    def _rotate(self, x: torch.Tensor, rope) -> torch.Tensor:
        """x (B, T, n, D_i): RoPE on the first h_r channels, rotate-half (V3.2) or interleaved pairs (GLM-5: taken
        to the rotate-half layout first, as the main attention does; q and k alike, so every q·k is the same)."""
        if rope is None:
            return x
        cos, sin = (t[..., None, :] for t in rope)  # (T, 1, h_r) or (B, T, 1, h_r)
        x_rot, x_pass = x.split([self.rope_dim, self.dim - self.rope_dim], dim=-1)
        x_rot = deinterleave(x_rot) if self.interleave else x_rot
        return torch.cat([rotate(x_rot, cos, sin), x_pass], dim=-1)  # signed sine

    def forward(self, x: torch.Tensor, q_resid: torch.Tensor, rope) -> tuple[torch.Tensor, ...]:
        """The indexer's projections (a module call, so FlopCounterMode puts them with the attention's
        projections; the scores are position mixing, ``index_scores``): x (B, T, d), q_resid (B, T, c_q) ->
        queries (B, T, H_i, D_i) and keys (B, T, D_i), rotated, and the head weights (B, T, H_i) in fp32, times
        H_i^-1/2 (DeepseekV32Indexer.forward)."""
        B, T, _ = x.shape
        q = self._rotate(self.wq_b(q_resid).view(B, T, self.n_head, self.dim), rope)  # (B, T, H_i, D_i)
        k = self._rotate(self.k_norm(self.wk(x)).view(B, T, 1, self.dim), rope)[:, :, 0]  # (B, T, D_i)
        return q, k, self.weights_proj(x).float() * self.n_head ** -0.5


def index_scores(q: torch.Tensor, keys: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """Index scores (B, T, S) in fp32 of the queries q (B, T, H_i, D_i) against the S keys (B, S, D_i), unmasked:
    Σ_h w_h · ReLU(D_i^-1/2 · q_h · k), w (B, T, H_i) (DeepseekV32Indexer.forward)."""
    s = torch.matmul(q.float(), keys.float().mT[:, None]) * q.shape[-1] ** -0.5  # (B, T, H_i, S)
    return torch.matmul(w[:, :, None], torch.relu(s))[:, :, 0]  # (B, T, S)


class SparseLatentAttention(LatentAttention):
    def __init__(self, spec: SparseSpec):
        super().__init__(spec)
        self.topk = spec.index_topk
        # GLM-5's shared layer: no indexer, the top-k of the last earlier full layer (set by link, held outside
        # the module tree), as GlmMoeDsaAttention takes prev_topk_indices; a full layer keeps its top-k for them
        self.indexer = None if spec.index_shared else Indexer(spec)
        self.top_source: tuple = ()
        self.last_top: torch.Tensor | None = None

    @staticmethod
    def _visible(mask: torch.Tensor | None, B: int, T: int, S: int, device) -> torch.Tensor:
        """The additive (B, T, S) mask of the keys each query may see: the step's, or causal built on the device."""
        if mask is None:
            seen = torch.ones(T, S, dtype=torch.bool, device=device).tril(S - T)
            return torch.zeros(T, S, device=device).masked_fill(~seen, float("-inf")).expand(B, T, S)
        m = mask.float()
        return m.reshape((1,) * (4 - m.dim()) + tuple(m.shape))[:, 0].expand(B, T, S)

    def forward(self, x: torch.Tensor, rope=None, mask: torch.Tensor | None = None, store=None) -> torch.Tensor:
        B, T, _ = x.shape
        q_resid = self.q_a_norm(self.q_a(x))  # (B, T, c_q)
        q_nope, q_rot = self.q_b(q_resid).view(B, T, self.n_head, -1).split([self.nope, self.rope_dim], dim=-1)
        latent, k_rot = self.kv_a(x).split([self.rank, self.rope_dim], dim=-1)
        latent, k_rot = self.kv_a_norm(latent), k_rot.view(B, T, 1, self.rope_dim)
        if rope is not None:
            q_rot, k_rot = self._rotate(q_rot, rope), self._rotate(k_rot, rope)
        latent, k_rot = latent[:, None], k_rot.transpose(1, 2)  # (B, 1, T, ...)
        if self.indexer is None:
            if not self.top_source or self.top_source[0].last_top is None:
                raise InputError("a layer that reuses another layer's top-k has no full indexer layer before it")
            if store is not None:
                latent, k_rot = store(latent, k_rot)  # (B, 1, S, ...)
            S = latent.shape[2]
            visible = self._visible(mask, B, T, S, x.device)  # (B, T, S), 0 or -inf
            top = self.top_source[0].last_top  # (B, T, k): the source's, over the same span of slots
        else:
            with torch.no_grad():  # no gradient to the indexer (DeepseekV32Indexer.forward is torch.no_grad too)
                index_q, index_k, index_w = self.indexer(x, q_resid, rope)  # (B, T, H_i, D_i), (B, T, D_i), (B, T, H_i)
            index_k = index_k[:, None]  # (B, 1, T, D_i)
            if store is not None:
                latent, k_rot, index_k = store(latent, k_rot, index_k)  # (B, 1, S, ...)
            S = latent.shape[2]
            visible = self._visible(mask, B, T, S, x.device)  # (B, T, S), 0 or -inf
            with torch.no_grad():
                scores = index_scores(index_q, index_k[:, 0], index_w) + visible  # (B, T, S)
                top = scores.topk(min(self.topk, S), dim=-1).indices  # (B, T, k): on the device
            self.last_top = top
        if store is not None and T == 1 and self.absorb:  # a decode step: the k selected rows only
            rows = cache_keys(latent[:, 0], k_rot[:, 0])  # (B, S, c + h_r)
            picked = rows.gather(1, top[:, 0, :, None].expand(B, top.shape[-1], rows.shape[-1]))  # (B, k, c + h_r)
            seen = visible.gather(-1, top)[:, None]  # (B, 1, 1, k): a pick beyond the causal keys stays hidden
            lat, kr = picked.split([self.rank, self.rope_dim], dim=-1)
            y = absorbed_attention(q_nope, q_rot, lat, kr, self.kv_b.weight, self.scale, seen.to(x.dtype))
            return self.out(y.flatten(2))  # (B, 1, H·h_v) -> (B, 1, d)
        keep = torch.zeros(B, T, S, dtype=torch.bool, device=x.device).scatter(-1, top, True)
        sparse_mask = visible.masked_fill(~keep, float("-inf"))[:, None].to(x.dtype)  # (B, 1, T, S)
        kv = self.kv_b(latent[:, 0]).view(B, S, self.n_head, self.nope + self.v_dim).transpose(1, 2)
        k_nope, v = kv.split([self.nope, self.v_dim], dim=-1)  # (B, nh, S, h_n), (B, nh, S, h_v)
        k = torch.cat([k_nope, k_rot.expand(B, self.n_head, S, self.rope_dim)], dim=-1)  # (B, nh, S, h_n + h_r)
        q = torch.cat([q_nope, q_rot], dim=-1).transpose(1, 2)  # (B, nh, T, h_n + h_r)
        y = attend(q, k, v, sparse_mask, False, self.scale, None)  # (B, nh, T, h_v)
        return self.out(merge_heads(y))


def link(blocks: nn.ModuleList) -> None:
    """Each shared-indexer layer's source: the last earlier layer that runs its indexer (modeling_glm_moe_dsa.py
    passes topk_indices from layer to layer; a shared layer returns what it was given). A stack cut where a shared
    layer has no full one before it (a pipeline stage) is refused as it runs."""
    source = None
    for block in blocks:
        attn = block.attn
        if isinstance(attn, SparseLatentAttention):
            if attn.indexer is not None:
                source = attn
            elif source is not None:
                attn.top_source = (source,)
