"""Smaller copies of a stack, made from the description: what the measured paths run when the whole model
is too large or too slow (``bench --n-layer``, the memory run's warm-up, a deep model's parameters counted
one block of each kind, the small copy of ``plan --measure``). Each keeps the kinds of layer the model
has and the order they come in, and changes nothing else about a block; no flat field is consulted.

- ``shrunk(stack, n)``: the same depth pattern with fewer repeats, n layers. Each run keeps at least one
  whole period, in model order; the layers left are shared out among the runs in proportion to the layers
  each holds, in whole periods (at most as many as the run had), and what remains is the start of one more
  period of the run furthest below its share (the layers of a run cut short, as a model of that depth
  has them). DeepSeek-V3's 3 dense + 58 MoE at 4 layers: 1 dense + 3 MoE; Llama 4's (chunk, chunk,
  chunk, NoPE)×12 at 6 layers: the period once and two chunk layers; Gemma 3 27B's (local×5, full)×10,
  local×2 at 8: the period and both trailing local layers.
  Fewer layers than one period of each run: the first layer of each kind (those with the most layers
  where there is room for fewer kinds, a mixture of experts first: the flat front end, and most of such a
  model's weights and time, have one), then the earliest of the runs' first periods to fill n, in model
  order. Llama 4 at 2 layers: chunk, NoPE; at 1: one chunk layer; DeepSeek-V3 at 1: one MoE layer.
- ``one_of_each(stack)``: each distinct block once, in the order first seen: every kernel of the
  stack runs (the memory run's warm-up), and a fold weights block j by how many layers are it (the
  parameters of a model too deep to build whole).

Pure Python: no torch, typer or rich here.
"""

from __future__ import annotations

import dataclasses

from tfcalc.architecture.block import Block, Run, Stack
from tfcalc.errors import InputError


def shrunk(stack: Stack, n: int) -> Stack:
    """The stack at n layers, its depth pattern kept with fewer repeats (see the module docstring)."""
    if n < 1:
        raise InputError(f"a smaller copy needs at least one layer; got {n}")
    if n >= stack.n_layer:
        return stack
    periods = [len(r.pattern) for r in stack.runs]
    if n < sum(periods):
        return dataclasses.replace(stack, runs=_merge([Run((b,)) for b in _first_layers(stack, n)]))
    depth = stack.n_layer
    shares = [n * p * r.repeat / depth for p, r in zip(periods, stack.runs, strict=True)]  # layers each would hold
    k = [max(1, min(r.repeat, int(s // p))) for s, p, r in zip(shares, periods, stack.runs, strict=True)]

    def left() -> int:
        return n - sum(ki * p for ki, p in zip(k, periods, strict=True))

    while left() < 0:  # runs whose share is under one period still hold one: take periods back from the others
        i = max((i for i in range(len(k)) if k[i] > 1), key=lambda i: k[i] * periods[i] - shares[i])
        k[i] -= 1
    while True:  # whole periods where they still fit, to the run furthest below its share
        room = [i for i, r in enumerate(stack.runs) if k[i] < r.repeat and periods[i] <= left()]
        if not room:
            break
        i = max(room, key=lambda i: shares[i] - k[i] * periods[i])
        k[i] += 1
    rest = left()
    runs = [Run(r.pattern, ki) for r, ki in zip(stack.runs, k, strict=True)]
    if rest:  # fewer layers than a period of any run not yet whole: the start of one more period
        i = max((i for i, r in enumerate(stack.runs) if k[i] < r.repeat), key=lambda i: shares[i] - k[i] * periods[i])
        runs.insert(i + 1, Run(stack.runs[i].pattern[:rest]))
    return dataclasses.replace(stack, runs=_merge(runs))


def one_of_each(stack: Stack) -> Stack:
    """The stack with each distinct block once, in the order first seen (see the module docstring)."""
    return dataclasses.replace(stack, runs=_merge([Run((b,)) for b, _ in stack.kinds()]))


def _first_layers(stack: Stack, n: int) -> list[Block]:
    """n layers, fewer than one period of each run: the first of each kind (the kinds with the most layers,
    a mixture of experts first, where n is short of them), then the earliest others of the runs' first
    periods, in model order."""
    first = [b for r in stack.runs for b in r.pattern]  # each run's first period, in model order
    counts = dict(stack.kinds())
    kinds = sorted(counts, key=lambda b: (not b.is_moe, -counts[b]))[:n]  # sorted() is stable: first seen on ties
    keep = {first.index(b) for b in kinds}
    keep |= set([i for i in range(len(first)) if i not in keep][:n - len(keep)])
    return [first[i] for i in sorted(keep)]


def _merge(runs: list[Run]) -> tuple[Run, ...]:
    """Neighbouring runs of one pattern joined."""
    out: list[Run] = []
    for run in runs:
        if out and out[-1].pattern == run.pattern:
            run = Run(run.pattern, out[-1].repeat + run.repeat)
            out.pop()
        out.append(run)
    return tuple(out)
