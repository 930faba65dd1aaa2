"""YaRN's rotary tables (Peng et al. 2023, arXiv 2309.00071, sec. 3.2-3.4), as transformers computes them
(modeling_rope_utils.py, _compute_yarn_parameters): per frequency, a blend of the original (extrapolated)
and the factor-interpolated inverse frequency, ramped between the dimensions where beta_fast and beta_slow
rotations fit the original context (tfcalc.architecture.rope.Yarn); the tables: tfcalc.model.rope_scaling."""

from __future__ import annotations

import math

import torch


def yarn_inv_freq(theta: float, dim: int, yarn, device=None) -> torch.Tensor:
    """(dim / 2,) inverse frequencies, in float32 as transformers computes them."""

    def correction_dim(rotations: float) -> float:
        return dim * math.log(yarn.original_max_seq_len / (rotations * 2 * math.pi)) / (2 * math.log(theta))

    low, high = correction_dim(yarn.beta_fast), correction_dim(yarn.beta_slow)
    if yarn.truncate:  # whole dimensions (find_correction_range); gpt-oss keeps the fractions (truncate: false)
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    high = high + 0.001 if low == high else high  # no division by zero
    pos_freqs = theta ** (torch.arange(0, dim, 2, device=device, dtype=torch.float32) / dim)
    ramp = ((torch.arange(dim // 2, device=device, dtype=torch.float32) - low) / (high - low)).clamp(0, 1)
    extrapolation = 1 - ramp  # 1: keep the original frequency; 0: interpolate by the factor
    return (1.0 / (yarn.factor * pos_freqs)) * (1 - extrapolation) + (1.0 / pos_freqs) * extrapolation

