"""Stacks and the whole Transformer built from the description (tfcalc.architecture: ``cfg.architecture``,
or one given), and build_model (see the package docstring for the layout and why).

Every module is built from its component: a stack from its ``Stack`` (embeddings, one ``Block`` module
per layer, each from that layer's block, and the final norm), the heads from ``Head``. The config gives
only what is no part of the architecture: how many positions the tables cover (max_seq_len), OPT's
position offset, T5's bucket distance, and the activation of BERT's head transform."""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel

from tfcalc.architecture import Architecture, Stack as StackSpec
from tfcalc.config import ModelConfig
from tfcalc.errors import InputError
from tfcalc.model import kv_shared, sparse_latent, step
from tfcalc.model.altup import Streams
from tfcalc.model.block import Block
from tfcalc.model.cache import StaticCache, check_decodable
from tfcalc.model.ffn import ACTIVATIONS
from tfcalc.model.hyper import HyperHead
from tfcalc.model.layers import Linear, LMHead, empty_embedding, make_norm, softcap
from tfcalc.model.mixers import tie_shared
from tfcalc.model.per_layer import PerLayerInputs
from tfcalc.model.positions import alibi_bias, position_buffers, relative_bias, rope_buffer_names

# A cached step's attention backends, in this order of priority: cuDNN attention (any additive mask; on an
# H100 10 us for Llama-2-7B's 32 heads over 576 cached keys against memory-efficient attention's 26 us, the
# step's largest part after the matmuls: benchmarks/decode_profile.py), flash (no explicit mask: it falls
# through), memory-efficient, math. cuDNN plans a graph per new shape (3.6-9 ms of host time a call on an
# H100 with the old growing key, tfcalc's first GPU run); a step's shapes are fixed per bucket, so it plans
# once, in the warm-up before a CUDA graph's capture (tfcalc.model.generate). A prefill keeps PyTorch's choice.
STEP_BACKENDS = [SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION,
                 SDPBackend.MATH]


class Stack(nn.Module):
    """Embeddings, one block per layer and an optional final norm, from a ``Stack`` component: one
    decoder (causal) or encoder stack.

    ``tok_emb`` may be a module shared with another stack (an encoder-decoder's tied embeddings)."""

    def __init__(self, cfg: ModelConfig, spec: StackSpec, tok_emb: nn.Embedding | None = None):
        super().__init__()
        self.cfg = cfg
        layers, emb = list(spec.layers()), spec.embeddings
        self.causal = layers[0].mixer.causal
        self.positions, self.scale = emb.positions, emb.scale
        self.tok_emb = tok_emb if tok_emb is not None else empty_embedding(emb.vocab_size, emb.table_dim)
        self.multiplier = emb.multiplier  # Granite's embedding_multiplier
        # OPT-350m: a narrower token table, projected in (modeling_opt.py, project_in)
        self.project_in = Linear(emb.project_dim, emb.d_model, bias=False) if emb.project_dim is not None else None
        self.pos_emb = empty_embedding(emb.position_rows, emb.d_model) if emb.positions == "learned" else None
        # T5: one (buckets, n_head) table per stack, read by every block (modeling_t5.py keeps it in block 0)
        self.rel_bias = empty_embedding(*emb.relative) if emb.relative is not None else None
        self.type_emb = empty_embedding(emb.type_vocab_size, emb.d_model) if emb.type_vocab_size else None
        self.emb_norm = make_norm(emb.norm) if emb.norm is not None else None
        self.blocks = nn.ModuleList(Block(b) for b in layers)  # each layer as the description has it
        for i, block in enumerate(self.blocks):
            block.attn.at_layer(i, len(self.blocks))
        self.tie_shared()
        kv_shared.link(self.blocks)  # readers of another layer's K/V given their source (Gemma 4, Gemma 3n)
        sparse_latent.link(self.blocks)  # GLM-5's shared-indexer layers given the full layer before them
        self.ple_in = PerLayerInputs(emb.per_layer) if emb.per_layer is not None else None  # Gemma 4's PLE
        self.altup_io = Streams(emb.altup) if emb.altup is not None else None  # Gemma 3n's AltUp streams
        for i, block in enumerate(self.blocks):
            if block.ple is not None:
                block.ple.bind(self.ple_in, i)
        self.final_norm = make_norm(spec.final_norm) if spec.final_norm is not None else None
        # DeepSeek-V4's hyper-connections (tfcalc.model.hyper): the embedding copied to n streams, collapsed by
        # hc_head before the final norm
        self.hash_moes = [b.ffn for b, spec in zip(self.blocks, layers, strict=True)
                          if spec.is_moe and spec.ffn.hash_vocab]
        hyper = layers[0].hyper
        self.hc_head = HyperHead(hyper, emb.d_model, layers[0].norm.eps) if hyper is not None else None
        # per layer: its mixer (the mask span it reads), and which of the stack's rotary tables its module
        # reads (None: no RoPE), each as the mixer answers (tfcalc.model.mixers), never by its kind
        self.mixers = [b.mixer for b in layers]
        # a mixer that reads the token embeddings beside its input (Zamba2's shared block): each block is given them
        self.reads_embeddings = any(getattr(m, "reads_embeddings", False) for m in self.mixers)
        keys = [block.attn.rope_key for block in self.blocks]
        self.ropes = [k for k in dict.fromkeys(keys) if k is not None]
        self.temperatures = [block.attn.temperature for block in self.blocks]  # Llama 4's NoPE layers
        self.layer_ropes = [None if k is None else self.ropes.index(k) for k in keys]
        self.alibi_heads = self.blocks[0].attn.n_head if emb.positions == "alibi" else 0  # ALiBi: a slope a head
        self.register_position_buffers()

    def tie_shared(self) -> None:
        tie_shared([block.attn for block in self.blocks])  # Zamba2's shared blocks (tfcalc.model.mixers)

    def register_position_buffers(self) -> None:
        """(Re)compute the position tables no checkpoint holds (after a build on meta: load, init_weights)."""
        d = self.project_in.out_features if self.project_in is not None else self.tok_emb.embedding_dim
        tables = position_buffers(self.positions, self.cfg.max_seq_len, d, self.alibi_heads, self.ropes,
                                  self.tok_emb.weight.device)
        for name, table in tables.items():
            self.register_buffer(name, table, persistent=False)

    def attention_mask(self, T: int, dtype: torch.dtype, window: int | None = None,
                       chunk: int | None = None) -> torch.Tensor | None:
        """None (SDPA applies the causal mask itself, or none), or an additive bias (nh, T, T): ALiBi's,
        causal in a decoder, in an encoder symmetric, -slope * |i - j|, as bidirectional ALiBi models use;
        or T5's learned bias per relative-position bucket (bidirectional buckets in an encoder). A sliding
        window W shorter than T adds -inf on every key more than W - 1 positions before its query; a
        chunk C shorter than T on every key of another chunk (i // C != j // C: Llama 4's chunked
        attention, modeling_llama4.py)."""
        if self.positions == "relative":
            bias = relative_bias(self.rel_bias, T, self.causal, self.cfg.rel_max_distance, dtype)
        elif self.positions == "alibi":
            bias = alibi_bias(self.alibi, T, self.causal, dtype)
        else:
            bias = None
        window = None if window is None or window >= T else window
        chunk = None if chunk is None or chunk >= T else chunk
        if not self.causal or (window is None and chunk is None):
            return bias
        pos = torch.arange(T, device=self.tok_emb.weight.device)
        distance = pos[None, :] - pos[:, None]  # j - i
        if chunk is not None:  # (T, T): the future, and every key of an earlier chunk
            hidden = (distance > 0) | (pos[None, :] // chunk != pos[:, None] // chunk)
        else:
            hidden = (distance > 0) | (distance <= -window)  # (T, T)
        base = torch.zeros(T, T, device=pos.device, dtype=dtype) if bias is None else bias
        return base.masked_fill(hidden, float("-inf"))

    def layer_masks(self, T: int, dtype: torch.dtype) -> list[torch.Tensor | None]:
        """Each block's mask: built once per distinct effective window or chunk (Gemma 2 alternates two; a
        window or chunk of T or more is none), as tfcalc.count.model.memory.forward_working_set counts them."""
        spans = [self._span(i, T) for i in range(len(self.mixers))]
        built = {span: self.attention_mask(T, dtype, *span) for span in dict.fromkeys(spans)}
        return [built[span] for span in spans]

    def embed(self, idx: torch.Tensor, token_type_ids: torch.Tensor | None = None,
              start: int | torch.Tensor = 0) -> torch.Tensor:
        """(B, T) token ids (and token types, default 0) at positions start.. -> (B, T, d) block input. start:
        one position for every sequence, or (B,) each its own (continuous batching, tfcalc.model.slots)."""
        x = self.tok_emb(idx)
        pos = _positions(start, idx.shape[1], idx.device)  # (T,) or (B, T)
        if self.scale:  # Vaswani et al. 2017, sec. 3.4
            x = x * math.sqrt(self.tok_emb.embedding_dim)
        if self.multiplier is not None:  # modeling_granite.py: inputs_embeds * embedding_multiplier
            x = x * self.multiplier
        if self.project_in is not None:  # modeling_opt.py: project_in before the positions are added
            x = self.project_in(x)
        if self.pos_emb is not None:  # OPT's positions start at row 2 (modeling_opt.py, OPTLearnedPositionalEmbedding)
            offset = self.cfg.position_offset
            x = x + self.pos_emb(offset + pos)
        elif self.positions == "sinusoidal":
            x = x + self.pos_table[pos].to(x.dtype)
        if self.type_emb is not None:
            x = x + self.type_emb(token_type_ids if token_type_ids is not None else torch.zeros_like(idx))
        if self.emb_norm is not None:
            x = self.emb_norm(x)
        for moe in self.hash_moes:  # DeepSeek-V4's hash-routed experts read the token ids (tfcalc.model.experts)
            moe.tokens = idx
        if self.ple_in is not None:  # each layer's input of these tokens, kept for the blocks (tfcalc.model.per_layer)
            self.ple_in(idx, x)
        if self.hc_head is not None:  # (B, T, n, d): the n hyper-connection streams
            x = x[:, :, None].expand(-1, -1, self.hc_head.hc_base.shape[0], -1).contiguous()
        return x if self.altup_io is None else self.altup_io(x)  # (B, T, n·d): tfcalc.model.altup

    def block_inputs(self, T: int, dtype: torch.dtype):
        """(rope, mask) that the first block takes at sequence length T."""
        return self.rope_tables(0, T, dtype)[0], self.attention_mask(T, dtype, *self._span(0, T))

    def _span(self, i: int, T: int) -> tuple[int | None, int | None]:
        """The (window, chunk) that layer i's mask hides keys by at T tokens (each None where it hides none)."""
        return self.mixers[i].mask_span(T) if self.causal else (None, None)

    def rope_tables(self, start: int | torch.Tensor, T: int, dtype: torch.dtype) -> list:
        """Each layer's cos and sin of positions start .. start + T - 1 (sliced once per distinct table),
        or None where the layer has no RoPE; start (B,) with T = 1: (B, 1, r), each sequence at its own. What
        each block's forward takes: here, in the runtime's step (tfcalc.model.step), a pipeline chunk, bench."""
        tables = []
        pos = slice(start, start + T) if isinstance(start, int) else _positions(start, T, start.device)
        for j in range(len(self.ropes)):
            cos, sin = (getattr(self, name) for name in rope_buffer_names(j))
            tables.append((cos[pos].to(dtype), sin[pos].to(dtype)))
        out = [None if j is None else tables[j] for j in self.layer_ropes]
        for i, temp in enumerate(self.temperatures):
            if temp is not None:  # modeling_llama4.py: 1 + attn_scale·log1p(floor((p + 1) / floor_scale))
                floor, scale = temp
                pos = _positions(start, T, self.tok_emb.weight.device).to(torch.float32)  # (T,) or (B, T)
                factors = torch.log1p(torch.floor((pos + 1.0) / floor)) * scale + 1.0
                out[i] = (*(out[i] or (None, None)), factors)
        return out

    def normed(self, x: torch.Tensor) -> torch.Tensor:
        x = x if self.hc_head is None else self.hc_head(x)  # (B, T, n, d) -> (B, T, d)
        x = x if self.altup_io is None else self.altup_io(x, merge=True)  # Gemma 3n: AltUp's streams back to one
        return x if self.final_norm is None else self.final_norm(x)

    def forward(self, idx: torch.Tensor, token_type_ids=None, memory: torch.Tensor | None = None) -> torch.Tensor:
        """(B, T) ids -> (B, T, d) output of the last block, before the final norm (no cache: decoding runs
        through tfcalc.model.step)."""
        T = idx.shape[1]
        x, carry = self.embed(idx, token_type_ids), []  # (B, T, d); carry: shortcut MoE outputs (model.block)
        more = {"emb": x} if self.reads_embeddings else {}
        for block, rope, mask in zip(self.blocks, self.rope_tables(0, T, x.dtype), self.layer_masks(T, x.dtype),
                                     strict=True):
            x = block(x, rope, mask, memory, carry=carry, **more)
        return x


class Transformer(Stack):
    """The output stack (decoder, or an encoder-only model's encoder), its heads, and for an
    encoder-decoder the ``encoder`` stack. ``arch``: the description to build (default cfg.architecture)."""

    def __init__(self, cfg: ModelConfig, arch: Architecture | None = None):
        arch = cfg.architecture if arch is None else arch
        super().__init__(cfg, arch.output)
        self.arch, head, d = arch, arch.head, arch.d_model
        self.pooler = Linear(d, d) if head.pooler else None
        # BERT's MLM head (modeling_bert.py, BertPredictionHeadTransform): dense, activation, norm
        self.head_dense = Linear(d, d) if head.transform is not None else None
        self.head_norm = make_norm(head.transform) if head.transform is not None else None
        # OPT-350m: the final states projected down to the token table's width (modeling_opt.py, project_out)
        self.project_out = Linear(d, head.project_dim, bias=False) if head.project_dim is not None else None
        self.lm_head = LMHead(head.in_dim, head.vocab_size, bias=head.bias) if head.lm_head else None
        self.tied = head.lm_head and head.tied
        # Registered after the decoder's own embedding, so a shared one is counted there (parameter order).
        self.encoder = None
        if arch.kind == "encoder-decoder":
            spec = arch.encoder
            shared = self.tok_emb if spec.embeddings.shared_with is not None else None
            self.encoder = Stack(cfg, spec, tok_emb=shared)
        self.tie_weights()

    def tie_weights(self) -> None:
        """The LM head shares the token embedding's tensor when tied (to_empty() unties them)."""
        if self.tied:
            self.lm_head.weight = self.tok_emb.weight
        for stack in (s for s in (self, getattr(self, "encoder", None)) if s is not None):
            stack.tie_shared()

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
                stack.register_position_buffers()
        for name, buffer in self.named_buffers():  # DeepSeek-V3's router correction bias starts at 0
            if name.endswith("score_bias"):
                buffer.zero_()
        for module in self.modules():  # buffers a module sets itself: xIELU's constants, a hash-routing table
            if hasattr(module, "reset_buffers"):
                module.reset_buffers()
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
            h = self.head_norm(ACTIVATIONS[self.cfg.activation](self.head_dense(h)))
        if self.project_out is not None:
            h = self.project_out(h)
        logits = self.lm_head(h)
        if self.arch.head.scale is not None:  # Cohere's logit_scale; Granite's 1 / logits_scaling
            logits = logits * self.arch.head.scale
        return softcap(logits, self.arch.head.softcap)

    # ---------- decoding with a static KV cache (tfcalc.model.cache) ----------

    def new_cache(self, batch: int, max_tokens: int, spare: int = 0) -> StaticCache:
        """A cache for ``batch`` sequences of up to ``max_tokens`` positions (prompt and generated tokens),
        on the model's device and in its dtype: each layer's mixer module allocates its own state (new_state).
        ``spare``: slots each window's or chunk's ring keeps beyond its span, so that steps of spare + 1
        tokens can be verified and rewound (tfcalc.model.attention_state); asked of a mixer module only when
        not 0 and its component declares ``rewind`` (a recurrent state has no slots to spare). An encoder
        generates nothing: InputError."""
        check_decodable(self.cfg, max_tokens)
        weight = self.tok_emb.weight
        states = [block.attn.new_state(batch, max_tokens, weight.device, weight.dtype,
                                       **({"spare": spare} if spare and block.spec.mixer.capabilities.rewind else {}))
                  for block in self.blocks]
        return StaticCache(states, batch, max_tokens, weight.device)

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
        x = step.prefill(self, idx, cache)  # (B, T, d)
        return self.head(x[:, -1:] if last_only else x)

    def step(self, idx: torch.Tensor, cache: StaticCache, span: int) -> torch.Tensor:
        """The fixed-shape step (tfcalc.model.step.run_step) and the head: (B, T) tokens at each row's next
        positions, over ``span`` slots -> logits (B, T, V). Device work only, nothing checked or counted
        on the host: what a CUDA graph captures (tfcalc.model.generate.Decoder)."""
        with sdpa_kernel(STEP_BACKENDS, set_priority=True):
            return self.head(step.run_step(self, idx, cache, span))

    def decode(self, token: torch.Tensor, cache: StaticCache) -> torch.Tensor:
        """One token per sequence (B, 1) at the cache's next position -> its logits (B, 1, V)."""
        if cache.length == 0:
            raise InputError("decode() continues a prompt: call prefill() first")
        if token.shape[1] != 1:
            raise InputError("decode() takes one token per sequence at a time (several at once: extend())")
        cache.check_room(1)
        logits = self.step(token, cache, cache.bucket(1))
        cache.length += 1
        return logits

    def extend(self, tokens: torch.Tensor, cache: StaticCache) -> torch.Tensor:
        """Several tokens per sequence (B, T) at the cache's next positions, in one forward -> their logits
        (B, T, V): speculative decoding's verify step (a draft's proposals checked at once). Only where
        every layer's state rewinds (StaticCache.rewindable) and T fits its rings' spare slots
        (StaticCache.widest_step); the caller rewinds what it rejects."""
        if cache.length == 0:
            raise InputError("extend() continues a prompt: call prefill() first")
        if not cache.rewindable:
            raise InputError(f"{self.cfg.name}: several tokens after the prompt need states that rewind")
        T = tokens.shape[1]
        widest = cache.widest_step
        if widest is not None and T > widest:
            raise InputError(f"{self.cfg.name}: a step of {T} tokens overwrites ring slots (sliding windows or "
                             f"chunks) its own queries read; this cache takes {widest} at most "
                             f"(new_cache(..., spare={T - 1}))")
        cache.check_room(T)
        logits = self.step(tokens, cache, cache.bucket(T))
        cache.length += T
        return logits

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


def _positions(start: int | torch.Tensor, T: int, device) -> torch.Tensor:
    """Positions start .. start + T - 1: (T,) from one start, (B, T) from (B,) starts."""
    if isinstance(start, torch.Tensor):
        return start[:, None] + torch.arange(T, device=device)
    return torch.arange(start, start + T, device=device)


def build_model(
    cfg: ModelConfig, device: str | torch.device = "meta", dtype: torch.dtype = torch.float32,
    arch: Architecture | None = None,
) -> Transformer:
    """The model on ``device`` in ``dtype`` (of ``arch``, default cfg.architecture). Built on meta first,
    so nothing is allocated or initialized twice; off meta, storage is then allocated once and filled by
    init_weights()."""
    with torch.device("meta"):
        model = Transformer(cfg, arch).to(dtype)
    if torch.device(device).type == "meta":
        return model
    # Module.to_empty(device), but with torch.empty: empty_like of a meta tensor runs its Python meta
    # kernel (torch._refs), whose first call imports sympy (a large import, for nothing); the tensors built on meta
    # here are contiguous, so the storage is the same.
    model._apply(lambda t: torch.empty(t.shape, dtype=t.dtype, device=device))
    model.tie_weights()  # to_empty() gives each module its own copy of a shared meta tensor
    model.init_weights()
    return model.eval()
