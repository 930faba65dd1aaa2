"""A list of per-layer kinds written as tfcalc's layer pattern (tfcalc.architecture.patterns), the shortest
way: plain runs, or a repeated group and the rest as runs. Used by the Reader (``layer_types`` with no
period) and by tfcalc.hf_config.layers. Pure Python."""

from __future__ import annotations


def compact(kinds: list[str]) -> str:
    """A layer pattern for a list of kinds, the shortest to write: plain runs ("full*20, local*8"), or a
    repeated group and the rest as runs ("(local*5, full)*10, local*2")."""
    best = _runs(kinds)
    n = len(kinds)
    for p in range(2, n // 2 + 1):
        reps = n // p
        if len(set(kinds[:p])) > 1 and kinds[:p] * reps == kinds[:p * reps]:
            rest = _runs(kinds[p * reps:])
            text = f"({_runs(kinds[:p])})*{reps}" + (f", {rest}" if rest else "")
            best = min(best, text, key=len)
    return best


def _runs(kinds: list[str]) -> str:
    out: list[str] = []
    i = 0
    while i < len(kinds):
        j = i
        while j < len(kinds) and kinds[j] == kinds[i]:
            j += 1
        out.append(kinds[i] if j - i == 1 else f"{kinds[i]}*{j - i}")
        i = j
    return ", ".join(out)
