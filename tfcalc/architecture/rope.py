"""RoPE scaling: how a layer's rotary frequencies are stretched past the context it was trained on, as
transformers 5.24 computes them (modeling_rope_utils.py). A function of the position only: no parameter,
matmul or cached byte changes, so every count holds; tfcalc's model builds each into its rotary tables
(tfcalc.model.rope_scaling). Pure Python: no torch, typer or rich here.

With d the rotated channels and b the base, the unscaled inverse frequencies are f_i = b^(-2i/d), i < d/2.

- ``LinearScaling`` (position interpolation, kaiokendev; Chen et al. 2023, arXiv 2306.15595;
  _compute_linear_scaling_rope_parameters): f_i / factor. Gemma 3 4B-27B: factor 8 on the global layers.
- ``Llama3Scaling`` (Meta's Llama 3.1 reference, _compute_llama3_parameters): with L the original context,
  wavelength λ_i = 2π / f_i: λ_i < L / high_freq_factor keeps f_i; λ_i > L / low_freq_factor takes
  f_i / factor; in between, (1 - s)·f_i / factor + s·f_i with s = (L / λ_i - low) / (high - low). Llama 3.1:
  factor 8, low 1, high 4, L 8192; Llama 4 Scout: factor 16, low = high = 1 (no band in between).
- ``Yarn`` (Peng et al. 2023, arXiv 2309.00071, sec. 3.2-3.4; _compute_yarn_parameters): per frequency a ramp
  from f_i (dimensions that turn more than beta_fast times over L) to f_i / factor (fewer than beta_slow),
  the ramp's ends floored and ceiled unless ``truncate`` is false (gpt-oss); cos and sin times the attention
  factor: given, or mscale(mscale) / mscale(mscale_all_dim) when both are given, or 0.1·ln(factor) + 1.
- ``LongRope`` (Phi-3's "su"/"longrope"; Ding et al. 2024, arXiv 2402.13753; _compute_longrope_parameters):
  f_i / e_i with e the config's per-frequency short_factor or long_factor list; cos and sin times
  sqrt(1 + ln(factor) / ln(L)) (1 for a factor of at most 1), factor the file's, else max_position_embeddings / L.
  transformers picks the list per forward by the sequence so far (longrope_frequency_update: long once
  max(position) + 1 > L, short otherwise) and never re-rotates the keys already cached. tfcalc's tables are
  fixed for max_seq_len: long_factor when max_seq_len > L, short_factor otherwise, so the logits equal
  transformers' for every sequence past L (or all of them when max_seq_len <= L); below L with
  max_seq_len > L, transformers rotates by the short list and tfcalc by the long one.
- ``Proportional`` (Gemma 4's global layers; _compute_proportional_rope_parameters): a whole head of h channels
  in the rotate-half layout, of which the first a = int(p·h // 2) frequencies turn, f_i = b^(-2i/h) (the full
  head's, not an a-pair head's: unlike GPT-NeoX's partial rotary), the other h/2 - a stand still (frequency 0:
  cos 1, sin 0), every frequency divided by ``factor``; p is ``partial_rotary_factor`` of the layer's dict.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Optional, Union

from tfcalc.errors import InputError


def yarn_mscale(factor: float, mscale: float = 1.0) -> float:
    """0.1·mscale·ln(factor) + 1 for a factor above 1, else 1 (YaRN, sec. 3.4; yarn_get_mscale)."""
    return 1.0 if factor <= 1 else 0.1 * mscale * math.log(factor) + 1.0


@dataclass(frozen=True)
class Yarn:
    """YaRN's rotary scaling (transformers' modeling_rope_utils.py, _compute_yarn_parameters)."""

    factor: float
    original_max_seq_len: int
    beta_fast: float = 32.0
    beta_slow: float = 1.0
    mscale: Optional[float] = None
    mscale_all_dim: Optional[float] = None
    given_attention_factor: Optional[float] = None  # attention_factor, where the config states it (OLMo 3)
    truncate: bool = True  # floor and ceil the ramp's ends (gpt-oss: false)
    kind = "yarn"

    def __post_init__(self) -> None:
        if self.factor <= 0 or self.original_max_seq_len < 1 or self.beta_fast <= 0 or self.beta_slow <= 0:
            raise InputError("YaRN needs a positive factor, original length, beta_fast and beta_slow")
        if self.given_attention_factor is not None and self.given_attention_factor <= 0:
            raise InputError(f"YaRN's attention factor must be positive; got {self.given_attention_factor}")

    @property
    def attention_factor(self) -> float:
        """What cos and sin are multiplied by: the one given, else mscale(mscale) / mscale(mscale_all_dim) when
        both are given, else mscale(factor)."""
        if self.given_attention_factor is not None:
            return self.given_attention_factor
        if self.mscale and self.mscale_all_dim:
            return yarn_mscale(self.factor, self.mscale) / yarn_mscale(self.factor, self.mscale_all_dim)
        return yarn_mscale(self.factor)

    @property
    def softmax_factor(self) -> float:
        """What a latent attention's softmax scale is multiplied by: mscale(mscale_all_dim)² (DeepSeek's
        yarn_get_mscale in modeling_deepseek_v3.py), else 1."""
        return yarn_mscale(self.factor, self.mscale_all_dim) ** 2 if self.mscale_all_dim else 1.0


@dataclass(frozen=True)
class LinearScaling:
    """Every frequency divided by ``factor`` (positions interpolated)."""

    factor: float
    kind = "linear"
    attention_factor = 1.0

    def __post_init__(self) -> None:
        if not self.factor > 0:
            raise InputError(f"linear RoPE scaling needs a positive factor; got {self.factor}")


@dataclass(frozen=True)
class Llama3Scaling:
    """Llama 3.1's: low frequencies divided by ``factor``, high ones kept, a smooth band between."""

    factor: float
    low_freq_factor: float
    high_freq_factor: float
    original_max_seq_len: int
    kind = "llama3"
    attention_factor = 1.0

    def __post_init__(self) -> None:
        if not (self.factor > 0 and self.low_freq_factor > 0 and self.high_freq_factor > 0):
            raise InputError("llama3 RoPE scaling needs a positive factor, low_freq_factor and high_freq_factor")
        if self.low_freq_factor > self.high_freq_factor or self.original_max_seq_len < 1:
            raise InputError(f"llama3 RoPE scaling: low_freq_factor ({self.low_freq_factor}) must be at most "
                             f"high_freq_factor ({self.high_freq_factor}), and the original length at least 1")


@dataclass(frozen=True)
class LongRope:
    """Each frequency divided by its own factor: ``ext_factors`` (the long or the short list, the docstring above
    says which), cos and sin times sqrt(1 + ln(factor) / ln(original))."""

    factor: float
    original_max_seq_len: int
    ext_factors: tuple[float, ...]
    kind = "longrope"

    def __post_init__(self) -> None:
        if not (self.factor > 0 and self.original_max_seq_len > 1 and all(e > 0 for e in self.ext_factors)):
            raise InputError("longrope RoPE scaling needs a positive factor and factors, and an original length > 1")

    @property
    def attention_factor(self) -> float:
        """_compute_longrope_parameters' default (the file's attention_factor is not read: tfcalc refuses it)."""
        if self.factor <= 1.0:
            return 1.0
        return math.sqrt(1 + math.log(self.factor) / math.log(self.original_max_seq_len))


@dataclass(frozen=True)
class Proportional:
    """Gemma 4's: of a whole head's h/2 rotate-half frequencies the first int(proportion·h // 2) turn (divided
    by ``factor``), the rest stand still. The head width is the layer's, so the turning count is asked per width."""

    proportion: float
    factor: float = 1.0
    kind = "proportional"
    attention_factor = 1.0

    def __post_init__(self) -> None:
        if not (0 < self.proportion <= 1 and self.factor > 0):
            raise InputError(f"proportional RoPE needs a proportion in (0, 1] and a positive factor; got "
                             f"{self.proportion} and {self.factor}")

    def turning(self, head_dim: int) -> int:
        """Frequencies that turn in a head of head_dim channels: int(proportion·head_dim // 2), as transformers."""
        return int(self.proportion * head_dim // 2)


RopeScaling = Union[Yarn, LinearScaling, Llama3Scaling, LongRope, Proportional]
KINDS = ("yarn", "linear", "llama3", "longrope", "proportional")  # the rope_type values tfcalc builds


def from_fields(cfg: Any) -> Optional[RopeScaling]:
    """The scaling a flat config's fields say (tfcalc.config_rope lists and checks them), or None."""
    kind = cfg.rope_scaling
    if kind == "linear":
        return LinearScaling(cfg.rope_scaling_factor)
    if kind == "llama3":
        return Llama3Scaling(cfg.rope_scaling_factor, cfg.rope_low_freq_factor, cfg.rope_high_freq_factor,
                             cfg.rope_original_max_seq_len)
    if kind == "yarn":
        return Yarn(cfg.rope_scaling_factor, cfg.rope_original_max_seq_len,
                    32.0 if cfg.yarn_beta_fast is None else cfg.yarn_beta_fast,
                    1.0 if cfg.yarn_beta_slow is None else cfg.yarn_beta_slow, cfg.yarn_mscale, cfg.yarn_mscale_all_dim,
                    cfg.yarn_attention_factor, cfg.yarn_truncate is not False)
    if kind == "longrope":  # the list of the longest sequence the tables serve (module docstring)
        long = cfg.max_seq_len > cfg.rope_original_max_seq_len
        return LongRope(cfg.rope_scaling_factor, cfg.rope_original_max_seq_len,
                        tuple(cfg.rope_long_factor if long else cfg.rope_short_factor))
    if kind == "proportional":
        return Proportional(cfg.rope_proportion, 1.0 if cfg.rope_scaling_factor is None else cfg.rope_scaling_factor)
    return None


def for_layer(cfg: Any, local: bool) -> Optional[RopeScaling]:
    """The scaling of a RoPE layer: every one's, or (rope_scaling_layers: full) the global layers' only, as
    Gemma 3 and OLMo 3 scale theirs (rope_parameters nested by layer type, full_attention's)."""
    if local and cfg.rope_scaling_layers == "full":
        return None
    return from_fields(cfg)
