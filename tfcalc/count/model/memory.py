"""Analytic memory of a ModelConfig: weights, KV cache, activations, training state. Pure arithmetic, no torch.

Notation (per token unless said): b batch, s sequence length, h = d_model, q = n_head·d_head (attention
width), k = n_kv_head·d_head (K and V width), f = d_ff, a = n_head, V = vocab, L = n_layer, e = bytes per
activation element. All sizes are bytes; "GB" is 10⁹ bytes and "GiB" 2³⁰.

Weights: params × bits/8 of the dtype, rounded up (int4 packs two per byte; tf32 is stored as fp32).

KV cache (inference, a cache holding every position): 2 · b · s · L · n_kv_head · d_head elements in the
dtype -- K and V, for every layer. GQA and MQA shrink it by n_head / n_kv_head. A sliding window W
(Mistral) caps s at W: a ring of W slots, which a decode step writes its own K and V into and then reads
over its fixed span (tfcalc.model.attention_state; transformers' StaticSlidingWindowLayer, cache_utils.py,
allocates the same W); chunked attention of C (Llama 4) at C, one chunk (docs/serving.md, "Sliding window").

Activations (what autograd keeps for the backward pass, checked to the byte against the real module):
tfcalc.count.model.activations, re-exported here.

Training state per parameter (P params, weights in the dtype, e_w bytes):
- "adam-mixed": weights e_w + gradients e_w + fp32 master weights 4 (when the dtype is narrower than
  fp32) + fp32 Adam moments 8: 16 bytes/param in bf16 (ZeRO, Rajbhandari et al. 2020, sec. 3.1);
- "adam": everything in the weight dtype, torch.optim.Adam as it is: 4·e_w (16 in fp32, 8 in bf16);
- "sgd": weights and gradients, 2·e_w (no momentum);
- "muon": mixed precision as adam-mixed, one fp32 momentum buffer per hidden matrix and AdamW's two moments for
  the rest (embeddings, LM head, norms, biases): 16 − 4·M/P bytes/param in bf16 (tfcalc.count.model.muon).
The optimizer step adds temporaries, one tensor at a time in torch.optim's single-tensor code: Adam's
denominator (√v, then √v / √(1 - β₂ᵗ) + ε: two tensors the size of the largest parameter, in the
moments' dtype, alive together for an instant) and, for adam-mixed below fp32, the fp32 copy of that
tensor's gradient. They live while the activations are gone, so a training step peaks at
state + max(activation peak, step temporaries) -- the step matters only for small batches of models
whose embedding is a large share (GPT-2 at seq 256: the 38.6M-parameter embedding).
Training is modelled for fp32, tf32, bf16 and fp16 weights; fp8, int8 and int4 are inference formats here.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Optional

from tfcalc.architecture import Block, Stack
from tfcalc.architecture.mixer import Mixer
from tfcalc.config import ModelConfig
from tfcalc.count.model.activations import (  # noqa: F401  (re-exported: memory's public names)
    ATTENTION_KERNELS,
    FP32,
    RECOMPUTE,
    TRAINING_ATTENTION,
    Activations,
    activations,
    default_attention,
    head_activations,
)
from tfcalc.count.model.dtypes import (  # noqa: F401  (re-exported: memory's public names)
    BITS_PER_ELEMENT,
    DTYPES,
    activation_element_bytes,
    check_dtype,
    state_dtype,
    weight_bytes,
)
from tfcalc.count.model.params import total as param_total
from tfcalc.workload import Workload

OPTIMIZERS = ("adam-mixed", "adam", "sgd", "muon")
TRAINING_DTYPES = ("fp32", "tf32", "bf16", "fp16")


def weights_bytes(cfg: ModelConfig, dtype: str) -> int:
    check_dtype(dtype)
    return weight_bytes(param_total(cfg), dtype)


def kv_cache_bytes(cfg: ModelConfig, w: Workload, spare: int = 0) -> int:
    """The cache the workload ends with: 2 · b · s · L · n_kv_head · d_head elements (K and V of every
    decoder layer and position, s = w.seq + w.gen) in the KV dtype ``w.kv``; an encoder-decoder adds its
    cross-attention cache of w.src_seq sources (see cross_kv_cache_bytes); an encoder has none. ``spare``:
    slots each window's or chunk's ring keeps beyond its span, min(s, W + spare) (a speculative run's, so
    that a verify step of spare + 1 tokens can be rewound: tfcalc.model.attention_state)."""
    check_dtype(w.kv)
    # a fold over the decoder's mixers' generation state (tfcalc.architecture.mixer): each attention caches
    # all positions, or within a sliding window (a chunk) a ring of W (C) slots at most, of its K and V; a
    # state kept in a dtype of its own (an SSM's fp32 state) is priced in it, the rest in the KV dtype
    own = sum(weight_bytes(w.batch * elements, state_dtype(dtype, w.kv, w.dtype))
              for dtype, elements in cfg.architecture.state_by_dtype(w.seq + w.gen, spare).items())
    return own + cross_kv_cache_bytes(cfg, w)


@dataclass(frozen=True)
class StateSplit:
    """The decoder's generation state at a workload, split as a reader sizes a hybrid: ``growing``, the bytes that
    grow with the tokens (K and V, or a latent, of the layers that cache positions: ``growing_layers`` of
    ``layers``), and ``fixed``, the bytes each sequence holds whatever its length (a convolution's ring, a
    recurrent state), ``fixed_parts`` {tensor name: (dtype, bytes)} over every layer. Each priced in its own dtype
    (``StateTensor.dtype``; None: the KV dtype). growing + fixed is kv_cache_bytes less the cross-attention cache.

    Hand check, Qwen3-Next-80B-A3B (48 layers: 12 gated attention, 36 gated DeltaNet; config.json) at batch 1, bf16:
    growing = 12 layers · 2 (K, V) · 2 KV heads · 256 · 2 bytes = 24,576 bytes a token; fixed = 36 layers ·
    (conv 8,192 channels · 4 taps · 2 bytes + S 32 heads · 128 · 128 · 4 bytes) = 36 · 2,162,688 = 77,856,768
    bytes a sequence, transformers' DynamicCache holding the same (tests/count/test_state_split.py)."""

    growing: int
    fixed: int
    fixed_parts: dict[str, tuple[str, int]]
    growing_layers: int
    layers: int
    strides: tuple[int, ...] = ()  # positions per entry of a strided growing tensor (DeepSeek-V4's compressed KV)


def state_split(cfg: ModelConfig, w: Workload, spare: int = 0) -> StateSplit:
    """``StateSplit`` of the decoder at w.seq + w.gen positions, w.batch sequences, in w.kv (``spare``: as for
    kv_cache_bytes)."""
    check_dtype(w.kv)
    stack = cfg.architecture.decoder
    fixed_el: dict[str, int] = {}
    parts: dict[str, tuple[str, int]] = {}
    growing_layers = layers = 0
    strides: set[int] = set()
    for b, n in stack.kinds() if stack is not None else ():
        layers += n
        tensors = b.mixer.state()
        growing_layers += n if any(t.per_token for t in tensors) else 0
        strides |= {t.stride for t in tensors if t.per_token and t.stride > 1}
        for t in tensors:
            if t.fixed:
                dtype = state_dtype(t.dtype, w.kv, w.dtype)
                fixed_el[dtype] = fixed_el.get(dtype, 0) + n * t.fixed
                _, before = parts.get(t.name, (dtype, 0))
                parts[t.name] = (dtype, before + weight_bytes(w.batch * n * t.fixed, dtype))
    fixed = sum(weight_bytes(w.batch * el, dtype) for dtype, el in fixed_el.items())
    own = kv_cache_bytes(cfg, w, spare) - cross_kv_cache_bytes(cfg, w)
    return StateSplit(own - fixed, fixed, parts, growing_layers, layers, tuple(sorted(strides)))


def kv_cache_expanded_bytes(cfg: ModelConfig, w: Workload) -> int:
    """kv_cache_bytes with a latent attention's cache counted as the K and V heads it expands to (what a
    server without MLA support would cache: tfcalc.architecture.latent, step 4); the same for every other
    attention."""
    check_dtype(w.kv)
    # each tensor in its own dtype, as kv_cache_bytes prices it (a DeltaNet's fp32 state is not K/V to expand)
    stack, context, by_dtype = cfg.architecture.decoder, w.seq + w.gen, {}
    for b, n in stack.kinds() if stack is not None else ():
        for t in b.mixer.expanded_state():
            dtype = state_dtype(t.dtype, w.kv, w.dtype)
            by_dtype[dtype] = by_dtype.get(dtype, 0) + n * t.elements(context)
    own = sum(weight_bytes(w.batch * elements, dtype) for dtype, elements in by_dtype.items())
    return own + cross_kv_cache_bytes(cfg, w)


def cross_kv_cache_bytes(cfg: ModelConfig, w: Workload) -> int:
    """An encoder-decoder's cross-attention K and V of the S = w.src_seq source positions (default: w.seq),
    in every decoder layer: 2 · b · S · L · n_kv_head · d_head elements in ``w.kv``, computed once from the
    encoder output; 0 otherwise."""
    check_dtype(w.kv)
    return weight_bytes(w.batch * cfg.architecture.cross_kv_elements(w.src_seq or w.seq), w.kv)


def forward_working_set(cfg: ModelConfig, w: Workload, attention: Optional[str] = None) -> int:
    """Bytes alive at once during a no-grad forward pass, beyond the weights: the largest of
    1. attention: residual x and norm output (2h), fused QKV output (q + 2k), rotated Q, K (q + k, RoPE),
       SDPA output (q), projection output (h); math attention adds Q, K, V copies (3q) and the scores
       and their softmax (2·a·s);
    2. FFN: x and norm output (2h), then the hidden tensors: 2f ungated (input and output of the
       activation), 4f gated (fused [gate | up], activation output, product); a MoE runs one expert at a
       time on at most every token, beside the output it accumulates: 4h more (accumulator, the
       expert's input, output and weighted output);
    3. head: x, final-norm output (2h) and the logits (V; none without an LM head; 2V soft-capped);
    times b·s·e; plus the attention masks, alive through the whole pass, one per distinct window
    (tfcalc.model.Stack.layer_masks): ALiBi's or T5's bias, a·s² elements, and a sliding window W < s
    masks that bias (a new a·s² tensor) or, without one, is an (s, s) mask of its own. No KV cache is
    kept. Q/K norms and partial rotary add a new Q and K (q + k), as RoPE does; a shared expert's
    output (h) stays alive while the routed experts run. An encoder-decoder: the larger of the
    encoder's pass over S source tokens and the decoder's pass, during which the encoder output (b·S·h)
    stays alive and cross-attention adds a stage: x, norm output and projection output (3h), Q and the
    SDPA output (2q) per target token, K/V (2k) per source token (math: the scores and softmax, 2·a·S per
    target token). A decoder-only stack with cross-attention keeps its S external states alive likewise."""
    batch, seq, arch = w.batch, w.seq, cfg.architecture
    e, h, src = activation_element_bytes(w.dtype), arch.d_model, w.src_seq or w.seq
    kernel = attention or default_attention(cfg)
    out_stack = arch.output
    cross = max((_cross_stage(b.cross_attention, batch, seq, src, attention) for b, _ in out_stack.kinds()
                 if b.cross_attention is not None), default=None)
    logits = arch.vocab_size * (2 if arch.head.softcap is not None else 1) if arch.head.lm_head else 0
    head = batch * seq * (2 * h + logits)
    if arch.kind != "encoder-decoder":
        if cross is not None:  # a decoder-only stack reading src external states
            return int(e * (batch * src * h + max(_stack_stage(out_stack, batch, seq, kernel, e), cross, head)))
        return int(e * max(_stack_stage(out_stack, batch, seq, kernel, e), head))
    encoder = _stack_stage(arch.stacks[0], batch, src, kernel, e)
    return int(e * max(encoder, batch * src * h + max(_stack_stage(out_stack, batch, seq, kernel, e), cross or 0,
                                                      head)))


def _block_stage(block: Block, kernel: str, length: int, e: int) -> Fraction:
    """Per token, the elements of one block's larger stage (forward_working_set, 1 and 2), in elements of e bytes:
    a mixer's tensors computed in fp32 whatever the activations' dtype (``fp32_working_set``, optional: Mamba-1's
    scan) at 4 bytes each."""
    h = block.mixer.d_model
    fp32 = getattr(block.mixer, "fp32_working_set", None)
    wide = Fraction(FP32 * fp32(kernel, length, e), e) if fp32 is not None else 0
    attn = 3 * h + block.mixer.working_set(kernel, length) + wide  # x, norm and projection outputs, the mixer's
    ffn = block.ffn.expert if block.is_moe else block.ffn
    hidden = 2 * h + (4 if ffn.gated else 2) * ffn.d_ff
    if block.is_moe:
        hidden += 4 * h + (h if block.ffn.shared is not None else 0)
    return max(attn, hidden)


def _stack_stage(stack: Stack, batch: int, length: int, kernel: str, e: int) -> Fraction:
    """Elements of the largest stage of one stack's blocks (each kind of block its own widths), and its
    attention masks: one per distinct window or chunk shorter than ``length`` of its causal layers
    (tfcalc.model.Stack.layer_masks), (None, None) for the layers that see every position."""
    kinds = stack.kinds()
    bias = 0  # ALiBi's and T5's bias: a·s², every score of one sequence of the (first) mixer's heads
    if stack.embeddings.positions in ("alibi", "relative"):
        bias = sum(e.elements for e in kinds[0][0].mixer.elementwise(length, length) if e.work == "softmax")
    spans = {b.mixer.mask_span(length) for b, _ in kinds if b.mixer.causal} or {(None, None)}
    masks = sum(bias if span == (None, None) else (bias or length * length) for span in spans)
    return batch * length * max(_block_stage(b, kernel, length, e) for b, _ in kinds) + masks


def _cross_stage(a: Mixer, batch: int, seq: int, src: int, attention: Optional[str]) -> int:
    """Cross-attention's stage: x, norm output and projection output (3h) per target token, and what the mixer
    says alive over ``src`` sources (its ``working_set``: Q and the output per target token, K and V per source
    token; math: the scores and softmax). Under the kernel asked for, else the fused one (its module runs
    SDPA's fused kernel: no mask)."""
    return batch * (seq * 3 * a.d_model + a.working_set(attention or "flash", seq, sources=src))


def inference_bytes(cfg: ModelConfig, w: Workload) -> int:
    """Weights in w.dtype plus the KV cache of w.seq + w.gen positions (and an encoder-decoder's
    cross-attention cache of w.src_seq source positions, default w.seq): what must fit to serve them."""
    return weights_bytes(cfg, w.dtype) + kv_cache_bytes(cfg, w)
