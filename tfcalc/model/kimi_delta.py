"""Kimi Delta Attention's torch module (the component and its derivation: tfcalc.architecture.kimi_delta;
transformers' reference: modeling_kimi_linear.py, KimiLinearDeltaAttention). Gated DeltaNet's module
(tfcalc.model.gated_deltanet) shares with it the convolution (``conv_silu``), the recurrent step (``recurrent``,
its decay a vector per key channel here), the L2 norm and the fixed state (``DeltaNetState``: the convolution's
last K inputs (B, C, K) in the model's dtype, S (B, H, h, h) in fp32); what is KDA's own is here: the
projections and their bottlenecks, the decay per channel, and the chunked form with it.

The chunked form (``chunked``) runs chunk by chunk (c = 64, chunk_kimi_delta_attention's): the pairwise decays
of the chunk per channel, exp(G_i - G_j) for j ≤ i (B, H, c, c, h), the decayed copies of K_β and Q, each
contracted with K over the channels (a batched matmul: 2·c²·h FLOPs that FlopCounterMode sees), one unit lower
triangular solve for [V_β | decayed K_β], then gated DeltaNet's read and update of S with S decayed row by row.
One chunk's c×c×h tensors are alive at a time (transformers builds them for every chunk at once). A decode step
of one token runs ``recurrent`` on the state in place. Nothing reads a value back to the host.

Ling 3's form (spec.form "bailing", transformers' BailingHybridDeltaAttention; the differences named in
tfcalc.architecture.kimi_delta): ``f_proj`` and ``g_proj`` in place of the bottlenecks, ``A_log`` (H,); the
bounded decay b·sigmoid(exp(A_log)·(f + dt_bias)) where spec.decay_bound is b
(BailingHybridForgetGate with kda_safe_gate). The scan, the step, the state and the gated norm are the same code.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from tfcalc.model.gated_deltanet import Conv1d, DeltaNetState, conv_silu, l2norm, recurrent
from tfcalc.model.layers import Linear
from tfcalc.model.mixers import MixerModule


def chunked(q, k, v, g, beta, chunk: int, state: torch.Tensor | None = None, final: bool = True):
    """The gated delta rule with a decay per key channel, chunk by chunk. q, k (B, H, T, dk) L2-normed and q
    scaled, v (B, H, T, dv), g (B, H, T, dk) the log decays, beta (B, H, T), all fp32; ``state`` (B, H, dk, dv)
    or None (zero). Returns the output (B, H, T, dv) and the final state. T is padded to whole chunks with
    zeros (a zero β and g leave S as it is). ``final`` false: the last chunk's state update runs outside autograd,
    as gated DeltaNet's (tfcalc.model.gated_deltanet.chunked)."""
    B, H, T, dk = k.shape
    pad = (-T) % chunk
    # fresh contiguous copies whatever T (F.pad by nothing clones with the input's strides): one layout to count
    q, k, v, g = (F.pad(x, (0, 0, 0, pad)).contiguous() for x in (q, k, v, g))
    beta = F.pad(beta, (0, pad)).contiguous()
    n = (T + pad) // chunk
    kb, vb = k * beta[..., None], v * beta[..., None]
    q, k, kb, vb, g = (x.reshape(B, H, n, chunk, x.shape[-1]) for x in (q, k, kb, vb, g))  # (B, H, N, c, w)
    cum = g.cumsum(-2)  # (B, H, N, c, dk): the log decay per channel from the chunk's start
    upper = torch.ones(chunk, chunk, dtype=torch.bool, device=q.device).triu(1)[..., None]  # (c, c, 1): j > i
    s = q.new_zeros(B, H, dk, v.shape[-1]) if state is None else state.to(q.dtype)
    grad = torch.is_grad_enabled()
    out = []
    for i in range(n):
        G, ki = cum[:, :, i], k[:, :, i]  # (B, H, c, dk)
        decay = (G[..., :, None, :] - G[..., None, :, :]).masked_fill(upper, float("-inf")).exp()  # (B, H, c, c, dk)
        # Σ_d x_id·k_jd·exp(G_id - G_jd): the decayed copy (B, H, c, c, dk) contracted with K over d
        system = torch.einsum("bhijd,bhjd->bhij", kb[:, :, i, :, None, :] * decay, ki)  # its strict lower part
        scores = torch.einsum("bhijd,bhjd->bhij", q[:, :, i, :, None, :] * decay, ki)  # j ≤ i
        rhs = torch.cat([vb[:, :, i], kb[:, :, i] * G.exp()], dim=-1)  # (B, H, c, dv + dk)
        u, w = torch.linalg.solve_triangular(system, rhs, upper=False, unitriangular=True).split(
            [v.shape[-1], dk], dim=-1)
        v_new = u - w @ s  # (B, H, c, dv): what the state does not already predict
        out.append((q[:, :, i] * G.exp()) @ s + scores @ v_new)
        last = G[..., -1:, :]  # (B, H, 1, dk): the decay over the whole chunk
        with torch.set_grad_enabled(grad and (final or i < n - 1)):  # S decayed row by row, then updated
            s = s * last.mT.exp() + (ki * (last - G).exp()).mT @ v_new
    return torch.cat(out, dim=2)[:, :, :T], s


class KimiDeltaModule(MixerModule):
    """tfcalc.architecture.kimi_delta.KimiDeltaAttention as a torch module (module docstring). Parameters under
    transformers' names but q, k, v and out (q_proj, k_proj, v_proj, o_proj), and the forget gate's f_a_proj,
    f_b_proj, dt_bias and A_log held here, not in a submodule (tfcalc.hf_config.kimi_linear maps them)."""

    def __init__(self, spec):
        super().__init__()
        self.spec = spec
        d, H, h, K = spec.d_model, spec.n_v_head, spec.v_head_dim, spec.conv_kernel
        w = H * h
        self.H, self.h, self.bailing, self.bound = H, h, spec.form == "bailing", spec.decay_bound
        self.q, self.k, self.v = (Linear(d, w, bias=False) for _ in range(3))
        # the convolution's weights as the checkpoints keep them, three (concatenated in the forward)
        self.q_conv1d, self.k_conv1d, self.v_conv1d = (Conv1d(w, w, K, groups=w, bias=False) for _ in range(3))
        if self.bailing:  # Ling 3's (BailingHybridDeltaAttention): full projections, A_log (H,)
            self.f_proj, self.g_proj = Linear(d, w, bias=False), Linear(d, w, bias=False)
            self.A_log = nn.Parameter(torch.zeros(H))
        else:
            self.f_a_proj, self.f_b_proj = Linear(d, h, bias=False), Linear(h, w, bias=False)
            self.g_a_proj, self.g_b_proj = Linear(d, h, bias=False), Linear(h, w, bias=False)
            self.A_log = nn.Parameter(torch.zeros(1, 1, H, 1))
        self.dt_bias = nn.Parameter(torch.zeros(w))
        self.b_proj = Linear(d, H, bias=False)
        self.o_norm = nn.RMSNorm(h, eps=spec.norm_eps)
        self.out = Linear(w, d, bias=False)

    def new_state(self, batch: int, max_tokens: int, device, dtype) -> DeltaNetState:
        return DeltaNetState(self.spec, batch, device, dtype)

    def forward(self, x: torch.Tensor, rope=None, mask=None, store=None) -> torch.Tensor:
        B, T, _ = x.shape
        H, h = self.H, self.h
        qkv = torch.cat([self.q(x), self.k(x), self.v(x)], dim=-1)  # (B, T, C)
        conv = torch.cat([self.q_conv1d.weight, self.k_conv1d.weight, self.v_conv1d.weight])  # (C, 1, K)
        mixed = conv_silu(qkv, conv, store).mT  # (B, T, C)
        # copies (a reshape keeps a view of the convolution's output where one token or head allows it)
        q, k, v = (t.clone(memory_format=torch.contiguous_format).view(B, T, H, h) for t in mixed.split(H * h, dim=-1))
        g = self._decay(x).view(B, T, H, h)  # (B, T, H, h): the log decay per channel, fp32
        beta = self.b_proj(x).float().sigmoid()  # (B, T, H)
        q, k, v, g, beta = (t.transpose(1, 2).float() for t in (q, k, v, g, beta))  # (B, H, T, ...)
        q, k = l2norm(q) * h ** -0.5, l2norm(k)
        if store is not None and store.decoding and T == 1:
            y = recurrent(q, k, v, g[:, :, 0], beta, store.s)  # the decay (B, H, h): S's rows
        else:
            y, s = chunked(q, k, v, g, beta, self.spec.chunk, None if store is None or not store.decoding else store.s,
                           final=store is not None)
            if store is not None:
                store.s.copy_(s)
        y = y.transpose(1, 2).to(x.dtype)  # (B, T, H, h), as transformers returns it
        # KimiLinearRMSNormGated: normed and scaled in fp32, times sigmoid of the gate in fp32
        gate = (self.g_proj(x) if self.bailing else self.g_b_proj(self.g_a_proj(x))).view(B, T, H, h)
        y = F.rms_norm(y.float(), (h,), self.o_norm.weight.float(), self.o_norm.eps) * gate.float().sigmoid()
        return self.out(y.to(x.dtype).flatten(2))

    def _decay(self, x: torch.Tensor) -> torch.Tensor:
        """(B, T, H·h) log decays in fp32 from f + dt_bias: KimiLinearForgetGate's -exp(A_log)·softplus, or the
        bounded b·sigmoid(exp(A_log)·(f + dt_bias)) (BailingHybridForgetGate, kda_safe_gate)."""
        B, T, _ = x.shape
        f = (self.f_proj(x) if self.bailing else self.f_b_proj(self.f_a_proj(x))).float() + self.dt_bias.float()
        f = f.view(B, T, self.H, self.h)
        rate = self.A_log.float().exp().view(self.H, 1)  # (H, 1): one rate a head
        if self.bound is not None:
            return (self.bound * torch.sigmoid(rate * f)).flatten(2)
        return (-rate * F.softplus(f)).flatten(2)
