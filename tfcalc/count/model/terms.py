"""The small terms every FLOP count is built of: FFN matrix counts, causal score pairs, non-matmul costs
per element, and the size checks. Pure arithmetic, no torch."""

from __future__ import annotations

from dataclasses import dataclass

from tfcalc.errors import InputError

SOFTMAX_PER_SCORE = 5
NORM_PER_ELEMENT = {("layernorm", True): 7, ("layernorm", False): 6, ("rmsnorm", False): 4}
ACTIVATION_PER_ELEMENT = {"relu": 1, "gelu": 5, "gelu_tanh": 9, "silu": 4}
ROPE_PER_ELEMENT = 3
SOFTCAP_PER_ELEMENT = 3  # c·tanh(x / c): divide, tanh, multiply
SIGMOID_PER_ELEMENT = 4  # negate, exp, +1, divide


def causal_pairs(queries: int, keys: int, window: int | None = None, chunk: int | None = None) -> int:
    """Unmasked (query, key) pairs when the queries are the last ``queries`` of ``keys`` positions:
    row i (0-based) sees keys - queries + i + 1 keys. queries == keys == T gives T·(T+1)/2. With a
    sliding window W a query at position p sees min(p + 1, W) keys: the sum of min(n, W) over
    n = keys - queries + 1 .. keys. With chunks of C (Llama 4) a query at p sees (p mod C) + 1 keys."""
    if chunk is not None:
        return _chunk_pairs(keys, chunk) - _chunk_pairs(keys - queries, chunk)
    if window is None:
        return queries * (keys - queries) + queries * (queries + 1) // 2
    lo, hi = keys - queries + 1, keys  # each query's visible keys without the window: n = lo .. hi
    top = min(hi, window)
    below = (top * (top + 1) - (lo - 1) * lo) // 2 if lo <= top else 0  # n <= W: n keys
    return below + window * (hi - max(lo - 1, window)) if hi > window else below


def _chunk_pairs(n: int, chunk: int) -> int:
    """Σ_{p < n} ((p mod C) + 1): n // C whole chunks of C·(C+1)/2 pairs, then r = n mod C rows of 1..r."""
    whole, r = divmod(n, chunk)
    return whole * chunk * (chunk + 1) // 2 + r * (r + 1) // 2


@dataclass(frozen=True)
class NonMatmulEntry:
    """Approximate non-matmul FLOPs: ``per_element`` FLOPs on each of ``elements`` elements, ``copies`` times."""

    component: str  # softmax, norms, activation, rope, residual, bias, positions, moe, pooler, softcap, head
    label: str
    per_element: int
    elements: int
    copies: int

    @property
    def total(self) -> int:
        return self.per_element * self.elements * self.copies


def check_sizes(**sizes: int) -> None:
    for name, value in sizes.items():
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise InputError(f"{name} must be a positive integer; got {value!r}")
