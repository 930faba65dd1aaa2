"""The whole model: embeddings, one or two stacks of blocks, and the head; and what the folds walk.

- ``Embeddings``: a token table, positions (learned table, sinusoidal, RoPE, ALiBi, T5's relative bias, or
  none), BERT's token types and embedding norm, Vaswani's sqrt(d) scale; an encoder-decoder's encoder
  may share the decoder's token table (``tied``);
- ``Head`` after the output stack: BERT's pooler and MLM transform, the LM head (tied to the token
  embedding or not, with a bias, with Gemma 2's logit soft-cap);
- ``Architecture``: stacks in model order (an encoder-decoder's encoder first) and the head.

``Architecture.weights()`` lists every parameter tensor once per kind, with the layers holding it: the
one list the parameter count, the parallel plan's shards and the checkpoint map fold over.
Pure Python: no torch, typer or rich here.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Literal, Optional

from tfcalc.architecture import copies
from tfcalc.architecture.block import Block, Hyper, Stack
from tfcalc.architecture.ffn import MoE
from tfcalc.architecture.mixer import MixerRole, role_of, state_by_dtype, state_elements
from tfcalc.architecture.mtp import MTP
from tfcalc.architecture.norm import Norm
from tfcalc.architecture.per_layer import AltUp, PerLayerInputs
from tfcalc.architecture.tensors import Linear, Weight
from tfcalc.errors import InputError

Positions = Literal["learned", "sinusoidal", "rope", "alibi", "none", "relative"]
Kind = Literal["decoder", "encoder", "encoder-decoder"]
Where = Literal["first", "last", "both", "block"]


@dataclass(frozen=True)
class Embeddings:
    vocab_size: int
    d_model: int
    positions: Positions = "learned"
    position_rows: int = 0  # rows of a learned table (max_seq_len + OPT's offset)
    relative: Optional[tuple[int, int]] = None  # T5: (buckets, n_head) of the bias table
    type_vocab_size: int = 0
    norm: Optional[Norm] = None
    scale: bool = False  # token embeddings times sqrt(d_model) (Vaswani et al. 2017, sec. 3.4)
    tied_head: bool = False  # the LM head is this table (Press and Wolf 2017): vocabulary-split under TP
    shared_with: Optional[str] = None  # an encoder's table that is the decoder's: counted there
    multiplier: Optional[float] = None  # token embeddings times this (Granite's embedding_multiplier)
    # the token table's width when not d_model, projected in by a bias-free Linear (OPT-350m's project_in)
    project_dim: Optional[int] = None
    per_layer: Optional[PerLayerInputs] = None  # Gemma 4's per-layer inputs (tfcalc.architecture.per_layer)
    altup: Optional[AltUp] = None  # Gemma 3n's streams: their projections in and out (tfcalc.architecture.per_layer)

    def __post_init__(self) -> None:
        if self.positions == "learned" and self.position_rows < 1:
            raise InputError("learned positions need a table of at least one row (max_seq_len)")

    @property
    def table_dim(self) -> int:
        """Width of the token table: d_model, or the projected width."""
        return self.d_model if self.project_dim is None else self.project_dim

    def weights(self) -> list[Weight]:
        V, d, p = self.vocab_size, self.d_model, self.table_dim
        # an untied table is split along the hidden dimension under TP (see tfcalc.count.training.shard, step 4)
        out = [Weight("token_embedding", (V, p), "embeddings", "token embedding", "rows" if self.tied_head else "cols",
                      tied_to=self.shared_with)]
        if self.project_dim is not None:  # modeling_opt.py, OPTDecoder.project_in
            out.append(Weight("embedding_project_in", (d, p), "embeddings", "embedding projection in"))
        if self.positions == "learned":
            out.append(Weight("position_embedding", (self.position_rows, d), "embeddings", "position embedding"))
        if self.relative is not None:
            out.append(Weight("relative_position_bias", self.relative, "embeddings", "relative position bias"))
        if self.type_vocab_size:
            out.append(Weight("token_type_embedding", (self.type_vocab_size, d), "embeddings", "token-type embedding"))
        out += self.per_layer.weights() if self.per_layer is not None else []
        out += self.altup.io_weights() if self.altup is not None else []
        return out + (self.norm.weights("embedding_norm", "embedding norm") if self.norm else [])

    def linears(self) -> list[Linear]:
        """The matmuls at the embeddings, over every token: OPT-350m's project_in, Gemma 4's per-layer projection."""
        out = [Linear("embedding_project_in", "embeddings", "embedding projection in", self.project_dim,
                      self.d_model)] if self.project_dim is not None else []
        out += self.altup.io_linears() if self.altup is not None else []
        return out + (self.per_layer.linears() if self.per_layer is not None else [])


@dataclass(frozen=True)
class Head:
    vocab_size: int
    d_model: int
    lm_head: bool = True
    tied: bool = True  # the LM head is the token embedding
    bias: bool = False  # a bias on the vocabulary projection (BERT's MLM head)
    pooler: bool = False  # BERT: tanh(Linear(d, d)) of the first token
    transform: Optional[Norm] = None  # BERT's MLM transform: Linear(d, d), activation, this norm
    softcap: Optional[float] = None  # logits -> c·tanh(logits / c) (Gemma 2: 30)
    scale: Optional[float] = None  # logits times this (Cohere's logit_scale; Granite's 1 / logits_scaling)
    # the LM head reads this width, projected down from d_model by a bias-free Linear (OPT-350m's project_out)
    project_dim: Optional[int] = None
    # hyper-connection streams collapsed before the final norm (DeepSeek-V4's hc_head, DeepseekV4HyperHead: a
    # projection n·d -> n, sigmoid weights of the n streams); None: none (tfcalc.architecture.block.Hyper)
    hyper: Optional[Hyper] = None
    activation: str = "gelu"  # the transform's, between its Linear and its norm (BERT's hidden_act: the model's)

    def __post_init__(self) -> None:
        extras = self.tied or self.bias or self.transform or self.softcap is not None or self.scale is not None
        if not self.lm_head and (extras or self.project_dim is not None):
            raise InputError("tie_embeddings, lm_head_bias, lm_head_transform, logit_softcap, logit_scale and "
                             "embedding_dim need an LM head")

    @property
    def in_dim(self) -> int:
        """Width the vocabulary projection reads: d_model, or the projected width."""
        return self.d_model if self.project_dim is None else self.project_dim

    def weights(self) -> list[Weight]:
        d, V, out = self.d_model, self.vocab_size, []
        if self.hyper is not None:
            n = self.hyper.streams
            out += [Weight("hc_head_fn", (n, n * d), "lm_head", "hyper-connection head projection"),
                    Weight("hc_head_base", (n,), "lm_head", "hyper-connection head bias"),
                    Weight("hc_head_scale", (1,), "lm_head", "hyper-connection head scale")]
        if self.project_dim is not None:  # modeling_opt.py, OPTDecoder.project_out
            out.append(Weight("lm_head_project_out", (self.project_dim, d), "lm_head", "LM head projection out"))
        if self.pooler:  # BERT (Devlin et al. 2019, sec. 3)
            out += [Weight("pooler_weight", (d, d), "pooler", "pooler weight"),
                    Weight("pooler_bias", (d,), "pooler", "pooler bias")]
        if self.transform is not None:  # modeling_bert.py, BertPredictionHeadTransform
            out += [Weight("lm_head_transform_weight", (d, d), "lm_head", "LM head transform weight"),
                    Weight("lm_head_transform_bias", (d,), "lm_head", "LM head transform bias")]
            out += [Weight(w.name.replace("norm", "lm_head_norm", 1), w.shape, "lm_head", w.label)
                    for w in self.transform.weights("norm", "LM head norm")]
        if self.lm_head:  # vocabulary-parallel under TP (Megatron)
            out.append(Weight("lm_head", (V, self.in_dim), "lm_head", "LM head", "rows",
                              tied_to="token_embedding" if self.tied else None))
            if self.bias:
                out.append(Weight("lm_head_bias", (V,), "lm_head", "LM head bias", "rows"))
        return out


@dataclass(frozen=True)
class Placed:
    """A tensor where the model holds it: ``layers`` copies (one per block of ``stack`` that has it, or 1
    outside the blocks), each of ``weight.copies`` (experts) copies; ``where``: the pipeline stage(s)."""

    weight: Weight
    layers: int
    stack: str
    where: Where

    @property
    def total(self) -> int:
        """Parameters it adds to the model: 0 when tied to another tensor (counted there)."""
        return 0 if self.weight.tied_to else self.weight.numel * self.layers


@dataclass(frozen=True)
class Architecture:
    kind: Kind
    stacks: tuple[Stack, ...]  # model order: an encoder-decoder's encoder, then its decoder
    head: Head
    mtp: Optional[MTP] = None  # DeepSeek-V3's multi-token prediction modules: beside the model, not in it

    def __post_init__(self) -> None:
        if not self.stacks or any(s.n_layer < 1 for s in self.stacks):
            raise InputError("a model needs at least one stack of at least one layer")

    @property
    def d_model(self) -> int:
        return self.head.d_model

    @property
    def vocab_size(self) -> int:
        return self.head.vocab_size

    @property
    def output(self) -> Stack:
        """The stack the head reads: the decoder, or a one-stack model's stack."""
        return self.stacks[-1]

    @property
    def encoder(self) -> Optional[Stack]:
        return next((s for s in self.stacks if s.name == "encoder"), None) if self.kind == "encoder-decoder" else (
            self.stacks[0] if self.kind == "encoder" else None)

    @property
    def decoder(self) -> Optional[Stack]:
        """The causal stack (an encoder has none)."""
        return None if self.kind == "encoder" else self.output

    def blocks(self) -> list[Block]:
        """Every layer's block, stacks in model order: one per layer (a fold over kinds() costs less)."""
        return [b for s in self.stacks for b in s.layers()]

    def kinds(self) -> list[tuple[Stack, Block, int]]:
        """(stack, distinct block, layers that are it), stacks in model order."""
        return [(s, b, n) for s in self.stacks for b, n in s.kinds()]

    def kinds_in(self, start: int, stop: int) -> list[tuple[Stack, Block, int]]:
        """As kinds(), among the layers start..stop-1 of all stacks numbered in model order (encoder first).
        Memoized per description: a plan's search asks for the same pipeline stages thousands of times."""
        memo = self.__dict__.setdefault("_kinds_in", {})
        if (start, stop) not in memo:
            out, offset = [], 0
            for s in self.stacks:
                out += [(s, b, n) for b, n in s.kinds_in(start - offset, stop - offset)]
                offset += s.n_layer
            memo[start, stop] = out
        return list(memo[start, stop])

    def __getstate__(self) -> dict:
        """Pickled without the memo of kinds_in."""
        return {k: v for k, v in self.__dict__.items() if k != "_kinds_in"}

    def shrunk(self, n_layer: int, n_encoder_layer: Optional[int] = None) -> "Architecture":
        """A copy with the output stack at n_layer layers (an encoder-decoder's encoder at n_encoder_layer,
        default n_layer), each depth pattern kept with fewer repeats (tfcalc.architecture.copies); the
        embeddings, head and MTP modules as they are."""
        depths = [n_layer] if len(self.stacks) == 1 else [n_encoder_layer or n_layer, n_layer]
        stacks = tuple(copies.shrunk(s, n) for s, n in zip(self.stacks, depths, strict=True))
        return dataclasses.replace(self, stacks=stacks)

    def one_of_each(self) -> "Architecture":
        """A copy whose stacks hold each distinct block once, in the order first seen: every kernel of the
        model in as few layers as hold them (tfcalc.architecture.copies)."""
        return dataclasses.replace(self, stacks=tuple(copies.one_of_each(s) for s in self.stacks))

    @property
    def has_moe(self) -> bool:
        return any(b.is_moe for _, b, _ in self.kinds())

    @property
    def positions(self) -> str:
        """How the output stack encodes positions (learned, sinusoidal, rope, alibi, relative, none)."""
        return self.output.embeddings.positions

    @property
    def bounded_positions(self) -> bool:
        """Whether the model encodes positions up to a length only (a learned or sinusoidal table, RoPE's rows built
        for the context): the front end's max_seq_len then bounds what a measured run may take."""
        return self.positions in ("learned", "rope", "sinusoidal")

    @property
    def has_cross_attention(self) -> bool:
        """Whether some block reads another sequence (an encoder-decoder's decoder, GPT-2's add_cross_attention)."""
        return any(b.cross_attention is not None for _, b, _ in self.kinds())

    def weights(self) -> list[Placed]:
        """Every tensor once per (name, shape), with the layers holding it, in model order: each stack's
        embeddings, blocks and final norm, then the head (with the output stack)."""
        out: list[Placed] = []
        for stack in self.stacks:
            pre = stack.prefix
            both = stack.embeddings.tied_head  # the LM head's table: the last stage holds it too
            out += [Placed(w.named(pre), 1, stack.name, "both" if both and w.name == "token_embedding" else "first")
                    for w in stack.embeddings.weights()]
            seen: dict[tuple[str, tuple[int, ...]], int] = {}
            for block, layers in stack.kinds():
                for w in block.weights():
                    key = (w.name, w.shape)
                    if key in seen:
                        i = seen[key]
                        out[i] = Placed(out[i].weight, out[i].layers + layers, stack.name, "block")
                    else:
                        seen[key] = len(out)
                        out.append(Placed(w.named(pre), layers, stack.name, "block"))
            if stack.final_norm is not None:
                out += [Placed(w.named(pre), 1, stack.name, "last")
                        for w in stack.final_norm.weights("final_norm", "final norm")]
        return out + [Placed(w, 1, self.output.name, "last") for w in self.head.weights()]

    def kv_elements(self, context: int) -> int:
        """Generation-state elements of the decoder's mixers at ``context`` tokens, all layers (each mixer's
        ``state()``: K and V, or a latent, growing with the context; a fixed state; tfcalc.architecture.mixer)."""
        stack = self.decoder
        if stack is None:
            return 0
        return sum(n * state_elements(b.mixer, context) for b, n in stack.kinds())

    def expanded_kv_elements(self, context: int) -> int:
        """As kv_elements, with each mixer's ``expanded_state()``: a latent attention's cache counted as the K
        and V heads it expands to (tfcalc.architecture.latent, step 4); equal to kv_elements for the others."""
        stack = self.decoder
        if stack is None:
            return 0
        return sum(n * state_elements(b.mixer, context, expanded=True) for b, n in stack.kinds())

    def state_by_dtype(self, context: int, spare: int = 0) -> dict[Optional[str], int]:
        """{dtype (None: the cache dtype): elements} of the decoder's generation state at ``context`` tokens,
        each window's or chunk's ring with ``spare`` slots more (a speculative run's: StateTensor.positions)."""
        out: dict[Optional[str], int] = {}
        for b, n in self.decoder.kinds() if self.decoder is not None else ():
            for dtype, elements in state_by_dtype(b.mixer, context, spare).items():
                out[dtype] = out.get(dtype, 0) + n * elements
        return out

    def moe(self) -> Optional[MoE]:
        """The mixture of experts of the first MoE layer (the front ends give every MoE layer the same), or None."""
        return next((b.ffn for _, b, _ in self.kinds() if b.is_moe), None)

    def decode_forms(self) -> str:
        """The forms the decoder's mixers run a decode step in (``Capabilities.decode_form``), joined:
        "standard", or "absorbed" for latent attention; "" for a model that decodes nothing."""
        stack = self.decoder
        forms = {b.mixer.capabilities.decode_form for b, _ in stack.kinds()} if stack is not None else set()
        return ", ".join(sorted(forms))

    def roles(self) -> tuple[MixerRole, ...]:
        """The roles its token mixers declare (tfcalc.architecture.mixer, 10.), each once, in model order; a block
        of its FFN alone (no mixer tensors, no matmuls) left out: what the reports' breakdowns name."""
        mixers = [b.mixer for _, b, _ in self.kinds() if b.mixer.weights() or b.mixer.linears()]
        return tuple(dict.fromkeys(role_of(m) for m in mixers))

    def cross_kv_elements(self, sources: int) -> int:
        """K and V elements of every cross-attention's cache over ``sources`` encoder positions."""
        return sum(n * state_elements(b.cross_attention, sources)
                   for s in self.stacks for b, n in s.kinds() if b.cross_attention is not None)
