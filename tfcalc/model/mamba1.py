"""The Mamba-1 mixer's torch module and its generation state (tfcalc.architecture.mamba1 derives every figure).

Transformers' torch path (models/mamba/modeling_mamba.py, MambaMixer.slow_forward's sequential loop): dt, exp(dt·A)
and the updates (dt·x)·Bᵀ for every position at once in fp32, then the recurrence h_t = exp(dt_t·A)·h_{t-1} +
update_t and the read h_t·C_t position by position (A varies per channel and state index, so Mamba2's chunked matmul
form, a scalar decay per head, does not apply; mamba_ssm's fused CUDA scan is not built). A prompt out of autograd
(prefill, a no-grad forward) runs the same recurrence chunked (``chunked_scan``: about 3·sqrt(T) kernels a layer
instead of the loop's 3·T, in place over the two (B, T, I, N) fp32 tensors the loop reads, so no more memory) and
reads every state in one batched matmul; under autograd (training) the loop runs, as its saved activations are
counted (tfcalc.architecture.mamba1, ``saved``). A decode step runs the same recurrence once over the state
allocated once (``Mamba1State``: the convolution's last K inputs and the I × N SSM state), in place, the same ops on
the same shapes at every position, nothing read back to the host. The update is a batched outer-product matmul
(transformers multiplies elementwise: the same values), so FlopCounterMode sees what the count names. The causal
convolution pads the left only.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from tfcalc.architecture.mamba1 import Mamba1, scan_chunks
from tfcalc.model.fixed_state import FixedState
from tfcalc.model.layers import Linear
from tfcalc.model.mixers import MixerModule

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


class BCdtNorm(nn.Module):
    """An RMSNorm in fp32 cast back to the input's dtype, with a weight (Jamba's JambaRMSNorm: weight times the
    cast) or without one (FalconMambaWeightlessRMSNorm)."""

    def __init__(self, width: int, eps: float, weighted: bool):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(width)) if weighted else None
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x.float()
        h = (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype)
        return h if self.weight is None else self.weight * h


class DtProj(nn.Module):
    """dt_proj R -> I, its bias added in fp32 (transformers' scan adds delta_bias.float() to dt_proj.weight @ dt):
    a module of its own so its matmul is counted as a projection (tfcalc.measure.flops reads module paths)."""

    def __init__(self, rank: int, inner: int):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(inner, rank))
        self.bias = nn.Parameter(torch.empty(inner))

    def forward(self, dt: torch.Tensor) -> torch.Tensor:
        return F.linear(dt, self.weight).float() + self.bias.float()  # (B, T, I) fp32


class Mamba1State(FixedState):
    """One layer's state, allocated once: ``conv`` (B, I, K) in the model's dtype, ``ssm`` (B, I, N) in the
    component's state dtype. No positions (layout None); a step rewrites both whole (``carried``)."""

    names = ("conv", "ssm")

    def __init__(self, spec: Mamba1, batch: int, device, dtype):
        conv, ssm = spec.state()
        super().__init__(batch, device, (conv.shape, dtype),
                         (ssm.shape, dtype if ssm.dtype is None else DTYPES[ssm.dtype]))


def chunked_scan(dA: torch.Tensor, update: torch.Tensor) -> torch.Tensor:
    """Every state h_t = dA_t·h_{t-1} + update_t (h_0 = 0) of a prompt, out of autograd, in about 3·sqrt(T) kernels
    where the position-by-position loop takes 3·T (tfcalc.architecture.mamba1, ``scan_chunks``): the T positions
    cut into c chunks of L (and a tail of r < L),

    1. within every chunk at once, the recurrence from a zero state, one addcmul_ a position (L - 1 kernels over
       (B, c, I, N)), and each chunk's running product of its decays (one mul_ a position, where c > 1);
    2. the state entering each chunk, S_{j+1} = P_j·S_j + H_j (P_j its decays' product, H_j its last local state):
       c - 1 kernels over (B, I, N);
    3. every position of chunks 1.. gets its running product times its chunk's entering state (one addcmul_);
    4. the tail's r positions continue the recurrence one addcmul_ each.

    The products and sums are the loop's, associated otherwise: equal to it within fp32 rounding. ``update`` is
    overwritten with the states and ``dA`` with the running products: no (B, T, I, N) tensor beyond the two the
    loop reads (dA, update: both already in memory, fp32)."""
    B, T = dA.shape[:2]
    L, c, r = scan_chunks(T)
    body = c * L
    a = dA[:, :body].unflatten(1, (c, L))  # (B, c, L, I, N), views
    h = update[:, :body].unflatten(1, (c, L))
    for t in range(1, L):  # 1: within each chunk, from zero; the decays' running product (a CPU's cumprod over a
        h[:, :, t].addcmul_(a[:, :, t], h[:, :, t - 1])  # middle dimension is 20x slower than these steps)
        if c > 1:
            a[:, :, t].mul_(a[:, :, t - 1])
    if c > 1:
        entering = torch.empty_like(h[:, :, 0])  # (B, c, I, N); chunk 0 enters at zero (never read)
        entering[:, 1] = h[:, 0, -1]
        for j in range(2, c):  # 2: S_j = P_{j-1}·S_{j-1} + H_{j-1}
            torch.addcmul(h[:, j - 1, -1], a[:, j - 1, -1], entering[:, j - 1], out=entering[:, j])
        h[:, 1:].addcmul_(a[:, 1:], entering[:, 1:, None])  # 3
    for t in range(body, T):  # 4: the tail
        update[:, t].addcmul_(dA[:, t], update[:, t - 1])
    return update


class Mamba1Mixer(MixerModule):
    def __init__(self, spec: Mamba1):
        super().__init__()
        self.spec = spec
        I_, N, R = spec.inner, spec.state_size, spec.dt_rank
        self.in_proj = Linear(spec.d_model, 2 * I_, bias=spec.bias)
        self.conv1d = nn.Conv1d(I_, I_, spec.conv_kernel, groups=I_, bias=spec.conv_bias)
        self.x_proj = Linear(I_, spec.proj_width, bias=False)
        self.dt_proj = DtProj(R, I_)
        self.A_log = nn.Parameter(torch.empty(I_, N))
        self.D = nn.Parameter(torch.empty(I_))
        if spec.bcdt_norm != "none":
            weighted = spec.bcdt_norm == "weighted"
            self.dt_norm, self.b_norm, self.c_norm = (BCdtNorm(w, spec.bcdt_norm_eps, weighted) for w in (R, N, N))
        self.out_proj = Linear(I_, spec.d_model, bias=spec.bias)

    def new_state(self, batch: int, max_tokens: int, device, dtype) -> Mamba1State:
        return Mamba1State(self.spec, batch, device, dtype)

    def _conv(self, xs: torch.Tensor, store: Mamba1State | None) -> torch.Tensor:
        """(B, T, I) -> the causal convolution's output, SiLU'd; with a store, its last K inputs kept (a prompt)
        or the step's input shifted in and convolved over the K kept (a decode step)."""
        K, w, bias = self.spec.conv_kernel, self.conv1d.weight, self.conv1d.bias
        if store is not None and store.decoding:
            window = store.shift(xs.mT)  # (B, I, K): the state after the step's input
            return F.silu(F.conv1d(window.to(w.dtype), w, bias, groups=w.shape[0]).mT.to(xs.dtype))
        if store is not None:
            store.keep(xs.mT)
        # (B, T, I) laid out contiguously before SiLU, so x_proj reads SiLU's output itself, not a copy of it
        return F.silu(F.conv1d(F.pad(xs.mT, (K - 1, 0)), w, bias, groups=w.shape[0]).mT.contiguous())

    def _scan(self, dA: torch.Tensor, update: torch.Tensor, Cm: torch.Tensor, store: Mamba1State | None):
        """h_t = dA_t·h_{t-1} + update_t, y_t = h_t·C_t over the T positions; dA, update (B, T, I, N) fp32, Cm
        (B, T, N) -> y (B, T, I) fp32. A decode step continues from the kept state; a prompt starts from zero."""
        C = Cm.float()[..., None]  # (B, T, N, 1)
        if store is not None and store.decoding:
            h = store.ssm.float() * dA[:, 0] + update[:, 0]
            store.ssm.copy_(h.to(store.ssm.dtype))
            return (h @ C[:, 0])[..., 0][:, None]  # (B, I, N) @ (B, N, 1)
        if not (torch.is_grad_enabled() and (dA.requires_grad or update.requires_grad)):
            h = chunked_scan(dA, update)  # (B, T, I, N), every state, in update's storage
            if store is not None:
                store.ssm.copy_(h[:, -1].to(store.ssm.dtype))
            return (h @ C)[..., 0]  # (B, T, I, N) @ (B, T, N, 1): every position's read in one batched matmul
        # under autograd, position by position; the positions taken by unbind, whose backward stacks their
        # gradients in one kernel, where indexing's select_backward writes a zero-filled (B, T, I, N) gradient for
        # each position and autograd sums them: quadratic in T (tfcalc.architecture.mamba1, autograd_loop)
        decays, updates, reads = dA.unbind(1), update.unbind(1), C.unbind(1)
        h = updates[0].clone()  # h_1 from h_0 = 0
        ys = [h @ reads[0]]
        for t in range(1, dA.shape[1]):
            h = decays[t] * h + updates[t]
            ys.append(h @ reads[t])
        if store is not None:
            store.ssm.copy_(h.to(store.ssm.dtype))
        return torch.stack(ys, dim=1)[..., 0]  # (B, T, I)

    def forward(self, x: torch.Tensor, rope=None, mask=None, store: Mamba1State | None = None) -> torch.Tensor:
        spec = self.spec
        R, N = spec.dt_rank, spec.state_size
        xs, z = self.in_proj(x).chunk(2, dim=-1)  # (B, T, I) each
        xs = self._conv(xs, store)
        dt, Bm, Cm = self.x_proj(xs).split([R, N, N], dim=-1)
        if spec.bcdt_norm != "none":  # Falcon-Mamba's and Jamba's norms on dt, B and C
            dt, Bm, Cm = self.dt_norm(dt), self.b_norm(Bm), self.c_norm(Cm)
        dt = F.softplus(self.dt_proj(dt))  # (B, T, I) fp32
        A = -torch.exp(self.A_log.float())  # (I, N)
        dA = torch.exp(dt[..., None] * A)  # (B, T, I, N)
        xf = xs.float()
        update = (dt * xf)[..., None] @ Bm.float()[..., None, :]  # (B, T, I, 1) @ (B, T, 1, N)
        y = self._scan(dA, update, Cm, store) + self.D.float() * xf
        return self.out_proj((y * F.silu(z.float())).to(x.dtype))
