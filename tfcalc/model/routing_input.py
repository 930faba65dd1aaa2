"""Llama 4's router (modeling_llama4.py, Llama4Router and Llama4TextMoe): each token's top-k router logits,
through a sigmoid (not a softmax, not renormalized), scale the token's *input* to each chosen expert; the
expert outputs are summed unweighted. transformers runs every expert on every token with the unchosen
scores at sigmoid(-inf) = 0 (bias-free experts give 0 there); tfcalc runs the chosen ones only, the same
sum."""

from __future__ import annotations

import torch


def route(logits: torch.Tensor, top_k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(N, E) router logits -> (weights, chosen experts), (N, k) each: sigmoid of the top-k logits."""
    top, chosen = logits.topk(top_k, dim=-1)
    return torch.sigmoid(top.float()).to(logits.dtype), chosen
