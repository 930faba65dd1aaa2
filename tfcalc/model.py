"""The real PyTorch transformer built from a ModelConfig.

nanoGPT-sized modules (Attention, FeedForward, Block, Transformer), each taking the config. Every
parameter here is one that tfcalc.count.params predicts; tests check the two agree tensor by tensor.

Layout choices, and why:
- Q, K and V come from one fused Linear (``attn.qkv``, rows [Q | K | V]) and the gate and up projections
  of a gated FFN from one fused Linear (``ffn.up``, rows [gate | up]), as in gpt-fast: one large matmul
  runs closer to the machine's peak than three small ones. The counts split them back by rows.
- Attention is ``F.scaled_dot_product_attention`` (fused kernels where the device has them); grouped
  query attention uses its ``enable_gqa`` flag instead of materializing repeated K/V heads.
- RoPE uses the rotate-half layout (GPT-NeoX, Hugging Face Llama); the count is the same either way.
- ``build_model(cfg, "meta")`` allocates nothing, so GPT-3 175B can be built and counted anywhere.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from tfcalc.config import ModelConfig

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


def rope_tables(cfg: ModelConfig, device=None) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of shape (max_seq_len, d_head), rotate-half layout (Su et al. 2021, eq. 34)."""
    half = cfg.head_dim // 2
    inv_freq = cfg.rope_theta ** (-torch.arange(half, device=device, dtype=torch.float32) / half)
    angles = torch.outer(torch.arange(cfg.max_seq_len, device=device, dtype=torch.float32), inv_freq)
    angles = torch.cat([angles, angles], dim=-1)
    return angles.cos(), angles.sin()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x: (B, nh, T, hs); cos, sin: (T, hs)."""
    x1, x2 = x.chunk(2, dim=-1)
    rotated = torch.cat([-x2, x1], dim=-1)
    return x * cos + rotated * sin


def sinusoid_table(cfg: ModelConfig, device=None) -> torch.Tensor:
    """Vaswani et al. 2017, sec. 3.5: PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(...)."""
    pos = torch.arange(cfg.max_seq_len, device=device, dtype=torch.float32)[:, None]
    inv_freq = 10000.0 ** (-torch.arange(0, cfg.d_model, 2, device=device, dtype=torch.float32) / cfg.d_model)
    table = torch.empty(cfg.max_seq_len, cfg.d_model, device=device)
    table[:, 0::2] = torch.sin(pos * inv_freq)
    table[:, 1::2] = torch.cos(pos * inv_freq)
    return table


def alibi_slopes(n_head: int, device=None) -> torch.Tensor:
    """Press et al. 2022, sec. 3: geometric slopes 2^(-8/n), ...; for n not a power of two, the slopes
    of the next lower power of two followed by every other slope of the next higher one."""

    def power_of_two(n: int) -> list[float]:
        start = 2 ** (-8 / n)
        return [start ** (i + 1) for i in range(n)]

    lower = 2 ** math.floor(math.log2(n_head))
    slopes = power_of_two(lower) + power_of_two(2 * lower)[0::2][: n_head - lower]
    return torch.tensor(slopes, device=device, dtype=torch.float32)


class Linear(nn.Linear):
    """nn.Linear without its own random init: every tfcalc model is built on meta first and filled once
    by init_weights(), so kaiming_uniform_ here would be wasted work (a third of the meta build time)."""

    def reset_parameters(self) -> None:
        pass


def _embedding(n: int, d: int) -> nn.Embedding:
    """An embedding whose weight is left uninitialized (init_weights fills it). nn.Embedding's own
    init calls normal_, which on the meta device goes through torch._refs and imports torch._dynamo:
    two seconds of start-up for nothing."""
    return nn.Embedding(n, d, _weight=torch.empty(n, d))


class Attention(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.n_head, self.n_kv_head, self.head_dim = cfg.n_head, cfg.kv_heads, cfg.head_dim
        self.q_dim, self.kv_dim = cfg.q_dim, cfg.kv_dim
        self.qkv = Linear(cfg.d_model, cfg.q_dim + 2 * cfg.kv_dim, bias=cfg.attn_bias)
        self.out = Linear(cfg.q_dim, cfg.d_model, bias=cfg.attn_bias)

    def forward(self, x: torch.Tensor, rope=None, mask: torch.Tensor | None = None) -> torch.Tensor:
        B, T, _ = x.shape
        q, k, v = self.qkv(x).split([self.q_dim, self.kv_dim, self.kv_dim], dim=-1)
        q = q.view(B, T, self.n_head, self.head_dim).transpose(1, 2)  # (B, nh, T, hs)
        k = k.view(B, T, self.n_kv_head, self.head_dim).transpose(1, 2)  # (B, nkv, T, hs)
        v = v.view(B, T, self.n_kv_head, self.head_dim).transpose(1, 2)  # (B, nkv, T, hs)
        if rope is not None:
            cos, sin = rope
            q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        y = F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, is_causal=mask is None, enable_gqa=self.n_kv_head != self.n_head
        )  # (B, nh, T, hs)
        return self.out(y.transpose(1, 2).reshape(B, T, self.q_dim))


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


class Block(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.pre_norm = cfg.norm_placement == "pre"
        self.attn_norm = make_norm(cfg)
        self.attn = Attention(cfg)
        self.ffn_norm = make_norm(cfg)
        self.ffn = FeedForward(cfg)

    def attention_sublayer(self, x: torch.Tensor, rope=None, mask=None) -> torch.Tensor:
        if self.pre_norm:  # GPT-2 onwards: x + f(norm(x))
            return x + self.attn(self.attn_norm(x), rope, mask)
        return self.attn_norm(x + self.attn(x, rope, mask))  # Vaswani et al. 2017, BERT: norm(x + f(x))

    def ffn_sublayer(self, x: torch.Tensor) -> torch.Tensor:
        if self.pre_norm:
            return x + self.ffn(self.ffn_norm(x))
        return self.ffn_norm(x + self.ffn(x))

    def forward(self, x: torch.Tensor, rope=None, mask=None) -> torch.Tensor:
        return self.ffn_sublayer(self.attention_sublayer(x, rope, mask))


class Transformer(nn.Module):
    """Decoder-only language model: embeddings, n_layer blocks, optional final norm, LM head."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.tok_emb = _embedding(cfg.vocab_size, cfg.d_model)
        self.pos_emb = _embedding(cfg.max_seq_len, cfg.d_model) if cfg.pos_encoding == "learned" else None
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.final_norm = make_norm(cfg) if cfg.final_norm else None
        self.lm_head = Linear(cfg.d_model, cfg.vocab_size, bias=False)
        if cfg.tie_embeddings:
            self.lm_head.weight = self.tok_emb.weight
        self._register_position_buffers()

    def _register_position_buffers(self) -> None:
        device = self.tok_emb.weight.device
        cfg = self.cfg
        if cfg.pos_encoding == "rope":
            cos, sin = rope_tables(cfg, device)
            self.register_buffer("rope_cos", cos, persistent=False)
            self.register_buffer("rope_sin", sin, persistent=False)
        elif cfg.pos_encoding == "sinusoidal":
            self.register_buffer("pos_table", sinusoid_table(cfg, device), persistent=False)
        elif cfg.pos_encoding == "alibi":
            self.register_buffer("alibi", alibi_slopes(cfg.n_head, device), persistent=False)

    @torch.no_grad()
    def init_weights(self, std: float = 0.02) -> None:
        """Fast random init for timing and memory runs (weights are never loaded): N(0, std) matrices,
        unit norm weights, zero biases, and the position buffers recomputed."""
        for name, p in self.named_parameters():
            if "norm" in name:
                p.fill_(1.0 if name.endswith("weight") else 0.0)
            elif name.endswith("bias"):
                p.zero_()
            else:
                p.normal_(0.0, std)
        self._register_position_buffers()
        self.to(self.tok_emb.weight.dtype)

    def attention_mask(self, T: int, dtype: torch.dtype) -> torch.Tensor | None:
        """None (SDPA applies the causal mask itself), or ALiBi's causal bias (nh, T, T)."""
        if self.cfg.pos_encoding != "alibi":
            return None
        pos = torch.arange(T, device=self.alibi.device)
        distance = (pos[None, :] - pos[:, None]).to(torch.float32)  # j - i, <= 0 where allowed
        bias = self.alibi.float()[:, None, None] * distance
        bias = bias.masked_fill(distance > 0, float("-inf"))
        return bias.to(dtype)

    def embed(self, idx: torch.Tensor) -> torch.Tensor:
        """(B, T) token ids -> (B, T, d) block input."""
        x = self.tok_emb(idx)
        if self.pos_emb is not None:
            x = x + self.pos_emb(torch.arange(idx.shape[1], device=idx.device))
        elif self.cfg.pos_encoding == "sinusoidal":
            x = x + self.pos_table[: idx.shape[1]].to(x.dtype)
        return x

    def block_inputs(self, T: int, dtype: torch.dtype):
        """(rope, mask) that every block takes at sequence length T."""
        rope = None
        if self.cfg.pos_encoding == "rope":
            rope = (self.rope_cos[:T].to(dtype), self.rope_sin[:T].to(dtype))
        return rope, self.attention_mask(T, dtype)

    def head(self, x: torch.Tensor) -> torch.Tensor:
        """(B, T, d) last block output -> (B, T, vocab_size) logits."""
        if self.final_norm is not None:
            x = self.final_norm(x)
        return self.lm_head(x)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        """idx: (B, T) token ids -> logits (B, T, vocab_size)."""
        x = self.embed(idx)  # (B, T, d)
        rope, mask = self.block_inputs(idx.shape[1], x.dtype)
        for block in self.blocks:
            x = block(x, rope, mask)
        return self.head(x)  # (B, T, vocab_size)


def build_model(cfg: ModelConfig, device: str | torch.device = "meta", dtype: torch.dtype = torch.float32) -> Transformer:
    """The model on ``device`` in ``dtype``. Built on meta first, so nothing is allocated or
    initialized twice; off meta, storage is then allocated once and filled by init_weights()."""
    with torch.device("meta"):
        model = Transformer(cfg).to(dtype)
    if torch.device(device).type == "meta":
        return model
    model.to_empty(device=device)
    if cfg.tie_embeddings:  # to_empty() gives each module its own copy of a shared meta tensor
        model.lm_head.weight = model.tok_emb.weight
    model.init_weights()
    return model.eval()
