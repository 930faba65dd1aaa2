"""Lightning attention's torch module and its fixed-size generation state (the component and its derivation:
tfcalc.architecture.lightning; transformers' reference: modeling_minimax.py, MiniMaxLightningAttention).

Parameters carry transformers' names (``qkv_proj``, ``output_gate``, ``norm``, ``out_proj``), so a checkpoint's
tensors load unchanged. transformers keeps the per-head decays as buffers (``slope_rate``, ``query_decay``,
``key_decay``, ``diagonal_decay``), functions of the layer's index and the model's depth alone; here they are
computed on the device from those two numbers, which the stack tells the module (``at_layer``), so a checkpoint's
copies are not read and no host value enters a step. A forward over T tokens runs the block form (blocks of b,
the last one shorter, never padded) as transformers' does; a decode step of one token the recurrent form, on
the state in place. Shapes: (B, H, T, d) for the per-head streams, (B, H, d, d) for the state S.

The state (``LightningState``, tfcalc.model.fixed_state): S in the model's dtype, allocated once; no positions,
no rewinding. A prompt starts from zero and leaves S as the prompt's end left it; a step continues from it and
writes it back in place (``carried``, put back around a CUDA graph's capture). Nothing reads a value back.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from tfcalc.architecture.lightning import NORM_EPS
from tfcalc.model.fixed_state import FixedState
from tfcalc.model.layers import Linear
from tfcalc.model.mixers import MixerModule


def slopes(heads: int, layer: int, layers: int, device, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """s per head (H, 1, 1) as get_slope_rate computes it: (2^(-8/H))^(h+1) · (1 - l / (L - 1 + 1e-5) + 1e-5); in
    fp32 as transformers' buffers are made (fp64 for an fp64 model: its block and step forms then agree to fp64)."""
    base = 1 / (2 ** (8 / heads))
    factor = 1 - layer / (layers - 1 + 1e-5) + 1e-5
    return (base ** torch.arange(1, heads + 1, device=device, dtype=dtype) * factor)[:, None, None]


def decays(s: torch.Tensor, c: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """For a block of c tokens (decay_factors): Q's λ^(i+1) (H, c, 1), K's λ^(c-1-j) (H, c, 1), D (H, c, c) with
    λ^(i-j) on and below the diagonal and 0 above, and the block's λ^c (H, 1, 1)."""
    pos = torch.arange(1, c + 1, device=s.device)
    q = torch.exp(-s * pos[:, None])
    k = torch.exp(-s * (c - pos[:, None]))
    gap = s * (pos[:, None] - pos[None, :])  # (H, c, c)
    d = torch.exp(torch.where(gap >= 0, -gap, float("-inf")))
    return q, k, d, torch.exp(-s * c)


def blocks(q, k, v, s: torch.Tensor, block: int, state: torch.Tensor | None, final: bool = True):
    """The decayed linear attention over a sequence, block by block. q, k, v (B, H, T, d); ``state`` (B, H, d, d)
    or None (zero). Returns the output (B, H, T, d) and the final state, in q's dtype. ``final`` false (no store
    keeps the state): the last block's update runs outside autograd, whose nodes would be freed as the forward
    returns (as tfcalc.model.gated_deltanet.chunked does)."""
    B, H, T, d = q.shape
    S = q.new_zeros(B, H, d, d) if state is None else state.to(q.dtype)
    out, cached = [], {}
    grad, n = torch.is_grad_enabled(), -(-T // block)
    # split, not sliced block by block: a split's backward is one concatenation of the blocks' gradients, where each
    # slice's would write a zero tensor of all T positions (a backward quadratic in T)
    for i, (qb, kb, vb) in enumerate(zip(*(t.split(block, dim=2) for t in (q, k, v)), strict=True)):  # (B, H, c, d)
        c = qb.shape[2]
        if c not in cached:  # at most two lengths: the whole block and the last one
            cached[c] = tuple(t.to(q.dtype) for t in decays(s, c))
        qd, kd, diag, whole = cached[c]
        intra = ((qb @ kb.mT) * diag) @ vb
        out.append((qb * qd) @ S + intra)
        with torch.set_grad_enabled(grad and (final or i < n - 1)):
            S = S * whole + (kb * kd).mT @ vb
    return torch.cat(out, dim=2), S


class LightningState(FixedState):
    """S (B, H, d, d) in the model's dtype (module docstring)."""

    names = ("s",)

    def __init__(self, spec, batch: int, device, dtype: torch.dtype):
        (rec,) = spec.state()
        super().__init__(batch, device, (rec.shape, dtype))


class LightningModule(MixerModule):
    """tfcalc.architecture.lightning.Lightning as a torch module (module docstring)."""

    def __init__(self, spec):
        super().__init__()
        self.spec = spec
        self.h, self.d = spec.n_head, spec.head_dim
        w = spec.width
        self.qkv_proj = Linear(spec.d_model, 3 * w, bias=False)
        self.output_gate = Linear(spec.d_model, w, bias=False)
        self.norm = nn.RMSNorm(w, eps=NORM_EPS)
        self.out_proj = Linear(w, spec.d_model, bias=False)
        self.layer, self.layers = 0, 1
        self._slopes: dict = {}  # (device, dtype, inference mode) -> (s, λ): made once, not per step

    def at_layer(self, index: int, count: int) -> None:
        self.layer, self.layers = index, count
        self._slopes = {}

    def slopes(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(s, λ = exp(-s)) per head, (H, 1, 1), for x's device, made on the first call there (a decode step's
        warm-up, before a CUDA graph's capture) and kept: a step launches no kernel to remake them."""
        wide = torch.float64 if x.dtype == torch.float64 else torch.float32
        key = (x.device, wide, torch.is_inference_mode_enabled())
        if key not in self._slopes:
            s = slopes(self.h, self.layer, self.layers, x.device, wide)
            self._slopes[key] = (s, torch.exp(-s))
        return self._slopes[key]

    def new_state(self, batch: int, max_tokens: int, device, dtype) -> LightningState:
        return LightningState(self.spec, batch, device, dtype)

    def forward(self, x: torch.Tensor, rope=None, mask=None, store=None) -> torch.Tensor:
        B, T, _ = x.shape
        qkv = F.silu(self.qkv_proj(x)).view(B, T, self.h, 3 * self.d)
        q, k, v = (t.transpose(1, 2).contiguous() for t in qkv.split(self.d, dim=-1))  # (B, H, T, d) each
        s, ratio = self.slopes(x)
        if store is not None and store.decoding and T == 1:  # the recurrent form (transformers' cached path)
            S = store.s
            S.mul_(ratio.to(S.dtype)).add_((k.mT @ v).to(S.dtype))  # (B, H, d, d)
            y = q @ S.to(q.dtype)
        else:
            y, S = blocks(q, k, v, s, self.spec.block, store.s if store is not None and store.decoding else None,
                          final=store is not None)
            if store is not None:
                store.s.copy_(S)
        y = y.transpose(1, 2).reshape(B, T, self.h * self.d)
        # MiniMaxRMSNorm: normed in fp32, back to the input's dtype, times w; then the sigmoid gate
        y = self.norm.weight * F.rms_norm(y.float(), (y.shape[-1],), eps=NORM_EPS).to(x.dtype)
        return self.out_proj(torch.sigmoid(self.output_gate(x)) * y)
