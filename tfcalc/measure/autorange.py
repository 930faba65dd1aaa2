"""Timing to a budget: warm up until stable, then time until a minimum time and a minimum number of
calls, in rounds interleaved with everything else being timed.

The way torch.utils.benchmark's ``Timer.blocked_autorange`` (``min_run_time``) and pytest-benchmark
(``min_time``, ``min_rounds``, ``warmup``) choose how long to time, adapted to calls that may each take
seconds (a full-context forward pass on a CPU):

- Warm-up, until stable: one call at a time, each timed (tfcalc.measure.bench.time_calls, one call), until
  a call ran no more than STABLE faster than the one before it (first-call costs -- allocation, kernel
  selection, compilation -- are behind us), or the warm-up has used WARMUP_SHARE of the budget (a
  forward pass of seconds warms up in one call), or MAX_WARMUP calls. ``Budget.warmup`` fixes the count.
- How many timed calls: enough to fill ``min_time`` at the warm-up's last call duration, at least
  ``min_calls``, at most MAX_CALLS (microsecond kernels on a GPU). With no warm-up call to go by, the
  first timed call sets it.
- Rounds: the calls are split into ``rounds`` blocks, and the blocks of everything timed in one run
  (the matmul ceiling, the forward pass at each length, its sub-layers) alternate: round 0 of each,
  then round 1 of each, ... A drift of the machine (another process, clocks, heat) then shows in every
  item alike and, as a difference between the rounds' medians, in ``Autorange.round_spread``: the
  run-to-run noise that a spread within one block of back-to-back calls misses (two runs of
  `tfcalc bench gpt2` once gave medians 7.3 s and 4.8 s, each with p10-p90 within ±3%).
- Every timed call goes through tfcalc.measure.bench.time_calls: one loop, one clock per device (CUDA
  events, or perf_counter after a synchronize), so the CPU tests exercise what runs on a GPU.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Protocol

STABLE = 0.10  # a call within 10% of the previous one (not faster by more) ends the warm-up
WARMUP_SHARE = 0.25  # at most this share of min_time goes to warming up, after the first call
MAX_WARMUP = 10
MAX_CALLS = 1000
SECONDARY_SHARE = 1 / 16  # the ceiling and each sub-layer: a sixteenth of the forward pass's time (an eighth
# made bench 17.8x its forward pass, issue 32), ...
SECONDARY_CALLS = 3  # ... and at least 3 calls (a median of three)


@dataclass(frozen=True)
class Budget:
    """How long to time one thing."""

    min_time: float = 3.0  # seconds of timed calls, all rounds together
    min_calls: int = 5
    rounds: int = 3
    warmup: Optional[int] = None  # exactly this many warm-up calls; None: until stable

    def secondary(self) -> "Budget":
        """The budget of what is timed beside the forward pass: enough for a stable median, no more."""
        return Budget(self.min_time * SECONDARY_SHARE, min(self.min_calls, SECONDARY_CALLS), self.rounds,
                      self.warmup)


def calls_for(budget: Budget, per_call: Optional[float]) -> int:
    """Timed calls to fill the budget at per_call seconds each (None: unknown, the minimum)."""
    if not per_call or per_call <= 0:
        return budget.min_calls
    return min(MAX_CALLS, max(budget.min_calls, math.ceil(budget.min_time / per_call)))


def split(calls: int, rounds: int) -> list[int]:
    """calls over min(rounds, calls) blocks, as even as can be: split(5, 3) == [2, 2, 1]."""
    n = max(1, min(rounds, calls))
    return [calls // n + (i < calls % n) for i in range(n)]


def warmed_up(durations: list[float], budget: Budget) -> bool:
    """The warm-up rule (module docstring) on the durations of the warm-up calls so far."""
    if budget.warmup is not None:
        return len(durations) >= budget.warmup
    if not durations:
        return False
    if len(durations) >= MAX_WARMUP or sum(durations[1:]) >= WARMUP_SHARE * budget.min_time:
        return True
    if durations[0] >= WARMUP_SHARE * budget.min_time:  # one call of a quarter of the budget or more
        return True
    return len(durations) >= 2 and durations[-1] >= (1 - STABLE) * durations[-2]


class Meter(Protocol):
    """What may wrap an item's first round (a peak-memory meter): start(), then peak()."""

    def start(self) -> None: ...

    def peak(self) -> Any: ...


@dataclass
class Autorange:
    """One thing to time: fn, its budget, and what was measured. ``meter`` (optional) is started before
    its warm-up and read after its first round, so it sees a full call at steady state."""

    fn: Callable[[], object]
    budget: Budget
    meter: Optional[Meter] = None
    warmup: list[float] = field(default_factory=list)
    plan: Optional[list[int]] = None  # timed calls per round
    rounds: list[tuple[float, ...]] = field(default_factory=list)
    peak: Any = None
    label: str = ""  # what a progress bar names while it runs ("seq 1,024: forward")

    def warm(self, time_one: Callable[[Callable[[], object]], float]) -> None:
        while not warmed_up(self.warmup, self.budget):
            self.warmup.append(time_one(self.fn))
        if self.warmup:
            self.plan = split(calls_for(self.budget, self.warmup[-1]), self.budget.rounds)

    def remaining_seconds(self) -> float:
        """A forecast of the time its calls still to come take: the budget before it has run, then its
        remaining calls at the last measured duration."""
        if self.plan is None:
            return self.budget.min_time
        last = self.rounds[-1][-1] if self.rounds else self.warmup[-1]
        return last * sum(self.plan[len(self.rounds):])


def run_interleaved(items: list[Autorange], time_one: Callable[[Callable[[], object]], float],
                    time_block: Callable[[Callable[[], object], int], tuple[float, ...]],
                    remaining: Callable[[float], None] = lambda seconds: None,
                    describe: Callable[[str], None] = lambda text: None) -> None:
    """Warm up and time every item in interleaved rounds (module docstring). time_one(fn) times one
    synchronized call; time_block(fn, n) times n calls (tfcalc.measure.bench.time_calls underneath).
    remaining(seconds) hears, after each block, how long the rest should take (a progress bar's ETA);
    describe(text) hears the phase and the item under way ('round 2 of 3: seq 1,024: forward')."""
    r = 0
    while any(item.plan is None or r < len(item.plan) for item in items):
        rounds = max(len(i.plan) if i.plan else i.budget.rounds for i in items)
        for item in items:
            if r == 0:
                describe(f"warm-up and round 1 of {rounds}: {item.label}")
                _first_round(item, time_one, time_block)
            elif r < len(item.plan):
                describe(f"round {r + 1} of {rounds}: {item.label}")
                item.rounds.append(time_block(item.fn, item.plan[r]))
            else:
                continue
            remaining(sum(i.remaining_seconds() for i in items))
        r += 1


def _first_round(item: Autorange, time_one, time_block) -> None:
    if item.meter is not None:
        item.meter.start()
    item.warm(time_one)
    if item.plan is None:  # no warm-up call to go by: the first timed call sets the plan
        first = time_block(item.fn, 1)
        item.plan = split(calls_for(item.budget, first[0]), item.budget.rounds)
        item.rounds.append(first + (time_block(item.fn, item.plan[0] - 1) if item.plan[0] > 1 else ()))
    else:
        item.rounds.append(time_block(item.fn, item.plan[0]))
    if item.meter is not None:
        item.peak = item.meter.peak()


def samples(item: Autorange) -> tuple[float, ...]:
    return tuple(s for block in item.rounds for s in block)


def round_spread(item: Autorange) -> Optional[float]:
    """(slowest - fastest round median) / the median of all samples; None with a single round."""
    if len(item.rounds) < 2:
        return None
    medians = [statistics.median(block) for block in item.rounds]
    return (max(medians) - min(medians)) / statistics.median(samples(item))
