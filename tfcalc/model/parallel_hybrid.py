"""The torch module of attention and Mamba2 side by side in one mixer slot (tfcalc.architecture.parallel_hybrid;
Falcon-H1's FalconH1DecoderLayer, modeling_falcon_h1.py), and its generation state: the attention's K and V
(positions, a layout, the step's mask) and the Mamba2 part's fixed state, each allocated by its own module and
driven through the state protocol of tfcalc.model.cache as one layer's state."""

from __future__ import annotations

import torch

from tfcalc.model.layers import Attention
from tfcalc.model.mixers import build_mixer


class ParallelState:
    """The attention's state and the Mamba2 part's, one layer's: the attention's layout and slots (the cache's
    positions and the step's mask are its), both parts' tensors (K and V first), the Mamba2 part's carried;
    no rewind (the recurrent part cannot)."""

    rewindable = False

    def __init__(self, attn, ssm):
        self.attn, self.ssm = attn, ssm
        self.layout = attn.layout
        self.size, self.window, self.chunk = attn.size, attn.window, attn.chunk

    @property
    def tensors(self) -> list[torch.Tensor]:
        return list(self.attn.tensors) + list(self.ssm.tensors)

    @property
    def carried(self) -> tuple[torch.Tensor, ...]:
        return tuple(self.attn.carried) + tuple(self.ssm.carried)

    @property
    def nbytes(self) -> int:
        return self.attn.nbytes + self.ssm.nbytes

    def prefill(self, slots: dict) -> tuple:
        return self.attn.prefill(slots), self.ssm.prefill(slots)

    def step(self, slots: dict, span: int) -> tuple:
        return self.attn.step(slots, span), self.ssm.step(slots, span)

    def rows(self, rows: slice) -> ParallelState:
        return ParallelState(self.attn.rows(rows), self.ssm.rows(rows))


class ParallelMixersModule(Attention):
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

    def new_state(self, batch: int, max_tokens: int, device, dtype, spare: int = 0) -> ParallelState:
        return ParallelState(super().new_state(batch, max_tokens, device, dtype),
                             self.ssm.new_state(batch, max_tokens, device, dtype))

    def forward(self, x: torch.Tensor, rope=None, mask=None, store=None) -> torch.Tensor:
        spec = self.parallel
        attn_store, ssm_store = (None, None) if store is None else store

        def scaled(t: torch.Tensor, m: float | None) -> torch.Tensor:
            return t if m is None else t * m

        y = scaled(self.ssm(scaled(x, spec.ssm_in), None, None, store=ssm_store), spec.ssm_out)  # (B, T, d)
        a = scaled(super().forward(scaled(x, spec.attn_in), rope, mask, store=attn_store), spec.attn_out)  # (B, T, d)
        return y + a
