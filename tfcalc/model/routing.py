"""DeepSeek's routers in the real model (tfcalc.architecture.routing has the steps and sources), as
modeling_deepseek_v3.py's DeepseekV3TopkRouter and modeling_deepseek_v2.py's DeepseekV2TopkRouter compute
them, in float32."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from tfcalc.architecture import MoE


def scores_of(logits: torch.Tensor, spec: MoE) -> torch.Tensor:
    """Step 1 in float32: (N, E) logits -> scores."""
    r, logits = spec.routing, logits.float()
    if r.scoring == "sigmoid":
        return logits.sigmoid()
    return F.softplus(logits).sqrt() if r.scoring == "sqrtsoftplus" else logits.softmax(dim=-1)


def hash_route(logits: torch.Tensor, spec: MoE, chosen: torch.Tensor, dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """DeepSeek-V4's hash-routed layers (modeling_deepseek_v4.py, DeepseekV4HashRouter): the ``chosen`` experts (N,
    k) of each token id, weighed by their scores, renormalized (step 4) and scaled."""
    weights = scores_of(logits, spec).gather(1, chosen)
    if spec.renormalize:
        weights = weights / (weights.sum(dim=-1, keepdim=True) + 1e-20)
    return (weights * spec.routing.scaling).to(dtype), chosen


def route(logits: torch.Tensor, spec: MoE, bias: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """(N, E) router logits -> (weights, chosen experts), (N, k) each."""
    r, k, E = spec.routing, spec.top_k, spec.n_expert
    scores = scores_of(logits, spec)  # step 1
    choice = scores if bias is None else scores + bias.float()  # step 3: for choosing only
    if r.n_group > 1:  # step 2: keep the topk_group best groups
        grouped = choice.view(-1, r.n_group, E // r.n_group)
        if r.group_score == "top2_sum":
            group = grouped.topk(2, dim=-1)[0].sum(dim=-1)
        else:
            group = grouped.max(dim=-1).values
        kept = torch.zeros_like(group).scatter_(1, group.topk(r.topk_group, dim=-1)[1], 1.0).bool()  # (N, G)
        choice = choice.masked_fill(~kept[:, :, None].expand_as(grouped).reshape(-1, E), float("-inf"))
    chosen = choice.topk(k, dim=-1)[1]
    weights = scores.gather(1, chosen)
    if spec.renormalize:  # step 4
        weights = weights / (weights.sum(dim=-1, keepdim=True) + 1e-20)
    return weights * r.scaling, chosen
