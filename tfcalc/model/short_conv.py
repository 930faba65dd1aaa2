"""The short gated convolution's torch module and its decode state (the component and its conventions:
tfcalc.architecture.short_conv; transformers' Lfm2ShortConv, modeling_lfm2.py, computes the same function).

Parameters as transformers names them, so a checkpoint maps one to one: ``in_proj`` (Linear d -> 3d, rows
[B | C | x']), ``conv.weight`` (d, 1, K) and ``conv.bias`` (nn.Conv1d's layout, held, never called as a
module: its FLOPs are the mixer's own position mixing, tfcalc.measure.flops), ``out_proj`` (Linear d -> d).

A prompt runs the convolution over the whole sequence, left-padded with K - 1 zeros (T outputs, no more),
and leaves the state holding its last K inputs u (zeros where the prompt is shorter). A step of T tokens
(one, in decode) reads the state's last K - 1 columns beside its own u, runs the same convolution over those
K - 1 + T columns (T outputs), and keeps the last K: fixed shapes, written in place, nothing read back to the
host (tests/model/test_short_conv.py records it).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from tfcalc.model.fixed_state import FixedState
from tfcalc.model.layers import Linear
from tfcalc.model.mixers import MixerModule


class ConvKernel(nn.Module):
    """The depthwise kernel (d, 1, K) and its bias (d,), named as nn.Conv1d names them (``conv.weight``)."""

    def __init__(self, d: int, k: int, bias: bool):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(d, 1, k))
        self.bias = nn.Parameter(torch.empty(d)) if bias else None


class ConvState(FixedState):
    """The last K inputs u of each channel, (B, d, K), allocated once (the component's ``state``); no
    positions (layout None), rewritten whole by every step (carried), never rewound. The module's forward
    calls its store with u (B, d, T): a prompt's last K are kept (None returned: the module convolves the
    prompt itself); a step gets the K - 1 + T columns its outputs read (``FixedState.shift``)."""

    names = ("s",)

    def __init__(self, spec, batch: int, device, dtype: torch.dtype):
        (t,) = spec.state()
        super().__init__(batch, device, (t.shape, dtype))  # (B, d, K)

    def __call__(self, u: torch.Tensor) -> torch.Tensor | None:
        if self.decoding:
            return self.shift(u)
        self.keep(u)
        return None


class ShortConvModule(MixerModule):
    def __init__(self, spec):
        super().__init__()
        self.spec = spec
        d, k = spec.d_model, spec.kernel_size
        self.in_proj = Linear(d, 3 * d, bias=spec.bias)
        self.conv = ConvKernel(d, k, spec.bias)
        self.out_proj = Linear(d, d, bias=spec.bias)

    def new_state(self, batch: int, max_tokens: int, device, dtype) -> ConvState:
        return ConvState(self.spec, batch, device, dtype)

    def forward(self, x: torch.Tensor, rope=None, mask=None, store=None) -> torch.Tensor:
        d, k = self.spec.d_model, self.spec.kernel_size
        b, c, xs = self.in_proj(x).transpose(1, 2).chunk(3, dim=1)  # (B, d, T) each
        u = b * xs  # the input gate
        window = store(u) if store is not None else None
        if window is None:  # the whole sequence, K - 1 zeros before position 0
            window = F.pad(u, (k - 1, 0))  # (B, d, K - 1 + T)
        z = F.conv1d(window.to(self.conv.weight.dtype), self.conv.weight, self.conv.bias, groups=d)  # (B, d, T)
        y = c * z.to(c.dtype)  # the output gate
        return self.out_proj(y.transpose(1, 2).contiguous())  # (B, T, d)
