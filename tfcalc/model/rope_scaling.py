"""The rotary tables of a scaled RoPE (tfcalc.architecture.rope says each kind), computed as transformers 5.24
computes them (modeling_rope_utils.py): inverse frequencies in float32 from base^(arange(0, d, 2) / d), scaled
per kind, the angles outer(positions, inv_freq) in float32, cos and sin times the kind's attention factor
(YaRN's and longrope's; 1 for linear and llama3). Rotate-half layout, like tfcalc.model.positions.rope_tables."""

from __future__ import annotations

import math

import torch

from tfcalc.model.yarn import yarn_inv_freq


def base_inv_freq(theta: float, dim: int, device=None) -> torch.Tensor:
    """(dim / 2,) unscaled inverse frequencies, float32, in transformers' order of operations."""
    return 1.0 / (theta ** (torch.arange(0, dim, 2, device=device, dtype=torch.int64).float() / dim))


def llama3_inv_freq(theta: float, dim: int, s, device=None) -> torch.Tensor:
    """_compute_llama3_parameters: wavelengths below L / high kept, above L / low divided by the factor, the
    band between blended by s = (L / λ - low) / (high - low). With low = high (Llama 4) there is no band; the
    blend is never taken there (torch.where), as in transformers."""
    inv_freq = base_inv_freq(theta, dim, device)
    length = s.original_max_seq_len
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > length / s.low_freq_factor, inv_freq / s.factor, inv_freq)
    span = s.high_freq_factor - s.low_freq_factor
    smooth = (length / wavelen - s.low_freq_factor) / (span if span else 1.0)
    blended = (1 - smooth) * scaled / s.factor + smooth * scaled
    medium = (wavelen >= length / s.high_freq_factor) & (wavelen <= length / s.low_freq_factor)
    return torch.where(medium, blended, scaled)


def scaled_inv_freq(theta: float, dim: int, scaling, device=None) -> torch.Tensor:
    """The (dim / 2,) inverse frequencies of a scaled RoPE, by its kind."""
    if scaling.kind == "yarn":
        return yarn_inv_freq(theta, dim, scaling, device)
    if scaling.kind == "linear":
        return base_inv_freq(theta, dim, device) / scaling.factor
    if scaling.kind == "llama3":
        return llama3_inv_freq(theta, dim, scaling, device)
    if scaling.kind == "longrope":  # _compute_longrope_parameters: 1 / (ext_factors · base^(2i/d)), float32
        ext = torch.tensor(scaling.ext_factors, dtype=torch.float32, device=device)
        shape = torch.arange(0, dim, 2, dtype=torch.int64, device=device).float() / dim
        return 1.0 / (ext * theta**shape)
    if scaling.kind == "proportional":  # _compute_proportional_rope_parameters: the head's first a turn, the rest 0
        inv_freq = base_inv_freq(theta, dim, device)
        inv_freq[scaling.turning(dim):] = 0.0
        return inv_freq / scaling.factor
    raise ValueError(f"no rotary table for RoPE scaling {scaling.kind!r}")  # tfcalc.architecture.rope lists them


def scaled_tables(theta: float, dim: int, length: int, scaling, device=None) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin (length, dim), rotate-half layout, times the attention factor."""
    inv_freq = scaled_inv_freq(theta, dim, scaling, device)
    angles = torch.outer(torch.arange(length, device=device, dtype=torch.float32), inv_freq)
    angles = torch.cat([angles, angles], dim=-1)
    return angles.cos() * scaling.attention_factor, angles.sin() * scaling.attention_factor
