"""Multi-head latent attention's decode in its absorbed form (DeepSeek-V2, arXiv 2405.04434, sec. 2.1.2:
"we can absorb W^UK into W^UQ, and W^UV into W^O"), as serving stacks run it (vLLM's and SGLang's MLA
decode, FlashMLA): the cached latents are never expanded into per-head keys and values.

Shapes (tfcalc.architecture.latent): H heads, h_n no-position and h_r rotary channels per query/key head,
h_v per value head, c = kv_lora_rank. W_kvb (H·(h_n + h_v), c) holds, per head, W_UK (h_n, c) over W_UV
(h_v, c). The naive form (tfcalc.model.latent) computes k_n,h = W_UK,h · c_s and v_h = W_UV,h · c_s for every
cached slot s, then attends with full-width heads. Since

    q_n,h · k_n,h,s = q_n,h · (W_UK,h c_s) = (W_UK,hᵀ q_n,h) · c_s        and
    Σ_s p_h,s v_h,s = Σ_s p_h,s W_UV,h c_s = W_UV,h (Σ_s p_h,s c_s),

a step instead
1. absorbs the queries into the latent space: q̃_h = W_UK,hᵀ q_n,h, (B, T, H, h_n) -> (B, T, H, c);
2. attends multi-query over the cache, one shared key head [c | k_r] of c + h_r channels and one value head
   c: scores_h,s = [q̃_h | q_r,h] · [c_s | k_r,s] (the same logits as the naive form's, so the same softmax
   scale (h_n + h_r)^-1/2 and YaRN's mscale², applied identically), o_h = softmax · c, (B, T, H, c);
3. takes the outputs out of the latent: y_h = W_UV,h o_h, (B, T, H, h_v), then W_o as before.

FLOPs per step, B sequences, T queries, S slots: 2·B·T·H·h_n·c (step 1), 2·B·T·H·S·(c + h_r) scores and
2·B·T·H·S·c attention·V (step 2), 2·B·T·H·c·h_v (step 3); no term of W_kvb over the S slots (the naive
form's 2·B·S·c·H·(h_n + h_v)). tfcalc.count.model.flops counts a decode step so (``absorbed``).

The heads are laid out as the query rows of one SDPA call (B, 1, T·H, c + h_r) against one key head: what
FlashMLA does, and what keeps the cache read once per step rather than once per head. SDPA needs the
queries and keys of one width, hence [q̃ | q_r] against [c | k_r]; when the latent and the rotary key lie
side by side in one buffer (a cache of rows [c | k_r]) the keys are a view of it, else they are concatenated.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def split_kv_b(weight: torch.Tensor, n_head: int, nope: int, v_dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """W_kvb (H·(h_n + h_v), c) -> W_UK (H, h_n, c) and W_UV (H, h_v, c), views: each head's rows are
    [k_n | v] (modeling_deepseek_v3.py splits kv_b_proj's output per head the same way)."""
    w = weight.view(n_head, nope + v_dim, weight.shape[-1])  # (H, h_n + h_v, c)
    return w[:, :nope], w[:, nope:]


def cache_keys(latent: torch.Tensor, k_rot: torch.Tensor) -> torch.Tensor:
    """(B, S, c) latents and (B, S, h_r) rotary keys -> (B, S, c + h_r) keys [c | k_r]: a view when the two
    are the halves of one buffer's rows (no copy of the cache), else a concatenation (and under torch.compile,
    whose fake tensors have no address: the compiler fuses the concatenation into its consumer)."""
    B, S, c = latent.shape
    adjacent = (not torch.compiler.is_compiling() and latent.stride() == k_rot.stride() and latent.stride(-1) == 1
                and latent.dtype == k_rot.dtype and latent.stride(-2) >= c + k_rot.shape[-1]
                and latent.device == k_rot.device and k_rot.data_ptr() == latent.data_ptr() + c * latent.element_size())
    if adjacent:
        return latent.as_strided((B, S, c + k_rot.shape[-1]), latent.stride())
    return torch.cat([latent, k_rot], dim=-1)


def per_head(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """x (B, T, H, k) @ w (H, k, n) -> (B, T, H, n): one matmul per head, a bmm over the heads (einsum would
    turn a contraction over one channel into a broadcast multiply, which FlopCounterMode does not see)."""
    B, T, H, k = x.shape
    y = torch.bmm(x.permute(2, 0, 1, 3).reshape(H, B * T, k), w)  # (H, B·T, n)
    return y.view(H, B, T, -1).permute(1, 2, 0, 3)


def _row_mask(mask: torch.Tensor | None, B: int, H: int, T: int) -> torch.Tensor | None:
    """A mask broadcastable to the naive form's (B, H, T, S) -> one for the rows (B, 1, T·H, S), row t·H + h
    being query t's head h. Additive (float) or boolean (True: attend), as SDPA takes either."""
    if mask is None:
        return None
    m = mask.reshape((1,) * (4 - mask.dim()) + tuple(mask.shape))  # (b, h, t, S)
    if m.shape[1] == 1 and m.shape[2] == 1:  # the same over heads and queries: broadcasts over the rows
        return m
    m = m.transpose(1, 2).expand(m.shape[0], T, H, m.shape[-1])  # (b, T, H, S)
    return m.reshape(m.shape[0], 1, T * H, m.shape[-1])


def absorbed_attention(q_nope: torch.Tensor, q_rot: torch.Tensor, latent: torch.Tensor, k_rot: torch.Tensor,
                       kv_b_weight: torch.Tensor, scale: float, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Steps 1-3 of the module docstring, before W_o.

    q_nope (B, T, H, h_n) and q_rot (B, T, H, h_r): the step's queries, RoPE applied; latent (B, S, c): the
    cached (normed) latents of the S slots; k_rot (B, S, h_r): the cached rotated keys; kv_b_weight W_kvb
    (H·(h_n + h_v), c); scale: the naive form's softmax scale; mask: broadcastable to (B, H, T, S), additive
    or boolean (True: attend), None: every slot seen by every query. -> (B, T, H, h_v)."""
    B, T, H, nope = q_nope.shape
    c = latent.shape[-1]
    w_uk, w_uv = split_kv_b(kv_b_weight, H, nope, kv_b_weight.shape[0] // H - nope)
    q_lat = per_head(q_nope, w_uk)  # (B, T, H, c): step 1
    q = torch.cat([q_lat, q_rot], dim=-1).reshape(B, 1, T * H, c + q_rot.shape[-1])  # (B, 1, T·H, c + h_r)
    k = cache_keys(latent, k_rot)[:, None]  # (B, 1, S, c + h_r): one key head shared by every row
    o = F.scaled_dot_product_attention(q, k, latent[:, None], attn_mask=_row_mask(mask, B, H, T), scale=scale)
    o = o.reshape(B, T, H, c)  # (B, T, H, c): step 2, still in the latent space
    return per_head(o, w_uv.mT)  # (B, T, H, h_v): step 3
