"""Gemma 4's experts beside its MLP (modeling_gemma4.py Gemma4TextDecoderLayer with enable_moe_block, Gemma4TextRouter;
tfcalc.architecture.ffn, step 5), a part of tfcalc.model.experts.MixtureOfExperts: the shared expert is the MLP,
on the block's normed input, normed after; the router and the experts read the block's input before that norm."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from tfcalc.model.layers import make_norm


class Beside(nn.Module):
    """The router's scales and the three norms (the module docstring); ``forward`` runs the whole FFN."""

    def __init__(self, spec):
        super().__init__()
        norm = spec.beside_mlp
        self.eps = norm.eps
        self.router_scale = nn.Parameter(torch.empty(spec.d_model))
        self.per_expert_scale = nn.Parameter(torch.empty(spec.n_expert))
        self.mlp_post_norm, self.moe_pre_norm, self.moe_post_norm = (make_norm(norm) for _ in range(3))

    def route(self, moe, raw: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(N, d) unnormed rows -> (weights, chosen), (N, k): Gemma4TextRouter, in fp32 from the softmax on."""
        d = raw.shape[-1]
        h = F.rms_norm(raw, (d,), eps=self.eps) * self.router_scale * d ** -0.5  # the norm has no weight
        probs = moe.router(h).float().softmax(dim=-1)  # (N, E)
        top, chosen = probs.topk(moe.top_k, dim=-1)
        top = top / top.sum(dim=-1, keepdim=True)
        return (top * self.per_expert_scale[chosen]).to(raw.dtype), chosen

    def forward(self, moe, flat: torch.Tensor, raw: torch.Tensor, live: torch.Tensor | None) -> torch.Tensor:
        """(N, d) normed rows for the MLP and (N, d) unnormed ones for the router and experts -> (N, d)."""
        mlp = self.mlp_post_norm(moe.shared(flat))
        experts = moe.routed(self.moe_pre_norm(raw), live, routing=self.route(moe, raw))
        return mlp + self.moe_post_norm(experts)
