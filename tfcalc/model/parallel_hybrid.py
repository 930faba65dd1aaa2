"""The torch module of attention and Mamba2 side by side in one mixer slot (tfcalc.architecture.parallel_hybrid;
Falcon-H1's FalconH1DecoderLayer, modeling_falcon_h1.py). Its generation state, the attention's K and V (positions,
a layout, the step's mask) beside the Mamba2 part's fixed state, and the protocol's forwarding to both parts are
tfcalc.model.attention_ssm's, shared with Zamba2."""

from __future__ import annotations

import torch

from tfcalc.model.attention_ssm import AttentionSsmMixer
from tfcalc.model.layers import Attention
from tfcalc.model.mixers import build_mixer


class ParallelMixersModule(AttentionSsmMixer, Attention):
    """x -> ssm_out·mamba(ssm_in·x) + attn_out·attention(attn_in·x), each multiplier skipped where None. The
    attention is this module itself (tfcalc.model.layers.Attention: its ``qkv`` and ``out`` where every attention
    keeps them, so the breakdown and the checkpoint names read them as any layer's), the Mamba2 mixer its ``ssm``."""

    # no adds_residual: two outputs summed, the stream is added by the block (block._forward_adds_residual)

    def __init__(self, spec):
        super().__init__(spec.attention)
        self.parallel = spec
        self.ssm = build_mixer(spec.ssm)

    @classmethod
    def tp_refusal(cls, spec) -> str | None:
        return "attention beside Mamba2 under TP is planned, not run"

    def attention_state(self, batch: int, max_tokens: int, device, dtype):
        return Attention.new_state(self, batch, max_tokens, device, dtype)  # this module is the attention

    def forward(self, x: torch.Tensor, rope=None, mask=None, store=None) -> torch.Tensor:
        spec = self.parallel
        attn_store, ssm_store = self.split_store(store)

        def scaled(t: torch.Tensor, m: float | None) -> torch.Tensor:
            return t if m is None else t * m

        y = scaled(self.ssm(scaled(x, spec.ssm_in), None, None, store=ssm_store), spec.ssm_out)  # (B, T, d)
        a = scaled(super().forward(scaled(x, spec.attn_in), rope, mask, store=attn_store), spec.attn_out)  # (B, T, d)
        return y + a
