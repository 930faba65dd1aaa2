"""What the plan's search varies beyond tp, pp, dp, ZeRO and recompute (tfcalc.count.training.layout's
candidate_layouts and tfcalc.count.training.plan's search): the micro-batch, the pipeline schedule and context
parallelism -- each only where the request leaves it open. Pure arithmetic.

- micro-batch: powers of two from 1 (the given one only, when given) while the global batch still
  splits into dp × micro-batch and the rank still fits: activations grow with it and nothing shrinks
  (the micro-batches in flight fall only where m < p, and then m × micro-batch stays the global batch
  / dp), so the search stops at the first micro-batch whose 1F1B layout does not fit. Larger
  micro-batches make larger GEMMs (closer to the peak: tfcalc.count.perf.gemm) and fewer micro-batches
  (a larger bubble): the step time decides.
- schedule: 1F1B, and the interleaved schedule with each V of 2 to MAX_VIRTUAL that divides the blocks
  per stage, where the micro-batches are a multiple of pp (tfcalc.count.training.layout_pipeline) -- or, unless
  --pp-split-counts is given, that divides them once the head (blocks + 1) or both ends (blocks + 2) count
  as blocks (``split_counts``; Megatron-LM's --account-for-*-in-pipeline-split). Zero-bubble
  only when asked: its ZB-H1 bubble is always below 1F1B's in this model, but few training stacks run it;
  dualpipe likewise, on even pp with an even count of micro-batches, at least 2 × pp
  (tfcalc.count.perf.pipeline, step 4); dualpipev with at least 2 × pp micro-batches and blocks (step 5).
  A layout of one stage runs 1f1b (a schedule orders pipeline stages).
- context parallelism: for long sequences only, each power of two C that leaves every rank at least
  CP_MIN_TOKENS positions (Llama 3 405B's 128K-token stage ran CP 16: 8,192 positions a rank; Dubey et
  al. 2024, sec. 3.3.2) and divides the GPUs.
- overlap: as asked, on the layouts it applies to (tp with tp > 1 and sequence parallelism, pp with
  pp > 1, ep with ep > 1, cp with cp > 1).
- FSDP variants (``fsdp_variants``; unless --hsdp, --no-reshard-after-forward or a ZeRO stage other than 3
  is given): each ZeRO-3 layout that fits is tried again with HSDP -- shards within a node, replicas
  across nodes (Zhao et al. 2023, "PyTorch FSDP", sec. 3.2.2: the gathers on NVLink) -- and without
  resharding after forward (half the gathers, the stage's weights held), each kept where it still fits.
- offload (``offload_bases``; unless --offload is given): only where no layout fits in the GPUs' memory --
  at --gpus N, none of N GPUs; at --gpus auto, none of any number up to the limit -- the optimizer, the
  activations and both are moved to host memory (tfcalc.count.training.offload), and the step time decides.
- FP8 matmuls never: numerics are the user's choice (--compute-dtype fp8 runs every layout in FP8).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Iterator, Optional

from tfcalc.config import ModelConfig
from tfcalc.count.training.layout_pipeline import cp_refused
from tfcalc.count.training.shard import total_blocks
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
    pp_split_counts: Optional[tuple[str, ...]] = None  # None: counted only where it makes interleaving possible
    fsdp: bool = True  # whether ZeRO-3 layouts that fit are tried with HSDP and without resharding too
    offload: bool = True  # whether offload is tried where nothing fits without


FIXED = SearchSpace(micro_batch=1, schedule="1f1b", virtual_stages=1, cp=1, pp_split_counts=(), fsdp=False,
                    offload=False)  # the search of before issue 20


def cp_degrees(seq: int, gpus: int, space: SearchSpace, applies: bool = True) -> list[int]:
    """The context-parallel degrees the search tries (see the module docstring); ``applies``: whether CP is
    modelled for the model (cp_applies)."""
    if space.cp is not None:
        return [space.cp]
    if not applies:
        return [1]
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
    return overlaps(layout.tp, layout.pp, layout.sequence_parallel, overlap, layout.ep, layout.cp)


def overlaps(tp: int, pp: int, sequence_parallel: bool, overlap: tuple[str, ...], ep: int = 1,
             cp: int = 1) -> tuple[str, ...]:
    keep = {"tp": tp > 1 and sequence_parallel, "pp": pp > 1, "ep": ep > 1, "cp": cp > 1}
    return tuple(o for o in overlap if keep.get(o, True))


def cp_applies(cfg: ModelConfig, attention: str) -> bool:
    """Whether context parallelism is modelled for the model at all (tfcalc.count.training.layout_pipeline.check_cp:
    flash attention; no cross-attention, sliding windows or chunks)."""
    return attention == "flash" and not cp_refused(cfg)


def schedules(cfg: ModelConfig, layout: Layout, space: SearchSpace) -> Iterator[Layout]:
    """The layout under each schedule the search tries, 1F1B (the least memory) first; the ends counted as
    blocks as the request fixes them, else only where that makes an interleaved V possible (split_counts)."""
    if layout.pp == 1:
        yield replace(layout, schedule="1f1b", virtual_stages=1, pp_split_counts=())
        return
    asked, fixed = space.schedule, space.pp_split_counts
    if asked in (None, "1f1b"):
        yield replace(layout, schedule="1f1b", virtual_stages=1, pp_split_counts=fixed or ())
    if asked in ("zero-bubble", "dualpipe", "dualpipev"):  # only when asked (the module docstring)
        m, p = layout.micro_batches, layout.pp
        if (asked == "zero-bubble" or (asked == "dualpipe" and p % 2 == 0 and m % 2 == 0 and m >= 2 * p)
                or (asked == "dualpipev" and m >= 2 * p and total_blocks(cfg) >= 2 * p and not fixed)):
            yield replace(layout, schedule=asked, virtual_stages=1, pp_split_counts=fixed or ())
    if asked in (None, "interleaved") and layout.micro_batches % layout.pp == 0:
        vs = [space.virtual_stages] if space.virtual_stages is not None else range(2, MAX_VIRTUAL + 1)
        for v in vs:
            counted = split_counts(total_blocks(cfg), layout.pp, v, fixed)
            if counted is not None:
                yield replace(layout, schedule="interleaved", virtual_stages=v, pp_split_counts=counted)


def split_counts(blocks: int, pp: int, v: int, fixed: Optional[tuple[str, ...]]) -> Optional[tuple[str, ...]]:
    """The ends counted as blocks for an interleaved V (None: V does not divide). Fixed by the request: as
    given. Left open: none where the blocks divide over pp × V; else the head where blocks + 1 do (it is the
    heavier end: the LM head's GEMMs and the loss, so the last stage drops a block), both ends where blocks
    + 2 do (Llama 3 405B's 126 + 2 over 16 × 8; tfcalc.count.training.shard.stage_ranges)."""
    chunks = pp * v
    if fixed is not None:
        return fixed if (blocks + len(fixed)) % chunks == 0 else None
    for counted in ((), ("head",), ("embedding", "head")):
        if (blocks + len(counted)) % chunks == 0:
            return counted
    return None


def fsdp_variants(layout: Layout, gpus_per_node: int, space: SearchSpace) -> Iterator[Layout]:
    """A ZeRO-3 layout's HSDP and no-reshard variants (see the module docstring): HSDP over the data-parallel
    ranks of one node (R = GPUs per node / tp, where dp spans more than a node: the gathers and
    reduce-scatters on NVLink, one all-reduce of the shards across nodes), and each without resharding
    after forward."""
    if not space.fsdp or layout.zero != 3 or layout.hsdp is not None or not layout.reshard_after_forward:
        return
    r = gpus_per_node // layout.tp
    hsdp = [r] if layout.cp == 1 and layout.ep == 1 and 1 < r < layout.dp and layout.dp % r == 0 else []
    yield replace(layout, reshard_after_forward=False)
    for h in hsdp:
        yield replace(layout, hsdp=h)
        yield replace(layout, hsdp=h, reshard_after_forward=False)


def offload_bases(base: Layout) -> list[Layout]:
    """The layouts a search tries with offload when nothing fits without it: the optimizer, the activations,
    both (tfcalc.count.training.offload); under Muon the activations only (ZeRO-Offload's CPU step is Adam's)."""
    return [replace(base, offload_optimizer=o, offload_activations=a) for o, a in ((True, False), (False, True),
                                                                                (True, True))
            if not (o and base.optimizer == "muon")]


def offload_words(base: Layout) -> str:
    """What a search's offload tried, for its 'nothing fits' line."""
    if base.optimizer == "muon":
        return " (with activation offload too; optimizer offload is not modelled with Muon)"
    return " (with offload too)"
