"""What the plan's search varies beyond tp, pp, dp, ZeRO and recompute (tfcalc.count.layout's
candidate_layouts and tfcalc.count.plan's search): the micro-batch, the pipeline schedule and context
parallelism -- each only where the request leaves it open. Pure arithmetic.

- micro-batch: powers of two from 1 (the given one only, when given) while the global batch still
  splits into dp × micro-batch and the rank still fits: activations grow with it and nothing shrinks
  (the micro-batches in flight fall only where m < p, and then m × micro-batch stays the global batch
  / dp), so the search stops at the first micro-batch whose 1F1B layout does not fit. Larger
  micro-batches make larger GEMMs (closer to the peak: tfcalc.count.perf.gemm) and fewer micro-batches
  (a larger bubble): the step time decides.
- schedule: 1F1B, and the interleaved schedule with each V of 2 to MAX_VIRTUAL that divides the blocks
  per stage, where the micro-batches are a multiple of pp (tfcalc.count.layout_pipeline). Zero-bubble
  only when asked: its ZB-H1 bubble is always below 1F1B's in this model, but few training stacks run it.
  A layout of one stage runs 1f1b (a schedule orders pipeline stages).
- context parallelism: for long sequences only, each power of two C that leaves every rank at least
  CP_MIN_TOKENS positions (Llama 3 405B's 128K-token stage ran CP 16: 8,192 positions a rank; Dubey et
  al. 2024, sec. 3.3.2) and divides the GPUs.
- overlap: as asked, on the layouts it applies to (tp with tp > 1 and sequence parallelism, pp with
  pp > 1).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Iterator, Optional

from tfcalc.config import ModelConfig
from tfcalc.count.shard import total_blocks
from tfcalc.workload import Layout

MAX_VIRTUAL = 8  # Megatron-LM's published runs interleave 2-8 chunks a rank
MAX_MICRO_BATCH = 2**10
CP_MIN_TOKENS = 8192


@dataclass(frozen=True)
class SearchSpace:
    """What the request fixed (a value) and left to the search (None)."""

    micro_batch: Optional[int] = None
    schedule: Optional[str] = None
    virtual_stages: Optional[int] = None
    cp: Optional[int] = None


FIXED = SearchSpace(micro_batch=1, schedule="1f1b", virtual_stages=1, cp=1)  # the search of before issue 20


def cp_degrees(seq: int, gpus: int, space: SearchSpace) -> list[int]:
    """The context-parallel degrees the search tries (see the module docstring)."""
    if space.cp is not None:
        return [space.cp]
    out, c = [1], 2
    while seq // c >= CP_MIN_TOKENS and seq % (2 * c) == 0 and gpus % c == 0:
        out.append(c)
        c *= 2
    return out


def micro_batches(layout: Layout, space: SearchSpace) -> Iterator[int]:
    """Micro-batches to try, ascending, that split the global batch over the layout's dp ranks."""
    if space.micro_batch is not None:
        yield space.micro_batch
        return
    b = 1
    while b <= MAX_MICRO_BATCH and layout.dp * b <= layout.global_batch:
        if layout.global_batch % (layout.dp * b) == 0:
            yield b
        b *= 2


def applicable_overlap(layout: Layout, overlap: tuple[str, ...]) -> tuple[str, ...]:
    """The asked overlap, kept where the layout has what it hides."""
    keep = {"tp": layout.tp > 1 and layout.sequence_parallel, "pp": layout.pp > 1}
    return tuple(o for o in overlap if keep.get(o, True))


def schedules(cfg: ModelConfig, layout: Layout, space: SearchSpace) -> Iterator[Layout]:
    """The layout under each schedule the search tries, 1F1B (the least memory) first."""
    if layout.pp == 1:
        yield replace(layout, schedule="1f1b", virtual_stages=1)
        return
    asked = space.schedule
    if asked in (None, "1f1b"):
        yield replace(layout, schedule="1f1b", virtual_stages=1)
    if asked == "zero-bubble":
        yield replace(layout, schedule="zero-bubble", virtual_stages=1)
    if asked in (None, "interleaved") and layout.micro_batches % layout.pp == 0:
        per_stage = total_blocks(cfg) // layout.pp if total_blocks(cfg) % layout.pp == 0 else 0
        vs = ([space.virtual_stages] if space.virtual_stages is not None
              else [v for v in range(2, MAX_VIRTUAL + 1) if per_stage and per_stage % v == 0])
        for v in vs:
            yield replace(layout, schedule="interleaved", virtual_stages=v)
