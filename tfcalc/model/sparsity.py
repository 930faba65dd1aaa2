"""Gemma 3n's activation sparsity in the real model (tfcalc.architecture.ffn, FFN.sparsity): the gate's Gaussian
top-k, as modeling_gemma3n.py's Gemma3nTextMLP._gaussian_topk computes it. Φ⁻¹(s) is computed once per share, on
the host, in float32 as transformers computes it: a step makes no tensor from the host (a CUDA graph captures it)."""

from __future__ import annotations

import functools

import torch


@functools.lru_cache(maxsize=None)
def std_multiplier(sparsity: float) -> float:
    """Φ⁻¹(sparsity) of the standard normal, float32 (torch.distributions.Normal.icdf)."""
    return float(torch.distributions.normal.Normal(0.0, 1.0).icdf(torch.tensor(sparsity, dtype=torch.float32)))


def gaussian_topk(gate: torch.Tensor, sparsity: float) -> torch.Tensor:
    """relu(gate - (mean + std·Φ⁻¹(sparsity))) over the last dim, the std biased (as transformers')."""
    mean = torch.mean(gate, dim=-1, keepdim=True)
    std = torch.std(gate, dim=-1, keepdim=True, unbiased=False)
    return torch.relu(gate - (mean + std * std_multiplier(sparsity)))
