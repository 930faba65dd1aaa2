"""A parallel training layout -- tensor, pipeline and data parallel degrees, ZeRO stage, recompute,
sequence parallelism, batch sizes -- its checks, and the layouts a search walks. Pure arithmetic.

Rank order (Megatron-LM's, Narayanan et al. 2021, sec. 3.2; Megatron-Core's default "tp-cp-ep-dp-pp"):
tensor-parallel ranks are adjacent (rank mod tp), then context-parallel (stride tp), then data-parallel
(stride tp·cp), then pipeline stages (stride tp·cp·dp). So a TP group sits inside a node whenever tp ≤
GPUs per node, a CP group whenever tp·cp ≤ GPUs per node, a DP group whenever tp·cp·dp ≤ GPUs per node.

Batch: ``global_batch`` sequences per optimizer step, ``micro_batch`` per forward pass of one DP rank,
so every DP rank runs m = global_batch / (dp · micro_batch) micro-batches per step (gradient
accumulation; the pipeline's micro-batches).
"""

from __future__ import annotations

import functools
import math
from dataclasses import replace
from typing import Callable, Iterator, Optional

from tfcalc.config import ModelConfig
from tfcalc.count.model.training_memory import check_training_dtype
from tfcalc.count.perf.elementwise import ROPE_KINDS
from tfcalc.count.training.experts_folded import implied
from tfcalc.count.training.layout_pipeline import check_pipeline
from tfcalc.count.training.search_space import overlaps
from tfcalc.count.training.shard import check_tp, total_blocks
from tfcalc.count.training.sharding import check_sharding, expert_counts
from tfcalc.errors import InputError, shown
from tfcalc.workload import RECOMPUTE, Layout  # noqa: F401  (re-exported: the layout's home before)

ZERO_STAGES = (0, 1, 2, 3)
ATTENTION_KERNELS = ("flash", "math")
# the non-matmul kernels: tfcalc.count.perf.eager; fused (elementwise); compile: the blocks fused by Inductor, the
# embedding, final norm and loss eager (torchtitan's per-block torch.compile: tfcalc.count.perf.elementwise, 5)
KERNEL_MODES = ("eager", "fused", "compile")


def _positive(**values: int) -> None:
    for name, value in values.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:  # True is an int to Python
            raise InputError(f"--{name.replace('_', '-')} must be a positive integer; got {shown(value)}")


def default_kernels(cfg) -> str:
    """--kernels when not given: fused for a model with a mixer whose published training runs its own fused kernels
    (``Capabilities.training_kernels``: Mamba's, gated DeltaNet's, lightning attention's -- their op-by-op PyTorch
    path is a fallback no published run trains with), else eager (PyTorch op by op, torchtitan's published runs)."""
    fused = any(block.mixer.capabilities.training_kernels == "fused" for _, block, _ in cfg.architecture.kinds())
    return "fused" if fused else "eager"


def check_kernels(kernels: object) -> None:
    """--kernels: eager, fused or compile (tfcalc.count.perf.eager, elementwise), one line otherwise; None: the
    model's default (default_kernels)."""
    if kernels is not None and (not isinstance(kernels, str) or kernels not in KERNEL_MODES):
        raise InputError(f"--kernels must be one of {', '.join(KERNEL_MODES)}; got {shown(kernels)}")


def check_rope(rope: object) -> None:
    """--rope: complex or real (tfcalc.count.perf.elementwise, 6), one line otherwise."""
    if not isinstance(rope, str) or rope not in ROPE_KINDS:
        raise InputError(f"--rope must be one of {', '.join(ROPE_KINDS)}; got {shown(rope)}")


def check_layout(cfg: ModelConfig, layout: Layout) -> None:
    """Raise InputError, one line, for a layout the model cannot take."""
    _positive(tp=layout.tp, pp=layout.pp, dp=layout.dp, seq=layout.seq, global_batch=layout.global_batch,
              micro_batch=layout.micro_batch)
    if isinstance(layout.zero, bool) or layout.zero not in ZERO_STAGES:  # zero=True would pass as stage 1
        raise InputError(f"--zero must be 0, 1, 2 or 3; got {shown(layout.zero)}")
    if not isinstance(layout.recompute, str) or layout.recompute not in RECOMPUTE:
        raise InputError(f"--recompute must be one of {', '.join(RECOMPUTE)}; got {shown(layout.recompute)}")
    if not isinstance(layout.attention, str) or layout.attention not in ATTENTION_KERNELS:
        raise InputError(f"--attention must be one of {', '.join(ATTENTION_KERNELS)}; got {shown(layout.attention)}")
    check_kernels(layout.kernels)
    if layout.optimizer not in ("adam", "muon"):  # tfcalc.count.training.muon_plan
        raise InputError(f"--optimizer must be adam or muon; got {shown(layout.optimizer)}")
    if layout.optimizer == "muon" and layout.offload_optimizer:
        raise InputError("--offload optimizer with --optimizer muon is not modelled (ZeRO-Offload steps Adam's "
                         "states on the CPU)")
    check_training_dtype(layout.dtype)
    check_tp(cfg, layout.tp)
    blocks = total_blocks(cfg)
    if layout.pp > blocks:
        raise InputError(f"pp {layout.pp} is more pipeline stages than {cfg.name} has blocks ({blocks})")
    if layout.pp > 1 and cfg.arch == "encoder-decoder":
        raise InputError(f"{cfg.name} is an encoder-decoder: plans cover it with pp 1 (its stages would pass the "
                         "encoder output along: not modelled)")
    if layout.sequence_parallel and _has_moe(cfg) and layout.etp is None:  # folded: count.training.experts_folded
        raise InputError(f"{cfg.name} has a mixture of experts, kept whole on every TP rank: sequence "
                         "parallelism around replicated experts is not modelled (give --etp to fold them)")
    if layout.sequence_parallel and _has_cross(cfg):
        raise InputError(f"{cfg.name} has cross-attention: sequence parallelism around the encoder output its "
                         "K/V projections read is not modelled (leave out --sp)")
    if layout.zero and layout.data_ranks == 1:
        raise InputError(f"ZeRO-{layout.zero} shards over data-parallel ranks, but dp is 1")
    if layout.sequence_parallel and layout.tp == 1:
        raise InputError("sequence parallelism splits the sequence over the tensor-parallel ranks: it needs tp > 1")
    if layout.sequence_parallel and layout.seq % layout.tp:
        raise InputError(f"sequence parallelism needs seq ({layout.seq}) divisible by tp ({layout.tp})")
    check_positions(cfg, layout.seq)
    per_step = layout.dp * layout.micro_batch
    if layout.global_batch % per_step:
        raise InputError(f"--global-batch {layout.global_batch} is not a multiple of dp × micro-batch "
                         f"({layout.dp} × {layout.micro_batch} = {per_step})")
    check_sharding(cfg, layout)
    check_pipeline(cfg, layout)  # schedule, virtual stages, overlap, context parallelism (issue 20)


def check_positions(cfg: ModelConfig, seq: int) -> None:
    """A sequence past the positions the model has (learned, RoPE or sinusoidal): one line (a search
    says it once, not as "no layout")."""
    positions = cfg.architecture.output.embeddings.positions
    if positions in ("learned", "rope", "sinusoidal") and seq > cfg.max_seq_len:
        raise InputError(f"{cfg.name} has {positions} positions for at most {cfg.max_seq_len} tokens; "
                         f"got --seq {seq}")


@functools.lru_cache(maxsize=256)  # a search checks thousands of layouts of one model
def _has_cross(cfg: ModelConfig) -> bool:
    return any(b.cross_attention is not None for _, b, _ in cfg.architecture.kinds())


@functools.lru_cache(maxsize=256)
def _has_moe(cfg: ModelConfig) -> bool:
    return cfg.architecture.has_moe


def sequence_parallel_modelled(cfg: ModelConfig, folded: bool = False) -> bool:
    """Whether the plan models sequence parallelism for cfg: not around replicated experts (it does around
    experts folded over TP × DP, ``folded``: tfcalc.count.training.experts_folded), nor cross-attention."""
    return (folded or not _has_moe(cfg)) and not _has_cross(cfg)


def resolve_degrees(gpus: int | None, tp: int | None, pp: int | None, dp: int | None,
                    cp: int = 1) -> tuple[int, int, int]:
    """(tp, pp, dp) from what was given: missing tp and pp are 1, a missing dp fills the GPUs; gpus must
    equal tp·pp·dp (tp·cp·pp·dp with context parallelism)."""
    tp, pp = 1 if tp is None else tp, 1 if pp is None else pp  # not `tp or 1`: --tp 0 is refused, not read as 1
    _positive(tp=tp, pp=pp, cp=cp)
    model = tp * cp * pp
    names = "tp × cp × pp" if cp > 1 else "tp × pp"
    if dp is None:
        if gpus is None:
            dp = 1
        elif gpus % model:
            raise InputError(f"--gpus {gpus} is not a multiple of {names} = {model}")
        else:
            dp = gpus // model
    _positive(dp=dp)
    if gpus is not None and model * dp != gpus:
        shown_cp = f" × {cp}" if cp > 1 else ""
        raise InputError(f"--gpus {gpus} must equal {names} × dp = {tp}{shown_cp} × {pp} × {dp} = {model * dp}")
    return tp, pp, dp


def divisors(n: int) -> list[int]:
    """The divisors of n, ascending, by trial division up to √n: 2^20 steps for the largest --gpus
    (2^40), where a scan of 1..n ran for minutes at --gpus 1000000000."""
    small, large = [], []
    k = 1
    while k * k <= n:
        if n % k == 0:
            small.append(k)
            if k * k != n:
                large.append(n // k)
        k += 1
    return small + large[::-1]


def candidate_layouts(cfg: ModelConfig, gpus: int, base: Layout, gpus_per_node: int,
                      zero: Optional[int] = None, recompute: Optional[str] = None,
                      ep: Optional[int] = None, cps: tuple[int, ...] = (1,),
                      keep: Optional[Callable[[int, int, int, int], bool]] = None) -> Iterator[Layout]:
    """Every valid layout of exactly ``gpus`` GPUs for the search: tp a divisor within one node, pp a
    divisor up to n_layer, dp the rest; each ZeRO stage (ZeRO-1..3 only when dp > 1) unless ``zero`` is
    given; each recompute unless ``recompute`` is given; sequence parallelism whenever tp > 1 where it is
    modelled (``sequence_parallel_modelled``: a model without experts or cross-attention; it keeps
    the same bytes on the wire as plain TP, sec. 4.2.2 of Korthikanti et al. 2022, and divides the
    replicated activations by tp); each context-parallel degree of ``cps`` (tfcalc.count.training.search_space),
    the sequence's s/C split by tp under SP. Batch sizes, dtype and schedule are the base layout's (one
    stage: 1f1b, no ends counted; an interleaved schedule or counted ends checked as 1F1B: ``_probe``); its
    overlap where it applies (search_space.applicable_overlap). A mixture of experts:
    expert parallelism ``ep`` if given, else ep 1 and the largest ep that divides dp and every mixture's
    experts with its tp·ep GPUs in one node (``search_ep``; with cp 1 only: tfcalc.count.training.sharding).
    ``keep(tp, pp, cp, dp)``: False skips the shape unbuilt (a bound says none of it fits:
    tfcalc.count.training.search_bound)."""
    recomputes = RECOMPUTE if recompute is None else (recompute,)
    every = divisors(gpus)  # tp and pp are divisors of gpus: enumerated once, the work scales with their count
    sp = sequence_parallel_modelled(cfg, base.etp is not None)
    folded_sp = sequence_parallel_modelled(cfg, True)  # an --ep the legacy grid cannot lay out folds (experts_folded)
    for cp in cps:
        for tp in every:
            if tp > gpus_per_node:
                break
            try:  # what check_layout would refuse for every layout of this tp: said once, not per layout
                check_tp(cfg, tp)
            except InputError:
                continue
            for pp in every:
                if pp > cfg.n_layer:
                    break
                if (gpus // tp) % (pp * cp):
                    continue
                dp = gpus // (tp * cp * pp)
                if base.global_batch % (dp * base.micro_batch):  # as check_layout: the batch must split
                    continue
                if keep is not None and not keep(tp, pp, cp, dp):
                    continue
                zeros = (ZERO_STAGES if dp * cp > 1 else (0,)) if zero is None else (zero,)
                legacy_cp = cp > 1 and base.etp is None  # the legacy grid has no EP under CP
                eps = (ep,) if ep is not None else search_ep(cfg, tp, dp, gpus_per_node) if not legacy_cp else (1,)
                for z in zeros:
                    for r in recomputes:
                        for e in eps:
                            etp = 1 if base.etp is None and ep is not None and implied(e, tp, cp, dp) else base.etp
                            split = (sp or (etp is not None and folded_sp)) and tp > 1 and (base.seq // cp) % tp == 0
                            sched = dict(schedule="1f1b", virtual_stages=1, pp_split_counts=()) if pp == 1 else {}
                            layout = replace(base, tp=tp, pp=pp, dp=dp, cp=cp, zero=z, recompute=r, ep=e, etp=etp,
                                             sequence_parallel=split,
                                             overlap=overlaps(tp, pp, split, base.overlap, e, cp), **sched)
                            try:
                                check_layout(cfg, _probe(layout))
                            except InputError:
                                continue
                            yield layout


def _probe(layout: Layout) -> Layout:
    """What candidate_layouts checks: an interleaved schedule or counted ends as 1F1B without them (the search
    picks V and the split per shape: tfcalc.count.training.search_space.schedules, each option checked there)."""
    if layout.pp > 1 and (layout.schedule == "interleaved" or layout.pp_split_counts):
        return replace(layout, schedule="1f1b", virtual_stages=1, pp_split_counts=())
    return layout


def search_ep(cfg: ModelConfig, tp: int, dp: int, gpus_per_node: int) -> tuple[int, ...]:
    """Expert-parallel degrees a search tries (``candidate_layouts``): 1, and for a mixture of experts the
    largest ep dividing dp and every mixture's experts whose tp·ep GPUs share a node (NVLink carries the
    all-to-all), and the largest across nodes (the fewest experts per rank, as DeepSeek-V3's EP 64)."""
    counts = expert_counts(cfg)
    if not counts:
        return (1,)
    every = divisors(math.gcd(dp, *counts))
    inside = max((e for e in every if tp * e <= gpus_per_node), default=1)
    return tuple(sorted({1, inside, every[-1]}))


def gpu_counts(gpus_per_node: int, limit: int) -> Iterator[int]:
    """GPU counts ``--gpus auto`` tries, fewest first: powers of two up to one node, then whole nodes."""
    n = 1
    while n < gpus_per_node and n <= limit:
        yield n
        n *= 2
    nodes = 1
    while nodes * gpus_per_node <= limit:
        yield nodes * gpus_per_node
        nodes += 1
