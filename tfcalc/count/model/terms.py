"""The small terms every FLOP count is built of: FFN matrix counts, causal score pairs, non-matmul costs
per element, and the size checks. Pure arithmetic, no torch."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from tfcalc.architecture.attention import causal_pairs  # noqa: F401 (re-exported: the mask is attention's)
from tfcalc.errors import InputError

SOFTMAX_PER_SCORE = 5
NORM_PER_ELEMENT = {("layernorm", True): 7, ("layernorm", False): 6, ("rmsnorm", False): 4}
ACTIVATION_PER_ELEMENT = {"relu": 1, "relu2": 2, "gelu": 5, "gelu_tanh": 9, "silu": 4, "xielu": 12}
ROPE_PER_ELEMENT = 3
SOFTCAP_PER_ELEMENT = 3  # c·tanh(x / c): divide, tanh, multiply
SIGMOID_PER_ELEMENT = 4  # negate, exp, +1, divide


@dataclass(frozen=True)
class NonMatmulEntry:
    """Approximate non-matmul FLOPs: ``per_element`` FLOPs on each of ``elements`` elements, ``copies`` times."""

    component: str  # softmax, norms, activation, rope, residual, bias, positions, moe, pooler, softcap, head
    label: str
    per_element: int
    elements: int
    copies: int
    kernels: int = 1  # per copy (a mixer's Elementwise.kernels: a loop's or a chunked scan's)
    traffic: Optional[int] = None  # bytes per copy (a mixer's Elementwise.traffic); None: 2·elements·act bytes

    @property
    def total(self) -> int:
        return self.per_element * self.elements * self.copies


def check_sizes(**sizes: int) -> None:
    for name, value in sizes.items():
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise InputError(f"{name} must be a positive integer; got {value!r}")


def workload_sizes(w) -> tuple[int, int]:
    """(B, T) of a Workload, each a positive integer (its seq set: Workload.for_model resolves it)."""
    check_sizes(batch=w.batch, seq=w.seq)
    return w.batch, w.seq
