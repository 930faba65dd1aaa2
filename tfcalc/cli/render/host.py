"""The busy-host warning of every timed command (bench, bench decode, bench ranks, infer --measure, plan
--measure): timings taken while the host runs more work than it has CPUs include waiting for it, and two runs
of the same command then differ by 2x (issue 32 saw 1.8x). The rule of tfcalc.measure.decode: the 1-minute load
average, the higher of before and after, above the CPU count."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Optional


def load_average() -> Optional[float]:
    try:
        return os.getloadavg()[0]
    except (OSError, AttributeError):  # Windows has none
        return None


@contextmanager
def busy_host(what: str, enabled: bool = True) -> Iterator[None]:
    """Run the timed work; then one warning line on stderr when the host was busy (see the module docstring)."""
    before = load_average() if enabled else None
    yield
    if not enabled:
        return
    loads = [x for x in (before, load_average()) if x is not None]
    cpus = os.cpu_count()
    if loads and cpus and max(loads) > cpus:
        from tfcalc.cli import render

        render.warn(f"the host was busy while {what} ran (load average {max(loads):.1f} on {cpus} CPUs): the "
                    "timings include waiting for other processes; compare timings from quiet runs")
