"""Approximate non-matmul FLOPs of a forward pass: pure arithmetic, no torch. Reported beside the matmul
count of tfcalc.count.model.flops, never added to it. A fold over ``cfg.architecture``: each stack's distinct
blocks (``Stack.kinds()``) are priced from their components -- the attention's heads and widths, its RoPE
(none in a NoPE layer), Q/K norms and soft-cap, the FFN's activation and width or the mixture's routing,
the block's norms -- and multiplied by the layers that are each (closed form in depth); entries of the
same work over different kinds are joined, so a stack of identical layers shows one row per kind of work.

Conventions (one transcendental function = 1 FLOP; per-row reductions of O(B·T) operations ignored),
per element of the tensor named:

- softmax: 5 per score element over the full T×T square: scale by 1/√h, subtract the row max, exp, sum,
  divide (taking the max is a comparison, not counted);
- norms: LayerNorm 7 per element of (B·T, d) (mean, subtract, square, sum, normalize, ×γ, +β; 6 without
  β), RMSNorm 4 (square, sum, normalize, ×γ); two per block (four with sandwich norms, one in a parallel
  block with a shared norm), plus the final norm; Q/K norms the same per element of Q and K;
- activation, per element of the FFN hidden (B·T, f): relu 1, gelu (erf) 5, gelu_tanh 9 (x³ is two,
  ×0.044715, +x, ×√(2/π), tanh, +1, ×x, ×0.5), silu 4 (negate, exp, +1, divide); a gated FFN adds 1
  for the product act(gate)·up; gpt-oss's clamped SwiGLU 10 (clamp gate and up, ×α, sigmoid 4, ×g,
  up + 1, product); xielu 12 (Apertus; transformers' XIELUActivation._xielu_python evaluates both branches of
  its torch.where: x > 0, α_p·x, ·x, β·x, add; min(x, eps), expm1, −x, ×α_n, β·x, add; select);
- rope: 3 per rotated element of Q and K (x·cos, rotate_half(x)·sin, add; the sign flip is not
  counted): all of them, or the first rope_dim channels of each head with partial rotary;
- soft-capping (Gemma 2): 3 per capped element (divide, tanh, multiply): every score element of every
  layer, and every logit;
- residual adds: 1 per element of (B·T, d), two per block (a parallel block too: x + attn + ffn); Granite's
  residual_multiplier 1 more per sub-layer output, its embedding_multiplier and a logit_scale 1 per element;
- bias adds: 1 per output element of every Linear with a bias;
- positions: a learned or sinusoidal table added once, 1 per element of (B·T, d); ALiBi and T5's
  relative bias add a bias to every score element of every layer;
- mixture of experts: the softmax of the k chosen router logits (5 each; of all E logits when the top k
  are not renormalized), weighting and adding each expert output (2 per element of (B·T·k, d)); a
  shared expert's activation as the FFN's, and its gate, sigmoid (4 per token), product and add (2 per
  element of (B·T, d)).
"""

from __future__ import annotations

from tfcalc.architecture import Block, MoE, Stack
from tfcalc.config import ModelConfig
from tfcalc.count.model.terms import (
    ACTIVATION_PER_ELEMENT,
    NORM_PER_ELEMENT,
    ROPE_PER_ELEMENT,
    SIGMOID_PER_ELEMENT,
    SOFTCAP_PER_ELEMENT,
    SOFTMAX_PER_SCORE,
    NonMatmulEntry,
)

# the order a stack's entries are listed in (each kind of work, every kind of block's joined)
ORDER = ("softmax", "norms", "activation", "residual", "qk_norm", "softcap", "moe", "final_norm", "bias", "rope",
         "mixer", "positions", "embeddings", "embedding_norm")


def non_matmul_entries(cfg: ModelConfig, batch: int, seq: int, src: int | None = None,
                       step: bool = False) -> list[NonMatmulEntry]:
    """The approximate non-matmul work of a forward pass (conventions in the module docstring). src: the
    source length of an encoder-decoder, or the external states a cross-attention stack reads. ``step``: a
    decode step's, each mixer with a decode form of its own (``Capabilities.decode_form``: latent attention's
    absorbed step) asked for that form's work (``elementwise(..., step=True)``), as the matmuls are."""
    arch = cfg.architecture
    cross = any(b.cross_attention is not None for _, b, _ in arch.kinds())
    src = (seq if src is None else src) if cross or arch.kind == "encoder-decoder" else None
    out: list[NonMatmulEntry] = []
    for stack in arch.stacks:
        label = f"{stack.name} " if arch.kind == "encoder-decoder" else ""
        length = src if stack.name == "encoder" else seq
        out += _stack_non_matmul(cfg, stack, batch, length, label, src, step)
    if arch.head.pooler:
        out.append(NonMatmulEntry("pooler", "pooler bias and tanh", 2, batch * arch.d_model, 1))
    return out + _head_non_matmul(cfg, batch * seq)


def _head_non_matmul(cfg: ModelConfig, tokens: int) -> list[NonMatmulEntry]:
    """BERT's MLM-head transform (bias, activation, norm), the vocabulary bias, logit soft-capping."""
    head = cfg.architecture.head
    out, d, V = [], head.d_model, head.vocab_size
    if head.transform is not None:  # its activation is the model's (Head.activation)
        norm = head.transform
        per = 1 + ACTIVATION_PER_ELEMENT[head.activation] + NORM_PER_ELEMENT[(norm.kind, norm.bias)]
        label = f"LM head transform: bias, {head.activation}, {norm.kind}"
        out.append(NonMatmulEntry("head", label, per, tokens * d, 1))
    if head.bias:
        out.append(NonMatmulEntry("bias", "LM head bias add", 1, tokens * V, 1))
    if head.softcap is not None:
        out.append(NonMatmulEntry("softcap", "logit soft-capping", SOFTCAP_PER_ELEMENT, tokens * V, 1))
    if head.scale is not None:  # Cohere, Granite
        out.append(NonMatmulEntry("head", "logits × logit_scale", 1, tokens * V, 1))
    return out


def bias_elements(block: Block, batch: int, seq: int, src: int | None) -> int:
    """Output elements of the block's Linears with a bias: the mixer's and a cross-attention's projections (a
    cross-attention's K and V over the sources), as each says (``elementwise``, work "bias"); the FFN's
    (gate,) up and down for each routed copy (each buffer row), a shared expert's on every token."""
    tokens = batch * seq
    out = batch * sum(e.elements for e in block.mixer.elementwise(seq, seq) if e.work == "bias")
    if block.cross_attention is not None:
        out += batch * sum(e.elements for e in block.cross_attention.elementwise(seq, src or 0) if e.work == "bias")
    moe = block.ffn if isinstance(block.ffn, MoE) else None
    expert = moe.expert if moe else block.ffn
    if expert.bias:
        rows = moe.routed_rows(tokens) if moe else tokens
        out += rows * ((expert.matrices - 1) * expert.d_ff + expert.d_model)
    if moe is not None and moe.shared is not None and moe.shared.bias:
        out += tokens * ((moe.shared.matrices - 1) * moe.shared.d_ff + moe.shared.d_model)
    return out


def _ffn_work(block: Block, tokens: int, stack: str) -> tuple[list[NonMatmulEntry], list[NonMatmulEntry]]:
    """(the activation, the mixture's routing work) of one block, once."""
    moe = block.ffn if isinstance(block.ffn, MoE) else None
    expert = moe.expert if moe else block.ffn
    act = ACTIVATION_PER_ELEMENT[expert.activation] + (1 if expert.gated else 0)
    if expert.swiglu_limit is not None:  # gpt-oss: two clamps, ×alpha, +1 beside the sigmoid, g·σ and the product
        act = 2 + 1 + SIGMOID_PER_ELEMENT + 1 + 1 + 1
    rows = moe.routed_rows(tokens) if moe else tokens  # token rows the FFN (or the experts' buffers) runs on
    name = f"{expert.activation}{' · gate' if expert.gated else ''}"
    activation = [NonMatmulEntry("activation", f"{stack}{name}", act, rows * expert.d_ff, 1)]
    if moe is None:
        return activation, []
    d, routed = moe.dispatch_width, tokens * moe.top_k  # the experts' width: L in a latent MoE
    out = []  # softmax over the k chosen logits (or all E); scale each expert output and add it in
    logits, which = (routed, "top-k") if moe.renormalize else (tokens * moe.n_expert, "all")
    out.append(NonMatmulEntry("moe", f"{stack}softmax of the {which} router logits", SOFTMAX_PER_SCORE, logits, 1))
    out.append(NonMatmulEntry("moe", f"{stack}weight and add the expert outputs", 2, routed * d, 1))
    if moe.shared is not None:
        shared = moe.shared
        per = ACTIVATION_PER_ELEMENT[shared.activation] + (1 if shared.gated else 0)
        activation.append(NonMatmulEntry("activation", f"{stack}shared expert {shared.activation}", per,
                                         tokens * shared.d_ff, 1))
        out.append(NonMatmulEntry("moe", f"{stack}add the shared expert", 1, tokens * d, 1))
    if moe.shared_gate:
        out.append(NonMatmulEntry("moe", f"{stack}shared expert gate: sigmoid", SIGMOID_PER_ELEMENT, tokens, 1))
        out.append(NonMatmulEntry("moe", f"{stack}shared expert gate: product", 1, tokens * d, 1))
    return activation, out


def _block_work(block: Block, positions: str, batch: int, seq: int, src: int | None, stack: str,
                step: bool = False) -> dict[str, list[NonMatmulEntry]]:
    """{kind of work: entries} of one block, once (each entry's copies 1)."""
    cross, norm = block.cross_attention, block.norm
    d, tokens = block.mixer.d_model, batch * seq
    # the mixer's own work (tfcalc.architecture.mixer), in a decode step's form where it has one, and a
    # cross-attention's scores over the sources
    own = (block.mixer.elementwise(seq, seq, step=True) if step and block.mixer.capabilities.decode_form != "standard"
           else block.mixer.elementwise(seq, seq))
    crossed = [e for e in cross.elementwise(seq, src) if e.work in ("softmax", "softcap")] if cross else []

    def total(work: str, entries=own + crossed) -> int:
        return batch * sum(e.elements for e in entries if e.work == work)

    scores, capped = total("softmax"), total("softcap")
    per_norm = NORM_PER_ELEMENT[(norm.kind, norm.bias)]
    norms, sublayers = len(block.norms()), 3 if cross is not None else 2
    activation, moe = _ffn_work(block, tokens, stack)
    out = {
        "softmax": [NonMatmulEntry("softmax", f"{stack}softmax (full square)", SOFTMAX_PER_SCORE, scores, 1)]
        if scores else [],
        "norms": [NonMatmulEntry("norms", f"{stack}{norm.kind} ×{norms} per block", per_norm, tokens * d, norms)],
        "activation": activation,
        "residual": [NonMatmulEntry("residual", f"{stack}residual adds ×{sublayers} per block", 1, tokens * d,
                                    sublayers)],
        "moe": moe,
    }
    if block.residual_scale is not None:  # Granite: each sub-layer's output (a parallel block's sum) scaled
        scaled = 1 if block.parallel != "none" else sublayers
        out["residual"].append(NonMatmulEntry("residual", f"{stack}× residual_multiplier", 1, tokens * d, scaled))
    if block.residual_alpha is not None:  # MiniMax-01: each sub-layer's normed residual scaled
        out["residual"].append(NonMatmulEntry("residual", f"{stack}× residual_alpha", 1, tokens * d, sublayers))
    norms_of_mixer = [NonMatmulEntry("norms", f"{stack}{e.label}", NORM_PER_ELEMENT[(e.norm.kind, e.norm.bias)],
                                     batch * e.elements, 1) for e in own if e.work == "qk_norm"]
    if norms_of_mixer:  # Q/K norms; a latent attention's step, the latents'
        out["qk_norm"] = norms_of_mixer
    if capped:
        out["softcap"] = [NonMatmulEntry("softcap", f"{stack}score soft-capping", SOFTCAP_PER_ELEMENT, capped, 1)]
    bias = bias_elements(block, batch, seq, src)
    if bias:
        out["bias"] = [NonMatmulEntry("bias", f"{stack}bias adds", 1, bias, 1)]
    rope = total("rope", own)  # a NoPE layer rotates nothing
    if any(e.work == "rope" for e in own):
        out["rope"] = [NonMatmulEntry("rope", f"{stack}RoPE on Q and K", ROPE_PER_ELEMENT, rope, 1)]
    priced = ("softmax", "softcap", "qk_norm", "rope", "bias")  # a mixer's other work at its own per-element price
    out["mixer"] = [NonMatmulEntry("mixer", f"{stack}{e.label}", e.per_element, batch * e.elements, 1, e.kernels,
                                   None if e.traffic is None else batch * e.traffic)
                    for e in own if e.work not in priced]
    if positions in ("alibi", "relative"):
        name = "ALiBi" if positions == "alibi" else "relative position"
        out["positions"] = [NonMatmulEntry("positions", f"{stack}{name} bias on the scores", 1,
                                           total("softmax", own), 1)]  # every score of the mixer
    return out


def _joined(entries: list[tuple[NonMatmulEntry, int]]) -> list[NonMatmulEntry]:
    """Entries times their layers, the same work over several kinds of block joined (first seen first)."""
    out: dict[tuple, NonMatmulEntry] = {}
    for e, layers in entries:
        key = (e.component, e.label, e.per_element, e.elements, e.kernels, e.traffic)
        copies = e.copies * layers + (out[key].copies if key in out else 0)
        out[key] = NonMatmulEntry(e.component, e.label, e.per_element, e.elements, copies, e.kernels, e.traffic)
    return list(out.values())


def _stack_non_matmul(cfg: ModelConfig, arch_stack: Stack, batch: int, seq: int, stack: str = "",
                      src: int | None = None, step: bool = False) -> list[NonMatmulEntry]:
    """One stack's non-matmul work folded over its kinds of block; stack is "" or "encoder "/"decoder " (labels)."""
    emb, tokens = arch_stack.embeddings, batch * seq
    d = emb.d_model
    by_kind: dict[str, list[tuple[NonMatmulEntry, int]]] = {k: [] for k in ORDER}
    for block, layers in arch_stack.kinds():
        for kind, entries in _block_work(block, emb.positions, batch, seq, src, stack, step).items():
            by_kind[kind] += [(e, layers) for e in entries]
    final = arch_stack.final_norm
    if final is not None:
        per = NORM_PER_ELEMENT[(final.kind, final.bias)]
        entry = NonMatmulEntry("final_norm", f"{stack}final {final.kind}", per, tokens * d, 1)
        by_kind["final_norm"].append((entry, 1))
    if emb.positions in ("learned", "sinusoidal"):
        entry = NonMatmulEntry("positions", f"{stack}{emb.positions} positions added", 1, tokens * d, 1)
        by_kind["positions"].append((entry, 1))
    for label, present in (("token types added", emb.type_vocab_size > 0), ("embeddings × √d_model", emb.scale),
                           ("embeddings × embedding_multiplier", emb.multiplier is not None)):
        if present:
            by_kind["embeddings"].append((NonMatmulEntry("embeddings", f"{stack}{label}", 1, tokens * d, 1), 1))
    if emb.norm is not None:
        per = NORM_PER_ELEMENT[(emb.norm.kind, emb.norm.bias)]
        entry = NonMatmulEntry("norms", f"{stack}embedding {emb.norm.kind}", per, tokens * d, 1)
        by_kind["embedding_norm"].append((entry, 1))
    return [e for kind in ORDER for e in _joined(by_kind[kind])]
