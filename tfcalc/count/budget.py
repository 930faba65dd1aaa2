"""Budgets: sizes as people write them (80GB, 24GiB), and the largest context and batch whose memory fits
one. Pure arithmetic, no torch."""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation
from dataclasses import dataclass
from typing import Callable, Optional

from tfcalc.config import ModelConfig
from tfcalc.count.memory import inference_bytes, weights_bytes
from tfcalc.count.training import training_bytes, training_state
from tfcalc.errors import InputError as ConfigError

_UNITS = {
    "": 1, "b": 1,
    "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12, "pb": 10**15,
    "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40, "pib": 2**50,
}
_SIZE = re.compile(r"\s*([0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*([a-z]*)\s*", re.IGNORECASE)


def parse_bytes(text: str) -> int:
    """'80GB' -> 80·10⁹, '80 GiB' -> 80·2³⁰, '1.5TB', '512MB', '1000' (bytes). Decimal units (kB, MB,
    GB, TB, PB) are powers of 1000, binary ones (KiB, MiB, GiB, TiB, PiB) powers of 1024; case is
    ignored. A bare 'G' is refused: it could mean either. Fractions of a byte round down."""
    m = _SIZE.fullmatch(text or "")
    unit = m.group(2).lower() if m else ""
    if not m or unit not in _UNITS:
        hint = " (say GB for 10^9 bytes or GiB for 2^30)" if m and unit in ("k", "m", "g", "t", "p") else ""
        raise ConfigError(f"cannot read '{text}' as a size; write e.g. 80GB, 80GiB, 512MB or 1000000{hint}")
    try:
        value = int(Decimal(m.group(1)) * _UNITS[unit])
    except InvalidOperation:  # pragma: no cover - the pattern admits only decimal numbers
        raise ConfigError(f"cannot read '{text}' as a size") from None
    if value <= 0:
        raise ConfigError(f"a size must be positive; got '{text}'")
    return value


def largest_fitting(needed: Callable[[int], int], budget: int, limit: int = 2**40) -> int:
    """The largest n in [1, limit] with needed(n) <= budget, for needed non-decreasing in n; 0 if none."""
    if needed(1) > budget:
        return 0
    lo, hi = 1, 2
    while hi <= limit and needed(hi) <= budget:  # lo fits; double until hi does not
        lo, hi = hi, 2 * hi
    hi = min(hi, limit + 1)
    while hi - lo > 1:  # invariant: lo fits, hi does not (or is past the limit)
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if needed(mid) <= budget else (lo, mid)
    return lo


@dataclass(frozen=True)
class Fit:
    """What fits a memory budget: the largest context at the given batch, the largest batch at the
    given context; 0 where nothing fits (weights_fit False: not even the weights, or the state)."""

    budget: int
    fixed_bytes: int  # weights (inference) or the training state: needed before any token
    max_seq: int
    max_batch: int

    @property
    def weights_fit(self) -> bool:
        return self.fixed_bytes <= self.budget


def fit_inference(cfg: ModelConfig, batch: int, seq: int, dtype: str, budget: int, src_seq: Optional[int] = None) -> Fit:
    """Largest context (at batch) and batch (at seq) whose weights + KV cache fit the budget. An
    encoder-decoder keeps src_seq source positions; without it, as many as the context."""
    return Fit(
        budget, weights_bytes(cfg, dtype),
        largest_fitting(lambda t: inference_bytes(cfg, batch, t, dtype, src_seq), budget),
        largest_fitting(lambda b: inference_bytes(cfg, b, seq, dtype, src_seq), budget),
    )


def fit_training(
    cfg: ModelConfig, batch: int, seq: int, dtype: str, budget: int, optimizer: str = "adam-mixed",
    attention: Optional[str] = None, recompute: str = "none", src_seq: Optional[int] = None,
) -> Fit:
    """Largest context (at batch) and batch (at seq) whose training state + activations fit the budget
    (an encoder-decoder: src_seq source tokens, or as many as the context)."""
    def need(b: int, t: int) -> int:
        return training_bytes(cfg, b, t, dtype, optimizer, attention, recompute, src_seq)

    return Fit(
        budget, training_state(cfg, dtype, optimizer).total,
        largest_fitting(lambda t: need(batch, t), budget),
        largest_fitting(lambda b: need(b, seq), budget),
    )
