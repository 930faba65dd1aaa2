"""The pipeline stages a rank's memory must price: the ends, and the first stage of each distinct kind
between them (tfcalc.count.training.rank_memory.rank_memory). Found in closed form over the layer runs
(tfcalc.architecture.block.Run), never by walking the stages: a plan of a 2**40-layer pattern tries
pipeline degrees up to its GPU limit, and a walk over every stage of every degree tried was quadratic.

Why the candidates below hold every first stage. Under 1F1B (one chunk per stage, V = 1) the middle
stages 1 .. pp-2 fall in at most two arithmetic classes -- start(s) = a + s·size, the same size for all
(tfcalc.count.training.shard.stage_ranges: the first ``extra`` stages one block more; with ends counted
as blocks, one size c). Within a class, a stage's blocks are fixed by (i, φ, j): the run i its first
block lies in, its phase φ = (start − pos_i) mod P_i in that run's pattern of P_i blocks, and the run j
of its last block. For i = j the stage is inside the run: its kinds and counts are fixed by φ and the
size, and φ repeats with period dividing P_i, so the first P_i stages of the (i, j) range meet every φ.
For i ≠ j its first block lies in (end_i − size, end_i): at most one stage. The (i, j) pairs only grow
with s, so there are at most 2·(runs) ranges: the candidates number O(runs · pattern length), and the
first stage of each distinct kind is among them (each kind's first stage is its key's first).
Interleaved stages (V > 1) and given splits (--pp-layers) are walked (pp ≤ the GPUs of a layout); under
DualPipeV (shard.V_SHAPE) every rank is priced: its two stages hold 2p − i and i + 1 micro-batches
(tfcalc.count.perf.pipeline, step 5), so ranks of the same kinds of blocks may still differ."""

from __future__ import annotations

import bisect
import functools

from tfcalc.config import ModelConfig
from tfcalc.count.training.shard import V_SHAPE, stage_ranges, total_blocks


def _signature(cfg: ModelConfig, n_blocks: int, pp: int, stage: int, virtual: int, counted: tuple[str, ...]):
    return tuple((id(s), id(b), n) for r in stage_ranges(n_blocks, pp, stage, virtual, counted)
                 for s, b, n in cfg.architecture.kinds_in(r.start, r.stop))


@functools.lru_cache(maxsize=256)
def _runs(cfg: ModelConfig) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """(first layer, end, pattern length) of every run of every stack, numbered in model order."""
    starts, ends, periods, pos = [], [], [], 0
    for stack in cfg.architecture.stacks:
        for run in stack.runs:
            starts.append(pos)
            pos += len(run.pattern) * run.repeat
            ends.append(pos)
            periods.append(len(run.pattern))
    return tuple(starts), tuple(ends), tuple(periods)


def _classes(n_blocks: int, pp: int, counted: tuple[str, ...]) -> list[tuple[int, int, int, int]]:
    """(first stage, end stage, a, size) of the middle stages 1 .. pp-2 under 1F1B: start(s) = a + s·size."""
    if counted:
        c = (n_blocks + len(counted)) // pp
        return [(1, pp - 1, -int("embedding" in counted), c)]
    base, extra = divmod(n_blocks, pp)
    return [(1, min(extra, pp - 1), 0, base + 1), (max(extra, 1), pp - 1, extra, base)]


def _candidates(cfg: ModelConfig, lo: int, hi: int, a: int, size: int) -> list[int]:
    """The module docstring's candidate stages of one class, stages lo .. hi-1."""
    starts, ends, periods = _runs(cfg)
    out, s = [], lo
    while s < hi:
        first = a + s * size
        i = bisect.bisect_right(starts, first) - 1
        j = bisect.bisect_right(starts, first + size - 1) - 1
        stop = min(hi, -(-(ends[i] - a) // size), -(-(ends[j] - a - size + 1) // size))  # the same (i, j) up to
        out += range(s, min(stop, s + periods[i]) if i == j else stop)
        s = stop
    return out


@functools.lru_cache(maxsize=4096)
def priced_stages(cfg: ModelConfig, pp: int, virtual: int, counted: tuple[str, ...] = ()) -> tuple[int, ...]:
    """The ends, and the first stage of each kind between them, in stage order (see rank_memory)."""
    n_blocks = total_blocks(cfg)
    if counted == V_SHAPE:
        return tuple(range(pp))
    given = bool(counted) and isinstance(counted[0], int)  # --pp-layers: the stages are walked (pp ≤ the GPUs)
    classes = [] if given else _classes(n_blocks, pp, counted)
    if virtual > 1 or pp <= 2 or given or min(size for *_, size in classes) < 1:
        middle = range(1, pp - 1)
    else:
        middle = sorted({s for lo, hi, a, size in classes if lo < hi
                         for s in _candidates(cfg, lo, hi, a, size)})
    out, seen = [0], set()
    for stage in middle:
        kinds = _signature(cfg, n_blocks, pp, stage, virtual, counted)
        if kinds not in seen:
            seen.add(kinds)
            out.append(stage)
    return tuple(out + [pp - 1] if pp > 1 else out)


def stage_block_count(n_blocks: int, pp: int, stage: int, virtual: int = 1, counted: tuple[str, ...] = ()) -> int:
    """Blocks pipeline rank ``stage`` holds over its chunks (shard.stage_block_counts' entry, without a list
    of every stage)."""
    return sum(map(len, stage_ranges(n_blocks, pp, stage, virtual, counted)))
