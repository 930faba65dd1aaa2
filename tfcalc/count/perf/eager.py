"""The memory traffic of the non-matmul work as eager PyTorch runs it: every elementary op its own kernel,
each reading its inputs and writing its output in the dtype it runs in. Pure arithmetic.

tfcalc.count.perf.elementwise (step 1) prices the non-matmul work as FUSED kernels (one read and one
write per element: Megatron-LM's and Transformer Engine's kernels, torch.compile). Without them every
aten op is a kernel of its own (torchtitan's published runs are eager: pytorch/torchtitan
docs/performance.md), and its backward runs the autograd formulas of each op (torch/csrc/autograd/
FunctionsManual.cpp, derivatives.yaml). The bytes below are those of tfcalc's own module
(tfcalc.model: layers.py, ffn.py, block.py, positions.py, experts.py), op by op as the dispatcher sees them;
tests/count/test_eager_traffic.py sums the bytes of every aten op of the real module under a
TorchDispatchMode, forward and backward, and checks them against these figures.

Conventions: ``a`` the activation bytes (2 in bf16), F = 4 (fp32). A tensor's bytes are its distinct
elements (a broadcast operand -- a weight vector, a RoPE table, a stride-0 expand -- is read once and
counted as its own size, which does not grow with the tokens and is left out). Views (view, reshape of
a contiguous tensor, transpose, split, slice, expand, detach) move nothing. Copies (cat, _to_copy,
index_select) are kernels: their reads and writes count. Per element of the tensor named, forward /
backward bytes, then the kernels forward / backward:

1. RMSNorm (torch.nn.RMSNorm, decomposed by ATen's rms_norm into the ops torchtitan's RMSNorm writes
   out): x.float() (a + F), pow(2) (2F), mean (F), x · rsqrt (2F), × weight (2F), .type_as(x) (F + a):
   28 + 2(a + F) forward. Backward: the grad cast (a + F); for the weight: grad · normed (3F), sum over
   rows (F); grad · weight (2F); for the input: (· x) 3F, (· rstd) 2F, sum over the row F, the
   expand's div (writes F), pow's derivative pow(x, 1) 2F, × 2 (2F), × grad 3F, the two paths added
   3F; the cast back (F + a): 92 + 2(a + F). In fp32 (a = F) there are no casts. Per row (mean, +eps,
   rsqrt; their backward): 24 forward, 40 backward bytes. Kernels 6 (+2 casts) / 14 (+3 casts: the
   weight gradient's too).
2. LayerNorm: one aten op each way (native_layer_norm and its backward): 2a forward (x in, y out), one
   kernel; backward, on CUDA (aten/src/ATen/native/cuda/layer_norm_kernel.cu) two kernels: the input's
   gradient (grad and x in, grad out: 3a) and γ's and β's (grad and x read again: 2a), 5a; per row the
   fp32 mean and rstd, written (8) and read (8). (CPU's backward is one kernel, its statistics in the
   input's dtype: the test states the difference.)
3. Activation, per element of the FFN hidden: act(h) one op, 2a; its backward (gelu_backward,
   silu_backward, threshold_backward) 3a. Gated (tfcalc.model.ffn.ffn_hidden: the fused [gate | up]
   projection split by views): act(gate) 2a, × up 3a; backward: two products 3a each, act's backward
   3a, and the cat of the gate's and up's gradients into the fused projection's (2a per element of
   the two halves: 4a per element of f): 13a, 2 / 4 kernels. gpt-oss's clamped SwiGLU: two clamps,
   × alpha, sigmoid, × g, + 1, product (7 ops, 16a) and about twice as much back (clamped_swiglu_cost); Apertus'
   xIELU: 12 ops, 28a + 2, and 57a + 6 back (xielu_cost).
4. Residual add: x + f(x), 3a, 1 kernel; backward: the skip's gradient added to the branch's where the
   stream forks (autograd accumulates), 3a, 1 kernel. Granite's multiplier: 2a each way.
5. RoPE (positions.rotate, rotate-half with the sign in the sine table), per rotated element of Q and K:
   the halves swapped by a flip (2a), x·cos (2a), addcmul(x·cos, swapped, sin) (3a) = 7a, 3 kernels for Q
   and 3 for K; back: grad·sin (2a; addcmul's scale by its value is a kernel over the table, no bytes
   counted), the flip back (2a), grad·cos (2a), the two paths summed (3a): 9a, 5 + 5 kernels. Q/K norms
   (Qwen3) are the norms above over Q's and K's heads, two calls each way. Partial rotary (GPT-NeoX,
   Phi), per element of Q's and K's whole heads: the cat of the rotated and passed channels (2a, a
   kernel each for Q and K); back, each slice's slice_backward (a zeroed head-wide gradient with its
   part copied in: 3a over the two) and their sum (3a): 6a, 6 kernels.
6. Attention's fused QKV projection (layers.Attention: one Linear, Q, K, V split by views): the
   backward cats dQ, dK, dV into its gradient, 2a per element of Q, K and V (a cross-attention's
   fused [K | V] the same over the source rows, and the source states' gradients from its L readers
   summed: L - 1 adds of 3a). The scores and softmax are the attention kernel's (or, under "math",
   elementwise step 2's passes, in both modes). DeepSeek's latent attention: LatentAttention.eager_ops (derived from
   tfcalc/model/latent.py, not dispatch-checked: see its docstring).
   A mixer whose kernels grow with its sequences' blocks (lightning attention's block scan) lists them
   by batch and sequence too (``scan_eager_ops``, tfcalc.architecture.lightning_eager).
7. Bias: nn.Linear runs aten.addmm, the bias added in the GEMM (0 bytes); its gradient is a sum over
   the rows of the output gradient: a per output element, 1 kernel per biased Linear.
8. Mixture of experts (experts.py, per routed element of (N·k, d)): index_select of the rows (2a), ×
   the routing weight (2a), index_add into the output (3a): 7a; backward: index_select of the gradient
   (2a), the two products' (4a, the weight's summed), index_add (3a): 9a. Kernels 3 / 5 for all the
   experts together, as tfcalc's module launches them (tfcalc.model.experts; the matmuls too are one
   grouped GEMM: tfcalc.count.training.micro_batch_time). Left out: the routing's int64 index work (the sort of the
   N·k pairs, the gathers of their ids, token and weight, the groups' ends) and the zero-filled output,
   4-5 % of the block's measured traffic (tests/count/test_eager_traffic.py), are priced apart with the
   top-k (tfcalc.count.perf.moe_dispatch, in the training micro-batch's time). The router's
   softmax in fp32 (cast, softmax, cast; its backward): 2a + 16 / 2a + 20 per logit.
9. Embeddings: the token lookup writes (N, d) (2a: the gathered rows read) and its backward reads the
   gradient (a; the table's gradient, V·d per step, left out); positions added (learned, sinusoidal:
   2a; learned positions' gradient summed over the batch, a), × √d or a multiplier (2a / 2a), token types
   (their lookup and add: 5a / a).
10. The loss: cross-entropy over the logits cast to fp32 (torchtitan's cross_entropy_loss,
   pred.float(); nanoGPT's F.cross_entropy): the cast (a + F), log_softmax (2F), per element, and
   nll_loss's gather of the N targets; backward: nll_loss_backward's zeroed gradient (F), log_softmax's
   backward (3F), the cast back (F + a): 3 / 3 kernels (2 / 2 in fp32). Logit scale (2a / 2a) and
   soft-capping (div, tanh, mul: 6a / 7a) as the ops they are.

The score-level work (softmax under "math", score soft-capping, ALiBi) keeps step 2's passes of
tfcalc.count.perf.elementwise in both modes.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from tfcalc.architecture import Block, MoE, Norm
from tfcalc.architecture.mixer import EagerOp
from tfcalc.config import ModelConfig
from tfcalc.count.model.non_matmul import bias_elements

F32 = 4
SPLIT_BY_TP = ("activation", "rope", "bias", "moe", "qk_norm", "qkv", "loss")  # per-head or column-split widths


@dataclass(frozen=True)
class Cost:
    """Bytes per element forward and backward, and the kernels each way."""

    forward: float
    backward: float
    forward_kernels: int
    backward_kernels: int


@dataclass(frozen=True)
class Term:
    """One kind of eager work of a model: its bytes and kernels over a whole forward and backward pass."""

    component: str  # decides the TP split (SPLIT_BY_TP; the rest only under sequence parallelism)
    forward: float
    backward: float
    forward_kernels: int
    backward_kernels: int


def norm_cost(norm: Norm, a: int) -> tuple[Cost, Cost]:
    """(per element, per row) of a norm (module docstring, 1 and 2)."""
    if norm.kind == "layernorm":
        return Cost(2 * a, 5 * a, 1, 2), Cost(2 * F32, 2 * F32, 0, 0)
    cast = a != F32
    casts = 2 * (a + F32) if cast else 0
    w = 1 if norm.affine else 0  # × weight forward; grad · normed, its sum and grad · weight back
    forward = 5 * F32 + 2 * F32 * w + casts
    backward = 17 * F32 + 6 * F32 * w + casts
    return (Cost(forward, backward, 5 + w + 2 * cast, 11 + 3 * w + (2 + w) * cast),
            Cost(6 * F32, 10 * F32, 0, 0))


def activation_cost(activation: str, gated: bool, clamped: bool, a: int) -> Cost:
    """Per element of the FFN hidden (module docstring, 3)."""
    if clamped:
        return clamped_swiglu_cost(a)
    if activation == "xielu":
        return xielu_cost(a)
    if gated:
        return Cost(5 * a, 13 * a, 2, 4)
    return Cost(2 * a, 3 * a, 1, 1)


def xielu_cost(a: int) -> Cost:
    """Apertus' xIELU (tfcalc.model.ffn.XIELU, as transformers' XIELUActivation._xielu_python), per element:
    x > 0 (a + 1), α_p·x (2a), ·x (3a), β·x (2a), add (3a), min(x, eps) (2a), expm1 (2a), −x (3a), ×α_n
    (2a), β·x (2a), add (3a), where (3a + 1): 28a + 2, 12 kernels, and 3 on the scalars (two softplus,
    β +); backward 57a + 6 in 29 kernels, measured (tests/count/test_eager_traffic.py: the aten ops autograd
    runs, fp32 and bf16)."""
    return Cost(28 * a + 2, 57 * a + 6, 15, 29)


def clamped_swiglu_cost(a: int) -> Cost:
    """gpt-oss's clamped SwiGLU (ffn.ffn_hidden): clamp, clamp (2a each), g·alpha (2a), sigmoid (2a),
    g·σ (3a), up + 1 (2a), product (3a): 16a, 7 kernels; back: the product's two (6a), g·σ's two (6a),
    sigmoid's (3a), ×alpha (2a), g's two gradients added (3a), the cat (4a), and the clamps' masks and
    wheres (1-byte masks): min(gate, limit) le and where (3a + 2), clamp(up) ge, le, and, where
    (4a + 6): 31a + 8, 16 kernels (with where's two scalar zeros)."""
    return Cost(16 * a, 31 * a + 8, 7, 16)


RESIDUAL = Cost(3, 3, 1, 1)  # × a
ROPE = Cost(7, 9, 3, 5)  # × a; kernels for Q, then again for K


def _norm_terms(norm: Norm, elements: int, copies: int, a: int, component: str) -> list[Term]:
    per, row = norm_cost(norm, a)
    rows = elements // norm.width
    return [Term(component, copies * (elements * per.forward + rows * row.forward),
                 copies * (elements * per.backward + rows * row.backward),
                 copies * per.forward_kernels, copies * per.backward_kernels)]


def _term(component: str, cost: Cost, elements: int, copies: int = 1, scale: int = 1) -> Term:
    return Term(component, copies * elements * cost.forward * scale, copies * elements * cost.backward * scale,
                copies * cost.forward_kernels, copies * cost.backward_kernels)


def block_terms(block: Block, batch: int, seq: int, src: int | None, a: int) -> list[Term]:
    """One block's eager work (module docstring, 1-8)."""
    mixer, cross = block.mixer, block.cross_attention
    d, tokens = mixer.d_model, batch * seq
    norms = len(block.norms())
    out = _norm_terms(block.norm, tokens * d, norms, a, "norms")
    sublayers = 3 if cross is not None else 2  # a parallel block adds twice too: attn + ffn, then x + it
    out.append(_term("residual", RESIDUAL, tokens * d, sublayers, a))
    if block.residual_scale is not None:
        out.append(_term("residual", Cost(2, 2, 1, 1), tokens * d, 1 if block.parallel != "none" else sublayers, a))
    if block.residual_alpha is not None:  # MiniMax-01's scaled normed residual: one more product a sub-layer
        out.append(_term("residual", Cost(2, 2, 1, 1), tokens * d, sublayers, a))
    # the mixer's own work (tfcalc.architecture.mixer, EagerOp); per sequence where its kernels depend on the
    # length, not only the tokens (gated DeltaNet's chunk loop: ``sequence_eager_ops``); a block scan's, by its
    # sequences' blocks (lightning's ``scan_eager_ops``)
    per_sequence = getattr(mixer, "sequence_eager_ops", None)
    out += mixer_terms(per_sequence(batch, seq) if per_sequence else mixer.eager_ops(tokens), a)
    scan = getattr(mixer, "scan_eager_ops", None)
    if scan is not None:
        out += mixer_terms(scan(batch, seq), a)
    if cross is not None:  # its own work as it says, over the source rows (its fused [K | V]'s split)
        out += mixer_terms(cross.eager_ops(batch * (src or seq)), a)
    out += _ffn_terms(block, tokens, a)
    bias = bias_elements(block, batch, seq, src)
    if bias:
        out.append(Term("bias", 0.0, bias * a, 0, _biased_linears(block)))
    return out


def mixer_terms(ops: list[EagerOp], a: int) -> list[Term]:
    """A token mixer's eager work, as it lists it (``EagerOp``), priced: moves at a bytes per element, fp32 moves at
    4, casts between a and fp32 at a + 4 (none in fp32), norms
    by norm_cost (kernels ``kernel_factor`` times: one call per head group of Q and of K), RoPE by step 5
    (kernels for Q, then K). Its Linears with a bias are counted with the block's (_biased_linears)."""
    out: list[Term] = []
    for op in ops:
        if op.kind == "moves":
            out.append(Term(op.component, a * op.elements, a * op.backward, op.forward_kernels, op.backward_kernels))
        elif op.kind == "fp32":  # in fp32 whatever the activations' dtype
            out.append(Term(op.component, F32 * op.elements, F32 * op.backward, op.forward_kernels,
                            op.backward_kernels))
        elif op.kind == "cast" and a != F32:  # a <-> fp32; in fp32 .float() is the tensor itself: no kernel
            out.append(Term(op.component, (a + F32) * op.elements, (a + F32) * op.backward, op.forward_kernels,
                            op.backward_kernels))
        elif op.kind == "norm":
            (t,) = _norm_terms(op.norm, op.elements, 1, a, op.component)
            k = op.kernel_factor
            out.append(Term(t.component, t.forward, t.backward, k * t.forward_kernels, k * t.backward_kernels))
        elif op.kind == "rope":
            rope = _term(op.component, ROPE, op.elements, 1, a)
            out.append(Term(op.component, rope.forward, rope.backward, 2 * ROPE.forward_kernels,
                            2 * ROPE.backward_kernels))
    return out


def _biased_linears(block: Block) -> int:
    # the mixer's and the cross-attention's biased Linears, as each says (a cross-attention's Q, [K | V], O)
    mixers = [m for m in (block.mixer, block.cross_attention) if m is not None]
    n = sum(op.elements for m in mixers for op in m.eager_ops(1) if op.kind == "bias_linears")
    moe = block.ffn if isinstance(block.ffn, MoE) else None
    expert = moe.expert if moe else block.ffn
    n += 2 * int(expert.bias)
    if moe is not None and moe.shared is not None:
        n += 2 * int(moe.shared.bias)
    return n


def _ffn_terms(block: Block, tokens: int, a: int) -> list[Term]:
    moe = block.ffn if isinstance(block.ffn, MoE) else None
    expert = moe.expert if moe else block.ffn
    rows = moe.routed_rows(tokens) if moe else tokens
    act = activation_cost(expert.activation, expert.gated, expert.swiglu_limit is not None, a)
    out = [_term("activation", act, rows * expert.d_ff)]
    if moe is None:
        return out
    d, routed, E = moe.d_model, tokens * moe.top_k, moe.n_expert
    w = moe.dispatch_width  # the routed rows' width: L in a latent MoE (tfcalc.architecture.ffn, step 7)
    out.append(Term("moe", routed * w * 7 * a, routed * w * 9 * a, 3, 5))
    logits = routed if moe.renormalize else tokens * E
    out.append(Term("moe", logits * (2 * a + 4 * F32), logits * (2 * a + 5 * F32), 3, 3))
    if moe.shared is not None:
        shared = moe.shared
        out.append(_term("activation", activation_cost(shared.activation, shared.gated, False, a),
                         tokens * shared.d_ff))
        out.append(_term("residual", RESIDUAL, tokens * d, 1, a))
    if moe.shared_gate:
        out.append(_term("moe", Cost(3, 6, 2, 4), tokens * d, 1, a))  # sigmoid (per token), × shared
    return out


def stack_terms(cfg: ModelConfig, batch: int, seq: int, src: int | None, a: int, edges_only: bool = False
                ) -> list[Term]:
    """Every stack's blocks (each kind once, times its layers), embeddings and final norm (module
    docstring, 9); ``edges_only``: the embeddings and final norms alone (what a per-block torch.compile leaves
    eager: tfcalc.count.perf.elementwise, 5)."""
    arch = cfg.architecture
    out: list[Term] = []
    for stack in arch.stacks:
        length = src if stack.name == "encoder" and src is not None else seq
        tokens, emb = batch * length, stack.embeddings
        d = emb.d_model
        for block, layers in ([] if edges_only else stack.kinds()):
            out += [Term(t.component, t.forward * layers, t.backward * layers, t.forward_kernels * layers,
                         t.backward_kernels * layers) for t in block_terms(block, batch, length, src, a)]
        readers = sum(layers for block, layers in stack.kinds() if block.cross_attention is not None)
        if readers > 1 and src is not None and not edges_only:  # the source states' gradients, summed
            out.append(_term("residual", Cost(0, 3, 0, 1), batch * src * d, readers - 1, a))
        out.append(_term("embeddings", Cost(2, 1, 1, 1), tokens * d, 1, a))  # every stack gathers its tokens
        if emb.positions in ("learned", "sinusoidal"):
            learned = emb.positions == "learned"
            out.append(_term("embeddings", Cost(2, int(learned), 1, int(learned)), tokens * d, 1, a))
        extras = int(emb.scale) + int(emb.multiplier is not None)
        if extras:
            out.append(_term("embeddings", Cost(2, 2, 1, 1), tokens * d, extras, a))
        if emb.type_vocab_size > 0:
            out.append(_term("embeddings", Cost(5, 1, 2, 1), tokens * d, 1, a))
        for norm in (emb.norm, stack.final_norm):
            if norm is not None:
                out += _norm_terms(norm, tokens * d, 1, a, "norms")
    return out


def head_terms(cfg: ModelConfig, tokens: int, a: int) -> list[Term]:
    """The LM head's work around its matmul and the loss (module docstring, 10)."""
    head = cfg.architecture.head
    d, V = head.d_model, head.vocab_size
    out: list[Term] = []
    if head.transform is not None:  # BERT: dense (+bias), activation, LayerNorm
        out.append(_term("head", Cost(0, 1, 0, 1), tokens * d, 1, a))
        out.append(_term("head", activation_cost(head.activation, False, False, a), tokens * d))
        out += _norm_terms(head.transform, tokens * d, 1, a, "norms")
    if not head.lm_head:
        return out
    if head.bias:
        out.append(_term("loss", Cost(0, 1, 0, 1), tokens * V, 1, a))
    if head.scale is not None:
        out.append(_term("loss", Cost(2, 2, 1, 1), tokens * V, 1, a))
    if head.softcap is not None:
        out.append(_term("loss", Cost(6, 7, 3, 3), tokens * V, 1, a))
    cast = a != F32
    loss = Cost(2 * F32 + cast * (a + F32), 4 * F32 + cast * (a + F32), 2 + cast, 2 + cast)
    out.append(_term("loss", loss, tokens * V))
    return out


@lru_cache(maxsize=1024)
def terms(cfg: ModelConfig, batch: int, seq: int, a: int, src: int | None = None, edges_only: bool = False
          ) -> tuple[Term, ...]:
    """The model's eager work for one micro-batch of ``batch`` sequences of ``seq`` (cached per config);
    ``edges_only``: the work outside the blocks alone (embeddings, final norms, the head and the loss)."""
    arch = cfg.architecture
    cross = any(b.cross_attention is not None for _, b, _ in arch.kinds())
    src = (seq if src is None else src) if cross or arch.kind == "encoder-decoder" else None
    return tuple(stack_terms(cfg, batch, seq, src, a, edges_only) + head_terms(cfg, batch * seq, a))


def rank_traffic(cfg: ModelConfig, batch: int, seq: int, a: int, tp: int = 1, sp: bool = False,
                 edges_only: bool = False) -> tuple[float, float, int, int]:
    """(forward bytes, backward bytes, forward kernels, backward kernels) of one TP rank's eager
    non-matmul work for a micro-batch: the per-head and column-split widths (SPLIT_BY_TP) t ways, the
    (B·T, d) terms only under sequence parallelism (as tfcalc.count.perf.elementwise splits them);
    ``edges_only``: of the work outside the blocks alone (``terms``)."""
    fwd = bwd = 0.0
    kf = kb = 0
    for t in terms(cfg, batch, seq, a, None, edges_only):
        split = tp if (t.component in SPLIT_BY_TP or sp) else 1
        fwd += t.forward / split
        bwd += t.backward / split
        kf += t.forward_kernels
        kb += t.backward_kernels
    return fwd, bwd, kf, kb
