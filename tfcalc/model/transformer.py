"""Blocks, stacks and the whole Transformer built from a ModelConfig, and build_model (see the package
docstring for the layout and why)."""

from __future__ import annotations

import functools
import math

import torch
from torch import nn

from tfcalc.config import ModelConfig
from tfcalc.errors import InputError
from tfcalc.model.cache import StaticCache, check_decodable
from tfcalc.model.layers import (
    _ACTIVATIONS,
    Attention,
    CrossAttention,
    FeedForward,
    Linear,
    LMHead,
    MixtureOfExperts,
    _embedding,
    make_norm,
    softcap,
)
from tfcalc.model.positions import position_buffers, relative_buckets


class Block(nn.Module):
    """Self-attention, cross-attention (an encoder-decoder's decoder, or cross_attention), FFN or mixture
    of experts; each a residual sub-layer with its own norm, laid out pre, post or sandwich, or attention
    and FFN side by side (a parallel block; see tfcalc.config)."""

    def __init__(self, cfg: ModelConfig, causal: bool = True, cross: bool = False, moe: bool | None = None,
                 d_ff: int | None = None):
        """``moe`` and ``d_ff``: this layer's FFN as the description has it (tfcalc.architecture: a mixed
        model's dense layers, d_ff wide); default: every layer alike, from cfg."""
        super().__init__()
        moe = bool(cfg.n_expert) if moe is None else moe
        self.placement, self.parallel = cfg.norm_placement, cfg.parallel_block != "none"
        sandwich = cfg.norm_placement == "sandwich"
        self.attn_norm = make_norm(cfg)
        self.attn = Attention(cfg, causal)
        self.attn_post_norm = make_norm(cfg) if sandwich else None
        self.cross_attn_norm = make_norm(cfg) if cross else None
        self.cross_attn = CrossAttention(cfg) if cross else None
        self.cross_attn_post_norm = make_norm(cfg) if cross and sandwich else None
        self.ffn_norm = None if cfg.parallel_block == "shared_norm" else make_norm(cfg)
        self.ffn = MixtureOfExperts(cfg) if moe else FeedForward(cfg, d_ff)
        self.ffn_post_norm = make_norm(cfg) if sandwich else None

    def _branch(self, norm: nn.Module, post_norm: nn.Module | None, f, x: torch.Tensor) -> torch.Tensor:
        """What a sub-layer adds to the residual stream x (pre and sandwich; post-norm is not additive)."""
        y = f(norm(x))
        return y if post_norm is None else post_norm(y)  # Gemma 2: norm the output before the residual add

    def _residual(self, norm: nn.Module, post_norm: nn.Module | None, f, x: torch.Tensor) -> torch.Tensor:
        if self.placement == "post":  # Vaswani et al. 2017, BERT: norm(x + f(x))
            return norm(x + f(x))
        return x + self._branch(norm, post_norm, f, x)  # GPT-2 onwards: x + f(norm(x))

    def attention_sublayer(self, x: torch.Tensor, rope=None, mask=None, store=None) -> torch.Tensor:
        return self._residual(self.attn_norm, self.attn_post_norm, lambda h: self.attn(h, rope, mask, store=store), x)

    def cross_attention_sublayer(self, x: torch.Tensor, memory: torch.Tensor | None, kv=None) -> torch.Tensor:
        return self._residual(self.cross_attn_norm, self.cross_attn_post_norm,
                              lambda h: self.cross_attn(h, memory, kv), x)

    def ffn_sublayer(self, x: torch.Tensor) -> torch.Tensor:
        return self._residual(self.ffn_norm or self.attn_norm, self.ffn_post_norm, self.ffn, x)

    def forward(self, x: torch.Tensor, rope=None, mask=None, memory: torch.Tensor | None = None,
                store=None, cross_kv=None) -> torch.Tensor:
        """``store`` and ``cross_kv`` when decoding with a cache (see Stack.forward)."""
        if self.parallel:
            return self._parallel(x, rope, mask, store)
        x = self.attention_sublayer(x, rope, mask, store)
        if self.cross_attn is not None:
            if memory is None and cross_kv is None:
                raise ValueError("a block with cross-attention needs the states it attends to (memory)")
            x = self.cross_attention_sublayer(x, memory, cross_kv)
        return self.ffn_sublayer(x)

    def _parallel(self, x: torch.Tensor, rope, mask, store=None) -> torch.Tensor:
        """x + attn(n1(x)) + ffn(n2(x)) (GPT-NeoX, modeling_gpt_neox.py, use_parallel_residual), or with one
        norm output read by both (Falcon-7B, modeling_falcon.py; GPT-J; PaLM, Chowdhery et al. 2022, sec. 2)."""
        h = self.attn_norm(x)
        attn = self.attn(h, rope, mask, store=store)
        return x + attn + self.ffn(h if self.ffn_norm is None else self.ffn_norm(x))


class Stack(nn.Module):
    """Embeddings, n_layer blocks and an optional final norm: one decoder (causal) or encoder stack.

    ``tok_emb`` may be a module shared with another stack (an encoder-decoder's tied embeddings)."""

    def __init__(self, cfg: ModelConfig, n_layer: int, causal: bool, cross: bool = False,
                 tok_emb: nn.Embedding | None = None, encoder: bool = False):
        super().__init__()
        self.cfg, self.causal = cfg, causal
        d = cfg.d_model
        self.tok_emb = tok_emb if tok_emb is not None else _embedding(cfg.vocab_size, d)
        learned = cfg.pos_encoding == "learned"
        self.pos_emb = _embedding(cfg.max_seq_len + cfg.position_offset, d) if learned else None
        # T5: one (buckets, n_head) table per stack, read by every block (modeling_t5.py keeps it in block 0)
        self.rel_bias = _embedding(cfg.rel_buckets, cfg.n_head) if cfg.pos_encoding == "relative" else None
        self.type_emb = _embedding(cfg.type_vocab_size, d) if cfg.type_vocab_size else None
        self.emb_norm = make_norm(cfg) if cfg.embedding_norm else None
        # each layer as the description has it (tfcalc.architecture): MoE or dense, and how wide
        spec = cfg.architecture.encoder if encoder else cfg.architecture.output
        layers = list(spec.layers())
        self.blocks = nn.ModuleList(
            Block(cfg, causal, cross, b.is_moe, None if b.is_moe else b.ffn.d_ff) for b in layers)
        self.final_norm = make_norm(cfg) if cfg.final_norm else None
        self._register_position_buffers()

    def _register_position_buffers(self) -> None:
        for name, table in position_buffers(self.cfg, self.tok_emb.weight.device).items():
            self.register_buffer(name, table, persistent=False)

    def attention_mask(self, T: int, dtype: torch.dtype, window: int | None = None) -> torch.Tensor | None:
        """None (SDPA applies the causal mask itself, or none), or an additive bias (nh, T, T): ALiBi's,
        causal in a decoder, in an encoder symmetric, -slope * |i - j|, as bidirectional ALiBi models use;
        or T5's learned bias per relative-position bucket (bidirectional buckets in an encoder). A sliding
        window W shorter than T adds -inf on every key more than W - 1 positions before its query."""
        if self.cfg.pos_encoding == "relative":
            bias = self._relative_bias(T, dtype)
        elif self.cfg.pos_encoding == "alibi":
            bias = self._alibi_bias(T, dtype)
        else:
            bias = None
        if not self.causal or window is None or window >= T:
            return bias
        pos = torch.arange(T, device=self.tok_emb.weight.device)
        distance = pos[None, :] - pos[:, None]  # j - i
        hidden = (distance > 0) | (distance <= -window)  # (T, T)
        base = torch.zeros(T, T, device=pos.device, dtype=dtype) if bias is None else bias
        return base.masked_fill(hidden, float("-inf"))

    def layer_masks(self, T: int, dtype: torch.dtype) -> list[torch.Tensor | None]:
        """Each block's mask: built once per distinct effective window (Gemma 2 alternates two; a window
        of T or more is no window), as tfcalc.count.memory.forward_working_set counts them."""
        windows = [self.cfg.layer_window(i, T) if self.causal else None for i in range(len(self.blocks))]
        built = {w: self.attention_mask(T, dtype, w) for w in dict.fromkeys(windows)}
        return [built[w] for w in windows]

    def _alibi_bias(self, T: int, dtype: torch.dtype) -> torch.Tensor:
        pos = torch.arange(T, device=self.alibi.device)
        distance = (pos[None, :] - pos[:, None]).to(torch.float32)  # j - i, <= 0 where allowed
        if not self.causal:
            return (self.alibi.float()[:, None, None] * -distance.abs()).to(dtype)
        bias = self.alibi.float()[:, None, None] * distance
        bias = bias.masked_fill(distance > 0, float("-inf"))
        return bias.to(dtype)

    def _relative_bias(self, T: int, dtype: torch.dtype) -> torch.Tensor:
        """T5's position bias (nh, T, T), with -inf above the diagonal in a decoder."""
        cfg, device = self.cfg, self.rel_bias.weight.device
        if device.type == "meta":  # no values to bucket: a lookup of the right shape stands in
            buckets = torch.zeros(T, T, dtype=torch.long, device=device)
        else:
            buckets = relative_buckets(T, T, not self.causal, cfg.rel_buckets, cfg.rel_max_distance, device)
        bias = self.rel_bias(buckets).permute(2, 0, 1)  # (T, T, nh) -> (nh, T, T)
        if self.causal:
            future = torch.ones(T, T, dtype=torch.bool, device=device).triu(1)
            bias = bias.masked_fill(future, float("-inf"))
        return bias.to(dtype)

    def decode_mask(self, cache: StaticCache, dtype: torch.dtype) -> torch.Tensor | None:
        """A decode step's mask over the cache's slots: none (the cache holds exactly the keys the new
        token may see), or ALiBi's bias (nh, 1, n) by each slot's distance to the new position. Every
        layer of an ALiBi model keeps the same slots (check_decodable refuses alternating windows with a
        bias)."""
        if self.cfg.pos_encoding != "alibi":
            return None
        positions = cache.slot_positions(0, cache.length + 1, self.alibi.device)
        distance = (positions - cache.length).to(torch.float32)  # <= 0
        return (self.alibi.float()[:, None, None] * distance).to(dtype)

    def embed(self, idx: torch.Tensor, token_type_ids: torch.Tensor | None = None, start: int = 0) -> torch.Tensor:
        """(B, T) token ids (and token types, default 0) at positions start.. -> (B, T, d) block input."""
        x = self.tok_emb(idx)
        end = start + idx.shape[1]
        if self.cfg.embedding_scale:  # Vaswani et al. 2017, sec. 3.4
            x = x * math.sqrt(self.cfg.d_model)
        if self.pos_emb is not None:  # OPT's positions start at row 2 (modeling_opt.py, OPTLearnedPositionalEmbedding)
            offset = self.cfg.position_offset
            x = x + self.pos_emb(torch.arange(offset + start, offset + end, device=idx.device))
        elif self.cfg.pos_encoding == "sinusoidal":
            x = x + self.pos_table[start:end].to(x.dtype)
        if self.type_emb is not None:
            x = x + self.type_emb(token_type_ids if token_type_ids is not None else torch.zeros_like(idx))
        if self.emb_norm is not None:
            x = self.emb_norm(x)
        return x

    def block_inputs(self, T: int, dtype: torch.dtype):
        """(rope, mask) that the first block takes at sequence length T."""
        window = self.cfg.layer_window(0, T) if self.causal else None
        return self._rope(0, T, dtype), self.attention_mask(T, dtype, window)

    def _rope(self, start: int, T: int, dtype: torch.dtype):
        """cos and sin of positions start .. start + T - 1, or None without RoPE."""
        if self.cfg.pos_encoding != "rope":
            return None
        return self.rope_cos[start:start + T].to(dtype), self.rope_sin[start:start + T].to(dtype)

    def normed(self, x: torch.Tensor) -> torch.Tensor:
        return x if self.final_norm is None else self.final_norm(x)

    def forward(self, idx: torch.Tensor, token_type_ids=None, memory: torch.Tensor | None = None,
                cache: StaticCache | None = None) -> torch.Tensor:
        """(B, T) ids -> (B, T, d) output of the last block, before the final norm. With a cache: a prompt
        (the cache empty) or one decode step, each block storing its K and V (tfcalc.model.cache)."""
        T = idx.shape[1]
        start = 0 if cache is None else cache.length
        if cache is not None:
            cache.check_room(T)
        x = self.embed(idx, token_type_ids, start)  # (B, T, d)
        rope = self._rope(start, T, x.dtype)
        if start > 0:  # a decode step: the cache holds exactly the keys each layer's query may see
            masks = [self.decode_mask(cache, x.dtype)] * len(self.blocks)
        else:
            masks = self.layer_masks(T, x.dtype)
        for i, (block, mask) in enumerate(zip(self.blocks, masks, strict=True)):
            store = None if cache is None else functools.partial(cache.store, i)
            cross_kv = None if cache is None or cache.cross is None else cache.cross[i]
            # the decoding arguments by keyword: a tensor-parallel plan lays out the positional ones
            x = block(x, rope, mask, memory, store=store, cross_kv=cross_kv)
        if cache is not None:
            cache.advance(T)
        return x


class Transformer(Stack):
    """The output stack (decoder, or an encoder-only model's encoder), its heads, and for an
    encoder-decoder the ``encoder`` stack."""

    def __init__(self, cfg: ModelConfig):
        encoder_decoder = cfg.arch == "encoder-decoder"
        super().__init__(cfg, cfg.n_layer, causal=cfg.arch != "encoder", cross=encoder_decoder or cfg.cross_attention)
        self.pooler = Linear(cfg.d_model, cfg.d_model) if cfg.pooler else None
        # BERT's MLM head (modeling_bert.py, BertPredictionHeadTransform): dense, activation, norm
        self.head_dense = Linear(cfg.d_model, cfg.d_model) if cfg.lm_head_transform else None
        self.head_norm = make_norm(cfg) if cfg.lm_head_transform else None
        self.lm_head = LMHead(cfg.d_model, cfg.vocab_size, bias=cfg.lm_head_bias) if cfg.lm_head else None
        # Registered after the decoder's own embedding, so a shared one is counted there (parameter order).
        self.encoder = None
        if encoder_decoder:
            shared = self.tok_emb if cfg.tie_encoder_embedding else None
            self.encoder = Stack(cfg, cfg.encoder_layers, causal=False, tok_emb=shared, encoder=True)
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
        return x if self.lm_head is None else self.logits(x)

    def logits(self, h: torch.Tensor) -> torch.Tensor:
        """(B, T, d) final hidden states -> (B, T, vocab_size): BERT's head transform, the projection,
        and Gemma 2's soft-capping."""
        if self.head_dense is not None:
            h = self.head_norm(_ACTIVATIONS[self.cfg.activation](self.head_dense(h)))
        return softcap(self.lm_head(h), self.cfg.logit_softcap)

    # ---------- decoding with a static KV cache (tfcalc.model.cache) ----------

    def new_cache(self, batch: int, max_tokens: int) -> StaticCache:
        """A cache for ``batch`` sequences of up to ``max_tokens`` positions (prompt and generated tokens),
        on the model's device and in its dtype. An encoder generates nothing: InputError."""
        check_decodable(self.cfg, max_tokens)
        weight = self.tok_emb.weight
        return StaticCache(self.cfg, batch, max_tokens, weight.device, weight.dtype)

    def prefill(self, idx: torch.Tensor, cache: StaticCache, src_idx: torch.Tensor | None = None,
                last_only: bool = True) -> torch.Tensor:
        """Run the prompt idx (B, T) from position 0, filling the cache; logits of its last position
        (B, 1, V), or of every position. An encoder-decoder encodes src_idx (B, S) once and caches every
        decoder block's cross-attention K and V."""
        cache.reset()
        memory = None
        if self.encoder is not None:
            if src_idx is None:
                raise InputError("an encoder-decoder decodes against a source: prefill(idx, cache, src_idx)")
            memory = self.encode(src_idx)
            cache.cross = [block.cross_attn.project(memory) for block in self.blocks]
        x = Stack.forward(self, idx, cache=cache)  # (B, T, d)
        return self.head(x[:, -1:] if last_only else x)

    def decode(self, token: torch.Tensor, cache: StaticCache) -> torch.Tensor:
        """One token per sequence (B, 1) at the cache's next position -> its logits (B, 1, V)."""
        if cache.length == 0:
            raise InputError("decode() continues a prompt: call prefill() first")
        return self.head(Stack.forward(self, token, cache=cache))

    def pool(self, h: torch.Tensor) -> torch.Tensor:
        """BERT's pooler: (B, T, d) final hidden states -> (B, d) tanh(W h[:, 0] + b)."""
        return torch.tanh(self.pooler(h[:, 0]))

    def forward(self, idx: torch.Tensor, tgt_idx: torch.Tensor | None = None, token_type_ids=None,
                memory: torch.Tensor | None = None):
        """idx: (B, T) token ids -> logits (B, T, vocab_size), or hidden states (B, T, d) without an LM head.

        An encoder-decoder takes forward(src_idx (B, S), tgt_idx (B, T)) -> (B, T, vocab_size); a stack
        with cross_attention reads ``memory`` (B, S, d), the states of some encoder (GPT-2's
        add_cross_attention). With a pooler (BERT), returns (output, pooled (B, d)), as BertModel does."""
        if self.encoder is not None:
            if tgt_idx is None:
                raise ValueError("an encoder-decoder takes forward(src_idx, tgt_idx)")
            memory, idx = self.encode(idx), tgt_idx
        x = super().forward(idx, token_type_ids, memory)  # (B, T, d)
        if self.pooler is None:
            return self.head(x)
        h = self.normed(x)
        return (h if self.lm_head is None else self.logits(h)), self.pool(h)


def build_model(
    cfg: ModelConfig, device: str | torch.device = "meta", dtype: torch.dtype = torch.float32
) -> Transformer:
    """The model on ``device`` in ``dtype``. Built on meta first, so nothing is allocated or
    initialized twice; off meta, storage is then allocated once and filled by init_weights()."""
    with torch.device("meta"):
        model = Transformer(cfg).to(dtype)
    if torch.device(device).type == "meta":
        return model
    # Module.to_empty(device), but with torch.empty: empty_like of a meta tensor runs its Python meta
    # kernel (torch._refs), whose first call imports sympy (a large import, for nothing); the tensors built on meta
    # here are contiguous, so the storage is the same.
    model._apply(lambda t: torch.empty(t.shape, dtype=t.dtype, device=device))
    model.tie_weights()  # to_empty() gives each module its own copy of a shared meta tensor
    model.init_weights()
    return model.eval()
