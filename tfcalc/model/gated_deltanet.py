"""Gated DeltaNet's torch module and its fixed-size generation state (the component and its derivation:
tfcalc.architecture.gated_deltanet; transformers' reference: modeling_qwen3_next.py, Qwen3NextGatedDeltaNet).

Parameters carry transformers' names (``in_proj_qkvz``, ``in_proj_ba``, ``conv1d``, ``dt_bias``, ``A_log``,
``norm``, ``out_proj``; Qwen3.5's ``in_proj_qkv``, ``in_proj_z``, ``in_proj_b``, ``in_proj_a``; OLMo-Hybrid's
``q_proj``, ``k_proj``, ``v_proj``, ``g_proj``, ``b_proj``, ``a_proj``, whose ``o_norm`` and ``o_proj`` are
``norm`` and ``out_proj`` here) and layouts, so a checkpoint's tensors load unchanged. A forward over T tokens runs
the chunked form (``chunked``: the UT transform of each chunk of 64 by two unit lower triangular solves,
then one pass over the chunks carrying the state), as torch_chunk_gated_delta_rule does; a decode step of
one token runs the recurrent form (``recurrent``) on the state in place, its three products written as
matmuls. Shapes: (B, T, H, w) for the per-head streams, (B, H, dk, dv) for the state S.

The state (``DeltaNetState``, the state protocol of tfcalc.model.cache): the convolution's last K inputs
(B, C, K) in the model's dtype and S (B, Hv, dk, dv) in fp32, allocated once; no positions (``layout``
None), no rewinding. A prompt starts both from zero and leaves them as the prompt's end left them; a step
shifts the convolution's inputs by one, writes its own, and updates S, in place (``carried``: both, put
back around a CUDA graph's capture). Nothing reads a value back to the host.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from tfcalc.model.fixed_state import FixedState
from tfcalc.model.layers import Linear
from tfcalc.model.mixers import MixerModule


def l2norm(x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """x / sqrt(Σx² + eps) over the last dim (transformers' l2norm, the FLA library's convention)."""
    return x * torch.rsqrt((x * x).sum(-1, keepdim=True) + eps)


def chunked(q, k, v, g, beta, chunk: int, state: torch.Tensor | None = None, final: bool = True):
    """The gated delta rule over a sequence, chunk by chunk. q, k (B, H, T, dk) L2-normed and q scaled, v
    (B, H, T, dv), g and beta (B, H, T), all fp32; ``state`` (B, H, dk, dv) or None (zero). Returns the
    output (B, H, T, dv) and the final state. ``final`` false (a forward with no store to keep the state in):
    the last chunk's update runs outside autograd, its FLOPs done as transformers' loop does them but no nodes
    built that would be freed as soon as the forward returns (what they saved would count as kept, and its
    memory could be reused; tfcalc.architecture.gated_deltanet.GatedDeltaNet.saved counts what stays). T is
    padded to whole chunks with zeros (a zero β and g leave S as it is)."""
    B, H, T, dk = k.shape
    dv = v.shape[-1]
    pad = (-T) % chunk
    # fresh contiguous copies whatever T: F.pad by nothing clones with the input's strides (q and k come
    # transposed), and a strided copy would make the chunk views and matmuls below copy again, so what autograd
    # keeps would depend on whether T is a whole number of chunks (GatedDeltaNet.saved counts one layout)
    q, k, v = (F.pad(x, (0, 0, 0, pad)).contiguous() for x in (q, k, v))
    g, beta = (F.pad(x, (0, pad)).contiguous() for x in (g, beta))
    n = (T + pad) // chunk
    kb, vb = k * beta[..., None], v * beta[..., None]
    q, k, kb, vb = (x.reshape(B, H, n, chunk, x.shape[-1]) for x in (q, k, kb, vb))  # (B, H, N, c, w)
    cum = g.reshape(B, H, n, chunk).cumsum(-1)  # (B, H, N, c): log of the decay from the chunk's start
    upper = torch.ones(chunk, chunk, dtype=torch.bool, device=q.device).triu(1)
    decay = (cum[..., :, None] - cum[..., None, :]).masked_fill(upper, float("-inf")).exp()  # (B, H, N, c, c)
    system = (kb @ k.mT) * decay  # the UT transform's I + strictly lower part (its diagonal is taken as 1)
    scores = (q @ k.mT) * decay
    u = torch.linalg.solve_triangular(system, vb, upper=False, unitriangular=True)  # (B, H, N, c, dv)
    w = torch.linalg.solve_triangular(system, kb * cum.exp()[..., None], upper=False, unitriangular=True)
    s = q.new_zeros(B, H, dk, dv) if state is None else state.to(q.dtype)
    q = q * cum.exp()[..., None]
    grad = torch.is_grad_enabled()
    tracked = n if final else n - 1  # state updates autograd sees: the last one only where its result is kept
    with torch.set_grad_enabled(grad and tracked > 0):
        k = k * (cum[..., -1:] - cum).exp()[..., None]
        last = cum[..., -1].exp()[..., None, None]  # (B, H, N, 1, 1): the decay over a whole chunk
    out = []
    for i in range(n):
        v_new = u[:, :, i] - w[:, :, i] @ s  # (B, H, c, dv): what the state does not already predict
        out.append(q[:, :, i] @ s + scores[:, :, i] @ v_new)
        with torch.set_grad_enabled(grad and i < tracked):
            s = s * last[:, :, i] + k[:, :, i].mT @ v_new
    return torch.cat(out, dim=2)[:, :, :T], s


def recurrent(q, k, v, g, beta, s: torch.Tensor) -> torch.Tensor:
    """One token, in place on s (B, H, dk, dv): S ← S·exp(g); δ = β(v - k·S); S ← S + kᵀ·δ; o = q·S. q, k
    (B, H, 1, dk), v (B, H, 1, dv), g and beta (B, H, 1), fp32 -- or g (B, H, dk), a decay per key channel
    (S's rows: Kimi Delta Attention, tfcalc.model.kimi_delta). Returns o (B, H, 1, dv)."""
    s.mul_(g.exp()[..., None])
    delta = (v - k @ s) * beta[..., None]  # (B, H, 1, dv)
    s.add_(k.mT @ delta)
    return q @ s


def conv_silu(qkv: torch.Tensor, w: torch.Tensor, store) -> torch.Tensor:
    """The depthwise causal convolution of (B, T, C) by w (C, 1, K), then SiLU -> (B, C, T): padded by K - 1 as
    transformers' causal_conv1d_fn (a prompt, its last K inputs kept in the store), or one token over the K kept
    (a step, causal_conv1d_update). Gated DeltaNet's and Kimi Delta Attention's (tfcalc.model.kimi_delta)."""
    x = qkv.mT  # (B, C, T)
    T, K = x.shape[-1], w.shape[-1]
    if store is not None and store.decoding:
        if T == 1:
            return F.silu(F.conv1d(store.shift(x).to(x.dtype), w, groups=x.shape[1]))  # (B, C, 1)
        # several tokens (a verify step): the K - 1 inputs kept before them, in the activations' dtype
        x = torch.cat([store.conv[..., 1:].to(x.dtype), x], dim=-1)  # (B, C, K - 1 + T)
        store.conv.copy_(x[..., -K:])
        return F.silu(F.conv1d(x, w, groups=x.shape[1])[..., -T:])
    if store is not None:
        store.keep(x)
    # padded on the left only: the T outputs kept (transformers pads both sides and drops K - 1). F.conv1d here,
    # not a Conv1d module's call: the convolution is position mixing, counted with the mixer's own ops, not as a
    # projection (tfcalc.measure.flops groups a mixer's submodules as projections)
    return F.silu(F.conv1d(F.pad(x, (K - 1, 0)), w, groups=x.shape[1]))


class Conv1d(nn.Conv1d):
    """nn.Conv1d without its own random init (as tfcalc.model.layers.Linear: built on meta, filled once)."""

    def reset_parameters(self) -> None:
        pass


class DeltaNetState(FixedState):
    """The convolution's inputs (B, C, K) and S (B, Hv, dk, dv), allocated once (module docstring)."""

    names = ("conv", "s")

    def __init__(self, spec, batch: int, device, dtype: torch.dtype):
        conv, rec = spec.state()
        super().__init__(batch, device, (conv.shape, dtype), (rec.shape, torch.float32))


class GatedDeltaNetModule(MixerModule):
    """tfcalc.architecture.gated_deltanet.GatedDeltaNet as a torch module (module docstring)."""

    def __init__(self, spec):
        super().__init__()
        self.spec = spec
        d, C = spec.d_model, spec.conv_dim
        self.hk, self.hv, self.dk, self.dv = spec.n_k_head, spec.n_v_head, spec.k_head_dim, spec.v_head_dim
        self.split, self.separate = spec.split_projections, spec.separate_projections
        if self.separate:  # OLMo-Hybrid's six (OlmoHybridGatedDeltaNet)
            self.q_proj, self.k_proj = Linear(d, spec.k_width, bias=False), Linear(d, spec.k_width, bias=False)
            self.v_proj, self.g_proj = Linear(d, spec.v_width, bias=False), Linear(d, spec.v_width, bias=False)
            self.b_proj, self.a_proj = Linear(d, self.hv, bias=False), Linear(d, self.hv, bias=False)
        elif self.split:  # Qwen3.5's four projections
            self.in_proj_qkv, self.in_proj_z = Linear(d, C, bias=False), Linear(d, spec.v_width, bias=False)
            self.in_proj_b, self.in_proj_a = Linear(d, self.hv, bias=False), Linear(d, self.hv, bias=False)
        else:  # Qwen3-Next's two, grouped per key head
            self.in_proj_qkvz = Linear(d, C + spec.v_width, bias=False)
            self.in_proj_ba = Linear(d, 2 * self.hv, bias=False)
        if self.separate:  # OLMo-Hybrid's checkpoints keep the convolution as three (q/k/v_conv1d, concatenated
            # on load by transformers' conversion_mapping.py): three here, concatenated in the forward
            K = spec.conv_kernel
            self.q_conv1d, self.k_conv1d = (Conv1d(spec.k_width, spec.k_width, K, groups=spec.k_width, bias=False)
                                            for _ in range(2))
            self.v_conv1d = Conv1d(spec.v_width, spec.v_width, K, groups=spec.v_width, bias=False)
        else:
            self.conv1d = Conv1d(C, C, spec.conv_kernel, groups=C, padding=spec.conv_kernel - 1, bias=False)
        self.dt_bias = nn.Parameter(torch.ones(self.hv))
        self.A_log = nn.Parameter(torch.zeros(self.hv))
        self.norm = nn.RMSNorm(self.dv, eps=spec.norm_eps)
        self.out_proj = Linear(spec.v_width, d, bias=False)

    def new_state(self, batch: int, max_tokens: int, device, dtype) -> DeltaNetState:
        return DeltaNetState(self.spec, batch, device, dtype)

    def _split(self, x: torch.Tensor):
        """Step 1: [q | k | v·r | z·r] and [b·r | a·r] per key head (fix_query_key_value_ordering) ->
        [Q | K | V] (B, T, C), Z (B, T, Hv, dv), b and a (B, T, Hv)."""
        B, T, _ = x.shape
        if self.separate:  # OLMo-Hybrid: [Q | K | V] concatenated as OlmoHybridGatedDeltaNet does
            qkv = torch.cat([self.q_proj(x), self.k_proj(x), self.v_proj(x)], dim=-1)
            return qkv, self.g_proj(x).view(B, T, self.hv, self.dv), self.b_proj(x), self.a_proj(x)
        if self.split:  # Qwen3.5: [Q | K | V] as the convolution reads it already
            return (self.in_proj_qkv(x), self.in_proj_z(x).view(B, T, self.hv, self.dv), self.in_proj_b(x),
                    self.in_proj_a(x))
        r, dk, dv = self.hv // self.hk, self.dk, self.dv
        qkvz = self.in_proj_qkvz(x).view(B, T, self.hk, 2 * dk + 2 * r * dv)
        q, k, v, z = qkvz.split([dk, dk, r * dv, r * dv], dim=-1)
        b, a = self.in_proj_ba(x).view(B, T, self.hk, 2 * r).split([r, r], dim=-1)
        qkv = torch.cat([q.flatten(2), k.flatten(2), v.flatten(2)], dim=-1)
        # Z a copy, as reshape makes it but where one key head or r = 1 lets it view in_proj_qkvz's output (then
        # SiLU(Z) in fp32 would keep that whole output)
        z = z.clone(memory_format=torch.contiguous_format).view(B, T, self.hv, dv)
        return qkv, z, b.reshape(B, T, self.hv), a.reshape(B, T, self.hv)

    def _conv(self, qkv: torch.Tensor, store) -> torch.Tensor:
        """Step 2 on (B, T, C) -> (B, C, T) after SiLU (conv_silu)."""
        w = torch.cat([self.q_conv1d.weight, self.k_conv1d.weight, self.v_conv1d.weight]) if self.separate \
            else self.conv1d.weight  # (C, 1, K)
        return conv_silu(qkv, w, store)

    def forward(self, x: torch.Tensor, rope=None, mask=None, store=None) -> torch.Tensor:
        B, T, _ = x.shape
        qkv, z, b, a = self._split(x)
        mixed = self._conv(qkv, store).mT  # (B, T, C)
        q, k, v = mixed.split([self.hk * self.dk, self.hk * self.dk, self.hv * self.dv], dim=-1)
        r = self.hv // self.hk
        # each key head serves its r value heads, in order (repeat_interleave's layout, no sync), always a copy:
        # reshape (or contiguous) would keep a view of the convolution's output where one key head, r = 1 or a
        # single token allows it, and the L2 norms would then keep that whole output (GatedDeltaNet.saved counts
        # the copies)
        q, k = (t.view(B, T, self.hk, 1, self.dk).expand(B, T, self.hk, r, self.dk)
                .clone(memory_format=torch.contiguous_format).view(B, T, self.hv, self.dk)
                for t in (q, k))  # (B, T, Hv, dk)
        v = v.view(B, T, self.hv, self.dv)
        beta = b.float().sigmoid()
        if self.spec.beta_scale != 1.0:  # OLMo-Hybrid's allow_neg_eigval: β in [0, 2]
            beta = beta * self.spec.beta_scale
        g = -self.A_log.float().exp() * F.softplus(a.float() + self.dt_bias.float())  # (B, T, Hv)
        q, k, v, g, beta = (t.transpose(1, 2).float() for t in (q, k, v, g, beta))  # (B, Hv, T, ...)
        q, k = l2norm(q) * self.dk ** -0.5, l2norm(k)
        if store is not None and store.decoding and T == 1:
            y = recurrent(q, k, v, g, beta, store.s)
        else:
            y, s = chunked(q, k, v, g, beta, self.spec.chunk, None if store is None or not store.decoding else store.s,
                           final=store is not None)
            if store is not None:
                store.s.copy_(s)
        y = y.transpose(1, 2)  # (B, T, Hv, dv), fp32
        # Qwen3NextRMSNormGated: normed in fp32, scaled by w in the input's dtype, times silu(z) in fp32
        y = F.rms_norm(y.to(x.dtype).float(), (self.dv,), eps=self.norm.eps).to(x.dtype) * self.norm.weight
        y = y.float() * F.silu(z.float())
        return self.out_proj(y.to(x.dtype).flatten(2))
