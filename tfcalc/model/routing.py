"""DeepSeek's routers in the real model (tfcalc.architecture.routing has the steps and sources), as
modeling_deepseek_v3.py's DeepseekV3TopkRouter and modeling_deepseek_v2.py's DeepseekV2TopkRouter compute
them, in float32."""

from __future__ import annotations

import torch

from tfcalc.architecture import MoE


def route(logits: torch.Tensor, spec: MoE, bias: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """(N, E) router logits -> (weights, chosen experts), (N, k) each."""
    r, k, E = spec.routing, spec.top_k, spec.n_expert
    logits = logits.float()
    scores = logits.sigmoid() if r.scoring == "sigmoid" else logits.softmax(dim=-1)  # step 1
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
