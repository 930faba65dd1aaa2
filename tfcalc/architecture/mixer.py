"""The token mixer: what a block's position-mixing sub-layer answers, whatever mixes the positions.

A block (tfcalc.architecture.block) holds one token MIXER in its ``mixer`` slot, beside its FFN and norms:
softmax attention (``Attention``: full, window, chunk, sinks, NoPE, soft-cap) and latent attention
(``LatentAttention``) today; state-space, linear-attention and short-convolution mixers next. Every count
fold asks the mixer through this protocol and never its class, so a new mixer is one component that
answers it (see tests/test_mixer_protocol.py: a toy fixed-state mixer counted by the folds unchanged).

Modelled on torchtitan's per-layer configs: its ``TransformerBlock.Config`` (torchtitan/models/common/
decoder.py) holds one ``attention: BaseAttention.Config`` slot beside ``feed_forward`` or ``moe``, which
softmax attention, MLA and the gated-DeltaNet and KDA configs (models/common/attention/gdn.py, kda.py) all
fill. Taken: one slot per layer, filled by a value of any mixer kind, and what the mixer is asked stated
once. Not taken: ``build()`` of the torch module on the config (tfcalc.model builds modules from the
description, so this package stays free of torch), nor the slot's name (``attention``: a state-space mixer
is none; ``Block.attention`` stays only as an alias).

What a mixer answers:

1. ``weights()``: its parameter tensors (``Weight``: breakdown key, shape, role, TP split, fused stored
   tensor) -- the parameter count, the plan's shards and the checkpoint map fold over them;
2. ``linears(with_kv, step)``: its projections (``Linear``: n_in -> n_out over the rows named); ``step``: in
   the form a decode step runs (latent attention's absorbed form; the same projections for most mixers);
   its output projection last (the FLOP table shows ``mixing`` just before it);
3. ``mixing(queries, keys)``: the matmuls that mix positions, for ONE sequence of ``queries`` new tokens
   over a context of ``keys`` positions (a forward pass: queries = keys = T; a decode step: queries = 1,
   keys = the context) -- each a ``Mixing`` with its full-square FLOPs (the convention of FlopCounterMode,
   Megatron and PaLM) and its causal-effective FLOPs (the pairs the mask leaves), the elements of
   generation state it reads and the activations it moves (``io``); the count prices each as position mixing
   (``MatmulEntry.mixing``: no weights, split by heads under TP), whatever its name; ``step``: a decode
   step's form, as for ``linears``. Attention answers Q·Kᵀ and attention·V; a state-space mixer its
   chunked scan's matmuls, with no Q·Kᵀ at all;
4. ``elementwise(queries, keys, step)``: its non-matmul work over one sequence (``Elementwise``: softmax,
   soft-cap, RoPE, Q/K norms, its projections' bias adds, copies), each priced by tfcalc.count.model.non_matmul;
   ``step``: a decode step's form, as for ``linears``;
5. ``kernel``, ``mask_span``, ``saved`` and ``working_set``: the activations it keeps for the backward pass
   and those alive in a no-grad forward, under the kernel its module runs and the masks it reads (a
   cross-attention asked with ``sources``, the length of the sequence its keys come from);
   ``eager_ops``: its eager PyTorch traffic and launches beside the matmuls (``EagerOp``);
6. ``state()``: its GENERATION STATE per sequence and layer, a list of ``StateTensor``: elements that grow
   with the tokens (K and V; capped by a window or a chunk: ``span``) and elements that do not (an SSM's
   recurrent state, a convolution's last K - 1 inputs), each with its dtype (None: the cache dtype the
   user asks for). ``state_elements`` folds it at a context; ``step_io`` says what a decode step reads
   and writes of it;
7. ``tp_widths()``: the widths tensor parallelism splits (each must be whole on a rank: heads, groups), and
   ``tp_state_heads()``: the heads its state splits by (None: kept whole on every rank);
8. ``capabilities``: what the runtime and the plans may do with it (``Capabilities``: rewind a decode
   state to an earlier position, split over tensor-parallel ranks, ring over context-parallel ranks);
9. ``module``: the torch module that runs it, named "package.module:Class" (or the class itself) and resolved
   by tfcalc.model.mixers, so this package stays free of torch; the module allocates the state (its
   ``new_state``). Not a member of ``Mixer`` below: a mixer only counted, never built, need not name one;
10. ``role``: what the reports call its parts (``MixerRole``: the parameter group of its tensors, the FLOP
   groups of its projections and of its position mixing, each a JSON key and a title), declared in its own
   module -- a Mamba2 mixer's "SSM projections" and "SSM scan", not "attention". Read through ``role_of``:
   a mixer that declares none is counted as attention (``ATTENTION``), as every mixer was before roles.
   Only the reports' breakdowns read it; the counts' internal groups (``attention``, ``attention_proj``,
   ``attention_scores``: the token-mixer sub-layer, whatever mixes) stay as they are.

Pure Python: no torch, typer or rich here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Protocol, runtime_checkable

from tfcalc.architecture.norm import Norm
from tfcalc.architecture.tensors import Linear, Weight


@dataclass(frozen=True)
class Mixing:
    """One position-mixing matmul of one sequence: ``copies`` (heads) of (m, k) @ (k, n).

    ``causal_flops``: the FLOPs over the pairs a causal mask (or a window, a chunk) leaves, summed over the
    copies; equal to ``flops`` where every pair counts. ``state_read``: elements of generation state the
    matmul reads in this pass, each once (a fused kernel: Q·Kᵀ reads K over the keys -- in a decode step
    only those its query sees -- attention·V reads V; a recurrent read its fixed state; 0 where the operand
    is not the kept state), kept in ``state_dtype`` (None: the cache dtype)."""

    name: str  # local to the mixer; the block prefixes it ("qk" -> "attn_qk")
    label: str
    shape: tuple[int, int, int]
    copies: int
    causal_flops: int
    state_read: int = 0
    state_dtype: Optional[str] = None
    # activation elements (not generation state) the matmul reads and writes in memory over the copies; None:
    # a plain GEMM's, its (m, k) operand read and its (m, n) output written per copy. A fused attention kernel
    # reads Q for Q·Kᵀ and writes the output of attention·V; the scores between stay on chip
    io: Optional[int] = None

    @property
    def flops(self) -> int:
        """Full-square FLOPs over the copies: 2·m·k·n each."""
        m, k, n = self.shape
        return 2 * m * k * n * self.copies

    @property
    def io_elements(self) -> int:
        """``io``, or the plain GEMM's copies·(m·k + m·n)."""
        m, k, n = self.shape
        return self.io if self.io is not None else self.copies * (m * k + m * n)


@dataclass(frozen=True)
class Elementwise:
    """Non-matmul work of one sequence: an operation on ``elements`` elements, named by ``work``, the kind the
    count prices per element (tfcalc.count.model.non_matmul: "softmax", "softcap", "rope", "qk_norm" with its
    ``norm``, "bias"), or at ``per_element`` FLOPs where the mixer says its own (an op the count has no
    price for: an SSM's exp, a convolution's taps)."""

    work: str
    label: str
    elements: int
    norm: Optional[Norm] = None
    per_element: Optional[int] = None
    kernels: int = 1  # the kernels it runs in (Mamba-1's chunked scan: about 2·sqrt(T); tfcalc.count.perf.inference)
    # bytes its kernels move per sequence where they are not one read and one write of ``elements`` activations
    # (Mamba-1's fp32 scan, many passes over its (T, I, N) tensors); None: 2·elements·activation bytes
    traffic: Optional[int] = None


@dataclass(frozen=True)
class EagerOp:
    """One piece of the mixer's eager PyTorch work beside its matmuls, over a whole micro-batch, priced by
    tfcalc.count.perf.eager (its module docstring derives each kind):

    - "moves": ``elements`` read and written forward and ``backward`` back (bytes: × the activation's
      bytes), in the kernels given (a split's backward cat, a concatenation);
    - "fp32": the same in fp32 whatever the activations' dtype (4 bytes an element: Mamba-1's dt and gate);
    - "cast": ``elements`` converted between the activations' dtype and fp32 (a + 4 bytes each); none in fp32;
    - "norm": a norm (``norm``) over ``elements``, its kernels ``kernel_factor`` times (one call per head
      group of Q and of K);
    - "rope": rotary embedding over ``elements`` rotated elements of Q, then of K;
    - "bias_linears": ``elements`` Linears with a bias (each a gradient sum back)."""

    kind: str
    component: str
    elements: int = 0
    backward: int = 0
    forward_kernels: int = 0
    backward_kernels: int = 0
    norm: Optional[Norm] = None
    kernel_factor: int = 1


@dataclass(frozen=True)
class StateTensor:
    """One tensor of a mixer's generation state, per sequence and layer.

    ``per_token`` elements for each position kept (K, V: they grow with the context), at most ``span``
    positions (a window of W keeps a ring of W, a chunk of C one chunk of C; None: every position); ``fixed``
    elements that do not grow (an SSM's state, a convolution's ring). ``dtype``: the dtype it is kept in,
    None for the cache dtype the user asks for (``--kv-dtype``: K and V), "model" for the model's activation
    dtype whatever the cache's (a convolution's ring of inputs: transformers and tfcalc's runtime allocate it in
    the model's dtype, and a server's FP8 KV cache leaves it so: vLLM's mamba cache dtype is separate), or a
    dtype of its own (a recurrent state in fp32); tfcalc.count.model.dtypes.state_dtype resolves it."""

    name: str
    per_token: int = 0
    fixed: int = 0
    span: Optional[int] = None
    dtype: Optional[str] = None
    # the shape a runtime allocates per position (a growing tensor: (heads, width), whose product is
    # per_token) or whole (a fixed one), batch and positions left out; () where the mixer does not say
    shape: tuple[int, ...] = ()
    # one entry kept per ``stride`` positions (DeepSeek-V4's compressed KV: one per m tokens,
    # tfcalc.architecture.compressed_attention); 1: one per position
    stride: int = 1

    def positions(self, context: int, spare: int = 0) -> int:
        """Positions kept at a context of this many tokens; a ring (``span``) with ``spare`` slots more, which a
        speculative run allocates so that a verify step of spare + 1 tokens can be rewound
        (tfcalc.model.attention_state); with a ``stride``, the entries of the closed strides."""
        return (context if self.span is None else min(context, self.span + spare)) // self.stride

    def elements(self, context: int, spare: int = 0) -> int:
        return self.per_token * self.positions(context, spare) + self.fixed


@dataclass(frozen=True)
class MixerRole:
    """What the reports call a mixer's parts (10.): each a stable JSON key and the title a table shows."""

    params: str = "attention"  # the parameter breakdown's group of its tensors (its norms stay "norms")
    params_title: str = "Attention"
    proj: str = "attention_proj"  # the FLOP group of its projections (``linears``)
    proj_title: str = "Attention projections"
    mixing: str = "attention_scores"  # the FLOP group of its position mixing (``mixing``)
    mixing_title: str = "Attention scores"
    noun: str = "attention"  # the sub-layer in a sentence ("the whole attention sub-layer")
    # ((term, label), ...): what the activation terms its ``saved`` names are for this mixer, where the memory table's
    # attention labels would mislead (a Mamba2 layer's "attn_scores" holds its scan's chunk scores and states)
    terms: tuple[tuple[str, str], ...] = ()


ATTENTION = MixerRole()  # softmax and latent attention's, and that of a mixer that declares none


def role_of(mixer: object) -> MixerRole:
    """A mixer's declared ``role`` (10.), or ``ATTENTION`` where it declares none."""
    return getattr(mixer, "role", None) or ATTENTION


@dataclass(frozen=True)
class Capabilities:
    """What the runtime and the plans may do with a mixer (declared, never inferred from its class)."""

    # its decode state can return to an earlier position (speculative decoding's reject); a window's or chunk's
    # ring can, given spare slots for the positions a verify step overwrites (tfcalc.model.attention_state)
    rewind: bool = True
    tensor_parallel: bool = True  # Megatron's split by heads (``tp_widths``)
    context_parallel: bool = True  # ring attention over the sequence split across ranks
    # why the op-level recompute policy (tfcalc.count.model.op_recompute) does not cover it; None: it does
    op_recompute: Optional[str] = "a token mixer the op-level recompute policy does not model"
    # the form its decode step runs and is counted in, when it differs from the forward's (``linears`` and
    # ``mixing`` with step=True): latent attention's "absorbed" (tfcalc.architecture.latent, step 6)
    decode_form: str = "standard"
    # the non-matmul kernels its published training runs: "fused" where the reference implementation ships its own
    # kernels (mamba_ssm's selective scan and SSD, flash-linear-attention's chunked delta rules, MiniMax's lightning
    # kernels) and the op-by-op PyTorch path is a fallback; a model with one plans with --kernels fused by default
    training_kernels: str = "eager"


@runtime_checkable
class Mixer(Protocol):
    """A token mixer (see the module docstring, 1-8)."""

    d_model: int
    causal: bool  # a query sees no later position (a decoder's self-mixer)

    def weights(self) -> list[Weight]: ...

    def linears(self, with_kv: bool = True, step: bool = False) -> list[Linear]: ...

    def mixing(self, queries: int, keys: int, step: bool = False) -> list[Mixing]: ...

    def elementwise(self, queries: int, keys: int, step: bool = False) -> list[Elementwise]:
        """Its non-matmul work over one sequence; ``step``: in its decode step's form (asked only of a mixer
        whose ``capabilities.decode_form`` is not "standard")."""
        ...

    def kernel(self, explicit_mask: bool) -> str:
        """The kernel its module runs on a CPU ("flash": fused, no (T, T) tensor; "math": scores written out),
        ``explicit_mask`` when the stack adds a bias to the scores (ALiBi, T5's relative bias)."""
        ...

    def mask_span(self, length: int) -> tuple[Optional[int], Optional[int]]:
        """The (window, chunk) of the (T, T) mask its module reads at ``length`` tokens, each None where it
        hides nothing; (None, None) for a mixer without one (one mask per distinct span, built per stack)."""
        ...

    def saved(self, batch: int, seq: int, e: int, kernel: str, dropout: bool,
              sources: Optional[int] = None) -> dict[str, int]:
        """{term: bytes per token} it keeps for the backward pass, beside the block's norm and its input
        (tfcalc.count.model.activation_terms), at ``e`` bytes an element under ``kernel``. A term named as one of
        tfcalc.count.training.rank_activations.SPLIT (qkv, attn_output, ...) is split by tensor parallelism with the
        heads; any other is kept whole on every rank (a latent attention's compressions).

        ``sources``: asked of a mixer that reads another sequence (a block's cross-attention, its keys and
        values from ``sources`` positions of an encoder's output): then the bytes over the whole micro-batch of
        ``batch`` sequences of ``seq`` queries, since its terms mix target and source tokens (the count
        prefixes each term "cross_"). A self-mixer is never asked with it."""
        ...

    def working_set(self, kernel: str, length: int, sources: Optional[int] = None) -> int:
        """Elements per token alive at once in its stage of a no-grad forward, beyond the block's input, norm
        output and output projection (tfcalc.count.model.memory.forward_working_set). With ``sources`` (a
        cross-attention reading that many positions): the elements per sequence of ``length`` queries."""
        ...

    def eager_ops(self, tokens: int, step: bool = False) -> list[EagerOp]:
        """Its eager PyTorch work over ``tokens`` tokens beside its matmuls and attention kernel; ``step``: one
        decode step's over ``tokens`` query rows, forward only, in its decode form (asked as ``elementwise``)."""
        ...

    def state(self) -> list[StateTensor]: ...

    def expanded_state(self) -> list[StateTensor]:
        """The state a runtime without this mixer's compressed form keeps (a latent attention's K and V
        heads); the state itself for every other mixer."""
        ...

    def tp_widths(self) -> list[tuple[str, int]]: ...

    def tp_state_heads(self) -> Optional[int]:
        """The heads its generation state splits by under TP (a rank whole heads, replicated when TP exceeds
        them); None: the state is kept whole on every rank (a latent cache)."""
        ...

    @property
    def capabilities(self) -> Capabilities: ...


def state_elements(mixer: Mixer, context: int, expanded: bool = False) -> int:
    """Elements of a mixer's generation state at a context of ``context`` tokens, per sequence and layer
    (all its tensors, whatever their dtype: ``state_by_dtype`` keeps them apart)."""
    tensors = mixer.expanded_state() if expanded else mixer.state()
    return sum(t.elements(context) for t in tensors)


def state_positions(mixer: Mixer, context: int) -> int:
    """Positions its growing state keeps at a context of ``context`` tokens (0 for a fixed state alone)."""
    return max((t.positions(context) for t in mixer.state() if t.per_token), default=0)


def state_by_dtype(mixer: Mixer, context: int, spare: int = 0) -> dict[Optional[str], int]:
    """{dtype (None: the cache dtype): elements} of a mixer's state at a context, per sequence and layer (a
    ring with ``spare`` slots more: ``StateTensor.positions``)."""
    out: dict[Optional[str], int] = {}
    for t in mixer.state():
        out[t.dtype] = out.get(t.dtype, 0) + t.elements(context, spare)
    return out


def step_io(mixer: Mixer, context: int) -> tuple[int, int]:
    """(elements read, elements written) of the state by one decode step at ``context`` positions already
    kept, per sequence and layer: a growing tensor is read over what it keeps and written one position; a
    fixed tensor is read and written whole (a recurrent state's update)."""
    read = sum(t.per_token * t.positions(context) + t.fixed for t in mixer.state())
    written = sum(t.per_token + t.fixed for t in mixer.state())
    return read, written


def is_local(mixer: Mixer) -> bool:
    """Whether a mixer's state stops growing before the context does (a window, a chunk, a fixed state)."""
    return all(t.span is not None or not t.per_token for t in mixer.state())
