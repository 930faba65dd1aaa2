"""The Mamba2 mixer's torch module and its generation state (tfcalc.architecture.mamba2 derives every figure).

Prefill (and the uncached forward) runs the chunked SSD scan as transformers' torch path does
(models/mamba2/modeling_mamba2.py, ``mamba2_chunk_scan``: fp32, the sequence padded to whole chunks, the five
matmuls a-e of the component's docstring), laid out head-major (B, H, c, C_, ·) so each is one batched matmul;
a decode step runs the recurrence over the state allocated once (``Mamba2State``: the convolution's last K
inputs and the H × P × N SSM state), in place, the same ops on the same shapes at every position, nothing
read back to the host. The causal convolution pads the left only (K - 1 zeros), where transformers pads both
sides and drops the extra outputs: the same values, without the wasted K - 1 outputs.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from tfcalc.architecture.mamba2 import Mamba2
from tfcalc.model.fixed_state import FixedState
from tfcalc.model.layers import Linear
from tfcalc.model.mixers import MixerModule

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def segment_sums(a: torch.Tensor) -> torch.Tensor:
    """(..., L) -> (..., L, L): out[i, j] = a[j+1] + ... + a[i] for i >= j (0 on the diagonal), -inf above it.
    Summed as a masked cumulative sum over i rather than a difference of two cumulative sums, which loses the
    small terms of a long chunk (transformers' segment_sum takes the same care)."""
    L = a.shape[-1]
    grid = a[..., :, None].expand(*a.shape, L)  # (..., i, j) = a[i]
    strictly_below = torch.ones(L, L, dtype=torch.bool, device=a.device).tril(-1)
    sums = grid.masked_fill(~strictly_below, 0.0).cumsum(dim=-2)
    return sums.masked_fill(torch.ones(L, L, dtype=torch.bool, device=a.device).triu(1), -math.inf)


def chunk_scan(x: torch.Tensor, dt: torch.Tensor, A: torch.Tensor, Bm: torch.Tensor, Cm: torch.Tensor,
               D: torch.Tensor, chunk: int, initial: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The SSD scan over whole chunks, fp32. x (B, T, H, P), dt (B, T, H) after softplus, A (H,), Bm and Cm
    (B, T, H, N) (per head), D (H,) -> y (B, T, H, P) and the final state (B, H, P, N)."""
    b, T, H, P = x.shape
    N = Bm.shape[-1]
    pad = (-T) % chunk
    c = (T + pad) // chunk

    def chunked(t: torch.Tensor) -> torch.Tensor:  # (B, T, H, k) -> (B, H, c, C_, k), zero-padded
        return F.pad(t, (0, 0, 0, 0, 0, pad)).view(b, c, chunk, H, -1).permute(0, 3, 1, 2, 4)

    xf, dtf = x.float(), dt.float()
    xs, Bs, Cs = chunked(xf * dtf[..., None]), chunked(Bm.float()), chunked(Cm.float())  # (B, H, c, C_, ·)
    a = chunked((dtf * A.float())[..., None])[..., 0]  # (B, H, c, C_): log-decay of each position
    cum = a.cumsum(dim=-1)
    decay = torch.exp(segment_sums(a))  # (B, H, c, C_, C_): exp(Σ a) from s to l, 0 above the diagonal
    y = ((Cs @ Bs.mT) * decay) @ xs  # a, b: within each chunk
    to_end = torch.exp(cum[..., -1:] - cum)  # (B, H, c, C_): decay from each position to its chunk's end
    states = (xs * to_end[..., None]).mT @ Bs  # c: (B, H, c, P, N)
    start = torch.zeros_like(states[:, :, :1]) if initial is None else initial[:, :, None].float()
    states = torch.cat([start, states], dim=2)  # (B, H, c + 1, P, N)
    passing = torch.exp(segment_sums(F.pad(cum[..., -1], (1, 0))))  # (B, H, c + 1, c + 1)
    states = (passing @ states.flatten(-2)).view(b, H, c + 1, P, N)  # d: the state entering each chunk
    y = y + (Cs @ states[:, :, :-1].mT) * torch.exp(cum)[..., None]  # e: (B, H, c, C_, P)
    y = y.permute(0, 2, 3, 1, 4).reshape(b, c * chunk, H, P)[:, :T]
    return y + D.float()[:, None] * xf, states[:, :, -1]


class GatedRMSNorm(nn.Module):
    """RMSNorm of y · silu(z) over each of G groups of channels, weight I wide (MambaRMSNormGated, fp32 inside);
    ``first``: norm(y) · silu(z) instead, the weight in fp32 (FalconH1RMSNormGated with norm_before_gate)."""

    def __init__(self, width: int, groups: int, eps: float, first: bool = False):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(width))
        self.groups, self.eps, self.first = groups, eps, first

    def forward(self, y: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        dtype = y.dtype
        h = y.float() if self.first else y.float() * F.silu(z.float())
        g = h.view(*h.shape[:-1], self.groups, -1)  # (..., G, I / G)
        g = g * torch.rsqrt(g.pow(2).mean(-1, keepdim=True) + self.eps)
        if self.first:
            return (self.weight * g.view(h.shape) * F.silu(z.float())).to(dtype)
        return self.weight * g.view(h.shape).to(dtype)


def silu_gate(y: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
    """y · silu(z) with no norm (Falcon-H1's mamba_rms_norm false: FalconH1Mixer's scan_output * silu(gate))."""
    return y * F.silu(z.to(y.dtype))


class Mamba2State(FixedState):
    """One layer's state, allocated once: ``conv`` (B, conv_dim, K) in the cache dtype, ``ssm`` (B, H, P, N) in
    the component's state dtype. No positions (layout None); a step rewrites both whole (``carried``)."""

    names = ("conv", "ssm")

    def __init__(self, spec: Mamba2, batch: int, device, dtype):
        conv, ssm = spec.state()
        super().__init__(batch, device, (conv.shape, dtype),
                         (ssm.shape, dtype if ssm.dtype is None else DTYPES[ssm.dtype]))


class Mamba2Mixer(MixerModule):
    def __init__(self, spec: Mamba2):
        super().__init__()
        self.spec = spec
        H, I_ = spec.n_heads, spec.inner
        self.in_proj = Linear(spec.d_model, spec.proj_width, bias=spec.bias)
        self.conv1d = nn.Conv1d(spec.conv_dim, spec.conv_dim, spec.conv_kernel, groups=spec.conv_dim,
                                bias=spec.conv_bias)
        self.dt_bias, self.A_log, self.D = (nn.Parameter(torch.empty(H)) for _ in range(3))
        self.gate_norm = GatedRMSNorm(I_, spec.n_groups, spec.norm_eps, spec.gate_norm == "norm_then_gate") \
            if spec.gate_norm != "none" else silu_gate
        self.out_proj = Linear(I_, spec.d_model, bias=spec.has_out_bias)

    def new_state(self, batch: int, max_tokens: int, device, dtype) -> Mamba2State:
        return Mamba2State(self.spec, batch, device, dtype)

    def _projected(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """in_proj's z (B, T, I), [x | B | C] (B, T, conv_dim) and dt (B, T, H); each of the five times its muP
        multiplier where the component has them (Falcon-H1's mup_vector, a buffer of constants there that no
        checkpoint stores: Python scalars here, so a loaded model needs nothing filled in)."""
        spec = self.spec
        proj = self.in_proj(x)
        if spec.proj_scales is None:
            return proj.split([spec.inner, spec.conv_dim, spec.n_heads], dim=-1)
        GN = spec.n_groups * spec.state_size
        parts = [p * m for p, m in zip(proj.split([spec.inner, spec.inner, GN, GN, spec.n_heads], dim=-1),
                                        spec.proj_scales, strict=True)]
        return parts[0], torch.cat(parts[1:4], dim=-1), parts[4]

    def _conv(self, xbc: torch.Tensor, store: Mamba2State | None) -> torch.Tensor:
        """(B, T, conv_dim) -> the causal convolution's output, SiLU'd; with a store, its last K inputs kept
        (a prompt) or the step's input shifted in and convolved over the K kept (a decode step)."""
        K, w, bias = self.spec.conv_kernel, self.conv1d.weight, self.conv1d.bias
        if store is not None and store.decoding:
            window = store.shift(xbc.mT)  # (B, cd, K): the state after the step's input
            return F.silu(F.conv1d(window.to(w.dtype), w, bias, groups=w.shape[0]).mT.to(xbc.dtype))
        padded = F.pad(xbc.mT, (K - 1, 0))  # (B, conv_dim, K - 1 + T)
        if store is not None:
            store.keep(xbc.mT)
        return F.silu(F.conv1d(padded, w, bias, groups=w.shape[0]).mT)

    def _step(self, x, dt, A, Bh, Ch, store: Mamba2State) -> torch.Tensor:
        """One position (T = 1): h = exp(dt·A)·h + (dt·x)·Bᵀ, y = h·C + D·x; x (B, 1, H, P), Bh, Ch (B, 1, H, N)."""
        s = store.ssm
        xf, dtf = x[:, 0].float(), dt[:, 0].float()  # (B, H, P), (B, H)
        update = (xf * dtf[..., None])[..., None] @ Bh[:, 0].float()[..., None, :]  # (B, H, P, 1) @ (B, H, 1, N)
        h = s.float() * torch.exp(dtf * A)[..., None, None] + update
        s.copy_(h.to(s.dtype))
        y = (h @ Ch[:, 0].float()[..., None])[..., 0]  # (B, H, P, N) @ (B, H, N, 1)
        return (y + self.D.float()[:, None] * xf)[:, None]  # (B, 1, H, P)

    def forward(self, x: torch.Tensor, rope=None, mask=None, store: Mamba2State | None = None) -> torch.Tensor:
        spec = self.spec
        B_, T, _ = x.shape
        H, P, G, N = spec.n_heads, spec.head_dim, spec.n_groups, spec.state_size
        z, xbc, dt = self._projected(x)
        xs, Bm, Cm = self._conv(xbc, store).split([spec.inner, G * N, G * N], dim=-1)
        xs = xs.reshape(B_, T, H, P)
        # each group's B and C serve H / G consecutive heads; always a copy (reshape keeps a view where G = 1, and
        # the scan's batched matmuls would then read its own copies as views or not by the layout of T's padding)
        Bh, Ch = (t.reshape(B_, T, G, 1, N).expand(B_, T, G, H // G, N).clone(memory_format=torch.contiguous_format)
                  .view(B_, T, H, N) for t in (Bm, Cm))
        dt = F.softplus(dt + self.dt_bias.to(dt.dtype))  # (B, T, H)
        if spec.dt_min:  # Zamba2's dt_limit (time_step_min, inf), mamba2_chunk_scan's clamp
            dt = dt.clamp(min=spec.dt_min)
        A = -torch.exp(self.A_log.float())
        if store is not None and store.decoding:
            y = self._step(xs, dt, A, Bh, Ch, store)
        else:
            y, final = chunk_scan(xs, dt, A, Bh, Ch, self.D, spec.chunk_size)
            if store is not None:
                store.ssm.copy_(final.to(store.ssm.dtype))
        # the norm reads the scan's fp32 output and casts after its weight, as MambaRMSNormGated does
        return self.out_proj(self.gate_norm(y.reshape(B_, T, spec.inner), z).to(x.dtype))


class NoState:
    """The generation state of a layer without a mixer: nothing."""

    layout = None
    rewindable = True
    tensors: list = []
    carried: tuple = ()
    nbytes = 0

    def prefill(self, slots: dict) -> None:
        return None

    def step(self, slots: dict, span: int) -> None:
        return None

    def rows(self, rows: slice) -> NoState:
        return self


class NoMixerModule(MixerModule):
    """The empty mixer slot of an FFN-alone layer (tfcalc.architecture.mamba2.NoMixer): the block skips it."""

    def __init__(self, spec):
        super().__init__()
        self.spec = spec

    def new_state(self, batch: int, max_tokens: int, device, dtype) -> NoState:
        return NoState()

    def forward(self, x: torch.Tensor, rope=None, mask=None, store=None) -> torch.Tensor:
        return torch.zeros_like(x)
