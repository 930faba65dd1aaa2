"""The real PyTorch transformer built from a ModelConfig: decoder, encoder or encoder-decoder.

nanoGPT-sized modules (Attention, CrossAttention, FeedForward, MixtureOfExperts, Block, Stack,
Transformer), each taking the config. Every parameter here is one that tfcalc.count.params predicts;
tests check the two agree tensor by tensor.

- A ``Stack`` is embeddings, blocks and a final norm. ``Transformer`` is the stack that makes the output
  (a decoder's, causal; or an encoder-only model's, bidirectional) plus its heads (LM head, BERT's
  pooler); an encoder-decoder also holds ``encoder``, a bidirectional ``Stack`` whose output every
  decoder block reads through cross-attention. ``forward(src_idx, tgt_idx)`` then.
- A mixture of experts routes each token to its top-k experts (softmax over the k chosen router logits,
  as in Mixtral); each expert runs on exactly the tokens routed to it (index_select, index_add), so a
  forward pass does the matmuls of k experts per token, not of all of them.

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


def position_buffers(cfg: ModelConfig, device) -> dict[str, torch.Tensor]:
    """RoPE's cos and sin, the sinusoid table or ALiBi's slopes, by buffer name. On meta, only their
    shapes: torch.arange on meta goes through torch._refs and imports torch._dynamo (seconds), for
    tables that init_weights() computes anyway once the model has storage."""
    meta = torch.device(device).type == "meta"
    T = cfg.max_seq_len
    if cfg.pos_encoding == "rope":
        if meta:
            return {name: torch.empty(T, cfg.head_dim, device=device) for name in ("rope_cos", "rope_sin")}
        cos, sin = rope_tables(cfg, device)
        return {"rope_cos": cos, "rope_sin": sin}
    if cfg.pos_encoding == "sinusoidal":
        return {"pos_table": torch.empty(T, cfg.d_model, device=device) if meta else sinusoid_table(cfg, device)}
    if cfg.pos_encoding == "alibi":
        return {"alibi": torch.empty(cfg.n_head, device=device) if meta else alibi_slopes(cfg.n_head, device)}
    return {}


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

    def forward(self, x: torch.Tensor, rope=None, mask: torch.Tensor | None = None) -> torch.Tensor:
        q, k, v = self.qkv(x).split([self.q_dim, self.kv_dim, self.kv_dim], dim=-1)
        q = _split_heads(q, self.n_head)  # (B, nh, T, hs)
        k, v = _split_heads(k, self.n_kv_head), _split_heads(v, self.n_kv_head)  # (B, nkv, T, hs)
        if rope is not None:
            cos, sin = rope
            q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        y = F.scaled_dot_product_attention(  # a mask, when given, already holds the causal part
            q, k, v, attn_mask=mask, is_causal=self.causal and mask is None, enable_gqa=self.n_kv_head != self.n_head
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

    def forward(self, x: torch.Tensor, memory: torch.Tensor) -> torch.Tensor:
        """x: (B, T, d) decoder stream; memory: (B, S, d) encoder output."""
        q = _split_heads(self.q(x), self.n_head)  # (B, nh, T, hs)
        k, v = (_split_heads(t, self.n_kv_head) for t in self.kv(memory).split(self.kv_dim, dim=-1))  # (B, nkv, S, hs)
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


class Block(nn.Module):
    """Self-attention, cross-attention (decoder of an encoder-decoder only), FFN or mixture of experts;
    each a residual sub-layer with its own norm."""

    def __init__(self, cfg: ModelConfig, causal: bool = True, cross: bool = False):
        super().__init__()
        self.pre_norm = cfg.norm_placement == "pre"
        self.attn_norm = make_norm(cfg)
        self.attn = Attention(cfg, causal)
        self.cross_attn_norm = make_norm(cfg) if cross else None
        self.cross_attn = CrossAttention(cfg) if cross else None
        self.ffn_norm = make_norm(cfg)
        self.ffn = MixtureOfExperts(cfg) if cfg.n_expert else FeedForward(cfg)

    def _residual(self, norm: nn.Module, f, x: torch.Tensor) -> torch.Tensor:
        if self.pre_norm:  # GPT-2 onwards: x + f(norm(x))
            return x + f(norm(x))
        return norm(x + f(x))  # Vaswani et al. 2017, BERT: norm(x + f(x))

    def attention_sublayer(self, x: torch.Tensor, rope=None, mask=None) -> torch.Tensor:
        return self._residual(self.attn_norm, lambda h: self.attn(h, rope, mask), x)

    def cross_attention_sublayer(self, x: torch.Tensor, memory: torch.Tensor) -> torch.Tensor:
        return self._residual(self.cross_attn_norm, lambda h: self.cross_attn(h, memory), x)

    def ffn_sublayer(self, x: torch.Tensor) -> torch.Tensor:
        return self._residual(self.ffn_norm, self.ffn, x)

    def forward(self, x: torch.Tensor, rope=None, mask=None, memory: torch.Tensor | None = None) -> torch.Tensor:
        x = self.attention_sublayer(x, rope, mask)
        if self.cross_attn is not None:
            x = self.cross_attention_sublayer(x, memory)
        return self.ffn_sublayer(x)


class Stack(nn.Module):
    """Embeddings, n_layer blocks and an optional final norm: one decoder (causal) or encoder stack.

    ``tok_emb`` may be a module shared with another stack (an encoder-decoder's tied embeddings)."""

    def __init__(self, cfg: ModelConfig, n_layer: int, causal: bool, cross: bool = False,
                 tok_emb: nn.Embedding | None = None):
        super().__init__()
        self.cfg, self.causal = cfg, causal
        d = cfg.d_model
        self.tok_emb = tok_emb if tok_emb is not None else _embedding(cfg.vocab_size, d)
        self.pos_emb = _embedding(cfg.max_seq_len, d) if cfg.pos_encoding == "learned" else None
        self.type_emb = _embedding(cfg.type_vocab_size, d) if cfg.type_vocab_size else None
        self.emb_norm = make_norm(cfg) if cfg.embedding_norm else None
        self.blocks = nn.ModuleList(Block(cfg, causal, cross) for _ in range(n_layer))
        self.final_norm = make_norm(cfg) if cfg.final_norm else None
        self._register_position_buffers()

    def _register_position_buffers(self) -> None:
        for name, table in position_buffers(self.cfg, self.tok_emb.weight.device).items():
            self.register_buffer(name, table, persistent=False)

    def attention_mask(self, T: int, dtype: torch.dtype) -> torch.Tensor | None:
        """None (SDPA applies the causal mask itself, or none), or ALiBi's bias (nh, T, T): causal in a
        decoder; in an encoder symmetric, -slope * |i - j|, as bidirectional ALiBi models use."""
        if self.cfg.pos_encoding != "alibi":
            return None
        pos = torch.arange(T, device=self.alibi.device)
        distance = (pos[None, :] - pos[:, None]).to(torch.float32)  # j - i, <= 0 where allowed
        if not self.causal:
            return (self.alibi.float()[:, None, None] * -distance.abs()).to(dtype)
        bias = self.alibi.float()[:, None, None] * distance
        bias = bias.masked_fill(distance > 0, float("-inf"))
        return bias.to(dtype)

    def embed(self, idx: torch.Tensor, token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        """(B, T) token ids (and token types, default 0) -> (B, T, d) block input."""
        x = self.tok_emb(idx)
        if self.cfg.embedding_scale:  # Vaswani et al. 2017, sec. 3.4
            x = x * math.sqrt(self.cfg.d_model)
        if self.pos_emb is not None:
            x = x + self.pos_emb(torch.arange(idx.shape[1], device=idx.device))
        elif self.cfg.pos_encoding == "sinusoidal":
            x = x + self.pos_table[: idx.shape[1]].to(x.dtype)
        if self.type_emb is not None:
            x = x + self.type_emb(token_type_ids if token_type_ids is not None else torch.zeros_like(idx))
        if self.emb_norm is not None:
            x = self.emb_norm(x)
        return x

    def block_inputs(self, T: int, dtype: torch.dtype):
        """(rope, mask) that every block takes at sequence length T."""
        rope = None
        if self.cfg.pos_encoding == "rope":
            rope = (self.rope_cos[:T].to(dtype), self.rope_sin[:T].to(dtype))
        return rope, self.attention_mask(T, dtype)

    def normed(self, x: torch.Tensor) -> torch.Tensor:
        return x if self.final_norm is None else self.final_norm(x)

    def forward(self, idx: torch.Tensor, token_type_ids=None, memory: torch.Tensor | None = None) -> torch.Tensor:
        """(B, T) ids -> (B, T, d) output of the last block, before the final norm."""
        x = self.embed(idx, token_type_ids)  # (B, T, d)
        rope, mask = self.block_inputs(idx.shape[1], x.dtype)
        for block in self.blocks:
            x = block(x, rope, mask, memory)
        return x


class Transformer(Stack):
    """The output stack (decoder, or an encoder-only model's encoder), its heads, and for an
    encoder-decoder the ``encoder`` stack."""

    def __init__(self, cfg: ModelConfig):
        encoder_decoder = cfg.arch == "encoder-decoder"
        super().__init__(cfg, cfg.n_layer, causal=cfg.arch != "encoder", cross=encoder_decoder)
        self.pooler = Linear(cfg.d_model, cfg.d_model) if cfg.pooler else None
        self.lm_head = LMHead(cfg.d_model, cfg.vocab_size, bias=False) if cfg.lm_head else None
        # Registered after the decoder's own embedding, so a shared one is counted there (parameter order).
        self.encoder = None
        if encoder_decoder:
            shared = self.tok_emb if cfg.tie_encoder_embedding else None
            self.encoder = Stack(cfg, cfg.encoder_layers, causal=False, tok_emb=shared)
        self.tie_weights()

    def tie_weights(self) -> None:
        """The LM head shares the token embedding's tensor when tied (to_empty() unties them)."""
        if self.lm_head is not None and self.cfg.tie_embeddings:
            self.lm_head.weight = self.tok_emb.weight

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
        for stack in self.modules():
            if isinstance(stack, Stack):
                stack._register_position_buffers()
        self.to(self.tok_emb.weight.dtype)

    def encode(self, src_idx: torch.Tensor) -> torch.Tensor:
        """(B, S) source ids -> (B, S, d) encoder output (after its final norm), read by cross-attention."""
        return self.encoder.normed(self.encoder(src_idx))

    def head(self, x: torch.Tensor) -> torch.Tensor:
        """(B, T, d) last block output -> (B, T, vocab_size) logits; without an LM head, the (normed)
        hidden states."""
        x = self.normed(x)
        return x if self.lm_head is None else self.lm_head(x)

    def pool(self, h: torch.Tensor) -> torch.Tensor:
        """BERT's pooler: (B, T, d) final hidden states -> (B, d) tanh(W h[:, 0] + b)."""
        return torch.tanh(self.pooler(h[:, 0]))

    def forward(self, idx: torch.Tensor, tgt_idx: torch.Tensor | None = None, token_type_ids=None):
        """idx: (B, T) token ids -> logits (B, T, vocab_size), or hidden states (B, T, d) without an LM head.

        An encoder-decoder takes forward(src_idx (B, S), tgt_idx (B, T)) -> (B, T, vocab_size).
        With a pooler (BERT), returns (output, pooled (B, d)), as Hugging Face's BertModel does."""
        memory = None
        if self.encoder is not None:
            if tgt_idx is None:
                raise ValueError("an encoder-decoder takes forward(src_idx, tgt_idx)")
            memory, idx = self.encode(idx), tgt_idx
        x = super().forward(idx, token_type_ids, memory)  # (B, T, d)
        if self.pooler is None:
            return self.head(x)
        h = self.normed(x)
        return (h if self.lm_head is None else self.lm_head(h)), self.pool(h)


def build_model(cfg: ModelConfig, device: str | torch.device = "meta", dtype: torch.dtype = torch.float32) -> Transformer:
    """The model on ``device`` in ``dtype``. Built on meta first, so nothing is allocated or
    initialized twice; off meta, storage is then allocated once and filled by init_weights()."""
    with torch.device("meta"):
        model = Transformer(cfg).to(dtype)
    if torch.device(device).type == "meta":
        return model
    model.to_empty(device=device)
    model.tie_weights()  # to_empty() gives each module its own copy of a shared meta tensor
    model.init_weights()
    return model.eval()
