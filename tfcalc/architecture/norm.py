"""Norms: the kind, its bias, its width. Where they sit in a block is the block's (tfcalc.architecture.block)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from tfcalc.architecture.tensors import Weight, norm_weights
from tfcalc.errors import InputError

NormKind = Literal["layernorm", "rmsnorm"]


@dataclass(frozen=True)
class Norm:
    """LayerNorm (Ba et al. 2016) or RMSNorm (Zhang and Sennrich 2019) over ``width`` channels."""

    kind: NormKind
    width: int
    bias: bool = True
    eps: float = 1e-5
    affine: bool = True  # false: no weight at all (Llama 4's L2 norm of Q and K, modeling_llama4.py Llama4TextL2Norm)

    def __post_init__(self) -> None:
        if self.kind not in ("layernorm", "rmsnorm"):
            raise InputError(f"norm kind must be layernorm or rmsnorm; got {self.kind!r}")
        if self.width < 1:
            raise InputError(f"a norm needs a positive width; got {self.width}")
        if self.kind == "rmsnorm" and self.bias:
            raise InputError("rmsnorm has no bias: leave norm_bias out (or false)")

    def weights(self, name: str, label: str) -> list[Weight]:
        return norm_weights(name, label, self.width, self.bias) if self.affine else []
