"""What softmax and latent attention keep for the backward pass, per token: each mixer's answer to the
protocol's "activations saved" (tfcalc.architecture.mixer; ``Attention.saved``, ``LatentAttention.saved``).

The steps are those of tfcalc.count.model.activation_terms (its module docstring derives them and names the tests
that check them byte for byte against autograd's saved tensors): 1, what a norm keeps (``norm_bytes``, used
by the count for the block's norms too); 3 and 4, attention under the fused ("flash") and the "math"
kernel; 5, soft-capped scores or sinks written out; 6, the Q/K norms; 9, the scores' dropout under "math";
11, latent attention. h = d_model, q, k, v, o the Q, K, V and output widths, a = n_head, e = bytes per
activation element. Pure Python: no torch, typer or rich here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tfcalc.architecture.norm import Norm

if TYPE_CHECKING:  # the annotations only: the components (Attention, LatentAttention) call these with
    # themselves, so naming their classes here would close an import circle (tests/test_layers.py)
    from tfcalc.architecture.mixer import Mixer

FP32 = 4  # bytes of the fp32 tensors every dtype keeps somewhere (norm statistics, log-sum-exp, loss)


def norm_bytes(norm: Norm, e: int, width: int | None = None, rows: int = 1) -> int:
    """Per token, what one norm keeps (step 1); ``rows`` norms of ``width`` channels (Q/K norms: one per head)."""
    width = norm.width if width is None else width
    if norm.kind == "layernorm":
        return rows * (e * width + 2 * FP32)
    return rows * (2 * FP32 * width + FP32)


def shared_input_bytes(norm: Norm, e: int) -> int:
    """Per token, the part of norm_bytes that two norms of the same tensor keep once: LayerNorm's input;
    RMSNorm's fp32 copy, which is the input itself in fp32 (and a fresh copy per norm below fp32)."""
    if norm.kind == "layernorm":
        return e * norm.width
    return FP32 * norm.width if e == FP32 else 0


def _new_qk(att: Mixer) -> bool:
    """Q and K are new tensors, not views of the fused QKV output: rotated, or normed."""
    return att.rope_theta is not None or att.qk_norm is not None


def _qk_norm_keeps_qkv(att: Mixer, e: int) -> bool:
    """Whether the Q/K norms keep their input, a view of the fused QKV output (so the whole of it)."""
    return att.qk_norm is not None and (att.qk_norm.kind == "layernorm" or e == FP32)


def _fused_kept(att: Mixer, e: int) -> bool:
    """Under the fused kernel, whether a view of the fused QKV output (Q's alone in a reader) reaches autograd:
    SDPA reads V (or Q) as a view, or a norm of Q, K or V heads keeps its input (LayerNorm; RMSNorm in fp32). With
    Q and K new and each V head normed (Gemma 4, 3n) below fp32 the norms keep fp32 copies: none is kept."""
    reader = getattr(att, "reader", False)
    v_view = not reader and getattr(att, "v_norm", None) is None
    v_norm_keeps = getattr(att, "v_norm", None) is not None and not reader and _keeps_input(att.v_norm, e)
    return v_view or not _new_qk(att) or _qk_norm_keeps_qkv(att, e) or v_norm_keeps


def _qk_norm_bytes(att: Mixer, e: int) -> int:
    """Per token, what the Q and K norms keep, one row per head (step 6)."""
    reader = getattr(att, "reader", False)  # step 8: no K of its own
    rows, k = att.n_head + (0 if reader else att.n_kv_head), (0 if reader else att.k_width)
    if att.qk_norm.kind == "layernorm":  # per-head weights (Cohere): their product keeps the normed x̂ too
        return 2 * FP32 * rows + (e * (att.q_width + k) if att.qk_norm_heads else 0)
    return FP32 * (att.q_width + k) * (2 if e < FP32 else 1) + FP32 * rows


def _written_out(att: Mixer, batch: int, seq: int, e: int) -> dict[str, int]:
    """Per token, the written-out self-attention, with soft-capped scores or sinks (step 5)."""
    q, k, v, o = att.q_width, att.k_width, att.v_width, att.out_width
    views, gqa = batch == 1 or att.n_head == 1, att.n_kv_head != att.n_head
    q_bytes = e * q if _new_qk(att) or not views else 0
    k_bytes = e * q if gqa else (e * k if _new_qk(att) or not views else 0)
    v_bytes = e * o if gqa else (0 if views else e * v)
    fused = 0 in (q_bytes, k_bytes, v_bytes) or _qk_norm_keeps_qkv(att, e)  # a view of it is kept
    qkv = q_bytes + k_bytes + v_bytes + (e * (q + k + v) if fused else 0)
    tanh = e * att.n_head * seq if att.softcap is not None else 0
    softmax = e * att.n_head * (seq + (1 if att.sinks else 0))  # a sink is one more logit in each row
    return {"qkv": qkv, "attn_scores": tanh + softmax, "softmax_stats": 0}


def working_set(att: Mixer, kernel: str, length: int) -> int:
    """Per token, the elements of a no-grad forward's attention stage beyond the block's x, norm output and
    projection output (tfcalc.count.model.memory.forward_working_set, 1): the fused QKV output, the new Q and K
    (RoPE or Q/K norms), the SDPA output; math attention adds Q, K, V copies and the scores and softmax."""
    q, k = att.q_width, att.k_width
    new_qk = att.rope_theta is not None or att.qk_norm is not None  # RoPE or Q/K norms: new Q and K tensors
    out = (q + k + att.v_width) + att.out_width + ((q + k) if new_qk else 0)
    return out + (3 * q + 2 * att.n_head * length if kernel == "math" else 0)


def cross_saved(att: Mixer, batch: int, seq: int, sources: int, e: int, kernel: str) -> dict[str, int]:
    """{term: bytes} a cross-attention keeps over b·T target and b·S source tokens, its ``batch`` sequences of
    ``seq`` queries reading ``sources`` positions (tfcalc.count.model.activation_terms, step 10), beside the
    block's norm and the Q-projection input: Q e·q, the output e·o and the log-sum-exp 4·a per target token,
    the fused K/V output e·(k + v) per source token. "math" (no mask, so only soft-capped scores run it, or a
    kernel the user forces): K and V copies per source token (the fused K/V output when V needs no copy; with
    soft-capped scores, as the written-out matmuls keep them) and the softmax output e·a·S per target token
    (and the tanh output, capped). The source side makes the terms whole only over the micro-batch."""
    q, k, v, o, a = att.q_width, att.k_width, att.v_width, att.out_width, att.n_head
    target, source = batch * seq, batch * sources
    gqa = att.n_kv_head != att.n_head
    if kernel == "math" and att.softcap is not None:  # written out: Q, K and V as the matmuls keep them
        out = {"qkv": target * e * q + source * e * (q + o if gqa else k + v),
               "attn_scores": target * 2 * e * a * sources, "softmax_stats": 0}
    elif kernel == "flash":
        out = {"qkv": target * e * q + source * e * (k + v), "attn_scores": 0, "softmax_stats": target * FP32 * a}
    else:
        v_is_view = not gqa and (batch == 1 or att.n_head == 1)
        out = {"qkv": target * e * q + source * e * (q + (k + v if v_is_view else o)),
               "attn_scores": target * e * a * sources, "softmax_stats": 0}
    out["attn_output"] = target * e * o
    return out


def cross_working_set(att: Mixer, kernel: str, length: int, sources: int) -> int:
    """Elements of a cross-attention's stage per sequence of ``length`` target tokens reading ``sources``
    positions, beyond the block's x, norm output and projection output (3h per target token;
    tfcalc.count.model.memory.forward_working_set): Q and the SDPA output per target token, K and V per source
    token; under "math" the scores and their softmax, 2·a·S per target token."""
    scores = 2 * att.n_head * sources if kernel == "math" else 0
    return length * (att.q_width + att.out_width + scores) + sources * (att.k_width + att.v_width)


def attention_saved(att: Mixer, batch: int, seq: int, e: int, kernel: str, dropout: bool) -> dict[str, int]:
    """{term: bytes per token} one self-attention keeps beside the block's norm and the QKV input (steps 3-6,
    and 9's scores dropout), under ``kernel``."""
    q, k, v, o, a = att.q_width, att.k_width, att.v_width, att.out_width, att.n_head
    if getattr(att, "reader", False):  # step 8: Q alone; K and V are its source layer's, kept there
        k = v = 0
    fused = q + k + (0 if getattr(att, "v_from_k", False) else v)  # step 7: V read from K has no rows of its own
    if getattr(att, "output_gate", False):  # Qwen3-Next: the gate's rows are in the fused output a view keeps
        fused += q
    out: dict[str, int] = {}
    if kernel == "flash":
        out["qkv"] = e * fused if _fused_kept(att, e) else 0
        out["rope_qk"] = e * (q + k) if _new_qk(att) else 0
        out["attn_scores"] = 0
        out["softmax_stats"] = FP32 * a  # log-sum-exp per head
    elif att.softcap is not None or att.sinks:
        out.update(_written_out(att, batch, seq, e), rope_qk=0)
    else:
        v_is_view = att.n_kv_head == att.n_head and (batch == 1 or att.n_head == 1)
        kept = v_is_view or _qk_norm_keeps_qkv(att, e)  # the whole fused QKV output is kept through a view
        out["qkv"] = e * (2 * q + (0 if v_is_view else o)) + (e * fused if kept else 0)  # K, V per query head
        out["rope_qk"] = 0
        out["attn_scores"] = e * a * seq  # softmax output, the s² term
        out["softmax_stats"] = 0
    if att.qk_norm is not None:
        out["qk_norm"] = _qk_norm_bytes(att, e)
        if getattr(att, "output_gate", False) and _qk_norm_keeps_qkv(att, e):  # Q strided between the gates: its
            out["qk_norm"] += e * q  # heads' view is a copy, which the norm keeps as its input
    if getattr(att, "v_norm", None) is not None and v:  # Gemma 4, 3n: each V head normed, no weight: its 1/rms
        # and its output (SDPA's V), below fp32 its fp32 copy (no x̂ apart from the output: no weight to scale)
        out["qk_norm"] = out.get("qk_norm", 0) + FP32 * att.n_kv_head + e * v + (FP32 * v if e != FP32 else 0)
    out["attn_output"] = e * o  # SDPA output = O-projection input
    if getattr(att, "output_gate", False):  # Qwen3-Next: sigmoid(gate) and the gated product (O's input) kept too
        out["attn_output"] += 2 * e * o
    out["scores_dropout"] = (1 + e) * a * seq if dropout and kernel == "math" else 0  # mask and output
    return out


def _keeps_input(norm: Norm, e: int) -> bool:
    """Whether a norm keeps its input tensor itself (LayerNorm; RMSNorm in fp32, where its fp32 copy is the
    input): then a view's whole storage is kept."""
    return norm.kind == "layernorm" or e == FP32


def latent_saved(att: Mixer, batch: int, seq: int, e: int, attention: str) -> dict[str, int]:
    """{component: bytes per token} a latent attention keeps (step 11), beside the block norm and the input.

    The "math" kernel is counted as it reduces in the activations' dtype: Q, K and V as the module passes them
    and the softmax in e bytes, what CUDA's math SDPA kept before torch 2.5 and keeps with
    torch.backends.cuda.allow_fp16_bf16_reduction_math_sdp(True) (a global switch: the CPU's math kernel follows it
    too). torch's default since 2.5 upcasts fp16/bf16 inputs of the math kernel to fp32 on every device: it then
    keeps fp32 copies of Q, K and V, F·H·(2(h_n + h_r) + h_v), in place of the e-byte tensors counted (nothing else
    keeps those), and the softmax in fp32, F·H·S (about 1.35x the whole at 64 tokens in tests/test_deepseek_v32.py);
    the fused kernels (flash, efficient: the GPU's choice where no explicit mask forces math) keep the e-byte Q,
    K, V and a log-sum-exp either way. fp32 is the same under both."""
    H, c, r, hn, hv = att.n_head, att.kv_lora_rank, att.qk_rope_head_dim, att.qk_nope_head_dim, att.v_head_dim
    q_latent = 0
    if att.q_lora_rank is not None:
        q_latent = norm_bytes(att.latent_norm(att.q_lora_rank), e) + e * att.q_lora_rank
    kv_norm = att.latent_norm(c)
    kv_latent = norm_bytes(kv_norm, e) + (e * r if _keeps_input(kv_norm, e) else 0) + e * c
    qk = 2 * e * H * (hn + r)  # Q and K, concatenated [nope | rope]: new tensors
    out = {"latent": q_latent + kv_latent, "rope_qk": 0, "attn_output": e * H * hv}
    if attention == "flash":
        out.update(qkv=qk + e * H * (hn + hv), attn_scores=0, softmax_stats=FP32 * H)
    else:
        v_is_view = batch == 1 or H == 1 or seq == 1  # (B, H, S, h_v) flattens to (B·H, S, h_v) as a view
        out.update(qkv=qk + e * H * ((hn + hv) if v_is_view else hv), attn_scores=e * H * seq, softmax_stats=0)
    return out
