"""Shared pieces of the tests' request-by-request simulations of a serving engine (tests/count/test_continuous.py,
test_chunked_prefill.py, test_disaggregated.py): Poisson arrival times and a decode step over the sequences in
flight, each held as [tokens left, time of its last token]."""

from __future__ import annotations

import random
from collections import deque


def poisson_arrivals(rate: float, requests: int, seed: int) -> deque:
    """``requests`` arrival times of a Poisson stream at ``rate`` per second (seeded), in order."""
    rng = random.Random(seed)
    arrivals, t = deque(), 0.0
    for _ in range(requests):
        t += rng.expovariate(rate)
        arrivals.append(t)
    return arrivals


def token_step(running: list, now: float, step: float, gaps: list) -> tuple[float, list]:
    """A step of ``step`` seconds from ``now``: every sequence in flight gets a token at its end, the gap since its
    previous token appended to ``gaps``. Returns the step's end and the sequences with tokens still to come."""
    now += step
    for seq in running:
        gaps.append(now - seq[1])
        seq[0] -= 1
        seq[1] = now
    return now, [s for s in running if s[0] > 0]
