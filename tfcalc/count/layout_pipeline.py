"""The checks of a layout's pipeline schedule, overlap and context parallelism (tfcalc.count.layout's
check_layout calls ``check_pipeline``): one InputError line each. Pure arithmetic.

- --schedule: 1f1b, interleaved or zero-bubble (tfcalc.count.perf.pipeline); the latter two need pp > 1.
- --virtual-stages V: > 1 only with interleaved, which needs V ≥ 2, the blocks divisible by pp × V (every
  chunk as many blocks) and the micro-batches a multiple of pp (Megatron-LM's rule for its interleaved
  schedule: "number of microbatches is not divisible by pipeline-model-parallel-size when using
  interleaved schedule").
- --overlap: any of tp and pp, each once; pp needs pp > 1; tp needs tp > 1 and sequence parallelism
  (Megatron-LM's --tp-comm-overlap asserts --sequence-parallel; PyTorch's async TP works on the
  sequence-parallel all-gathers and reduce-scatters).
- --cp C (tfcalc.count.context_parallel): the sequence split into 2C chunks for load balance, so seq
  divisible by 2C (Megatron-Core's rule), and by tp too under sequence parallelism (seq/C split t ways);
  flash attention only (ring attention is a fused kernel's online softmax: no T × T scores); no
  cross-attention, encoder-decoder, sliding-window or chunked attention (not modelled: the ring would
  pass other keys).
"""

from __future__ import annotations

from tfcalc.config import ModelConfig
from tfcalc.count.perf.pipeline import OVERLAPS, SCHEDULES
from tfcalc.count.shard import total_blocks
from tfcalc.errors import InputError, shown
from tfcalc.workload import Layout


def _positive(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InputError(f"{name} must be a positive integer; got {shown(value)}")


def check_overlap(overlap: object) -> tuple[str, ...]:
    """The --overlap value as a tuple of names (each once, from OVERLAPS), or InputError."""
    if not isinstance(overlap, (tuple, list)) or not all(isinstance(o, str) for o in overlap):
        raise InputError(f"--overlap must be a list of {' and '.join(OVERLAPS)}; got {shown(overlap)}")
    bad = [o for o in overlap if o not in OVERLAPS]
    if bad:
        raise InputError(f"--overlap takes {', '.join(OVERLAPS)} (comma-separated); got {shown(bad[0])}")
    if len(set(overlap)) != len(overlap):
        raise InputError(f"--overlap names each of {', '.join(OVERLAPS)} once; got {','.join(overlap)}")
    return tuple(overlap)


def check_pipeline(cfg: ModelConfig, layout: Layout) -> None:
    """The module docstring's checks."""
    L = layout
    if not isinstance(L.schedule, str) or L.schedule not in SCHEDULES:
        raise InputError(f"--schedule must be one of {', '.join(SCHEDULES)}; got {shown(L.schedule)}")
    _positive("--virtual-stages", L.virtual_stages)
    _positive("--cp", L.cp)
    check_overlap(L.overlap)
    if L.virtual_stages > 1 and L.schedule != "interleaved":
        raise InputError(f"--virtual-stages {L.virtual_stages} needs --schedule interleaved (got {L.schedule})")
    if L.schedule != "1f1b" and L.pp == 1:
        raise InputError(f"--schedule {L.schedule} schedules pipeline stages: it needs pp > 1")
    if L.schedule == "interleaved":
        blocks = total_blocks(cfg)
        if L.virtual_stages < 2:
            raise InputError("--schedule interleaved needs --virtual-stages V of 2 or more (V = 1 is 1f1b)")
        if blocks % (L.pp * L.virtual_stages):
            raise InputError(f"interleaving needs the blocks ({blocks}) divisible by pp × V = {L.pp} × "
                             f"{L.virtual_stages} = {L.pp * L.virtual_stages}")
        if L.micro_batches % L.pp:
            raise InputError(f"the interleaved schedule needs the micro-batches per step ({L.micro_batches}) to be "
                             f"a multiple of pp ({L.pp}), as Megatron-LM requires")
    if "pp" in L.overlap and L.pp == 1:
        raise InputError("--overlap pp hides pipeline sends: it needs pp > 1")
    if "tp" in L.overlap and not (L.tp > 1 and L.sequence_parallel):
        raise InputError("--overlap tp needs tp > 1 with --sequence-parallel, as Megatron's "
                         "--tp-comm-overlap and PyTorch's async TP do")
    if L.cp > 1:
        check_cp(cfg, L)


def check_cp(cfg: ModelConfig, L: Layout) -> None:
    """The context-parallel checks (a search runs them once, before trying layouts)."""
    if L.attention != "flash":
        raise InputError("--cp runs ring attention, a fused kernel: it needs --attention flash")
    if cfg.arch == "encoder-decoder" or any(b.cross_attention is not None for _, b, _ in cfg.architecture.kinds()):
        raise InputError(f"{cfg.name} has cross-attention: context parallelism of its sources is not modelled "
                         "(leave out --cp)")
    for _, b, _ in cfg.architecture.kinds():
        span = getattr(b.attention, "window", None) or getattr(b.attention, "chunk", None)
        if span is not None:
            raise InputError(f"{cfg.name} has sliding-window or chunked attention: ring attention over it is not "
                             "modelled (leave out --cp)")
    if L.seq % (2 * L.cp):
        raise InputError(f"--cp {L.cp} splits the sequence into 2 × {L.cp} chunks: seq ({L.seq}) must be "
                         f"divisible by {2 * L.cp}")
    if L.sequence_parallel and (L.seq // L.cp) % L.tp:
        raise InputError(f"sequence parallelism under --cp {L.cp} needs seq / cp ({L.seq // L.cp}) divisible "
                         f"by tp ({L.tp})")
