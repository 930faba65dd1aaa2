"""K and V shared across layers (Gemma 4's and Gemma 3n's num_kv_shared_layers; tfcalc.architecture.attention,
step 8): a ``source`` layer (tfcalc.model.layers.Attention) keeps the K and V it attends over in ``shared_kv``,
written every forward (the whole prompt uncached or at a prefill, its cache's span at a decode step); a
``ReaderAttention`` layer projects Q alone and attends over its source's, under its own mask (the source's kind:
the same window, so the same layout of slots). ``link`` gives each reader the last earlier source of its kind as
the stack is built; a stack cut where a reader's source is not before it (a pipeline stage) is refused.

As modeling_gemma4.py's Gemma4TextAttention does with its shared_kv_states: the reader's keys and values are its
source's after the cache update, so the two attend over the same positions."""

from __future__ import annotations

import torch
from torch import nn

from tfcalc.errors import InputError
from tfcalc.model.layers import Attention, Linear, add_projection, attend, interleave, merge_heads
from tfcalc.model.positions import rotate


class ReaderAttention(Attention):
    """Self-attention over another layer's K and V: Q's projection (and its norm and rotation), the scores, O."""

    def __init__(self, spec):
        super().__init__(spec)
        self.qkv = Linear(spec.d_model, self.q_rows, bias=spec.qkv_bias)  # Q's rows alone
        self.k_norm = None
        self.v_norm = None
        self.kv_source: tuple = ()  # (its source's module,): set by link, held outside the module tree

    adds_residual = True  # forward takes the stream it adds into (add_projection)

    def forward(self, x: torch.Tensor, rope=None, mask: torch.Tensor | None = None, store=None,
                residual: torch.Tensor | None = None) -> torch.Tensor:
        """x: (B, T, d); ``store`` is not called: the reader writes no state. ``residual``: as Attention's."""
        if not self.kv_source:
            raise InputError("a layer that reads another layer's K/V has no source layer before it in this stack")
        B, T, _ = x.shape
        q = self.qkv(x).view(B, T, self.n_head, self.head_dim)  # (B, T, nh, hs)
        if self.q_norm is not None:
            q = self.q_norm(q)
        if rope is not None:
            cos, sin = rope[0][..., None, :], rope[1][..., None, :]  # (T, 1, r), or (B, T, 1, r)
            q = rotate(q, cos, sin)  # the stack's sine is signed (positions.rotate)
        k, v = self.kv_source[0].shared_kv  # (B, nkv, S, hs|hv): what the source attended over in this forward
        y = attend(q.transpose(1, 2), k, v, mask, self.causal and T > 1, self.scale, self.cap, self.sinks)
        return add_projection(residual, self.out, merge_heads(y))  # (B, T, d)

    def fused_rows(self) -> dict[str, int]:
        return {"q": self.q_rows}

    @classmethod
    def tp_refusal(cls, spec) -> str | None:
        return "layers that read another layer's K/V are planned under TP, not run"

    def tp_localize(self, tp: int) -> None:
        interleave(self.qkv, [self.q_rows], tp)
        self.n_head, self.n_kv_head = self.n_head // tp, self.n_kv_head // tp
        self.q_dim, self.kv_dim, self.v_dim, self.q_rows = (self.q_dim // tp, self.kv_dim // tp, self.v_dim // tp,
                                                            self.q_rows // tp)


def link(blocks: nn.ModuleList) -> None:
    """Each reader's source: the last earlier source layer of its kind (the same window and chunk)."""
    sources: dict[tuple, nn.Module] = {}
    for block in blocks:
        attn, spec = block.attn, getattr(block.attn, "spec", None)
        share = getattr(spec, "kv_share", None)
        key = (getattr(spec, "window", None), getattr(spec, "chunk", None))
        if share == "source":
            sources[key] = attn
        elif share == "reader":
            if key not in sources:
                raise InputError("a layer that reads another layer's K/V has no source layer of its kind before it "
                                 "in this stack (a stack cut between them is not built)")
            attn.kv_source = (sources[key],)
