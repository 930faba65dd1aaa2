"""DeepSeek-V4's attention in the real model (tfcalc.architecture.compressed_attention has the steps, the sources and
the conventions), computing what transformers 5.24's DeepseekV4Attention computes (modeling_deepseek_v4.py), its
parameters named as transformers names them (q_a_proj, q_a_norm, q_b_proj, kv_proj, kv_norm, o_a_proj, o_b_proj,
sinks, compressor.kv_proj, compressor.gate_proj, compressor.position_bias, compressor.kv_norm, compressor.indexer.*)
so a checkpoint maps one to one.

The module builds its own rotary tables and masks from the positions (the sliding-only layers at rope_theta, the
compressed ones at compress_rope_theta with YaRN, attention factor 1): the runtime hands it neither. Shapes as
(B, nh, T, hs).

Generation state (``CompressedState``, tfcalc.model.fixed_state), allocated once at a fixed shape, nothing read
back to the host: the window's K=V in a ring of W slots (position p in slot p mod W), the compressed entries
(max_tokens // m slots, entry w in slot w), the open window's raw C and Z in a ring of m slots (position p in
slot p mod m), CSA's previous-window Ca and Z_a (m slots), the indexer's the same, and the next position (B,)
(bookkeeping, not counted, as tfcalc.model.cache's positions). A prompt runs the whole-sequence form and then
writes the state. A decode step (one token) writes its K=V into the ring and its C, Z into the window's slot,
pools the window so far (the slots not yet written this window hidden: -inf gate) and writes that entry into its
slot only once the window is closed (a torch.where of the old and new entry: the same op every step); the
closing step then also keeps its window's Ca as the next entry's overlap. It attends over the whole ring and the
entries of the step's span (span // m of them: the runtime's bucket of positions, a power of two, so the shapes
change once per bucket, tfcalc.model.cache) under a mask built from the position on the device.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from tfcalc.errors import InputError
from tfcalc.model.fixed_state import FixedState
from tfcalc.model.layers import Linear
from tfcalc.model.mixers import MixerModule
from tfcalc.model.yarn import yarn_inv_freq

NEG = float("-inf")


class RMSNorm(nn.Module):
    """DeepseekV4RMSNorm: in fp32, times the weight, cast back (``weight`` None: the unweighted q_b_norm)."""

    def __init__(self, width: int | None, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(width)) if width is not None else None
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return (h if self.weight is None else self.weight.float() * h).to(x.dtype)


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """RoPE on the last 2·cos.shape[-1] channels of x (..., h), on interleaved pairs (2i, 2i+1), in fp32;
    cos, sin broadcast against x's leading dims with the pairs last."""
    r = 2 * cos.shape[-1]
    keep, rot = x[..., :-r], x[..., -r:].float()
    a, b = rot[..., 0::2], rot[..., 1::2]
    out = torch.stack([a * cos - b * sin, b * cos + a * sin], dim=-1).flatten(-2)
    return torch.cat([keep, out.to(x.dtype)], dim=-1)


class Rotary(nn.Module):
    """Inverse frequencies of one θ (and YaRN where given: its frequencies, attention factor 1, as
    DeepseekV4Config forces for the compressed layers): cos, sin (..., h_r / 2) of any positions."""

    def __init__(self, theta: float, dim: int, yarn=None):
        super().__init__()
        self.theta, self.dim, self.yarn = theta, dim, yarn
        self.register_buffer("inv_freq", self._inv_freq(None), persistent=False)

    def _inv_freq(self, device) -> torch.Tensor:
        theta, dim = self.theta, self.dim
        return yarn_inv_freq(theta, dim, self.yarn, device) if self.yarn is not None else \
            1.0 / (theta ** (torch.arange(0, dim, 2, dtype=torch.float32, device=device) / dim))

    def register_position_buffers(self) -> None:
        """Recomputed after a build on meta (tfcalc.model.load and init_weights call it: no checkpoint holds it)."""
        self.inv_freq = self._inv_freq(self.inv_freq.device)

    reset_buffers = register_position_buffers

    def forward(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        freqs = positions[..., None].float() * self.inv_freq.to(positions.device)
        return freqs.cos(), freqs.sin()


def pool(kv: torch.Tensor, gate: torch.Tensor, norm: RMSNorm) -> torch.Tensor:
    """One entry per window: kv, gate (..., slots, h), the gate's position bias added, -inf where a slot is empty
    -> RMSNorm(Σ softmax(gate) ⊙ kv) (..., h) (DeepseekV4HCACompressor.forward; the softmax in fp32)."""
    return norm((kv * gate.softmax(dim=-2, dtype=torch.float32).to(kv.dtype)).sum(dim=-2))


class Compressor(nn.Module):
    """DeepseekV4HCACompressor (``series`` 1) or the CSA's (2: Ca, Cb; entry w pools window w - 1's Ca beside
    window w's Cb), and the CSA indexer's own (width D_i), named as transformers names them."""

    def __init__(self, d: int, width: int, ratio: int, series: int, eps: float):
        super().__init__()
        self.width, self.ratio, self.series = width, ratio, series
        self.kv_proj = Linear(d, series * width, bias=False)
        self.gate_proj = Linear(d, series * width, bias=False)
        self.position_bias = nn.Parameter(torch.empty(ratio, series * width))
        self.kv_norm = RMSNorm(width, eps)
        self.indexer: Indexer | None = None  # CSA's (set by CompressedAttention)

    def forward(self, x: torch.Tensor, q_res: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """Every projection of the compressor and its indexer, in one module call (FlopCounterMode groups them with
        the attention's projections, tfcalc.measure.flops): C and Z (B, T, c·w), and for CSA the indexer's C and
        Z (B, T, 2·D_i), queries (B, T, H_i·D_i) and head weights (B, T, H_i), without gradient."""
        out = (self.kv_proj(x), self.gate_proj(x))
        if self.indexer is None:
            return out
        ix = self.indexer
        with torch.no_grad():  # the selection carries no gradient (transformers' top-k indices)
            return out + (ix.kv_proj(x), ix.gate_proj(x), ix.q_b_proj(q_res), ix.scorer.weights_proj(x))

    def windows(self, c: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        """Every closed window of a sequence from position 0: c, z (B, T, c·w) -> entries (B, T // m, w)."""
        B, n, m, w = c.shape[0], c.shape[1] // self.ratio, self.ratio, self.width
        if n == 0:  # no window closed (a static shape: T < m)
            return c.new_zeros(B, 0, w)
        c = c[:, :n * m].view(B, n, m, c.shape[-1])
        z = z[:, :n * m].view(B, n, m, z.shape[-1]) + self.position_bias  # (B, n, m, c·w), fp32 with the bias
        if self.series == 1:
            return pool(c, z, self.kv_norm)
        prev_c = F.pad(c[:, :-1, :, :w], (0, 0, 0, 0, 1, 0))  # (B, n, m, w): window w - 1's Ca, zeros for w = 0
        prev_z = F.pad(z[:, :-1, :, :w], (0, 0, 0, 0, 1, 0), value=NEG)  # its gate, -inf: weight 0
        return pool(torch.cat([prev_c, c[..., w:]], dim=2), torch.cat([prev_z, z[..., w:]], dim=2), self.kv_norm)


class GroupedLinear(nn.Module):
    """DeepseekV4GroupedLinear: ``weight`` (g·d_g, n_in) holds g blocks (d_g, n_in); the output (B, T, H, h) split in
    g groups of n_in = H·h/g, each group times its block, in one bmm: (B, T, H, h) -> (B, T, g·d_g)."""

    def __init__(self, n_in: int, n_out: int, groups: int):
        super().__init__()
        self.groups = groups
        self.weight = nn.Parameter(torch.empty(n_out, n_in))

    def forward(self, y: torch.Tensor) -> torch.Tensor:
        B, T = y.shape[:2]
        g = self.groups
        w = self.weight.view(g, -1, self.weight.shape[1])  # (g, d_g, n_in)
        out = torch.matmul(y.reshape(B * T, g, -1).transpose(0, 1), w.mT)  # (g, B·T, d_g)
        return out.transpose(0, 1).reshape(B, T, -1)


class Indexer(Compressor):
    """DeepseekV4Indexer: its own CSA compressor at D_i (kv_proj, gate_proj, position_bias, kv_norm), q_b_proj and
    scorer.weights_proj."""

    def __init__(self, spec):
        Hi, Di = spec.index_n_heads, spec.index_head_dim
        super().__init__(spec.d_model, Di, spec.ratio, 2, spec.eps)
        self.heads, self.dim, self.topk = Hi, Di, spec.index_topk
        self.q_b_proj = Linear(spec.q_lora_rank, Hi * Di, bias=False)
        self.scorer = nn.Module()
        self.scorer.weights_proj = Linear(spec.d_model, Hi, bias=False)

    def select(self, iq, iw, rope, keys: torch.Tensor, visible: torch.Tensor) -> torch.Tensor:
        """The keep mask (B, T, C) of the compressed entries: of the ``visible`` ones (B, T, C), the top
        min(k, C) by Σ_h w_h·ReLU(D_i^-1/2·q_h·K_s) (DeepseekV4IndexerScorer); iq (B, T, H_i·D_i) and iw (B, T,
        H_i) the indexer's projections, keys (B, C, D_i) rotated."""
        B, T, _ = iq.shape
        q = rotate(iq.view(B, T, self.heads, self.dim), *(t[:, :, None] for t in rope))
        s = F.relu(torch.matmul(q.float(), keys.float().mT[:, None])) * self.dim ** -0.5  # (B, T, H_i, C)
        w = iw.float() * self.heads ** -0.5  # (B, T, H_i)
        scores = (s * w[..., None]).sum(dim=2).masked_fill(~visible, NEG)  # (B, T, C)
        top = scores.topk(min(self.topk, keys.shape[1]), dim=-1).indices
        return torch.zeros_like(visible).scatter(-1, top, True) & visible


class CompressedAttention(MixerModule):
    def __init__(self, spec):
        super().__init__()
        self.spec = spec
        d, H, h, cq = spec.d_model, spec.n_head, spec.head_dim, spec.q_lora_rank
        self.q_a_proj = Linear(d, cq, bias=False)
        self.q_a_norm = RMSNorm(cq, spec.eps)
        self.q_b_proj = Linear(cq, H * h, bias=False)
        self.q_b_norm = RMSNorm(None, spec.eps)
        self.kv_proj = Linear(d, h, bias=False)
        self.kv_norm = RMSNorm(h, spec.eps)
        g = spec.o_groups
        self.o_a_proj = GroupedLinear(H * h // g, g * spec.o_lora_rank, g)
        self.o_b_proj = Linear(g * spec.o_lora_rank, d, bias=False)
        self.sinks = nn.Parameter(torch.empty(H))
        self.compressor = None
        if spec.compressed:
            self.compressor = Compressor(d, h, spec.ratio, spec.series, spec.eps)
            self.compressor.indexer = Indexer(spec) if spec.sparse else None
        theta = spec.compress_rope_theta if spec.compressed else spec.rope_theta
        self.rotary = Rotary(theta, spec.rope_dim, spec.yarn if spec.compressed else None)

    def new_state(self, batch: int, max_tokens: int, device, dtype) -> CompressedState:
        return CompressedState(self.spec, batch, max_tokens, device, dtype)

    def _qkv(self, x: torch.Tensor, rope) -> tuple[torch.Tensor, ...]:
        """Steps 1-3: the Q latent (B, T, c_q), q (B, nh, T, h) and kv (B, T, h), rotated."""
        B, T, _ = x.shape
        q_res = self.q_a_norm(self.q_a_proj(x))
        q = self.q_b_norm(self.q_b_proj(q_res).view(B, T, self.spec.n_head, -1))  # (B, T, nh, h)
        q = rotate(q, *(t[:, :, None] for t in rope)).transpose(1, 2)
        kv = rotate(self.kv_norm(self.kv_proj(x)), *rope)
        return q_res, q, kv

    def _attend(self, q, keys, bias, rope) -> torch.Tensor:
        """Step 4-6: q (B, nh, T, h) over keys = values (B, S, h) under bias (B, T, S), a sink per head; the output
        rotated back at the query's position, grouped output projection."""
        B, H, T, h = q.shape
        S = keys.shape[1]
        # the heads as rows of one bmm against the shared K=V (B, S, h): never H copies of it
        scores = torch.bmm(q.reshape(B, H * T, h), keys.mT).view(B, H, T, S) * h ** -0.5 + bias[:, None].to(q.dtype)
        logits = torch.cat([scores, self.sinks.view(1, H, 1, 1).expand(B, H, T, 1).to(scores.dtype)], dim=-1)
        probs = (logits - logits.max(dim=-1, keepdim=True).values).softmax(dim=-1)[..., :-1]
        y = torch.bmm(probs.to(keys.dtype).reshape(B, H * T, S), keys).view(B, H, T, h)
        cos, sin = rope
        y = rotate(y.transpose(1, 2), cos[:, :, None], -sin[:, :, None])  # (B, T, nh, h)
        return self.o_b_proj(self.o_a_proj(y))

    def forward(self, x: torch.Tensor, rope=None, mask=None, store=None) -> torch.Tensor:
        if store is not None and store.decoding:
            return self._step(x, store)
        B, T, _ = x.shape
        pos = torch.arange(T, device=x.device).expand(B, T)  # a prompt from position 0
        rope = self.rotary(pos)
        q_res, q, kv = self._qkv(x, rope)
        p, s = pos[:, :, None], pos[:, None, :]  # (B, T, 1), (B, 1, T)
        seen = (s <= p) & (s > p - self.spec.window)  # the sliding-window mask
        keys, visible = kv, seen
        comp = self.compressor
        if comp is not None:
            c, z, *index = comp(x, q_res)
            entries = comp.windows(c, z)  # (B, n, h)
            n = entries.shape[1]
            at = torch.arange(n, device=x.device) * self.spec.ratio
            entries = rotate(entries, *self.rotary(at.expand(B, n)))
            open_ = torch.arange(n, device=x.device)[None, None] < (p + 1) // self.spec.ratio  # (B, T, n)
            ix = None
            if comp.indexer is not None:
                ix = self._index_prompt(index, rope, open_)
                open_ = ix[0]
            keys, visible = torch.cat([kv, entries], dim=1), torch.cat([seen, open_], dim=-1)
            if store is not None:
                store.keep(kv, c, z, entries, ix[1:] if ix is not None else None)
        elif store is not None:
            store.keep(kv)
        bias = torch.zeros(visible.shape, device=x.device).masked_fill(~visible, NEG)
        return self._attend(q, keys, bias, rope)

    def _index_prompt(self, index, rope, visible):
        """CSA over a prompt: the indexer's entries and its selection (keep mask, raw C, Z, index keys)."""
        ix = self.compressor.indexer
        c, z, iq, iw = index
        with torch.no_grad():  # the selection carries no gradient (transformers' top-k indices)
            keys = ix.windows(c, z)
            B, n = keys.shape[:2]
            keys = rotate(keys, *self.rotary(torch.arange(n, device=c.device).expand(B, n) * ix.ratio))
            return ix.select(iq, iw, rope, keys, visible), c, z, keys

    def _step(self, x: torch.Tensor, st: CompressedState) -> torch.Tensor:
        """One decode token per sequence over the state (module docstring)."""
        B, T, _ = x.shape
        if T != 1:
            raise InputError("DeepSeek-V4's compressed attention decodes one token per step (no verify steps)")
        p = st.next[:, None]  # (B, 1)
        rope = self.rotary(p)
        q_res, q, kv = self._qkv(x, rope)
        W = self.spec.window
        st.put(st.kv, p % W, kv)
        slot = torch.arange(W, device=x.device)
        visible = (p - (p - slot) % W >= 0)[:, None]  # (B, 1, W): the slot's latest position is written
        keys = st.kv
        comp = self.compressor
        n = min(st.span // self.spec.ratio, st.compressed_kv.shape[1]) if comp is not None else 0
        if n:  # the entries of the step's span (a bucket of positions, tfcalc.model.cache): its shapes per bucket
            c, z, *index = comp(x, q_res)
            entries = st.compressed_kv[:, :n]  # (B, n, h), a view: written through
            st.pool_step(comp, c, z, p, entries, st.window_kv, st.window_gate, getattr(st, "overlap_kv", None),
                         getattr(st, "overlap_gate", None), self.rotary)
            open_ = (torch.arange(n, device=x.device)[None] < (p + 1) // self.spec.ratio)[:, None]  # (B, 1, n)
            if comp.indexer is not None:
                ix = comp.indexer
                with torch.no_grad():
                    st.pool_step(ix, index[0], index[1], p, st.index_k[:, :n], st.index_window_kv,
                                 st.index_window_gate, st.index_overlap_kv, st.index_overlap_gate, self.rotary)
                    open_ = ix.select(index[2], index[3], rope, st.index_k[:, :n], open_)
            keys, visible = torch.cat([keys, entries], dim=1), torch.cat([visible, open_], dim=-1)
        st.next.add_(1)
        bias = torch.zeros(visible.shape, device=x.device).masked_fill(~visible, NEG)
        return self._attend(q, keys.to(x.dtype), bias, rope)


class CompressedState(FixedState):
    """The tensors of tfcalc.architecture.compressed_attention's ``state``, (B, ...) each, and ``next`` (B,), the
    next position (bookkeeping: not in ``nbytes``). Written by the module: ``keep`` after a prompt, ``put`` and
    ``pool_step`` in a step."""

    def __init__(self, spec, batch: int, max_tokens: int, device, dtype: torch.dtype):
        tensors = spec.state()
        self.names = tuple(t.name for t in tensors) + ("next",)
        shapes = [((spec.window, spec.head_dim) if t.name == "kv" else
                   (max_tokens // t.stride, t.shape[1]) if t.stride > 1 else t.shape, dtype) for t in tensors]
        super().__init__(batch, device, *shapes, ((), torch.long))
        self.spec = spec

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.tensors[:-1])

    def step(self, slots: dict, span: int) -> CompressedState:
        """The store a step calls: every tensor, and the span of positions it reads (its entries: span // m)."""
        view = self._view(self.tensors, True)
        view.span = span
        return view

    def _view(self, tensors, decoding):
        view = object.__new__(type(self))
        view.names, view.spec, view.span = self.names, self.spec, getattr(self, "span", 0)
        for name, t in zip(self.names, tensors, strict=True):
            setattr(view, name, t)
        view.decoding = decoding
        return view

    def put(self, buffer: torch.Tensor, slots: torch.Tensor, new: torch.Tensor) -> None:
        """new (B, T, w) into buffer (B, S, w) at slots (B, T), in place."""
        rows = torch.arange(buffer.shape[0], device=buffer.device)[:, None]
        buffer.index_put_((rows, slots), new.to(buffer.dtype))

    def keep(self, kv, c=None, z=None, entries=None, index=None) -> None:
        """A prompt (positions 0 .. T - 1): its last W K=V, its entries, its open window's raw C and Z, CSA's last
        closed window's Ca and Z_a; the indexer's likewise; next = T."""
        B, T, _ = kv.shape
        spec, W = self.spec, self.spec.window
        pos = torch.arange(max(0, T - W), T, device=kv.device)
        self.put(self.kv, (pos % W).expand(B, -1), kv[:, pos])
        if c is not None:
            self._keep_windows(T, c, z, entries, self.compressed_kv, self.window_kv, self.window_gate,
                               getattr(self, "overlap_kv", None), getattr(self, "overlap_gate", None), spec.head_dim)
        if index is not None:
            ic, iz, keys = index
            self._keep_windows(T, ic, iz, keys, self.index_k, self.index_window_kv, self.index_window_gate,
                               self.index_overlap_kv, self.index_overlap_gate, spec.index_head_dim)
        self.next.fill_(T)

    def _keep_windows(self, T, c, z, entries, store, wkv, wgate, okv, ogate, width) -> None:
        m = self.spec.ratio
        n = T // m
        store[:, :n].copy_(entries[:, :store.shape[1]])
        wkv[:, :T - n * m].copy_(c[:, n * m:])
        wgate[:, :T - n * m].copy_(z[:, n * m:])
        if okv is not None and n:
            okv.copy_(c[:, (n - 1) * m:n * m, :width])
            ogate.copy_(z[:, (n - 1) * m:n * m, :width])

    def pool_step(self, comp: Compressor, c_new, z_new, p, store, wkv, wgate, okv, ogate, rotary) -> None:
        """A step's C, Z into the window's slot p mod m; the window so far pooled (slots after p mod m hidden; CSA:
        the previous window's Ca beside, none for window 0) and written into entry p // m once the window closes;
        then (CSA) the closed window's Ca kept as the next one's overlap."""
        m, w = comp.ratio, comp.width
        self.put(wkv, p % m, c_new)
        self.put(wgate, p % m, z_new)
        hidden = (torch.arange(m, device=p.device)[None] > p % m)[..., None]  # (B, m, 1)
        z = (wgate + comp.position_bias).masked_fill(hidden, NEG)  # (B, m, c·w)
        c = wkv
        if comp.series == 2:
            first = (p < m)[..., None]  # (B, 1, 1): window 0 has no previous Ca
            oz = (ogate + comp.position_bias[:, :w]).masked_fill(first, NEG)
            c, z = torch.cat([okv, c[..., w:]], dim=1), torch.cat([oz, z[..., w:]], dim=1)
        entry = pool(c.to(c_new.dtype), z, comp.kv_norm)[:, None]  # (B, 1, w)
        at = (p // m) * m
        entry = rotate(entry, *rotary(at))
        closed = ((p + 1) % m == 0)[..., None]  # (B, 1, 1)
        slot = (p // m).clamp(max=store.shape[1] - 1)  # (B, 1)
        rows = torch.arange(store.shape[0], device=p.device)[:, None]
        self.put(store, slot, torch.where(closed, entry.to(store.dtype), store[rows, slot]))
        if okv is not None:
            self.put_all(okv, torch.where(closed, wkv[..., :w], okv))
            self.put_all(ogate, torch.where(closed, wgate[..., :w], ogate))

    @staticmethod
    def put_all(buffer: torch.Tensor, new: torch.Tensor) -> None:
        buffer.copy_(new)
