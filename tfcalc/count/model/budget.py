"""Budgets: sizes as people write them (80GB, 24GiB), and the largest context and batch whose memory fits
one. Pure arithmetic, no torch."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from decimal import Decimal, InvalidOperation
from typing import Callable, Optional

from tfcalc.config import ModelConfig
from tfcalc.count.model.memory import kv_cache_bytes, weights_bytes
from tfcalc.count.model.training_memory import training_bytes, training_state
from tfcalc.errors import InputError as ConfigError
from tfcalc.workload import Workload

_UNITS = {
    "": 1, "b": 1,
    "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12, "pb": 10**15,
    "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40, "pib": 2**50,
}
_SIZE = re.compile(r"\s*([0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*([a-z]*)\s*", re.IGNORECASE)


def parse_bytes(text: str, option: str = "") -> int:
    """'80GB' -> 80·10⁹, '80 GiB' -> 80·2³⁰, '1.5TB', '512MB', '1000B' (bytes). Decimal units (kB, MB,
    GB, TB, PB) are powers of 1000, binary ones (KiB, MiB, GiB, TiB, PiB) powers of 1024; case is
    ignored. A bare 'G' is refused: it could mean either. Fractions of a byte round down.

    A number without a unit is refused, with a hint, rather than read as bytes: `--budget 24` is a slip
    for 24 GB far more often than a budget of 24 bytes, and the answer for 24 bytes ("nothing fits")
    would look like a finding. A warning beside that answer is easy to miss (in a script, under --json);
    the unit costs one character where bytes are really meant (1000B)."""
    m = _SIZE.fullmatch(text or "") if len(text or "") <= 64 else None
    unit = m.group(2).lower() if m else ""
    shown = repr(text) if len(text or "") <= 64 else f"'{text[:40]}…' ({len(text):,} characters)"
    shown = f"{option} {shown}" if option else shown
    if m and m.group(2) == "":
        raise ConfigError(f"{shown} has no unit; write {m.group(1)}GB (10^9 bytes), {m.group(1)}GiB (2^30 bytes) "
                          f"or {m.group(1)}B (bytes)")
    if not m or unit not in _UNITS:
        hint = " (say GB for 10^9 bytes or GiB for 2^30)" if m and unit in ("k", "m", "g", "t", "p") else ""
        raise ConfigError(f"cannot read {shown} as a size; write e.g. 80GB, 80GiB, 512MB or 1000B{hint}")
    try:
        value = int(Decimal(m.group(1)) * _UNITS[unit])
    except InvalidOperation:  # pragma: no cover - the pattern admits only decimal numbers
        raise ConfigError(f"cannot read '{text}' as a size") from None
    if value <= 0:
        raise ConfigError(f"a size must be positive; got {shown}")
    return value


SEARCH_CAP = 2**40  # the largest batch or context searched (tfcalc.workload.MAX_SIZE): far past any real run


def largest_fitting(needed: Callable[[int], int], budget: int, limit: int = SEARCH_CAP) -> int:
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

    @property
    def seq_capped(self) -> bool:
        """True when the search stopped at SEARCH_CAP: max_seq is then a lower bound, not the answer."""
        return self.max_seq >= SEARCH_CAP

    @property
    def batch_capped(self) -> bool:
        return self.max_batch >= SEARCH_CAP


def fit_inference(cfg: ModelConfig, workload: Workload, budget: int, weights: Optional[int] = None,
                  kv_dtype: Optional[str] = None) -> Fit:
    """Largest context (at the workload's batch) and batch (at its seq, default the context length) whose
    weights + KV cache fit the budget. An encoder-decoder keeps the workload's src_seq source positions;
    without one, as many as the context. ``weights`` (bytes) and ``kv_dtype`` when they are not params ×
    dtype and dtype (quantized weights, tfcalc.count.model.quant; a cache in its own dtype)."""
    w, seq = workload, workload.seq or cfg.max_seq_len
    fixed = weights_bytes(cfg, w.dtype) if weights is None else weights
    kv = kv_dtype or w.dtype

    def need(b: int, t: int) -> int:
        return fixed + kv_cache_bytes(cfg, replace(w, batch=b, seq=t, gen=0, kv_dtype=kv))

    return Fit(budget, fixed, largest_fitting(lambda t: need(w.batch, t), budget),
               largest_fitting(lambda b: need(b, seq), budget))


def fit_training(cfg: ModelConfig, workload: Workload, budget: int, optimizer: str = "adam-mixed",
                 attention: Optional[str] = None, recompute: str = "none") -> Fit:
    """Largest context (at the workload's batch) and batch (at its seq) whose training state +
    activations fit the budget (an encoder-decoder: its src_seq source tokens, or as many as the context)."""
    seq = workload.seq or cfg.max_seq_len

    def need(b: int, t: int) -> int:
        return training_bytes(cfg, replace(workload, batch=b, seq=t), optimizer, attention, recompute)

    return Fit(
        budget, training_state(cfg, workload.dtype, optimizer).total,
        largest_fitting(lambda t: need(workload.batch, t), budget),
        largest_fitting(lambda b: need(b, seq), budget),
    )
