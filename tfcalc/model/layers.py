"""The sub-layers of the real model: linear layers, norms, self- and cross-attention, the FFN and the
mixture of experts. Each takes the config, nanoGPT-style; shapes are written as (B, nh, T, hs)."""

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



def make_norm(cfg: ModelConfig) -> nn.Module:
    if cfg.norm == "rmsnorm":
        return nn.RMSNorm(cfg.d_model, eps=cfg.norm_eps)
    return nn.LayerNorm(cfg.d_model, eps=cfg.norm_eps, bias=cfg.norm_bias)


class Linear(nn.Linear):
    """nn.Linear without its own random init: every tfcalc model is built on meta first and filled once
    by init_weights(), so kaiming_uniform_ here would be wasted work (a third of the meta build time)."""

    def reset_parameters(self) -> None:
        pass


class LMHead(Linear):
    """The output projection, bias-free. When the vocabulary is not a multiple of 16 (GPT-2 and GPT-3's
    50257), a (tokens, vocab) output has rows of an odd length, and BLAS libraries run such a matmul
    well below their peak (measured here: 108 GFLOP/s against 152 on this machine's CPU, fp32; on GPUs
    an unaligned leading dimension loses the tensor-core path). The product is then computed as
    weight @ xᵀ, whose output rows are the tokens, and returned as its transposed view: the same
    values and FLOPs (2·tokens·d·vocab), a (..., vocab) tensor with strides (.., 1, tokens)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.out_features % 16 == 0:
            return super().forward(x)
        flat = x.reshape(-1, self.in_features)  # (N, d)
        return (self.weight @ flat.mT).mT.reshape(*x.shape[:-1], self.out_features)  # (N, V) view -> (..., V)


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


class Attention(nn.Module):
    """Self-attention: causal in a decoder, bidirectional in an encoder."""

    def __init__(self, cfg: ModelConfig, causal: bool = True):
        super().__init__()
        self.n_head, self.n_kv_head, self.head_dim = cfg.n_head, cfg.kv_heads, cfg.head_dim
        self.q_dim, self.kv_dim = cfg.q_dim, cfg.kv_dim
        self.causal = causal
        self.qkv = Linear(cfg.d_model, cfg.q_dim + 2 * cfg.kv_dim, bias=cfg.attn_bias)
        self.out = Linear(cfg.q_dim, cfg.d_model, bias=cfg.attn_bias)

    def forward(self, x: torch.Tensor, rope=None, mask: torch.Tensor | None = None, store=None) -> torch.Tensor:
        """x: (B, T, d). ``store``, when decoding, writes the new K and V into the cache and returns the
        keys and values to attend to (tfcalc.model.cache.StaticCache.store)."""
        q, k, v = self.qkv(x).split([self.q_dim, self.kv_dim, self.kv_dim], dim=-1)
        q = _split_heads(q, self.n_head)  # (B, nh, T, hs)
        k, v = _split_heads(k, self.n_kv_head), _split_heads(v, self.n_kv_head)  # (B, nkv, T, hs)
        if rope is not None:
            cos, sin = rope
            q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        if store is not None:
            k, v = store(k, v)  # (B, nkv, S, hs): the cached keys a decode step attends to
        # A mask, when given, already holds the causal part. A single query needs none: every key it is
        # given is in its past (and SDPA's is_causal would align it with the first key, not the last).
        causal = self.causal and mask is None and q.shape[2] > 1
        y = F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, is_causal=causal, enable_gqa=self.n_kv_head != self.n_head
        )  # (B, nh, T, hs)
        return self.out(_merge_heads(y))


class CrossAttention(nn.Module):
    """Vaswani et al. 2017, sec. 3.2.3: queries from the decoder, keys and values from the encoder output
    (one fused Linear, rows [K | V]). No mask (every target position sees the whole source), no positions."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.n_head, self.n_kv_head, self.kv_dim = cfg.n_head, cfg.kv_heads, cfg.kv_dim
        self.q = Linear(cfg.d_model, cfg.q_dim, bias=cfg.attn_bias)
        self.kv = Linear(cfg.d_model, 2 * cfg.kv_dim, bias=cfg.attn_bias)
        self.out = Linear(cfg.q_dim, cfg.d_model, bias=cfg.attn_bias)

    def project(self, memory: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(B, S, d) encoder output -> K and V, (B, nkv, S, hs) each: computed once per source when decoding."""
        k, v = self.kv(memory).split(self.kv_dim, dim=-1)
        return _split_heads(k, self.n_kv_head), _split_heads(v, self.n_kv_head)

    def forward(self, x: torch.Tensor, memory: torch.Tensor | None, kv=None) -> torch.Tensor:
        """x: (B, T, d) decoder stream; memory: (B, S, d) encoder output, or kv: its cached project()."""
        q = _split_heads(self.q(x), self.n_head)  # (B, nh, T, hs)
        k, v = kv if kv is not None else self.project(memory)  # (B, nkv, S, hs)
        y = F.scaled_dot_product_attention(q, k, v, enable_gqa=self.n_kv_head != self.n_head)  # (B, nh, T, hs)
        return self.out(_merge_heads(y))


class FeedForward(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.gated = cfg.gated_ffn
        self.act = _ACTIVATIONS[cfg.activation]
        width = cfg.ffn_dim * (2 if cfg.gated_ffn else 1)
        self.up = Linear(cfg.d_model, width, bias=cfg.ffn_bias)  # rows [gate | up] when gated
        self.down = Linear(cfg.ffn_dim, cfg.d_model, bias=cfg.ffn_bias)

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
    outputs weighted by the softmax of the chosen router logits (Jiang et al. 2024, Mixtral, eq. 1-2)."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.top_k = cfg.experts_active
        self.router = Linear(cfg.d_model, cfg.experts, bias=False)
        self.experts = nn.ModuleList(FeedForward(cfg) for _ in range(cfg.experts))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, d = x.shape
        flat = x.reshape(B * T, d)  # (N, d)
        logits, chosen = self.router(flat).topk(self.top_k, dim=-1)  # (N, k) each
        weights = logits.float().softmax(dim=-1).to(x.dtype)  # (N, k)
        if flat.is_meta:
            return self._meta_forward(flat, weights).view(B, T, d)
        out = torch.zeros_like(flat)
        for e, expert in enumerate(self.experts):
            token, slot = (chosen == e).nonzero(as_tuple=True)  # the tokens routed to expert e
            y = expert(flat.index_select(0, token)) * weights[token, slot, None]  # (n_e, d)
            out.index_add_(0, token, y)
        return out.view(B, T, d)

    def _meta_forward(self, flat: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
        """On meta there are no values, so no routing (nonzero cannot run): the N·k token-expert pairs are
        dealt out evenly instead, in contiguous runs, one run per expert. Any routing does the same matmul
        FLOPs, since the experts together always see N·k rows; the output depends on every expert, so a
        backward pass counts theirs too."""
        n_pairs, n_expert = flat.shape[0] * self.top_k, len(self.experts)
        pairs = flat.repeat_interleave(self.top_k, dim=0)  # (N·k, d): each token once per chosen expert
        runs = [n_pairs // n_expert + (e < n_pairs % n_expert) for e in range(n_expert)]
        y = torch.cat([expert(run) for expert, run in zip(self.experts, pairs.split(runs))])  # (N·k, d)
        return (y.view(*weights.shape, -1) * weights[..., None]).sum(dim=1)  # (N, d)
