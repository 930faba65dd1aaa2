"""Multi-head latent attention in the real model (tfcalc.architecture.latent has the shapes and the source),
as modeling_deepseek_v3.py's DeepseekV3Attention computes it: Q from x (through its compressed latent and
norm, or directly); the KV latent (normed) and one rotary key shared by the heads; RoPE on the rotary
channels; the cache keeps the latent and the rotated key (B, 1, S, c_kv) and (B, 1, S, h_r), views of one
buffer of rows [c_kv | h_r]; the keys and
values of every position attended to are expanded from it through W_kvb (the naive form), then attended
to with full-width heads (the naive form: prefill, training, a verify step). A decode step (one query per
sequence, a state present) runs the absorbed form instead (tfcalc.model.latent_absorbed: W_UK folded into
the query, W_UV into the output, multi-query over the cached latents), as serving stacks do; ``absorb =
False`` on the module keeps the naive form there too. Shapes as (B, nh, T, hs)."""

from __future__ import annotations

import torch

from tfcalc.architecture import LatentAttention as LatentSpec
from tfcalc.model.attention_state import AttentionState
from tfcalc.model.latent_absorbed import absorbed_attention
from tfcalc.model.layers import Linear, attend, make_norm, merge_heads
from tfcalc.model.mixers import MixerModule
from tfcalc.model.positions import rope_key, rotate


def deinterleave(x: torch.Tensor) -> torch.Tensor:
    """(..., r) with rotary pairs (x0, x1), (x2, x3), ... -> (x0, x2, ..., x1, x3, ...): the rotate-half
    layout in which the same rotation is apply_rope's (modeling_deepseek_v3.py,
    apply_rotary_pos_emb_interleave returns the same order; DeepSeek-V2's complex rotation gives the
    interleaved order, which leaves every Q·K dot product the same)."""
    return torch.cat([x[..., 0::2], x[..., 1::2]], dim=-1)


class LatentAttention(MixerModule):
    absorb = True  # a decode step in the absorbed form (module docstring); False: the naive form throughout

    def __init__(self, spec: LatentSpec):
        super().__init__()
        self.spec = spec
        self.n_head, self.nope, self.rope_dim = spec.n_head, spec.qk_nope_head_dim, spec.qk_rope_head_dim
        self.v_dim, self.rank = spec.v_head_dim, spec.kv_lora_rank
        self.causal, self.scale, self.interleave = spec.causal, spec.scale, spec.interleave
        # the stack's rotary table it reads, YaRN's where the component has it
        self.rope_key = None if spec.rope_theta is None else rope_key(spec.rope_theta, spec.rope_dim, spec.yarn)
        d, c_q = spec.d_model, spec.q_lora_rank
        self.q = Linear(d, spec.q_width, bias=False) if c_q is None else None
        self.q_a = Linear(d, c_q, bias=spec.bias) if c_q is not None else None
        self.q_a_norm = make_norm(spec.latent_norm(c_q)) if c_q is not None else None
        self.q_b = Linear(c_q, spec.q_width, bias=False) if c_q is not None else None
        self.kv_a = Linear(d, self.rank + self.rope_dim, bias=spec.bias)  # [latent | rotary key]
        self.kv_a_norm = make_norm(spec.latent_norm(self.rank))
        self.kv_b = Linear(self.rank, self.n_head * (self.nope + self.v_dim), bias=False)  # per head [k_nope | v]
        # Ling 3's head gate (BailingHybridAttention's g_proj): each head's output times sigmoid(g(x))
        self.g_proj = Linear(d, self.n_head, bias=False) if spec.head_gate else None
        self.out = Linear(spec.out_width, d, bias=spec.bias)
        self.scales = spec.latent_scales  # LongCat-Flash's sqrt(d / c_q), sqrt(d / c_kv), or None

    @classmethod
    def tp_refusal(cls, spec: LatentSpec) -> str | None:
        return "latent attention under TP is planned, not run"

    def new_state(self, batch: int, max_tokens: int, device, dtype: torch.dtype, spare: int = 0) -> AttentionState:
        """The latent and the rotary key of every position, allocated once as rows [c | k_r] of one buffer
        (B, 1, S, c + h_r), each a view (tfcalc.model.attention_state, ``packed``): the absorbed step reads the
        rows as its keys without concatenating the cache (tfcalc.model.latent_absorbed.cache_keys)."""
        return AttentionState(self.spec, batch, max_tokens, device, dtype, spare, packed=True)

    def _rotate(self, x: torch.Tensor, rope) -> torch.Tensor:
        """x: (B, T, n, h_r) -> rotated, in the rotate-half layout."""
        x = deinterleave(x) if self.interleave else x
        cos, sin = (t[..., None, :] for t in rope)  # (T, 1, h_r), or (B, T, 1, h_r) at per-row positions
        return rotate(x, cos, sin)  # the stack's sine is signed (positions.signed_sine)

    def forward(self, x: torch.Tensor, rope=None, mask: torch.Tensor | None = None, store=None) -> torch.Tensor:
        """x: (B, T, d). ``store``, when decoding, writes the new latents and rotary keys into the cache and
        returns the state's span to attend to (tfcalc.model.attention_state.AttentionState)."""
        B, T, _ = x.shape
        q = self.q(x) if self.q is not None else self.q_b(self.q_a_norm(self.q_a(x)))
        q = q if self.scales is None else q * self.scales[0]  # LongcatFlashMLA: the whole query
        q_nope, q_rot = q.view(B, T, self.n_head, -1).split([self.nope, self.rope_dim], dim=-1)  # (B, T, nh, ..)
        latent, k_rot = self.kv_a(x).split([self.rank, self.rope_dim], dim=-1)
        latent = self.kv_a_norm(latent)  # (B, T, c_kv)
        latent = latent if self.scales is None else latent * self.scales[1]  # scaled before it is cached
        k_rot = k_rot.view(B, T, 1, self.rope_dim)
        if rope is not None:
            q_rot, k_rot = self._rotate(q_rot, rope), self._rotate(k_rot, rope)
        latent, k_rot = latent[:, None], k_rot.transpose(1, 2)  # (B, 1, T, c_kv), (B, 1, T, h_r)
        if store is not None:
            latent, k_rot = store(latent, k_rot)  # (B, 1, S, ...): every position attended to
            if T == 1 and self.absorb:  # a decode step: no expansion of the S cached latents
                y = absorbed_attention(q_nope, q_rot, latent[:, 0], k_rot[:, 0], self.kv_b.weight, self.scale, mask)
                return self.out(self._gated(y, x).flatten(2))  # (B, 1, H·h_v) -> (B, 1, d)
        S = latent.shape[2]
        kv = self.kv_b(latent[:, 0]).view(B, S, self.n_head, self.nope + self.v_dim).transpose(1, 2)
        k_nope, v = kv.split([self.nope, self.v_dim], dim=-1)  # (B, nh, S, h_n), (B, nh, S, h_v)
        k = torch.cat([k_nope, k_rot.expand(B, self.n_head, S, self.rope_dim)], dim=-1)  # (B, nh, S, h_n + h_r)
        q = torch.cat([q_nope, q_rot], dim=-1).transpose(1, 2)  # (B, nh, T, h_n + h_r)
        y = attend(q, k, v, mask, self.causal and T > 1, self.scale, None)  # (B, nh, T, h_v)
        if self.g_proj is None:
            return self.out(merge_heads(y))
        return self.out(self._gated(y.transpose(1, 2), x).flatten(2))

    def _gated(self, y: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """y (B, T, nh, h_v) times sigmoid of the head gate (B, T, nh), computed in fp32 as transformers does."""
        if self.g_proj is None:
            return y
        return y * torch.sigmoid(self.g_proj(x).float()).to(y.dtype)[..., None]
