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
