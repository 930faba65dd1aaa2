"""A list of per-layer kinds written as tfcalc's layer pattern (tfcalc.architecture.patterns), the shortest
way: plain runs, or a repeated group and the rest as runs. Used by the Reader (``layer_types`` with no
period) and by tfcalc.hf_config.layers. Pure Python.

The search is near-linear in the list (a config.json may list 50,000 layers): which groups repeat is read
from the Z-function of the list (z[p]: how far the list agrees with itself shifted by p), and each
candidate's text length from the runs' prefix sums, so only the shortest text is written out."""

from __future__ import annotations

import bisect


def compact(kinds: list[str]) -> str:
    """A layer pattern for a list of kinds, the shortest to write: plain runs ("full*20, local*8"), or a
    repeated group and the rest as runs ("(local*5, full)*10, local*2"); the first found on a tie, groups
    tried shortest first."""
    n = len(kinds)
    runs = _Runs(kinds)
    z = _z_function(kinds)
    differs = next((i for i, k in enumerate(kinds) if k != kinds[0]), n)  # the first layer unlike layer 0
    best, best_len = None, runs.length(0, n)
    for p in range(max(2, differs + 1), n // 2 + 1):  # a group of one kind is a plain run
        reps = n // p
        if z[p] < p * (reps - 1):  # kinds[:p * reps] is not the group repeated
            continue
        rest = p * reps
        size = 1 + runs.length(0, p) + 2 + len(str(reps)) + (2 + runs.length(rest, n) if rest < n else 0)
        if size < best_len:
            best, best_len = p, size
    if best is None:
        return runs.text(0, n)
    reps = n // best
    rest = runs.text(best * reps, n)
    return f"({runs.text(0, best)})*{reps}" + (f", {rest}" if rest else "")


def _z_function(kinds: list[str]) -> list[int]:
    """z[i]: the length of the longest common prefix of kinds and kinds[i:] (z[0] = n); O(n)."""
    n = len(kinds)
    z, left, right = [0] * n, 0, 0
    if n:
        z[0] = n
    for i in range(1, n):
        if i < right:
            z[i] = min(right - i, z[i - left])
        while i + z[i] < n and kinds[z[i]] == kinds[i + z[i]]:
            z[i] += 1
        if i + z[i] > right:
            left, right = i, i + z[i]
    return z


class _Runs:
    """The list's runs of one kind, with prefix sums of their written lengths: the length of ``text`` of
    any slice in O(log runs)."""

    def __init__(self, kinds: list[str]):
        self.kind, self.start, self.count = [], [], []
        for i, k in enumerate(kinds):
            if self.kind and self.kind[-1] == k:
                self.count[-1] += 1
            else:
                self.kind.append(k)
                self.start.append(i)
                self.count.append(1)
        self.sums = [0]
        for k, c in zip(self.kind, self.count, strict=True):
            self.sums.append(self.sums[-1] + _piece_len(k, c))

    def _span(self, a: int, b: int) -> tuple[int, int]:
        return bisect.bisect_right(self.start, a) - 1, bisect.bisect_right(self.start, b - 1) - 1

    def length(self, a: int, b: int) -> int:
        """len(self.text(a, b))."""
        if a >= b:
            return 0
        ra, rb = self._span(a, b)
        if ra == rb:
            return _piece_len(self.kind[ra], b - a)
        first = _piece_len(self.kind[ra], self.start[ra] + self.count[ra] - a)
        last = _piece_len(self.kind[rb], b - self.start[rb])
        return first + (self.sums[rb] - self.sums[ra + 1]) + last + 2 * (rb - ra)

    def text(self, a: int, b: int) -> str:
        """The slice a..b-1 as runs: "full*20, local*8"."""
        if a >= b:
            return ""
        ra, rb = self._span(a, b)
        out = []
        for r in range(ra, rb + 1):
            lo, hi = max(a, self.start[r]), min(b, self.start[r] + self.count[r])
            out.append(_piece(self.kind[r], hi - lo))
        return ", ".join(out)


def _piece(kind: str, count: int) -> str:
    return kind if count == 1 else f"{kind}*{count}"


def _piece_len(kind: str, count: int) -> int:
    return len(kind) + (1 + len(str(count)) if count > 1 else 0)
