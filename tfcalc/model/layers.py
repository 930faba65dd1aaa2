"""The sub-layers of the real model: linear layers, norms, self- and cross-attention, the FFN and the
mixture of experts. Each takes the config, nanoGPT-style; shapes are written as (B, nh, T, hs).

Attention runs ``F.scaled_dot_product_attention`` unless the scores are soft-capped (Gemma 2): SDPA has
no hook between Q·Kᵀ and the softmax, so ``_capped_attention`` writes the math out (the same two
matmuls, as modeling_gemma2.py's eager_attention_forward does)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from tfcalc.config import ModelConfig
from tfcalc.model.positions import apply_rope

_ACTIVATIONS = {
    "gelu": F.gelu,
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "relu": F.relu,
    "silu": F.silu,
}



def make_norm(cfg: ModelConfig, width: int | None = None) -> nn.Module:
    """The config's norm over ``width`` channels (default d_model; Q/K norms are d_head wide)."""
    width = cfg.d_model if width is None else width
    if cfg.norm == "rmsnorm":
        return nn.RMSNorm(width, eps=cfg.norm_eps)
    return nn.LayerNorm(width, eps=cfg.norm_eps, bias=cfg.norm_has_bias)


class Linear(nn.Linear):
    """nn.Linear without its own random init: every tfcalc model is built on meta first and filled once
    by init_weights(), so kaiming_uniform_ here would be wasted work (a third of the meta build time)."""

    def reset_parameters(self) -> None:
        pass


class LMHead(Linear):
    """The output projection, bias-free. When the vocabulary is not a multiple of 16 (GPT-2 and GPT-3's
    50257), a (tokens, vocab) output has rows of an odd length, and BLAS libraries run such a matmul
    well below their peak (nanoGPT pads GPT-2's vocabulary to 50304 for this reason: model.py, GPTConfig;
    on GPUs an unaligned leading dimension loses the tensor-core path: NVIDIA's "Matrix Multiplication
    Background User's Guide", tensor core requirements). The product is then computed as
    weight @ xᵀ, whose output rows are the tokens, and returned as its transposed view: the same
    values and FLOPs (2·tokens·d·vocab), a (..., vocab) tensor with strides (.., 1, tokens)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.out_features % 16 == 0:
            return super().forward(x)
        flat = x.reshape(-1, self.in_features)  # (N, d)
        y = (self.weight @ flat.mT).mT.reshape(*x.shape[:-1], self.out_features)  # (N, V) view -> (..., V)
        return y if self.bias is None else y + self.bias


def _embedding(n: int, d: int) -> nn.Embedding:
    """An embedding whose weight is left uninitialized (init_weights fills it). nn.Embedding's own
    init calls normal_, which on the meta device goes through torch._refs and imports torch._dynamo:
    two seconds of start-up for nothing."""
    return nn.Embedding(n, d, _weight=torch.empty(n, d))


def _merge_heads(y: torch.Tensor) -> torch.Tensor:
    """(B, nh, T, hs) -> (B, T, nh*hs)."""
    B, nh, T, hs = y.shape
    return y.transpose(1, 2).reshape(B, T, nh * hs)


def _split_heads(x: torch.Tensor, n_head: int) -> torch.Tensor:
    """(B, T, nh*hs) -> (B, nh, T, hs)."""
    B, T, _ = x.shape
    return x.view(B, T, n_head, -1).transpose(1, 2)


def softcap(x: torch.Tensor, cap: float | None) -> torch.Tensor:
    """cap · tanh(x / cap) (Gemma 2's soft-capping of scores and logits); x when cap is None."""
    return x if cap is None else torch.tanh(x / cap) * cap


def attend(q, k, v, mask, causal: bool, scale: float | None, cap: float | None) -> torch.Tensor:
    """(B, nh, Tq, hs) queries against (B, nkv, Tk, hs) keys and values -> (B, nh, Tq, hs). A mask, when
    given, is additive and already holds the causal part (ALiBi, T5's bias)."""
    gqa = k.shape[1] != q.shape[1]
    if cap is None:
        return F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, is_causal=causal and mask is None, scale=scale, enable_gqa=gqa
        )
    if gqa:  # query head i reads key/value head i // group, as SDPA's enable_gqa and HF's repeat_kv do
        group = q.shape[1] // k.shape[1]
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    scores = softcap(q @ k.mT * (q.shape[-1] ** -0.5 if scale is None else scale), cap)  # (B, nh, Tq, Tk)
    if mask is not None:
        scores = scores + mask
    elif causal:
        Tq, Tk = scores.shape[-2:]
        allowed = torch.ones(Tq, Tk, dtype=torch.bool, device=q.device).tril(Tk - Tq)
        scores = scores.masked_fill(~allowed, float("-inf"))
    return scores.softmax(dim=-1) @ v


class Attention(nn.Module):
    """Self-attention: causal in a decoder, bidirectional in an encoder. Optional: a norm over each
    head's Q and K before RoPE (Qwen3, modeling_qwen3.py: q_norm, k_norm), partial rotary, a scale
    other than 1/sqrt(d_head), soft-capped scores."""

    def __init__(self, cfg: ModelConfig, causal: bool = True):
        super().__init__()
        self.n_head, self.n_kv_head, self.head_dim = cfg.n_head, cfg.kv_heads, cfg.head_dim
        self.q_dim, self.kv_dim = cfg.q_dim, cfg.kv_dim
        self.causal, self.scale, self.cap = causal, cfg.attn_scale, cfg.attn_softcap
        self.qkv = Linear(cfg.d_model, cfg.q_dim + 2 * cfg.kv_dim, bias=cfg.attn_bias)
        self.out = Linear(cfg.q_dim, cfg.d_model, bias=cfg.o_bias)
        self.q_norm = make_norm(cfg, cfg.head_dim) if cfg.qk_norm else None
        self.k_norm = make_norm(cfg, cfg.head_dim) if cfg.qk_norm else None

    def forward(self, x: torch.Tensor, rope=None, mask: torch.Tensor | None = None, store=None) -> torch.Tensor:
        """x: (B, T, d). ``store``, when decoding, writes the new K and V into the cache and returns the
        keys and values to attend to (tfcalc.model.cache.StaticCache.store)."""
        B, T, _ = x.shape
        q, k, v = self.qkv(x).split([self.q_dim, self.kv_dim, self.kv_dim], dim=-1)
        if self.q_norm is not None:  # on (B, T, nh, hs), as Qwen3 does: the norm output keeps the (B, T, ...)
            # layout, so SDPA's output does too and merging the heads stays a view (no copy)
            q = self.q_norm(q.view(B, T, self.n_head, self.head_dim)).flatten(2)
            k = self.k_norm(k.view(B, T, self.n_kv_head, self.head_dim)).flatten(2)
        if rope is not None:  # on (B, T, nh, hs) views: see apply_rope
            cos, sin = (t[:, None, :] for t in rope)  # (T, 1, r)
            q = apply_rope(q.view(B, T, self.n_head, self.head_dim), cos, sin).flatten(2)
            k = apply_rope(k.view(B, T, self.n_kv_head, self.head_dim), cos, sin).flatten(2)
        q = _split_heads(q, self.n_head)  # (B, nh, T, hs)
        k, v = _split_heads(k, self.n_kv_head), _split_heads(v, self.n_kv_head)  # (B, nkv, T, hs)
        if store is not None:
            k, v = store(k, v)  # (B, nkv, S, hs): the cached keys a decode step attends to
        # A single query needs no causal mask: every key it is given is in its past (and SDPA's is_causal
        # would align it with the first key, not the last).
        y = attend(q, k, v, mask, self.causal and T > 1, self.scale, self.cap)  # (B, nh, T, hs)
        return self.out(_merge_heads(y))


class CrossAttention(nn.Module):
    """Vaswani et al. 2017, sec. 3.2.3: queries from the decoder, keys and values from the encoder output
    (one fused Linear, rows [K | V]) or, in a decoder-only stack, from states given to forward. No mask
    (every target position sees the whole source), no positions."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.n_head, self.n_kv_head, self.kv_dim = cfg.n_head, cfg.kv_heads, cfg.kv_dim
        self.scale, self.cap = cfg.attn_scale, cfg.attn_softcap
        self.q = Linear(cfg.d_model, cfg.q_dim, bias=cfg.attn_bias)
        self.kv = Linear(cfg.d_model, 2 * cfg.kv_dim, bias=cfg.attn_bias)
        self.out = Linear(cfg.q_dim, cfg.d_model, bias=cfg.o_bias)

    def project(self, memory: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(B, S, d) encoder output -> K and V, (B, nkv, S, hs) each: computed once per source when decoding."""
        k, v = self.kv(memory).split(self.kv_dim, dim=-1)
        return _split_heads(k, self.n_kv_head), _split_heads(v, self.n_kv_head)

    def forward(self, x: torch.Tensor, memory: torch.Tensor | None, kv=None) -> torch.Tensor:
        """x: (B, T, d) decoder stream; memory: (B, S, d) encoder output, or kv: its cached project()."""
        q = _split_heads(self.q(x), self.n_head)  # (B, nh, T, hs)
        k, v = kv if kv is not None else self.project(memory)  # (B, nkv, S, hs)
        y = attend(q, k, v, None, False, self.scale, self.cap)  # (B, nh, T, hs)
        return self.out(_merge_heads(y))


class FeedForward(nn.Module):
    """d_model -> width -> d_model (width: d_ff, or a shared expert's own width)."""

    def __init__(self, cfg: ModelConfig, width: int | None = None):
        super().__init__()
        self.gated = cfg.gated_ffn
        self.act = _ACTIVATIONS[cfg.activation]
        width = cfg.ffn_dim if width is None else width
        self.up = Linear(cfg.d_model, width * (2 if cfg.gated_ffn else 1), bias=cfg.ffn_bias)  # rows [gate | up]
        self.down = Linear(width, cfg.d_model, bias=cfg.ffn_bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.up(x)
        if self.gated:
            gate, up = h.chunk(2, dim=-1)
            h = self.act(gate) * up
        else:
            h = self.act(h)
        return self.down(h)


class MixtureOfExperts(nn.Module):
    """n_expert FFNs and a bias-free router; each token runs its top n_expert_active experts, their
    outputs weighted by the softmax of the chosen router logits (Jiang et al. 2024, Mixtral, eq. 1-2), or
    (router_norm_topk false) by their softmax over all experts, not renormalized (Qwen2-MoE with
    norm_topk_prob false). A shared expert, when configured, runs on every token and is added, times
    sigmoid of a one-output gate (modeling_qwen2_moe.py, Qwen2MoeSparseMoeBlock).

    With a capacity factor (Switch Transformers, sec. 2.2) each expert runs a fixed buffer of C rows:
    the first C tokens routed to it, in position order, padded with zeros when fewer come; the rest are
    dropped (their residual carries them). The experts then multiply E·C rows, whatever the routing."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.top_k, self.renormalize = cfg.experts_active, cfg.router_norm_topk
        self.router = Linear(cfg.d_model, cfg.experts, bias=False)
        self.experts = nn.ModuleList(FeedForward(cfg) for _ in range(cfg.experts))
        shared = cfg.shared_expert_d_ff
        self.shared = FeedForward(cfg, shared) if shared else None
        self.shared_gate = Linear(cfg.d_model, 1, bias=False) if cfg.shared_expert_gate else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, d = x.shape
        flat = x.reshape(B * T, d)  # (N, d)
        out = self.routed(flat)
        if self.shared is not None:
            shared = self.shared(flat)
            out = out + (shared if self.shared_gate is None else torch.sigmoid(self.shared_gate(flat)) * shared)
        return out.view(B, T, d)

    def routed(self, flat: torch.Tensor) -> torch.Tensor:
        """(N, d) -> (N, d): the weighted sum of each token's top-k experts."""
        logits = self.router(flat)  # (N, E)
        if self.renormalize:
            top, chosen = logits.topk(self.top_k, dim=-1)  # (N, k) each
            weights = top.float().softmax(dim=-1).to(flat.dtype)  # (N, k)
        else:
            weights, chosen = logits.float().softmax(dim=-1).topk(self.top_k, dim=-1)
            weights = weights.to(flat.dtype)
        capacity = self.cfg.expert_capacity(flat.shape[0])
        if flat.is_meta:
            return self._meta_forward(flat, weights, capacity)
        out = torch.zeros_like(flat)
        for e, expert in enumerate(self.experts):
            token, slot = (chosen == e).nonzero(as_tuple=True)  # the tokens routed to expert e, in order
            rows = flat.index_select(0, token[:capacity] if capacity is not None else token)  # (n_e, d)
            if capacity is not None:
                token, slot = token[:capacity], slot[:capacity]  # past the capacity: dropped
                rows = F.pad(rows, (0, 0, 0, capacity - rows.shape[0]))  # (C, d): a fixed-size buffer
            y = expert(rows)[: token.shape[0]] * weights[token, slot, None]  # (n_e, d)
            out.index_add_(0, token, y)
        return out

    def _meta_forward(self, flat: torch.Tensor, weights: torch.Tensor, capacity: int | None) -> torch.Tensor:
        """On meta there are no values, so no routing (nonzero cannot run): the N·k token-expert pairs are
        dealt out evenly instead, in contiguous runs, one run per expert (C rows each with a capacity).
        Any routing does the same matmul FLOPs, since the experts together always see N·k rows (E·C with
        a capacity); the output depends on every expert, so a backward pass counts theirs too."""
        n_pairs, n_expert = flat.shape[0] * self.top_k, len(self.experts)
        pairs = flat.repeat_interleave(self.top_k, dim=0)  # (N·k, d): each token once per chosen expert
        if capacity is None:
            runs = [n_pairs // n_expert + (e < n_pairs % n_expert) for e in range(n_expert)]
        else:
            runs, pairs = [capacity] * n_expert, F.pad(pairs, (0, 0, 0, max(0, capacity * n_expert - n_pairs)))
            pairs = pairs[: capacity * n_expert]
        y = torch.cat([expert(run) for expert, run in zip(self.experts, pairs.split(runs), strict=True)])  # (Σ runs, d)
        y = F.pad(y, (0, 0, 0, max(0, n_pairs - y.shape[0])))[:n_pairs]  # (N·k, d): dropped pairs are 0
        return (y.view(*weights.shape, -1) * weights[..., None]).sum(dim=1)  # (N, d)
