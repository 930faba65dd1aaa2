"""Training activations of a ModelConfig: the bytes autograd keeps for the backward pass, a fold over the
layers of ``cfg.architecture`` (tfcalc.architecture). Pure arithmetic.

Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large Transformer Models", arXiv
2205.05198, sec. 4.1, eq. 1) count, per layer, in 16-bit with dropout, for a GPT block (LayerNorm, GELU
MLP with f = 4h, q = k = h), in bytes:

1. attention block, 11sbh + 5as²b: QKV input 2sbh; Q and K (for QKᵀ) 4sbh; softmax output 2as²b;
   softmax-dropout mask as²b (1 byte); dropout output (for ·V) 2as²b; V 2sbh; output-projection input
   2sbh; output-dropout mask sbh;
2. MLP, 19sbh: first linear input 2sbh; GELU input 8sbh; GELU output (second linear input) 8sbh;
   dropout mask sbh;
3. two LayerNorms, 4sbh: each keeps its input, 2sbh.
   Sum: sbh·(34 + 5as/h). They leave out the LayerNorm statistics (mean, 1/σ: 8 bytes per token per norm
   in fp32); we keep them.

Those terms for each kind of block, read from its components (its attention's widths, RoPE, Q/K norms and
soft-cap; its FFN or mixture of experts; its norms and where they sit): tfcalc.count.model.activation_terms.
Here they are multiplied out over the layers in closed form: each stack's distinct blocks
(``Stack.kinds()``) times the layers that are each, so a stack of mixed layers (dense first layers, a
mixture of experts every n-th layer, local and global windows, per-layer widths) costs what each of its
layers keeps, and a 2**40-layer stack no more to count than a 2-layer one.

Outside the blocks: the embedding output is the first layer's input (counted there); the head keeps the
final-norm terms (when there is a final norm), the LM-head input e·h, and the log-probabilities of the
loss, 4·V (the loss runs in fp32, on the upcast logits, as is usual). The token ids are inputs, not
counted. BERT's MLM head transform keeps its input, the activation's input (ReLU: its output, which the
norm keeps anyway, when not copied) and a norm; Gemma 2's logit soft-capping keeps the tanh output, e·V.
BERT's pooler keeps its tanh output, e·h per sequence, and, without an LM head, the final hidden states
it reads its first token from (a view keeps the whole tensor), e·h per token. Without an LM head there
are no log-probabilities and no loss gradients over V.

An encoder-decoder over S source tokens: the encoder's blocks keep their terms over b·S tokens; the
encoder output is kept once, e·h per source token, as the input of every decoder block's K/V projection
(a decoder-only stack with cross-attention keeps its external states once, likewise). A sliding window
shorter than the sequence is an explicit (T, T) mask, built once per forward per distinct window
(tfcalc.model's ``layer_masks``) and kept by the fused kernel of every windowed block: e·T² each.

The backward pass begins with one more transient: the gradients of the fp32 log-probabilities and of
the fp32 logits, 8·V bytes per token, alive together with the saved log-probabilities. It is counted in
the activation peak (``Activations.total``), not in the saved bytes (``Activations.stored``).

Variants: attention kernel "flash" (SDPA's fused kernels keep no s² tensor) or "math". Called with no
kernel, ``activations`` counts what tfcalc's own module runs on a CPU (``block_kernel``: "math" under
ALiBi's or T5's explicit bias and with soft-capped scores) -- what a measured run is checked against; a
training request (memory --training, plan) assumes TRAINING_ATTENTION, "flash", as every current
training stack runs (FlashAttention-2 takes ALiBi slopes and a soft-cap in the kernel; T5's bias is read
by the fused kernel as an input, which it keeps: e·a·T² once, ``position_bias``). Selective recompute
(Korthikanti et al. 2022, sec. 5) keeps everything but the score terms (softmax output and its dropout),
rebuilt in the backward pass: under "flash" there are none, so it keeps what "none" keeps. Full
recompute (activation checkpointing of every block): only each block's input is kept, e·h per token
per layer (Korthikanti's 2sbh), and one block's activations are rebuilt at a time during the backward
pass, so the largest layer's worth is added to the peak. How a rank of a parallel layout shares these
terms: tfcalc.count.training.rank_activations.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Optional

from tfcalc.architecture import Architecture, Block, Stack
from tfcalc.config import ConfigError, ModelConfig
from tfcalc.count.model import op_recompute
from tfcalc.count.model.activation_terms import (
    FP32,
    capacity_terms,
    cross_terms,
    layer_terms,
    norm_bytes,
    shared_input_bytes,
)
from tfcalc.count.model.dtypes import activation_element_bytes
from tfcalc.workload import Workload

ATTENTION_KERNELS = ("flash", "math")
TRAINING_ATTENTION = "flash"  # what a training request assumes unless told: every current stack runs a fused kernel
RECOMPUTE = ("none", "selective", "full", "op")  # op: tfcalc.count.model.op_recompute
SCORE_TERMS = frozenset({"attn_scores", "scores_dropout", "cross_attn_scores"})  # what selective recompute rebuilds
EXPLICIT_BIAS = ("alibi", "relative")  # positions added to the scores as an explicit mask


def block_kernel(stack: Stack, block: Block) -> str:
    """The kernel tfcalc's module runs for this block on CPU: SDPA's fused kernel ("flash"), or "math"
    under an explicit mask (ALiBi's bias, T5's relative bias), with soft-capped scores or with sinks
    (written out), and with V heads of another width than Q's and K's (a latent attention's h_v beside
    h_n + h_r: SDPA's fused CPU kernel takes one head width, so PyTorch falls back to its math kernel)."""
    return block.mixer.kernel(stack.embeddings.positions in EXPLICIT_BIAS)  # the mixer's answer


def default_attention(cfg: ModelConfig) -> str:
    """The kernel the real module runs on CPU, "math" if any block runs it (``block_kernel``)."""
    kinds = cfg.architecture.kinds()
    return "math" if any(block_kernel(s, b) == "math" for s, b, _ in kinds) else "flash"


def head_activations(cfg: ModelConfig, e: int) -> dict[str, int]:
    """{component: bytes per token} kept outside the output stack's blocks (see the module docstring)."""
    arch = cfg.architecture
    head, stack, h, V = arch.head, arch.output, arch.d_model, arch.vocab_size
    norm = stack.embeddings.norm
    out = {
        "embedding_norm": norm_bytes(norm, e) if norm else 0,
        "final_norm": norm_bytes(stack.final_norm, e) if stack.final_norm else 0,
        "pooler_input": e * h if head.pooler and not head.lm_head else 0,
        "lm_head_input": e * h if head.lm_head else 0,
        # OPT-350m: project_in keeps the looked-up rows, the LM head project_out's output (p wide each)
        "embedding_projections": 2 * e * head.project_dim if head.project_dim is not None else 0,
        "log_probs": FP32 * V if head.lm_head else 0,
    }
    if head.transform is not None:  # ReLU keeps its output, which its norm keeps too (as input, when not copied)
        # the transform's activation is the model's (Head.activation; tfcalc.model.transformer builds it so)
        shared = head.activation == "relu" and e * h == shared_input_bytes(head.transform, e)
        out["head_transform"] = e * h + (0 if shared else e * h) + norm_bytes(head.transform, e)
    if head.softcap is not None:
        out["logit_softcap"] = e * V
    out.update(_stream_terms(stack, e))
    if head.hyper is not None:  # DeepSeek-V4's hc_head (tfcalc.model.hyper.HyperHead): the n streams (below fp32
        n = head.hyper.streams  # an fp32 copy too), 1/rms and the normed streams, the mixes, sigmoid, pre + eps
        out["hc_head"] = e * n * h + (FP32 * n * h if e != FP32 else 0) + FP32 * (1 + n * h + 3 * n)
    return out


def _stream_terms(stack: Stack, e: int) -> dict[str, int]:
    """{component: bytes per token} at the embeddings and the head of Gemma 3n's and Gemma 4's stacks
    (tfcalc.model.altup.Streams, tfcalc.model.per_layer.PerLayerInputs). AltUp's expand keeps the embeddings
    x (e·h: x² and the projections read them), mean(x²) and its root e each, and for each of the n - 1
    projections its output (its square and the rescale read it) e·h, the clamped mean of its square and its
    root e each, and the rescaled product e·h; the merge the same, reading the last block's n streams through
    a view (e·n·h). Per-layer inputs: the projection's input (the embeddings: AltUp's, or, in fp32 or under
    LayerNorm, the first block's norm's input, kept there), the norm of each layer's p channels, and the
    inputs the blocks read, e·L·p."""
    emb, h, out = stack.embeddings, stack.embeddings.d_model, {}
    if emb.altup is not None:
        rescaled = (emb.altup.n - 1) * (2 * e * h + 2 * e)
        # the expand at the embeddings (a pipeline's first stage), the merge before the final norm (its last)
        out["altup_expand"] = e * h + 2 * e + rescaled
        out["altup_merge"] = e * emb.altup.n * h + 2 * e + rescaled
    if emb.per_layer is not None:
        pl, first = emb.per_layer, stack.layer(0)
        x = 0 if emb.altup is not None else e * h - shared_input_bytes(first.norm, e)
        out["per_layer_inputs"] = x + norm_bytes(pl.norm, e, rows=pl.n_layer) + e * pl.n_layer * pl.width
    return out


Terms = dict[str, int]


@dataclass(frozen=True)
class Activations:
    """Activation bytes for one training step at (batch, seq): per kind of block, head, and total.

    ``per_layer`` and ``encoder_per_layer`` are the terms of each stack's commonest kind of block (what a
    table shows as "per layer"); every sum over layers goes through ``kinds_in`` (closed form in depth)."""

    per_layer: Terms  # bytes for one block of the output stack, by component (already times b·s)
    head: Terms  # bytes outside the blocks, by component
    n_layer: int
    layer_input: int  # bytes of one block's input, e·h·b·s: all that full recompute keeps per layer
    loss_gradients: int  # fp32 gradients of the log-probs and logits as the backward pass starts
    attention: str
    recompute: str  # none, selective (the score terms rebuilt in the backward pass) or full
    # an encoder-decoder's encoder blocks (over b·S source tokens); empty and 0 for the other kinds
    encoder_per_layer: Terms = dataclasses.field(default_factory=dict)
    n_encoder_layer: int = 0
    encoder_layer_input: int = 0
    moe: bool = False  # some FFN is a mixture of experts (replicated, not split, across tensor-parallel ranks)
    arch: Optional[Architecture] = None  # the layers the terms below are of; None: every layer is per_layer
    terms: dict = dataclasses.field(default_factory=dict)  # (stack name, id of its block) -> the block's terms
    # recompute "op" only: id of a block's terms -> the terms it keeps (tfcalc.count.model.op_recompute)
    op_terms: dict = dataclasses.field(default_factory=dict)
    _ranges: dict = dataclasses.field(default_factory=dict, repr=False, compare=False)  # kinds_in, memoized

    def kinds_in(self, start: int, stop: int) -> list[tuple[Terms, int, int]]:
        """(terms, layers, block-input bytes) of each kind of block among blocks start..stop-1, numbered over
        the whole model (an encoder-decoder's encoder first), counted in closed form."""
        if self.arch is None:
            return [(self.per_layer, stop - start, self.layer_input)] if stop > start else []
        if (start, stop) not in self._ranges:  # a plan's search asks for the same stages many times
            self._ranges[start, stop] = [
                (self.terms[stack.name, id(block)], n,
                 self.encoder_layer_input if stack.name == "encoder" else self.layer_input)
                for stack, block, n in self.arch.kinds_in(start, stop)]
        return self._ranges[start, stop]

    def layer_terms(self, i: int) -> Terms:
        """{component: bytes} of output-stack layer i (found from the runs in closed form)."""
        if not 0 <= i < self.n_layer:
            raise IndexError(f"layer {i} of {self.n_layer}")
        out = self.arch.output if self.arch is not None else None
        return self.per_layer if out is None else self.terms[out.name, id(out.layer(i))]

    def kept(self, terms: Terms) -> int:
        """Bytes of one layer's terms kept under selective recompute (the score terms dropped) or none."""
        drop = SCORE_TERMS if self.recompute == "selective" else frozenset()
        return sum(v for key, v in terms.items() if key not in drop)

    @property
    def layer(self) -> int:
        """One block of the output stack (an encoder-decoder's decoder block, cross-attention included)."""
        return sum(self.per_layer.values())

    @property
    def encoder_layer(self) -> int:
        return sum(self.encoder_per_layer.values())

    @property
    def stored(self) -> int:
        """Bytes kept from the forward pass to the backward pass."""
        full = self.recompute == "full"
        kinds = self.kinds_in(0, self.n_encoder_layer + self.n_layer)
        if self.recompute == "op":  # the block's input and what the policy saves
            return sum(n * (kept + sum(self.op_terms[id(terms)].values())) for terms, n, kept in kinds) + sum(
                self.head.values())
        return sum(n * (kept if full else self.kept(terms)) for terms, n, kept in kinds) + sum(self.head.values())

    @property
    def recompute_extra(self) -> int:
        """With full (or op) recompute, the largest block's activations, rebuilt one block at a time in the
        backward; under op recompute less what the policy saved, which the replay reads from its cache
        (torch.utils.checkpoint's selective-checkpoint caching mode) rather than computing anew."""
        if self.recompute not in ("full", "op"):
            return 0
        op = self.recompute == "op"
        return max(sum(t.values()) - (sum(self.op_terms[id(t)].values()) if op else 0)
                   for t, _, _ in self.kinds_in(0, self.n_encoder_layer + self.n_layer))

    @property
    def total(self) -> int:
        """The activation peak of a training step: stored, rebuilt layer, loss gradients."""
        return self.stored + self.recompute_extra + self.loss_gradients


def commonest_block(stack: Stack) -> Block:
    """The stack's kind of block with the most layers (the first such on a tie): the "per layer" of a table."""
    return max(stack.kinds(), key=lambda kind: kind[1])[0]


def _commonest(stack: Stack, terms: dict) -> Terms:
    """The terms of the stack's commonest kind of block."""
    return terms[stack.name, id(commonest_block(stack))]


def _masks(stack: Stack, seq: int) -> set[tuple]:
    """The distinct (window, chunk) of the stack's causal self-attention layers that hide keys at ``seq``
    tokens, each a (T, T) mask tfcalc.model builds once (``layer_masks``), that a layer running the fused
    kernel keeps for its backward (a written-out layer adds it to its scores, keeping nothing); a window or
    chunk of seq or more hides nothing. (``chunk``: chunked attention, issue 22; absent, none.)"""
    out = set()
    for block, _ in stack.kinds():
        span = block.mixer.mask_span(seq)
        if block.mixer.causal and span != (None, None) and block_kernel(stack, block) == "flash":
            out.add(span)
    return out


def _terms_by_block(arch: Architecture, batch: int, seq: int, src: int, e: int, attention: Optional[str],
                    dropout: bool) -> dict[tuple[str, int], Terms]:
    """{(stack name, id of a block of its runs): the block's terms (times its tokens)}: each distinct kind
    priced once, every block object of the runs (equal blocks may be distinct objects) mapped to it, so
    the folds look terms up by identity instead of hashing a whole block each time."""
    by_value: dict[tuple[str, Block], Terms] = {}
    out: dict[tuple[str, int], Terms] = {}
    for stack in arch.stacks:
        length = src if stack.name == "encoder" else seq
        tokens = batch * length
        for block in {id(b): b for run in stack.runs for b in run.pattern}.values():
            if (stack.name, block) not in by_value:
                kernel = attention or block_kernel(stack, block)
                terms = {key: int(tokens * n)  # a mixer's Fraction of a sequence's bytes: whole here
                         for key, n in layer_terms(block, batch, length, e, kernel, dropout).items()}
                if block.cross_attention is not None:  # src external states (an encoder's output)
                    cross_kernel = attention or block.cross_attention.kernel(False)  # no mask: its own choice
                    terms.update(cross_terms(block, batch, length, src, e, cross_kernel))  # step 10
                if block.is_moe and block.ffn.capacity_factor is not None:
                    capacity_terms(block.ffn, terms, tokens, e)
                by_value[stack.name, block] = terms
            out[stack.name, id(block)] = by_value[stack.name, block]
    return out


def activations(cfg: ModelConfig, w: Workload, attention: Optional[str] = None, recompute: str = "none",
                dropout: bool = False) -> Activations:
    """Training activations of w.batch sequences of w.seq tokens in w.dtype; attention None means each
    block's kernel in tfcalc's module (``block_kernel``; for cross-attention, which has no mask, the fused
    kernel unless capped). An encoder-decoder (or a stack with cross-attention) reads w.src_seq source
    tokens (default: w.seq)."""
    batch, seq, dtype, src_seq = w.batch, w.seq, w.dtype, w.src_seq
    if recompute not in RECOMPUTE:
        raise ConfigError(f"unknown recompute '{recompute}'; choose one of {', '.join(RECOMPUTE)}")
    if attention is not None and attention not in ATTENTION_KERNELS:
        raise ConfigError(f"unknown attention kernel '{attention}'; choose one of {', '.join(ATTENTION_KERNELS)}")
    arch, e = cfg.architecture, activation_element_bytes(dtype)
    h, src = arch.d_model, seq if src_seq is None else src_seq
    terms = _terms_by_block(arch, batch, seq, src, e, attention, dropout)
    head = {key: batch * seq * n for key, n in head_activations(cfg, e).items()}
    if arch.head.pooler:
        head["pooler_output"] = batch * e * h  # tanh keeps its output, one row per sequence
    cross = any(b.cross_attention is not None for _, b, _ in arch.kinds())
    if cross and arch.kind != "encoder-decoder":
        head["cross_memory"] = batch * src * e * h  # every block's K/V-projection input
    more = {}
    encoder = arch.encoder if arch.kind == "encoder-decoder" else None
    if encoder is not None:
        sources = batch * src
        more = dict(encoder_per_layer=_commonest(encoder, terms), n_encoder_layer=encoder.n_layer,
                    encoder_layer_input=sources * e * h)
        norm = encoder.embeddings.norm
        head["encoder_embedding_norm"] = sources * norm_bytes(norm, e) if norm else 0
        head["encoder_final_norm"] = sources * norm_bytes(encoder.final_norm, e) if encoder.final_norm else 0
        head["encoder_output"] = sources * e * h  # every decoder block's K/V-projection input
    out_stack = arch.output
    masked = _masks(out_stack, seq)
    if masked:
        # each window is an explicit (T, T) mask there, one tensor per distinct window, which the fused
        # kernel of every block with it keeps for its backward (ALiBi's, T5's and capped scores add it in)
        head["window_mask"] = len(masked) * e * seq * seq
    kernel = attention or default_attention(cfg)
    if kernel == "flash":  # the fused kernel reads T5's bias as an input and keeps it
        bias = sum(s.embeddings.relative[1] * (src if s.name == "encoder" else seq) ** 2
                   for s in arch.stacks if s.embeddings.relative is not None)
        if bias:
            head["position_bias"] = e * bias
    loss_gradients = 2 * FP32 * batch * seq * arch.vocab_size if arch.head.lm_head else 0
    op_terms = _op_terms(arch, terms, batch * seq * e, attention or kernel) if recompute == "op" else {}
    return Activations(_commonest(out_stack, terms), head, out_stack.n_layer, batch * seq * e * h, loss_gradients,
                       kernel, recompute, **more, moe=arch.has_moe, arch=arch, terms=terms, op_terms=op_terms)


def _op_terms(arch: Architecture, terms: dict, tokens_e: int, kernel: str) -> dict[int, Terms]:
    """{id of a block's terms: what op-level recompute keeps of it} (tfcalc.count.model.op_recompute)."""
    out = {}
    for stack, block, _ in arch.kinds():
        why = op_recompute.unsupported(block) or (None if kernel == "flash" else "the math attention kernel")
        if why is not None:
            raise ConfigError(f"--recompute op is not modelled for {why} (it is for dense blocks with flash attention)")
        out[id(terms[stack.name, id(block)])] = op_recompute.kept_terms(block, terms[stack.name, id(block)], tokens_e)
    return out
