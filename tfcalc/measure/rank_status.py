"""Each rank's progress through a distributed run, for the parent's progress lines (issue 21).

A rank writes its step to ``rank-<RANK>.status`` in the launch's temporary folder (beside the request):
one JSON object, ``{"done": k, "total": n, "phase": "timed 3 of 10"}``, written to a temporary name and
renamed over the old one (os.replace is atomic on POSIX), so the parent never reads half a file. The
parent polls the files while it waits (tfcalc.measure.launch) and keeps, per rank, the furthest step yet:
a rank's line never moves back (a stale or unreadable file is ignored).

The steps: 1 for the rendezvous (init_process_group), then per job 1 for building the model, then one
per step it runs (bench: warm-up + timed calls; measure: the warm-up steps + the measured step).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass


def status_path(folder: str, rank: int) -> str:
    return os.path.join(folder, f"rank-{rank}.status")


class StatusWriter:
    """A rank's side: advance(phase) counts one step done and names what comes next."""

    def __init__(self, folder: str, rank: int, total: int):
        self.path, self.total, self.done = status_path(folder, rank), total, 0

    def advance(self, phase: str) -> None:
        self.done = min(self.total, self.done + 1)
        self.write(phase)

    def write(self, phase: str) -> None:
        tmp = f"{self.path}.tmp"
        try:
            with open(tmp, "w", encoding="utf-8") as f:
                json.dump({"done": self.done, "total": self.total, "phase": phase}, f)
            os.replace(tmp, self.path)
        except OSError:  # progress is a courtesy: a full disk must not fail the measured run
            pass


@dataclass(frozen=True)
class RankStatus:
    rank: int
    done: int
    total: int
    phase: str


class StatusReader:
    """The parent's side: poll() returns every rank's furthest status yet (never a step back)."""

    def __init__(self, folder: str, nproc: int):
        self.folder = folder
        self.shown = [RankStatus(r, 0, 0, "starting (importing torch)") for r in range(nproc)]

    def poll(self) -> list[RankStatus]:
        for r, old in enumerate(self.shown):
            try:
                with open(status_path(self.folder, r), encoding="utf-8") as f:
                    raw = json.load(f)
                new = RankStatus(r, int(raw["done"]), int(raw["total"]), str(raw["phase"]))
            except (OSError, ValueError, KeyError, TypeError):  # not written yet, or unreadable: keep the last
                continue
            if new.done >= old.done:  # equal: a later phase of the same step (one rank writes in order)
                self.shown[r] = new
        return list(self.shown)
