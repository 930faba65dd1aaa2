"""YaRN's rotary tables (Peng et al. 2023, arXiv 2309.00071, sec. 3.2-3.4), as transformers computes them
(modeling_rope_utils.py, _compute_yarn_parameters): per frequency, a blend of the original (extrapolated)
and the factor-interpolated inverse frequency, ramped between the dimensions where beta_fast and beta_slow
rotations fit the original context; cos and sin times the attention factor (tfcalc.architecture.latent.Yarn)."""

from __future__ import annotations

import math

import torch


def yarn_inv_freq(theta: float, dim: int, yarn, device=None) -> torch.Tensor:
    """(dim / 2,) inverse frequencies, in float32 as transformers computes them."""

    def correction_dim(rotations: float) -> float:
        return dim * math.log(yarn.original_max_seq_len / (rotations * 2 * math.pi)) / (2 * math.log(theta))

    low = max(math.floor(correction_dim(yarn.beta_fast)), 0)
    high = min(math.ceil(correction_dim(yarn.beta_slow)), dim - 1)
    high = high + 0.001 if low == high else high  # no division by zero
    pos_freqs = theta ** (torch.arange(0, dim, 2, device=device, dtype=torch.float32) / dim)
    ramp = ((torch.arange(dim // 2, device=device, dtype=torch.float32) - low) / (high - low)).clamp(0, 1)
    extrapolation = 1 - ramp  # 1: keep the original frequency; 0: interpolate by the factor
    return (1.0 / (yarn.factor * pos_freqs)) * (1 - extrapolation) + (1.0 / pos_freqs) * extrapolation


def yarn_tables(theta: float, dim: int, length: int, yarn, device=None) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin (length, dim), rotate-half layout, times the attention factor."""
    inv_freq = yarn_inv_freq(theta, dim, yarn, device)
    angles = torch.outer(torch.arange(length, device=device, dtype=torch.float32), inv_freq)
    angles = torch.cat([angles, angles], dim=-1)
    return angles.cos() * yarn.attention_factor, angles.sin() * yarn.attention_factor
