"""A hybrid's layers under tensor parallelism in `plan`: what one rank of a short convolution keeps for the
backward pass. Reference: saved_tensors_hooks on one rank's module written here by hand as Megatron splits it
(in_proj column-parallel: the rank's d/t channels of B, C and x'; the depthwise convolution over those channels;
out_proj row-parallel), not tfcalc's module."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tfcalc.config import ModelConfig
from tfcalc.count.model.activations import activations
from tfcalc.count.training.rank_activations import share
from tfcalc.workload import Layout, Workload

D, K, B, T = 32, 3, 2, 7
TINY = dict(n_layer=2, d_model=D, n_head=4, n_kv_head=2, vocab_size=61, max_seq_len=64, pos_encoding="rope",
            norm="rmsnorm", activation="silu", gated_ffn=True, attn_bias=False, ffn_bias=False, d_ff=48,
            layer_pattern="conv*2", conv_kernel=K)


def _rank_saved_bytes(tp: int) -> int:
    """fp32 bytes autograd keeps in one rank's short convolution over (B, T) tokens, the input and weights aside."""
    c = D // tp
    x = torch.randn(B, T, D, requires_grad=True)
    w_in = torch.randn(3 * c, D, requires_grad=True)  # the rank's rows of [B | C | x']
    w_conv = torch.randn(c, 1, K, requires_grad=True)
    w_out = torch.randn(D, c, requires_grad=True)  # the rank's columns of out_proj
    kept: dict[int, int] = {}
    params = {p.untyped_storage().data_ptr() for p in (x, w_in, w_conv, w_out)}

    def pack(t):
        if t.untyped_storage().data_ptr() not in params:
            kept[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        bg, cg, xs = F.linear(x, w_in).transpose(1, 2).chunk(3, dim=1)  # (B, c, T) each
        u = bg * xs
        z = F.conv1d(F.pad(u, (K - 1, 0)), w_conv, groups=c)  # (B, c, T)
        y = cg * z
        F.linear(y.transpose(1, 2).contiguous(), w_out).sum().backward()
    return sum(kept.values())


@pytest.mark.parametrize("tp", [1, 2, 4])
def test_a_conv_rank_keeps_its_channels_share(tp):
    """Every saved term of the short convolution (in_proj's output, u and z, out_proj's input) is per channel, so
    a rank keeps 1/t of each: the count's terms through the plan's per-rank share equal the hand-split module's
    saved bytes, but for u's left padding (K - 1 columns a sequence and channel, counted nowhere per token)."""
    cfg = ModelConfig(**TINY)
    acts = activations(cfg, Workload(batch=B, seq=T, dtype="fp32"), "flash")
    block = next(b for b, _ in cfg.architecture.output.kinds())
    terms = {k: B * T * v for k, v in block.mixer.saved(B, T, 4, "flash", False).items()}
    layout = Layout(tp=tp, seq=T, global_batch=B, micro_batch=B, dtype="fp32")
    rank = sum(share(k, v, acts, layout, False) for k, v in terms.items())
    assert rank + B * (D // tp) * (K - 1) * 4 == _rank_saved_bytes(tp)


def test_a_hybrids_state_per_gpu_splits_each_mixer_by_its_own_heads():
    """infer --tp 4 on Qwen3-Next-80B-A3B, by hand (serving_tp's step 2, vLLM's rule): the 12 attention layers'
    2 KV heads are each held by 2 of the 4 GPUs, so a GPU keeps and reads 1/2 of their K/V; the 36 DeltaNet layers'
    16 key heads split 4 ways, 1/4 of their fixed state (read and written back). One kv_share for the whole state
    (the first layer's: a DeltaNet's 1/4) put half the K/V a GPU holds."""
    from fractions import Fraction

    from tfcalc.count.model.quant import plain
    from tfcalc.count.serving.roofline import decode_step
    from tfcalc.count.serving.serving_tp import kv_replicated, kv_share, shard_step, state_bytes_per_gpu
    from tfcalc.presets import load

    cfg = load("qwen3-next-80b-a3b")
    kv_per_token, fixed = 12 * 2 * 2 * 256 * 2, 36 * (8192 * 4 * 2 + 32 * 128 * 128 * 4)
    w = Workload(batch=3, seq=4096, gen=2, dtype="bf16", kv_dtype="bf16")
    assert state_bytes_per_gpu(cfg, w, 4) == 3 * (4098 * kv_per_token // 2 + fixed // 4)
    assert state_bytes_per_gpu(cfg, w, 1) == 3 * (4098 * kv_per_token + fixed)
    # the note's "each KV head on 2 GPUs" and the K and V projections' share are the attention's, not the DeltaNet's
    assert (kv_replicated(cfg, 4), kv_share(cfg, 4), kv_share(cfg, 2)) == (2, Fraction(1, 2), Fraction(1, 2))
    step = shard_step(decode_step(cfg, 3, 4097, plain("bf16"), "bf16"), cfg, 4, 0)
    # K/V read over the context, half per GPU; the fixed state read once and written once, a quarter
    assert step.kv_bytes == 3 * (4097 * kv_per_token // 2 + 2 * fixed // 4)


def test_a_dense_models_state_per_gpu_is_unchanged():
    """Llama 2 70B (8 KV heads) at T = 4 and 16: the state per GPU is the whole times kv_share, as before."""
    from fractions import Fraction

    from tfcalc.count.model.memory import kv_cache_bytes
    from tfcalc.count.serving.serving_tp import kv_share, state_bytes_per_gpu
    from tfcalc.presets import load

    cfg = load("llama2-70b")
    w = Workload(batch=2, seq=1000, dtype="bf16")
    for tp, f in ((4, Fraction(1, 4)), (16, Fraction(1, 8))):
        assert kv_share(cfg, tp) == f
        assert state_bytes_per_gpu(cfg, w, tp) == kv_cache_bytes(cfg, w) * f
