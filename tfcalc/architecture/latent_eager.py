"""Latent attention's eager work (tfcalc.architecture.latent, ``LatentAttention.eager_ops``): the ops tfcalc's
module runs beside its matmuls and attention kernel, as tfcalc.count.perf.eager prices them; a decode step's in
the absorbed form (tests/model/test_latent_step_traffic.py records every aten op of the real step), a training
step's in the naive one. Pure Python."""

from __future__ import annotations

from typing import Any

from tfcalc.architecture.mixer import EagerOp


def _scale_ops(spec: Any, tokens: int, backward: bool) -> list[EagerOp]:
    """``lora_scale``'s two products as eager work: each reads and writes its elements, one kernel (and as
    many back)."""
    if not spec.lora_scale:
        return []
    n = 2 * tokens * (spec.q_width + spec.kv_lora_rank)
    return [EagerOp("moves", "qkv", n, n if backward else 0, 2, 2 if backward else 0)]


def _latent_norms(spec: Any, tokens: int) -> list[EagerOp]:
    """The norms on the compressed KV latent (c) and, where Q is compressed, on c_q: a step's and training's."""
    c, q = spec.kv_lora_rank, spec.q_lora_rank
    out = [EagerOp("norm", "norms", tokens * c, norm=spec.latent_norm(c))]
    if q is not None:
        out.append(EagerOp("norm", "norms", tokens * q, norm=spec.latent_norm(q)))
    return out


def step_ops(spec: Any, tokens: int) -> list[EagerOp]:
    """One absorbed decode step's eager ops beside its matmuls and attention kernel (tfcalc.count.perf.eager
    prices them; tests/model/test_latent_step_traffic.py sums the bytes of every aten op of the real step
    under a TorchDispatchMode): the latent norms (c, c_q); the de-interleaving cats (one for Q, one for K:
    2 per rotated element) and RoPE over Q's H heads and the one K head, whose products read each row's cos
    and sin (positions per row in a step: 4·h_r per token over Q and K); the new row [c | k_r] joined (a
    cat: 2·(c + h_r)) and scattered into the state (its source read, its rows written: 2·(c + h_r)); the
    queries [q̃ | q_r] joined (2·H·(c + h_r)); the output heads copied for W_o where B·T > 1 (2·H·h_v)."""
    H, hr, c, hv = spec.n_head, spec.qk_rope_head_dim, spec.kv_lora_rank, spec.v_head_dim
    out = _latent_norms(spec, tokens)
    rotated = tokens * (H + 1) * hr
    if spec.rope_theta is not None:
        out.append(EagerOp("rope", "rope", rotated))
        out.append(EagerOp("moves", "rope", 4 * tokens * hr))  # the cos and sin rows, read for Q and for K
        if spec.interleave:
            out.append(EagerOp("moves", "rope", 2 * rotated, 0, 2, 0))
    gathered = 2 * tokens * H * hv if tokens > 1 else 0
    return out + _scale_ops(spec, tokens, False) + [EagerOp("moves", "state", 4 * tokens * (c + hr), 0, 2, 0),
                  EagerOp("moves", "qkv", 2 * tokens * H * (c + hr) + gathered, 0, 1 + int(tokens > 1), 0)]


def train_ops(spec: Any, tokens: int) -> list[EagerOp]:
    """tfcalc.model.latent's eager work (tfcalc.count.perf.eager, 6): the norms on the compressed KV latent
    (c_kv) and Q (c_q); RoPE on the H query heads' and the one shared key's h_r channels, de-interleaved
    (a cat forward, two slice_backwards and their sum back); the cats of [k_n | k_r expanded] (its
    backward sums the H copies of k_r) and [q_n | q_r]; back, the cats the splits of Q, of W_kvb's
    [k_n | v] and of W_kva's [latent | k_r] leave. Its biases' gradient sums are not counted."""
    H, hn, hr, hv, c = spec.n_head, spec.qk_nope_head_dim, spec.qk_rope_head_dim, spec.v_head_dim, spec.kv_lora_rank
    out = _latent_norms(spec, tokens)
    rotated = tokens * (H + 1) * hr
    if spec.rope_theta is not None:
        out.append(EagerOp("rope", "rope", rotated))
        if spec.interleave:
            out.append(EagerOp("moves", "rope", 2 * rotated, 6 * rotated, 2, 6))
    head = H * (hn + hr)
    return out + _scale_ops(spec, tokens, True) + [
        EagerOp("moves", "qkv", tokens * (H * hn + hr + head), tokens * (H * hr + hr), 1, 1),
                  EagerOp("moves", "qkv", 2 * tokens * head, 0, 1, 0),
                  EagerOp("moves", "qkv", 0, 2 * tokens * (head + H * (hn + hv) + c + hr), 0, 3)]
