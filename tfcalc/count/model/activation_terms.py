"""What one block keeps for the backward pass, read from its components (tfcalc.architecture): pure arithmetic.

Each function prices one *kind* of block -- its token mixer (what it says it keeps: its ``saved`` answer of
the protocol, tfcalc.architecture.mixer; for attention, tfcalc.architecture.saved prices steps 3-6, 9's
scores dropout and 11 from its widths, RoPE, Q/K norms, soft-cap), its ``FFN`` or ``MoE``, its ``Norm`` and
where the norms sit -- so a stack of mixed layers (windows, dense
first layers, a mixture of experts every n-th layer, per-layer widths) is priced kind by kind and
multiplied out by tfcalc.count.model.activations. Notation, per token: h = d_model, q = n_head·d_head (Q
width), k = n_kv_head·d_head (K width), v = n_kv_head·v_head_dim (V width), o = n_head·v_head_dim (the
attention output), f = the FFN's hidden width, a = n_head, e = bytes per activation element.

Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large Transformer Models", arXiv
2205.05198, sec. 4.1, eq. 1) count, per GPT layer (LayerNorm, GELU MLP with f = 4h, q = k = h), 16-bit,
with dropout: attention 11sbh + 5as²b, MLP 19sbh, two LayerNorms 4sbh. The same terms, generalized to
tfcalc's real module (tfcalc.model) -- each a tensor autograd saves, checked byte for byte against the
saved tensors of the real model in tests/count/test_memory.py and tests/count/test_activation_kinds.py --
per token per layer:

1. each norm (``norm_bytes``): LayerNorm keeps its input (e·h) plus mean and 1/σ in fp32 (8 bytes);
   RMSNorm, which PyTorch's CPU path runs as ops on an fp32 copy, keeps that copy and the normalized x̂
   (4·h each, 8·h in all, whatever the dtype) plus 1/rms (4 bytes). Sandwich norms (Gemma 2) keep what a
   norm keeps, each; a parallel block with two norms of the same input keeps that input once, with one
   shared norm also one FFN input less;
2. the QKV and the FFN-up projections keep their input (the norm output), e·h each;
3. attention, fused kernel ("flash": F.scaled_dot_product_attention, no s² tensor): Q, K and V are views
   of the fused QKV output, kept whole, e·(q + k + v); with RoPE or Q/K norms the new Q and K, e·(q + k)
   more; the output (the O-projection input) e·o; the log-sum-exp, 4·a (fp32). GQA shows here: K and V
   are k and v wide. Partial rotary keeps what full rotary keeps;
4. attention, "math" (scores materialized, as PyTorch does under an explicit mask -- ALiBi, T5's bias --
   and as the paper counts): Q, K and V copies with K and V repeated to every query head, e·(2q + o); the
   softmax output e·a·s; the O-projection input e·o; no log-sum-exp. When V's heads need no copy (batch
   1 or a single head, without GQA) V stays a view and keeps the whole fused QKV output;
5. soft-capped scores (Gemma 2) or sinks (gpt-oss), written out as two batched matmuls (``_written_out``):
   the operands as they flatten (B, nh, ...) to (B·nh, ...) -- copies, or new tensors (RoPE'd or normed Q
   and K, K and V repeated for GQA), or, when B or nh is 1, views that keep the whole fused output -- the
   tanh output (capped), e·a·s, and the softmax, e·a·s, or e·a·(s + 1) with a sink's logit in each row;
6. Q/K norms, one row per head: LayerNorm its input (a view of the fused QKV output, so all of it) and fp32
   mean and 1/σ; RMSNorm its fp32 x̂ and 1/rms (and below fp32 an fp32 copy; in fp32 its input, again the
   fused output);
7. FFN: ungated, the activation input and output, 2·e·f (ReLU keeps only its output: e·f); gated
   (SwiGLU/GeGLU), the fused [gate | up] output 2·e·f, the activation output e·f and the product (the
   down-projection input) e·f: 4·e·f (5·e·f with Falcon-H1's gate multiplier: the scaled gate); gpt-oss's
   clamped SwiGLU 7·e·f (the clamped gate, its sigmoid, g·σ and up + 1 besides); DeepSeek-V4's (no alpha) 6·e·f
   (the clamped gate and up besides); xIELU (Apertus) 5·e·f: its input and output and the three tensors autograd
   saves between (α_p·x, expm1(min(x, eps)), expm1(...) − x); the two softplus'd scalars it also saves, 2·e a
   layer whatever the tokens, are left out (tests/count/test_activation_kinds.py states them);
8. mixture of experts: the FFN input is kept once (the router's input); for each of the k experts a token
   is routed to, the expert's input rows (index_select), its hidden tensors (as 7), its output and the
   weighted output, and the routing weight: k·(3·e·h + hidden + e), plus the fp32 softmax of the k chosen
   logits, 4·k (of all E, 4·E, when the top k are not renormalized; DeepSeek's routing: the scores of all E,
   4·E, and renormalized the k chosen and their sum, 4·(k + 1) more; Gemma 4's experts beside the MLP, their
   norms and router besides: ``beside_terms``). A shared expert keeps its hidden
   tensors as 7 (its input is the router's) and with a gate the sigmoid output e and the shared output
   e·h. With a capacity C (``capacity_terms``) each expert keeps its buffer of C input rows instead,
   and each pair the row it reads back, its weighted row and its weight, k·(2·e·h + e). A latent MoE
   (tfcalc.architecture.ffn, step 7): every routed row above is L wide, h -> L, and the L -> d projection keeps
   its input, e·L a token (d -> L's input is the router's; the gather keeps no input, only its index);
9. dropout (tfcalc's model has none; ``dropout=True`` adds the paper's terms): a 1-byte mask on the
   attention and on the FFN output (2·h), and under math the softmax-dropout mask and output, (1 + e)·a·s;
12. hyper-connections (DeepSeek-V4, ``hyper_bytes``): what each of a block's two HyperConnections keeps, its
   fp32 Sinkhorn iterations included (the final hc_head's, once per model, left out);
10. cross-attention (``cross_terms``), b·T target and b·S source tokens: its norm, the Q-projection input
   e·h, Q e·q, the output e·o and the log-sum-exp 4·a per target token, its fused K/V output e·(k + v) per
   source token. Under "math" (unchecked: cross-attention has no mask, so the module runs the fused kernel
   unless its scores are capped) Q e·q, K and V copies per source token (or the fused K/V output when V
   needs no copy), the softmax output e·a·S;
11. latent attention (``latent_terms``; tfcalc.architecture.latent, H heads, c_q = q_lora_rank, c = kv_lora_rank,
   h_r rotary, h_n no-position, h_v value channels per head): beside the block's norm and the compressions'
   input e·h, the Q compression's norm (norm_bytes of c_q) and W_qb's input e·c_q; the KV latent's norm,
   whose input is a view of W_kva's output [c | k_r] (so, where the norm keeps its input, all c + h_r of
   it) and W_kvb's input e·c. Q and K are new tensors (concatenated [nope | rope]), e·H·(h_n + h_r) each.
   Fused kernel: V is a view of W_kvb's output, kept whole, e·H·(h_n + h_v); the output e·H·h_v and the
   log-sum-exp 4·H. "math" (what SDPA runs on a CPU when h_v differs from h_n + h_r): Q and K as the
   matmuls keep them, V e·H·h_v (the whole W_kvb output when it stays a view: batch 1, one head or one position), the
   softmax output e·H·s. The compressions are replicated on every tensor-parallel rank (key "latent").
13. Gemma 3n and Gemma 4 (``altup_terms``, ``laurel_terms``, ``ple_gate_terms``; tfcalc.model.altup, .per_layer;
   n streams of d, LAuReL rank r, per-layer inputs p wide): AltUp's predict keeps the block's input, all n
   streams (e·n·d: (n, n) @ streams), its router norm (whose input, in fp32 or under LayerNorm, is a view of
   those streams: kept with them), the router's input e·d, tanh's fp32 output 4·n (below fp32 the cast,
   the coefficients' input, e·n), the coefficients e·n²; the attention norm's input is a view of the n
   predictions: where a norm keeps its input, the whole e·n·d. Correct keeps a norm of the block's output, the
   router's input and tanh's as predict's, the coefficients plus one e·n and the innovation e·d; with a
   per-layer input, the corrected streams too (e·n·d: the output scale's product, or the gate, reads a view of
   them; without one they are the next block's input). LAuReL: the right matrix's input e·r and a norm of its
   output. The per-layer gate: its input e·d (the scaled first stream; Gemma 4's block output), the
   activation's input, output and product with the layer's input, e·p each (ReLU keeps its output: 2), and a
   norm of the projection's output. Gemma 3n's activation sparsity (step 7) keeps the top-k's ReLU output e·f
   and the gate's standard deviation, e per token, more.
"""

from __future__ import annotations

from tfcalc.architecture import FFN, Block, MoE
from tfcalc.architecture.saved import (  # noqa: F401 (re-exported: steps 1, 3-6 and 11 live with the mixers)
    FP32,
    latent_saved as latent_terms,
    norm_bytes,
    shared_input_bytes,
)


def _router_bytes(moe: MoE) -> int:
    """Per token, what the router keeps in fp32 (step 8): Mixtral's softmax of the k chosen logits, or of all
    E when they are not renormalized; DeepSeek's routing (tfcalc.architecture.routing) the sigmoid or softmax
    scores of all E and, renormalized, the k chosen scores and their sum (the division keeps both)."""
    if moe.routing.is_default:
        return FP32 * (moe.top_k if moe.renormalize else moe.n_expert)
    scores = 2 if moe.routing.scoring == "sqrtsoftplus" else 1  # DeepSeek-V4's: softplus' input and sqrt's output
    return FP32 * (scores * moe.n_expert + ((moe.top_k + 1) if moe.renormalize else 0))


def ffn_factor(ffn: FFN) -> int:
    """Hidden-width tensors the FFN keeps (step 7): 4 gated, 1 for ReLU (only its output), 5 for xIELU, else 2."""
    if ffn.gated:  # gpt-oss's 7; DeepSeek-V4's clamp (no alpha) 6; Falcon-H1's gate multiplier keeps the scaled gate
        clamped = None if ffn.swiglu_limit is None else (7 if ffn.swiglu_alpha is not None else 6)
        return (4 if clamped is None else clamped) + (ffn.multipliers is not None)
    return {"relu": 1, "xielu": 5}.get(ffn.activation, 2)


def altup_terms(block: Block, e: int) -> dict[str, int]:
    """Step 13, per token: AltUp's predict and correct around ``block`` (and its norms' views of the streams)."""
    altup, norm, d = block.altup, block.norm, block.mixer.d_model
    n, shared = altup.n, shared_input_bytes(block.norm, e)
    tanh = FP32 * n + (e * n if e != FP32 else 0)  # tanh in fp32, cast back below it (tfcalc.model.altup)
    predict = e * n * d + norm_bytes(norm, e) - shared + e * d + tanh + e * n * n
    correct = norm_bytes(norm, e) + e * d + tanh + e * n + e * d
    corrected = e * n * d if block.per_layer_input is not None else 0
    # the attention norm's input is a view of the n predictions: kept whole where the norm keeps its input
    return {"altup": predict + correct + corrected, "attn_norm_streams": (n - 1) * shared}


def laurel_terms(block: Block, e: int) -> int:
    """Step 13, per token: LAuReL's right input and its norm (the left reads the attention's input, kept)."""
    return e * block.laurel.rank + norm_bytes(block.norm, e)


def ple_gate_terms(block: Block, e: int) -> int:
    """Step 13, per token: a block's per-layer input gate (its input the scaled first stream, or the block's
    output; Gemma 3n without the output scale reads a view of the corrected streams, kept by ``altup_terms``)."""
    gate, norm = block.per_layer_input, block.norm
    view = block.altup is not None and not block.altup.correct_scale
    return (0 if view else e * gate.d_model) + (2 if gate.activation == "relu" else 3) * e * gate.width \
        + norm_bytes(norm, e)


def layer_terms(block: Block, batch: int, seq: int, e: int, attention: str, dropout: bool = False) -> dict[str, int]:
    """{component: bytes per token} one block keeps (steps 1-9), under kernel ``attention``."""
    ffn, norm = block.ffn, block.norm
    h = block.mixer.d_model
    out = {"attn_norm": norm_bytes(norm, e), "qkv_input": e * h}
    mixer = block.mixer.saved(batch, seq, e, attention, dropout)  # steps 3-6, 11: what the mixer keeps
    scores_dropout = mixer.pop("scores_dropout", 0)  # step 9's, listed last
    out.update(mixer)
    if block.placement == "sandwich":
        out["attn_post_norm"] = norm_bytes(norm, e)
    out["ffn_norm"] = {"none": norm_bytes(norm, e), "shared_norm": 0,
                       "two_norms": norm_bytes(norm, e) - shared_input_bytes(norm, e)}[block.parallel]
    out["ffn_input"] = 0 if block.parallel == "shared_norm" else e * h  # a MoE's router input too
    if isinstance(ffn, MoE):  # step 8
        k_ = ffn.top_k
        out["ffn_hidden"] = k_ * ffn_factor(ffn.expert) * e * ffn.expert.d_ff
        w = ffn.dispatch_width  # step 8: L in a latent MoE, whose L -> d projection keeps its input, e·L
        out["moe_routing"] = k_ * (3 * e * w + e) + _router_bytes(ffn) + e * ffn.latent
        if ffn.shared is not None:  # its input is the router's; gated: the sigmoid output and the shared output
            out["shared_expert"] = ffn_factor(ffn.shared) * e * ffn.shared.d_ff + (e * h + e if ffn.shared_gate else 0)
        if ffn.beside_mlp is not None:
            out["moe_beside"] = beside_terms(ffn, e)
    else:  # Gemma 3n's sparsity: the top-k's ReLU output and the gate's standard deviation (step 13)
        sparse = (e * ffn.d_ff + e) if ffn.sparsity else 0
        out["ffn_hidden"] = ffn_factor(ffn) * e * ffn.d_ff + sparse
    if block.placement == "sandwich":
        out["ffn_post_norm"] = norm_bytes(norm, e)
    if block.hyper is not None:  # step 12: DeepSeek-V4's hyper-connections, around each of the two sub-layers
        out["hyper_connections"] = 2 * hyper_bytes(block.hyper, h, e)
    if block.altup is not None:  # step 13
        out.update(altup_terms(block, e))
    if block.laurel is not None:
        out["laurel"] = laurel_terms(block, e)
    if block.per_layer_input is not None:
        out["ple_gate"] = ple_gate_terms(block, e)
    out["dropout"] = 2 * h if dropout else 0  # the 1-byte masks of the attention and FFN outputs
    out["scores_dropout"] = scores_dropout
    # a block of one sub-layer (a Mamba2 block, Nemotron-H's layers): the absent one's norm and input kept nowhere
    if not getattr(block.mixer, "sublayer", True):
        out.update(attn_norm=0, qkv_input=0)
    if not isinstance(ffn, MoE) and ffn.absent:
        out.update(ffn_norm=0, ffn_input=0)
    return out


def beside_terms(moe: MoE, e: int) -> int:
    """Step 8, Gemma 4's experts beside the MLP (tfcalc.model.beside), per token, beyond a mixture's terms: the MLP's
    post-norm and the experts' post-norm (norm_bytes each), the experts' pre-norm of the block's unnormed input (in
    fp32 or under LayerNorm that input itself, which the block's FFN norm keeps); the router's weightless RMSNorm
    of the same input (1/rms in fp32, below fp32 an fp32 copy, and its output, which the router scale's product
    keeps, e·h) and the router's input e·h; beside the k renormalized weights counted, the softmax over all E, the
    k chosen and their sum (fp32) and the k experts' scales gathered (e·k)."""
    norm, h, k = moe.beside_mlp, moe.d_model, moe.top_k
    norms = 3 * norm_bytes(norm, e) - shared_input_bytes(norm, e)
    route = (FP32 * h if e != FP32 else 0) + FP32 + 2 * e * h
    return norms + route + FP32 * (moe.n_expert + k + 1) + e * k


def hyper_bytes(hyper, d: int, e: int) -> int:
    """Step 12, per token and sub-layer (tfcalc.model.hyper.HyperConnection, n streams of d, t Sinkhorn iterations):
    the streams (e·n·d: the collapse and the mix read them), below fp32 their fp32 copy (4·n·d), the unweighted
    norm's 1/rms and output (4 + 4·n·d), the projection's output (4·n(n + 2)), the pre and post sigmoids (4·2n),
    the comb softmax (4·n²), each Sinkhorn division's operand and divisor (4·(2t - 1)(n² + n)), pre + eps (4·n);
    the mix's post and comb in the model's dtype (e·n, e·n²) and the sub-layer's output (e·d)."""
    n, t, f = hyper.streams, hyper.sinkhorn_iters, FP32
    return (e * n * d + (f * n * d if e != f else 0) + f * (1 + n * d) + f * n * (n + 2) + f * 2 * n + f * n * n
            + f * (2 * t - 1) * (n * n + n) + f * n + e * n + e * n * n + e * d)


def cross_terms(block: Block, batch: int, seq: int, src_seq: int, e: int, attention: str) -> dict[str, int]:
    """{component: bytes} a block's cross-attention keeps over b·T target and b·S source tokens (step 10): the
    block's norm and Q-projection input here, the rest as the mixer says (its ``saved`` over ``sources``)."""
    att, norm = block.cross_attention, block.norm
    target = batch * seq
    out = {"cross_attn_norm": target * norm_bytes(norm, e), "cross_q_input": target * e * att.d_model}
    if block.placement == "sandwich":
        out["cross_attn_post_norm"] = target * norm_bytes(norm, e)
    out.update({f"cross_{term}": n for term, n in att.saved(batch, seq, e, attention, False, sources=src_seq).items()})
    return out


def capacity_terms(moe: MoE, terms: dict[str, int], tokens: int, e: int) -> None:
    """With an expert capacity C (tfcalc.model.experts, MixtureOfExperts._buffered), per layer: the E
    buffers of C rows the experts multiply (their input, e·h each, kept by the batched matmul; their
    hidden tensors as the FFN's), and for each of the tokens·k (token, expert) pairs, kept or dropped
    (the forward has the same shapes whatever the routing): the row it reads back from its buffer and
    the weighted row (e·h each: the product keeps one, the scatter into the tokens the other) and its
    weight, e (0 when dropped). Llama 4's input-side weights keep the same amounts: the pair's input row
    and weight before the buffers, and the row read back. Exact for every routing. ``terms`` (already
    times the tokens) is updated in place."""
    h, k, E = moe.dispatch_width, moe.top_k, moe.n_expert  # the experts' rows: L wide in a latent MoE
    buffer_rows = E * moe.capacity(tokens)
    terms["ffn_hidden"] = buffer_rows * ffn_factor(moe.expert) * e * moe.expert.d_ff
    softmax = tokens * _router_bytes(moe)
    terms["moe_routing"] = buffer_rows * e * h + tokens * k * (2 * e * h + e) + softmax + tokens * e * moe.latent
