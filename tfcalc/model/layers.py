"""The sub-layers of the real model: linear layers, norms, self- and cross-attention (the FFN:
tfcalc.model.ffn; the mixture of experts: tfcalc.model.experts). Each is built from its component of the
description (tfcalc.architecture: an ``Attention``, ``Norm``), as litgpt's Block picks its classes from its
config; shapes are written as (B, nh, T, hs).

Attention runs ``F.scaled_dot_product_attention`` unless the scores are soft-capped (Gemma 2) or the
softmax has sinks (gpt-oss): SDPA has no hook between Q·Kᵀ and the softmax, so ``attend`` writes the
math out (the same two matmuls, as modeling_gemma2.py's and modeling_gpt_oss.py's
eager_attention_forward do)."""

from __future__ import annotations

import os

import torch
import torch.nn.functional as F
from torch import nn

from tfcalc.architecture import Attention as AttentionSpec, Norm
from tfcalc.errors import InputError
from tfcalc.model import fused
from tfcalc.model.attention_state import AttentionState
from tfcalc.model.mixers import MixerModule, interleave
from tfcalc.model.positions import rope_key, rotate


def make_norm(norm: Norm) -> nn.Module:
    """The norm a ``Norm`` component describes (its kind, width, bias and eps)."""
    if norm.kind == "rmsnorm":
        return nn.RMSNorm(norm.width, eps=norm.eps, elementwise_affine=norm.affine)
    return nn.LayerNorm(norm.width, eps=norm.eps, bias=norm.bias)


class HeadNorm(nn.Module):
    """A norm over each head's channels with weights of its own per head, (heads, h): Cohere's q_norm and
    k_norm (modeling_cohere.py, CohereLayerNorm of hidden_size (num_heads, head_dim), over the last dim)."""

    def __init__(self, norm: Norm, heads: int):
        super().__init__()
        self.kind, self.width, self.eps = norm.kind, norm.width, norm.eps
        self.weight = nn.Parameter(torch.empty(heads, norm.width))
        self.bias = nn.Parameter(torch.empty(heads, norm.width)) if norm.bias else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (B, T, nh, hs), normed over hs, each head scaled by its own weights."""
        norm = F.layer_norm if self.kind == "layernorm" else F.rms_norm
        y = norm(x, (self.width,), eps=self.eps) * self.weight
        return y if self.bias is None else y + self.bias


class Linear(nn.Linear):
    """nn.Linear without its own random init: every tfcalc model is built on meta first and filled once
    by init_weights(), so kaiming_uniform_ here would be wasted work (a third of the meta build time)."""

    def reset_parameters(self) -> None:
        pass


class LMHead(Linear):
    """The output projection, bias-free. When the vocabulary is not a multiple of 16 (GPT-2 and GPT-3's
    50257), a (tokens, vocab) output has rows of an odd length, and BLAS libraries run such a matmul
    well below their peak (nanoGPT pads GPT-2's vocabulary to 50304 for this reason: model.py, GPTConfig;
    on GPUs an unaligned leading dimension loses the tensor-core path: NVIDIA's "Matrix Multiplication
    Background User's Guide", tensor core requirements). The product is then computed as
    weight @ xᵀ, whose output rows are the tokens, and returned as its transposed view: the same
    values and FLOPs (2·tokens·d·vocab), a (..., vocab) tensor with strides (.., 1, tokens)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.out_features % 16 == 0:
            return super().forward(x)
        flat = x.reshape(-1, self.in_features)  # (N, d)
        y = (self.weight @ flat.mT).mT.reshape(*x.shape[:-1], self.out_features)  # (N, V) view -> (..., V)
        return y if self.bias is None else y + self.bias


def add_projection(residual: torch.Tensor | None, linear: nn.Linear, y: torch.Tensor) -> torch.Tensor:
    """residual + linear(y), or linear(y) without a residual. A decode step's sub-layer ends in a matmul of
    one row per sequence and a residual add, both latency-bound: where it may, the GEMM takes the residual as
    its C and adds into it in place (addmm with out = C, beta = 1: cuBLAS's epilogue; the sum rounds once), one kernel a
    sub-layer fewer (1.25 us each on an H100, benchmarks/decode_profile.py). It may where the Linear is plain:
    no bias, no hooks, not a DTensor (a tensor-parallel rank's partial sum must not take the residual before
    its all-reduce), of the residual's dtype, the residual contiguous and out of autograd (the caller's: only
    the runtime's step asks, tfcalc.model.step, whose stream no one else holds). TFCALC_FOLD=0 takes the sum
    apart, as a plain forward does (to tell its rounding from another's: it is not what makes a draft's
    one-token steps and a verify step disagree, tests/gpu/test_decode_runtime_cuda.py)."""
    if residual is None:
        return linear(y)
    if os.environ.get("TFCALC_FOLD", "1") == "0":  # the sum apart, as a plain forward takes it
        return residual + linear(y)
    w = linear.weight
    if (linear.bias is None and type(w.data) is torch.Tensor and w.dtype == residual.dtype and not y.requires_grad
            and residual.is_contiguous() and not (linear._forward_hooks or linear._forward_pre_hooks)):
        stream = residual.view(-1, residual.shape[-1])  # (B·T, d)
        # addmm's out= form, not addmm_: FlopCounterMode counts aten.addmm (its overloads), not aten.addmm_;
        # out is self, so nothing is copied before the GEMM (the kernels' copy_ returns at once on itself)
        torch.addmm(stream, y.reshape(-1, y.shape[-1]), w.t(), out=stream)
        return residual
    return residual + linear(y)


def empty_embedding(n: int, d: int) -> nn.Embedding:
    """An embedding of n rows of d whose weight is left uninitialized (init_weights fills it, or a checkpoint),
    for every table of the model (tfcalc.model.transformer, per_layer). nn.Embedding's own
    init calls normal_, which on the meta device goes through torch._refs and imports torch._dynamo:
    two seconds of start-up for nothing."""
    return nn.Embedding(n, d, _weight=torch.empty(n, d))


def merge_heads(y: torch.Tensor) -> torch.Tensor:
    """(B, nh, T, hs) -> (B, T, nh*hs): the heads' outputs side by side, the output projection's input (every
    attention module: here, latent, sparse_latent, kv_shared)."""
    B, nh, T, hs = y.shape
    return y.transpose(1, 2).reshape(B, T, nh * hs)


def _split_heads(x: torch.Tensor, n_head: int) -> torch.Tensor:
    """(B, T, nh*hs) -> (B, nh, T, hs)."""
    B, T, _ = x.shape
    return x.view(B, T, n_head, -1).transpose(1, 2)


def softcap(x: torch.Tensor, cap: float | None) -> torch.Tensor:
    """cap · tanh(x / cap) (Gemma 2's soft-capping of scores and logits); x when cap is None."""
    return x if cap is None else torch.tanh(x / cap) * cap


def _fold_groups(q, mask, sinks, groups: int):
    """Grouped-query attention as multi-head attention over the K/V heads: the ``groups`` query heads of
    each K/V head become more query rows of it, (B, nh, Tq, hs) -> (B, nkv, g·Tq, hs), and the mask
    (B', 1|nh, Tq, S) and sinks (nh,) follow. Query head i reads K/V head i // g (SDPA's enable_gqa, HF's
    repeat_kv), so nothing of the cache is copied or repeated, and every SDPA backend takes it (flash
    decoding's layout; gpt-fast does the same for its decode step)."""
    B, nh, Tq, hs = q.shape
    nkv = nh // groups
    q = q.reshape(B, nkv, groups * Tq, hs)
    if mask is not None:
        mask = mask.reshape((1,) * (4 - mask.dim()) + tuple(mask.shape))
        if mask.shape[1] == 1:  # (B', 1, Tq, S): the same for every head
            b, S = mask.shape[0], mask.shape[-1]
            mask = mask[:, :, None].expand(b, 1, groups, Tq, S).reshape(b, 1, groups * Tq, S)
        else:  # (B', nh, Tq, S): per head, so per (K/V head, group)
            mask = mask.reshape(mask.shape[0], nkv, groups * Tq, mask.shape[-1])
    if sinks is not None:  # (nh,) -> (nkv, g·Tq): each query row its head's sink
        sinks = sinks.view(nkv, groups, 1).expand(nkv, groups, Tq).reshape(nkv, groups * Tq)
    return q, mask, sinks


def attend(q, k, v, mask, causal: bool, scale: float | None, cap: float | None,
           sinks: torch.Tensor | None = None) -> torch.Tensor:
    """(B, nh, Tq, hs) queries against (B, nkv, Tk, hs) keys and (B, nkv, Tk, hv) values -> (B, nh, Tq, hv).
    A mask, when given, is additive and already holds the causal part (ALiBi, T5's bias, a cached step's
    (B, 1|nh, Tq, S) mask). ``sinks`` (nh,): one more logit per head in each softmax, attached to no value
    (gpt-oss, modeling_gpt_oss.py). With a mask and grouped K/V heads, the groups are folded into the
    query rows (``_fold_groups``) in a cached step (its mask 4-D; the causal flag then adds nothing)."""
    gqa = k.shape[1] != q.shape[1]
    if gqa and mask is not None and mask.dim() == 4:
        B, nh, Tq, _ = q.shape
        q, mask, folded = _fold_groups(q, mask, sinks, nh // k.shape[1])
        y = _attend(q, k, v, mask, scale, cap, folded, sinks is not None)  # (B, nkv, g·Tq, hv)
        return y.reshape(B, nh, Tq, y.shape[-1])
    return _attend_plain(q, k, v, mask, causal, scale, cap, sinks, gqa)


def _attend(q, k, v, mask, scale, cap, sinks, has_sinks: bool) -> torch.Tensor:
    """Folded heads (``_fold_groups``): sinks (nkv, Tq') already per row."""
    if cap is None and not has_sinks:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)
    scores = softcap(q @ k.mT * (q.shape[-1] ** -0.5 if scale is None else scale), cap)  # (B, nkv, Tq', Tk)
    scores = scores + mask
    if not has_sinks:
        return scores.softmax(dim=-1) @ v
    sink = sinks.to(scores.dtype)[None, :, :, None].expand(*scores.shape[:-1], 1)  # (B, nkv, Tq', 1)
    return torch.cat([scores, sink], dim=-1).softmax(dim=-1)[..., :-1] @ v


def _attend_plain(q, k, v, mask, causal: bool, scale, cap, sinks, gqa: bool) -> torch.Tensor:
    if cap is None and sinks is None:
        return F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, is_causal=causal and mask is None, scale=scale, enable_gqa=gqa
        )
    if gqa:  # query head i reads key/value head i // group, as SDPA's enable_gqa and HF's repeat_kv do
        group = q.shape[1] // k.shape[1]
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    scores = softcap(q @ k.mT * (q.shape[-1] ** -0.5 if scale is None else scale), cap)  # (B, nh, Tq, Tk)
    if mask is not None:
        scores = scores + mask
    elif causal:
        Tq, Tk = scores.shape[-2:]
        allowed = torch.ones(Tq, Tk, dtype=torch.bool, device=q.device).tril(Tk - Tq)
        scores = scores.masked_fill(~allowed, float("-inf"))
    if sinks is None:
        return scores.softmax(dim=-1) @ v
    sink = sinks.to(scores.dtype)[None, :, None, None].expand(*scores.shape[:-1], 1)  # (B, nh, Tq, 1)
    probs = torch.cat([scores, sink], dim=-1).softmax(dim=-1)[..., :-1]  # the sink's share goes nowhere
    return probs @ v


class Attention(MixerModule):
    """Self-attention as its ``Attention`` component describes it: causal in a decoder, bidirectional in
    an encoder; grouped K/V heads; RoPE (``rope_key``: its base and rotated channels, read from the
    stack's tables) or none (a NoPE layer); a sliding window (the stack's mask). Optional: a norm over
    each head's Q and K before RoPE (Qwen3, modeling_qwen3.py: q_norm, k_norm), a scale other than
    1/sqrt(d_head), soft-capped scores, sinks, V heads of their own width."""

    def __init__(self, spec: AttentionSpec):
        super().__init__()
        self.spec = spec
        self.n_head, self.n_kv_head, self.head_dim = spec.n_head, spec.n_kv_head, spec.head_dim
        self.q_dim, self.kv_dim, self.v_dim = spec.q_width, spec.k_width, spec.v_width
        self.causal, self.scale, self.cap, self.window = spec.causal, spec.scale, spec.softcap, spec.window
        self.rope_key = None if spec.rope_theta is None else rope_key(spec.rope_theta, spec.rope_dim, spec.rope_scaling)
        self.q_rows, self.gated = spec.q_rows, spec.output_gate  # Q's rows: per head [q | gate] when gated
        self.v_from_k, self.v_rows = spec.v_from_k, 0 if spec.v_from_k else self.v_dim  # Gemma 4: V from K's rows
        self.v_norm = make_norm(spec.v_norm) if spec.v_norm is not None else None
        self.qkv = Linear(spec.d_model, self.q_rows + self.kv_dim + self.v_rows, bias=spec.qkv_bias)  # [Q | K | V]
        self.out = Linear(spec.out_width, spec.d_model, bias=spec.o_bias)
        self.q_norm = self.k_norm = None
        if spec.qk_norm is not None and spec.qk_norm_heads:  # Cohere: weights per head
            self.q_norm, self.k_norm = HeadNorm(spec.qk_norm, spec.n_head), HeadNorm(spec.qk_norm, spec.n_kv_head)
        elif spec.qk_norm is not None:
            q_norm, k_norm = spec.qk_norms()
            self.q_norm, self.k_norm = make_norm(q_norm), make_norm(k_norm)
        self.qk_norm_whole, self.qk_norm_after_rope = spec.qk_norm_whole, spec.qk_norm_after_rope
        self.temperature = spec.temperature
        self.sinks = nn.Parameter(torch.empty(spec.n_head)) if spec.sinks else None
        # Q and K rotated where the projection wrote them (out of autograd), so that K stays next to V and
        # the state writes both at once (AttentionState, stacked): nothing may change Q or K apart from the
        # rotation (a norm, a gate between Q's heads), and K and V must be of one width
        self.in_place = (not self.gated and self.q_norm is None and spec.k_width == spec.v_width
                         and not self.v_from_k and self.v_norm is None)  # Gemma 4's V: K's rows, or normed apart

    adds_residual = True  # forward takes the stream it adds into (add_projection)

    def forward(self, x: torch.Tensor, rope=None, mask: torch.Tensor | None = None, store=None,
                residual: torch.Tensor | None = None) -> torch.Tensor:
        """x: (B, T, d). ``store``, when decoding, writes the new K and V into the cache and returns the
        keys and values to attend to (tfcalc.model.attention_state.AttentionState). ``residual``: the stream
        the output is added to (add_projection), the sum returned."""
        B, T, _ = x.shape
        qkv = self.qkv(x)
        q, k, v = qkv.split([self.q_rows, self.kv_dim, self.v_rows], dim=-1)
        in_place = self.in_place and not qkv.requires_grad
        if self.v_from_k:  # Gemma 4: V is K's projection, before K's norm and rotation
            v = k
        if self.v_norm is not None:  # over each V head, (B, T, nkv, hv)
            v = self.v_norm(v.view(B, T, self.n_kv_head, -1)).flatten(2)
        if self.gated:  # Qwen3NextAttention: each head's h queries, then its h gates
            q, gate = q.view(B, T, self.n_head, 2 * self.head_dim).chunk(2, dim=-1)
            q, gate = q.flatten(2), gate.flatten(2)  # (B, T, nh·hs) each
        if not self.qk_norm_after_rope:
            q, k = self._qk_norm(q, k)
        cos, sin, q_scale = (*rope, None)[:3] if rope is not None else (None, None, None)
        if cos is not None:  # on (B, T, nh, hs) views: see apply_rope
            cos, sin = cos[..., None, :], sin[..., None, :]  # (T, 1, r), or (B, T, 1, r) at per-row positions
            if in_place and residual is not None and fused.enabled(qkv):  # a runtime step on CUDA: one kernel
                qkv = fused.rotate_heads.fused(qkv.view(B, T, -1, self.head_dim), cos, sin,
                                               self.n_head + self.n_kv_head).flatten(2)
                q, k = qkv[..., :self.q_dim], qkv[..., self.q_dim:self.q_dim + self.kv_dim]
            else:
                q, k = self._rotate(qkv, q, k, cos, sin, in_place)
        if self.qk_norm_after_rope:  # Llama 4: the rotated Q and K
            q, k = self._qk_norm(q, k)
        if q_scale is not None:  # Llama 4's temperature on NoPE layers: (T,) or (B, T) factors, one per position
            q = q * q_scale[..., None].to(q.dtype)
        q = _split_heads(q, self.n_head)  # (B, nh, T, hs)
        if store is not None and in_place:  # K (rotated in place) and V side by side: one write (AttentionState)
            k, v = store(qkv[..., self.q_dim:].view(B, T, 2 * self.n_kv_head, self.head_dim).transpose(1, 2))
        else:
            k, v = _split_heads(k, self.n_kv_head), _split_heads(v, self.n_kv_head)  # (B, nkv, T, hs|hv)
            if store is not None:
                k, v = store(k, v)  # (B, nkv, S, hs): the state's span a cached step attends to, under its mask
        if self.spec.kv_share == "source":  # later layers attend over these too (tfcalc.model.kv_shared)
            self.shared_kv = (k, v)
        # A single query needs no causal mask: every key it is given is in its past (and SDPA's is_causal
        # would align it with the first key, not the last).
        y = merge_heads(attend(q, k, v, mask, self.causal and T > 1, self.scale, self.cap, self.sinks))  # (B, T, o)
        return add_projection(residual, self.out, y * torch.sigmoid(gate) if self.gated else y)

    def fused_rows(self) -> dict[str, int]:
        """The rows of the fused [Q | K | V] projection (tfcalc.measure.params splits it by them)."""
        return {"q": self.q_rows, "k": self.kv_dim} | ({} if self.v_from_k else {"v": self.v_dim})

    @classmethod
    def tp_refusal(cls, spec: AttentionSpec) -> str | None:
        if spec.sinks:
            return "attention sinks under TP are planned, not run"
        if spec.qk_norm_heads:
            return "Q/K norms with weights per head (Cohere) under TP are planned, not run"
        return None

    def tp_localize(self, tp: int) -> None:
        """Megatron's split by heads: [Q | K | V] rows interleaved per rank, the head counts and widths local."""
        interleave(self.qkv, [self.q_rows, self.kv_dim] + ([] if self.v_from_k else [self.v_dim]), tp)
        self.n_head, self.n_kv_head = self.n_head // tp, self.n_kv_head // tp
        self.q_dim, self.kv_dim, self.v_dim = self.q_dim // tp, self.kv_dim // tp, self.v_dim // tp
        self.v_rows //= tp
        self.q_rows //= tp

    def tp_plan(self, seq) -> dict:
        from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

        return {"qkv": ColwiseParallel(), "out": RowwiseParallel(output_layouts=seq)}

    def new_state(self, batch: int, max_tokens: int, device, dtype: torch.dtype, spare: int = 0) -> AttentionState:
        """This layer's generation state, allocated once (tfcalc.model.attention_state): K and V stacked in
        one buffer where a step writes them joined (``in_place``)."""
        return AttentionState(self.spec, batch, max_tokens, device, dtype, spare, stacked=self.in_place)

    def _rotate(self, qkv: torch.Tensor, q: torch.Tensor, k: torch.Tensor, cos, sin, in_place: bool):
        """RoPE on Q and K, (B, T, nh*hs) and (B, T, nkv*hs), split from ``qkv``; ``sin`` signed (positions.
        rotate). Where they are still the projection's output (no norm before the rotation, no gate between
        Q's heads), one call rotates their adjacent heads together: a decode step's rotation is three small
        kernels whatever the width, so one call instead of two saves about 7 us a layer on an H100
        (benchmarks/decode_profile.py); ``in_place`` (out of autograd) it writes them back where they were,
        next to V. Under autograd, apart: the rotated Q and K would otherwise be views of one tensor, which
        attention copies and saves again, and a training step's saved bytes are counted for two tensors
        (tfcalc.count)."""
        B, T, _ = q.shape
        nh, nkv, hs = self.n_head, self.n_kv_head, self.head_dim
        if not (qkv.requires_grad or self.gated) and (self.q_norm is None or self.qk_norm_after_rope):
            qk = qkv[..., :self.q_dim + self.kv_dim].view(B, T, nh + nkv, hs)
            qk = rotate(qk, cos, sin, in_place)
            return qk[:, :, :nh].flatten(2), qk[:, :, nh:].flatten(2)
        return (rotate(q.view(B, T, nh, hs), cos, sin).flatten(2), rotate(k.view(B, T, nkv, hs), cos, sin).flatten(2))

    def _qk_norm(self, q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self.q_norm is None:
            return q, k
        if self.qk_norm_whole:  # OLMo 2: over the whole projections
            return self.q_norm(q), self.k_norm(k)
        # on (B, T, nh, hs), as Qwen3 does: the norm output keeps the (B, T, ...) layout, so SDPA's output
        # does too and merging the heads stays a view (no copy)
        B, T, _ = q.shape
        return (self.q_norm(q.view(B, T, self.n_head, self.head_dim)).flatten(2),
                self.k_norm(k.view(B, T, self.n_kv_head, self.head_dim)).flatten(2))


class CrossAttention(MixerModule):
    """Vaswani et al. 2017, sec. 3.2.3: queries from the decoder, keys and values from the encoder output
    (one fused Linear, rows [K | V]) or, in a decoder-only stack, from states given to forward. No mask
    (every target position sees the whole source), no positions."""

    def __init__(self, spec: AttentionSpec):
        super().__init__()
        if spec.qk_norm is not None or spec.sinks:
            raise InputError("Q/K norms and sinks in cross-attention are not built: no model in use has them")
        self.n_head, self.n_kv_head, self.kv_dim, self.v_dim = spec.n_head, spec.n_kv_head, spec.k_width, spec.v_width
        self.scale, self.cap = spec.scale, spec.softcap
        self.q = Linear(spec.d_model, spec.q_width, bias=spec.qkv_bias)
        self.kv = Linear(spec.d_model, self.kv_dim + self.v_dim, bias=spec.qkv_bias)  # [K | V]
        self.out = Linear(spec.out_width, spec.d_model, bias=spec.o_bias)

    def fused_rows(self) -> dict[str, int]:
        """The rows of the fused [K | V] projection."""
        return {"k": self.kv_dim, "v": self.v_dim}

    @classmethod
    def tp_refusal(cls, spec: AttentionSpec) -> str | None:
        return None

    def tp_localize(self, tp: int) -> None:
        interleave(self.kv, [self.kv_dim, self.v_dim], tp)
        self.n_head, self.n_kv_head = self.n_head // tp, self.n_kv_head // tp
        self.kv_dim, self.v_dim = self.kv_dim // tp, self.v_dim // tp

    def tp_plan(self, seq) -> dict:
        from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

        return {"q": ColwiseParallel(), "kv": ColwiseParallel(), "out": RowwiseParallel(output_layouts=seq)}

    def project(self, memory: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(B, S, d) encoder output -> K and V, (B, nkv, S, hs|hv) each: computed once per source when decoding."""
        k, v = self.kv(memory).split([self.kv_dim, self.v_dim], dim=-1)
        return _split_heads(k, self.n_kv_head), _split_heads(v, self.n_kv_head)

    def forward(self, x: torch.Tensor, memory: torch.Tensor | None, kv=None) -> torch.Tensor:
        """x: (B, T, d) decoder stream; memory: (B, S, d) encoder output, or kv: its cached project()."""
        q = _split_heads(self.q(x), self.n_head)  # (B, nh, T, hs)
        k, v = kv if kv is not None else self.project(memory)  # (B, nkv, S, hs|hv)
        y = attend(q, k, v, None, False, self.scale, self.cap)  # (B, nh, T, hv)
        return self.out(merge_heads(y))
