"""The checks of a layout's pipeline schedule, overlap and context parallelism (tfcalc.count.training.layout's
check_layout calls ``check_pipeline``): one InputError line each. Pure arithmetic.

- --schedule: 1f1b, interleaved, zero-bubble, dualpipe or dualpipev (tfcalc.count.perf.pipeline); all but 1f1b
  need pp > 1; dualpipe an even pp (rank i holds stages i and p − 1 − i) and an even count of micro-batches,
  at least 2 × pp (half fed from each end: deepseek-ai/DualPipe's DualPipe.step asserts both).
- dualpipev (DualPipeV: 2p stages in a V, two a rank): any pp > 1 and at least 2 × pp micro-batches a step
  (PyTorch's ScheduleDualPipeV: "at least as many microbatches as stages"; deepseek-ai/DualPipe's DualPipeV.step:
  "num_chunks >= num_ranks * 2"), at least 2 × pp blocks (a block a stage), not with --pp-layers or
  --pp-split-counts (its placement is its own: tfcalc.count.training.shard.V_SHAPE).
- --virtual-stages V: > 1 only with interleaved, which needs V ≥ 2, the blocks divisible by pp × V (every
  chunk as many blocks) and the micro-batches a multiple of pp (Megatron-LM's rule for its interleaved
  schedule: "number of microbatches is not divisible by pipeline-model-parallel-size when using
  interleaved schedule").
- --pp-split-counts: any of embedding and head, each once, with pp > 1; the blocks plus the ends counted
  must divide over pp × V chunks (V = 1 without interleaving), as Megatron-LM asserts for its
  --account-for-embedding/loss-in-pipeline-split (tfcalc.count.training.shard.stage_ranges); with them the
  interleaved schedule needs the blocks + counted, not the blocks, divisible by pp × V.
- --pp-layers a,b,...: each stage's blocks, given (uneven stages: DeepSeek-V3's 61 layers; Megatron-LM's
  --decoder-first/last-pipeline-num-layers, torchtitan's manual split): one positive count a stage, pp of
  them, summing to the blocks; 1F1B or zero-bubble (one chunk a stage), not with --pp-split-counts.
- --overlap: any of tp and pp, each once; pp needs pp > 1; tp needs tp > 1 and sequence parallelism
  (Megatron-LM's --tp-comm-overlap asserts --sequence-parallel; PyTorch's async TP works on the
  sequence-parallel all-gathers and reduce-scatters).
- --cp C (tfcalc.count.training.context_parallel): the sequence split into 2C chunks for load balance, so seq
  divisible by 2C (Megatron-Core's rule), and by tp too under sequence parallelism (seq/C split t ways);
  flash attention only (ring attention is a fused kernel's online softmax: no T × T scores); no
  cross-attention, encoder-decoder, sliding-window or chunked attention (not modelled: the ring would
  pass other keys).
"""

from __future__ import annotations

import functools

from tfcalc.config import ModelConfig
from tfcalc.count.perf.pipeline import OVERLAPS, SCHEDULES
from tfcalc.count.training.shard import SPLIT_COUNTS, total_blocks
from tfcalc.errors import InputError, shown
from tfcalc.workload import Layout


def _positive(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InputError(f"{name} must be a positive integer; got {shown(value)}")


def _check_names(flag: str, value: object, allowed: tuple[str, ...]) -> tuple[str, ...]:
    """A list flag's value (the API's sequence) as a tuple of names, each once, from ``allowed``; or
    InputError, one line."""
    if not isinstance(value, (tuple, list)) or not all(isinstance(v, str) for v in value):
        raise InputError(f"{flag} must be a list of {' and '.join(allowed)}; got {shown(value)}")
    bad = [v for v in value if v not in allowed]
    if bad:
        raise InputError(f"{flag} takes {', '.join(allowed)} (comma-separated); got {shown(bad[0])}")
    if len(set(value)) != len(value):
        raise InputError(f"{flag} names each of {', '.join(allowed)} once; got {','.join(value)}")
    return tuple(value)


def check_overlap(overlap: object) -> tuple[str, ...]:
    """The --overlap value as a tuple of names (each once, from OVERLAPS), or InputError."""
    return _check_names("--overlap", overlap, OVERLAPS)


def check_split_counts(counted: object) -> tuple[str, ...]:
    """The --pp-split-counts value as a tuple of names (each once, from SPLIT_COUNTS), or InputError."""
    return _check_names("--pp-split-counts", counted, SPLIT_COUNTS)


def _check_split(cfg: ModelConfig, L: Layout) -> None:
    """The module docstring's --pp-split-counts checks (and the interleaved schedule's divisibility)."""
    counted = check_split_counts(L.pp_split_counts)
    if counted and L.pp == 1:
        raise InputError("--pp-split-counts counts the embedding or head as a block of a pipeline stage: it "
                         "needs pp > 1")
    blocks, v = total_blocks(cfg), L.virtual_stages if L.schedule == "interleaved" else 1
    if counted and (blocks + len(counted)) % (L.pp * v):
        named = "".join(f" + {c}" for c in counted)
        over = f"{L.pp} stages × V {v} = {L.pp * v} chunks" if v > 1 else f"{L.pp} stages"
        raise InputError(f"{blocks} blocks{named} = {blocks + len(counted)} do not divide over {over}")
    if not counted and v > 1 and blocks % (L.pp * v):
        raise InputError(f"interleaving needs the blocks ({blocks}) divisible by pp × V = {L.pp} × {v} = {L.pp * v} "
                         "(or, with --pp-split-counts embedding,head, the blocks + the ends counted)")


def check_pp_layers(cfg: ModelConfig, L: Layout) -> None:
    """The module docstring's --pp-layers checks."""
    given = L.pp_layers
    if not isinstance(given, tuple) or not given:
        raise InputError(f"--pp-layers must be a list of positive integers; got {shown(given)}")
    for n in given:
        _positive("--pp-layers' counts", n)
    if len(given) != L.pp:
        raise InputError(f"--pp-layers gives {len(given)} stage counts for pp {L.pp}: give one per stage")
    blocks = total_blocks(cfg)
    if sum(given) != blocks:
        raise InputError(f"--pp-layers {','.join(map(str, given))} sums to {sum(given)}, but {cfg.name} has "
                         f"{blocks} blocks")
    if L.pp_split_counts:
        raise InputError("--pp-layers gives each stage's blocks: leave out --pp-split-counts")
    if L.schedule == "interleaved":
        raise InputError("--pp-layers gives one chunk a stage: it does not take --schedule interleaved")


def check_dualpipev(cfg: ModelConfig, L: Layout) -> None:
    """The module docstring's dualpipev checks (pp > 1: check_pipeline's)."""
    if L.micro_batches < 2 * L.pp:
        raise InputError(f"--schedule dualpipev runs 2 × pp = {2 * L.pp} stages and needs at least as many "
                         f"micro-batches a step; got {L.micro_batches}")
    if total_blocks(cfg) < 2 * L.pp:
        raise InputError(f"--schedule dualpipev cuts {cfg.name}'s {total_blocks(cfg)} blocks into 2 × pp = "
                         f"{2 * L.pp} stages: it needs a block a stage")
    if L.pp_layers or L.pp_split_counts:
        raise InputError("--schedule dualpipev places its 2 × pp stages in a V itself: leave out --pp-layers and "
                         "--pp-split-counts")


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
    if L.schedule == "interleaved" and L.virtual_stages < 2:
        raise InputError("--schedule interleaved needs --virtual-stages V of 2 or more (V = 1 is 1f1b)")
    if L.schedule == "dualpipe" and (L.pp % 2 or L.micro_batches % 2 or L.micro_batches < 2 * L.pp):
        raise InputError(f"--schedule dualpipe pairs stage i with stage pp − 1 − i and feeds half the micro-batches "
                         f"from each end: it needs an even pp and an even count of micro-batches a step, at least "
                         f"2 × pp; got pp {L.pp}, {L.micro_batches} micro-batches")
    if L.schedule == "dualpipev":
        check_dualpipev(cfg, L)
    if L.pp_layers:
        check_pp_layers(cfg, L)
    _check_split(cfg, L)
    if L.schedule == "interleaved":
        if L.micro_batches % L.pp:
            raise InputError(f"the interleaved schedule needs the micro-batches per step ({L.micro_batches}) to be "
                             f"a multiple of pp ({L.pp}), as Megatron-LM requires")
    if "ep" in L.overlap and L.ep == 1:
        raise InputError("--overlap ep hides expert parallelism's all-to-alls: it needs --ep > 1")
    if "cp" in L.overlap and L.cp == 1:
        raise InputError("--overlap cp hides the context-parallel ring's transfers: it needs --cp > 1")
    if "pp" in L.overlap and L.pp == 1:
        raise InputError("--overlap pp hides pipeline sends: it needs pp > 1")
    if "tp" in L.overlap and not (L.tp > 1 and L.sequence_parallel):
        raise InputError("--overlap tp needs tp > 1 with --sequence-parallel, as Megatron's "
                         "--tp-comm-overlap and PyTorch's async TP do")
    if L.cp > 1:
        check_cp(cfg, L)


@functools.lru_cache(maxsize=256)  # a search checks thousands of layouts of one model
def cp_refused(cfg: ModelConfig) -> str:
    """Why the model cannot take context parallelism ('' when it can)."""
    if cfg.arch == "encoder-decoder" or any(b.cross_attention is not None for _, b, _ in cfg.architecture.kinds()):
        return f"{cfg.name} has cross-attention: context parallelism of its sources is not modelled (leave out --cp)"
    for _, b, _ in cfg.architecture.kinds():
        if not b.mixer.capabilities.context_parallel:  # declared by the mixer (tfcalc.architecture.mixer)
            return (f"{cfg.name} has sliding-window or chunked attention (or another mixer without context "
                    "parallelism): ring attention over it is not modelled (leave out --cp)")
    return ""


def check_cp(cfg: ModelConfig, L: Layout) -> None:
    """The context-parallel checks (a search runs them once, before trying layouts)."""
    if L.attention != "flash":
        raise InputError("--cp runs ring attention, a fused kernel: it needs --attention flash")
    why = cp_refused(cfg)
    if why:
        raise InputError(why)
    if L.seq % (2 * L.cp):
        raise InputError(f"--cp {L.cp} splits the sequence into 2 × {L.cp} chunks: seq ({L.seq}) must be "
                         f"divisible by {2 * L.cp}")
    if L.sequence_parallel and (L.seq // L.cp) % L.tp:
        raise InputError(f"sequence parallelism under --cp {L.cp} needs seq / cp ({L.seq // L.cp}) divisible "
                         f"by tp ({L.tp})")
