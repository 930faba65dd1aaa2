"""Gemma 3n's activation sparsity in the real model (tfcalc.architecture.ffn, FFN.sparsity): the gate's Gaussian
top-k, as modeling_gemma3n.py's Gemma3nTextMLP._gaussian_topk computes it."""

from __future__ import annotations

import torch


def gaussian_topk(gate: torch.Tensor, sparsity: float) -> torch.Tensor:
    """relu(gate - (mean + std·Φ⁻¹(sparsity))) over the last dim (Gemma3nTextMLP._gaussian_topk)."""
    normal = torch.distributions.normal.Normal(0, 1)
    multiplier = normal.icdf(torch.tensor(sparsity, dtype=torch.float32, device=gate.device)).type(gate.dtype)
    mean = torch.mean(gate, dim=-1, keepdim=True)
    std = torch.std(gate, dim=-1, keepdim=True, unbiased=False)
    return torch.relu(gate - (mean + std * multiplier))
