"""Step time of a parallel layout, training time for a token budget, and Chinchilla's optimal tokens.
Pure arithmetic on numbers from the device table (tfcalc.devices); no torch.

1. FLOPs executed per step, the whole model: training = 3 × forward (tfcalc.count.flops, full T×T
   attention square); full recompute runs the forward again (4 ×); selective recompute reruns only the
   attention scores' matmuls (Q·Kᵀ and ·V) of every layer (Korthikanti et al. 2022, sec. 5).
2. Compute time per GPU: executed FLOPs / GPUs / (peak × utilization). The utilization is assumed (or
   measured with ``tfcalc bench``) and applies to every executed FLOP; MFU, reported beside it, counts
   only the model's 3 × forward (recompute is not useful work): model FLOPs / (step time × peak × GPUs).
3. Pipeline bubble, 1F1B or GPipe with p stages and m micro-batches: (p − 1)/(m + p − 1) of the step
   is idle (Huang et al. 2019; Narayanan et al. 2021, sec. 2.2), so compute stretches by (m + p − 1)/m.
4. Communication time: each collective's bytes sent per rank (tfcalc.count.comm, ring convention) over
   the bandwidth of its group: NVLink (intra_node, per GPU and direction) when the whole group sits in
   one node under Megatron's rank order (tfcalc.count.layout), else the network per GPU (inter_node).
5. Without overlap: compute + all communication. With overlap: the data-parallel collectives (gradient
   reduction, ZeRO gathers) hide behind compute, as DDP's buckets and FSDP's prefetch arrange; tensor-
   and pipeline-parallel transfers sit on the critical path: max(compute, dp) + tp + pp.
6. Training time for D tokens: ⌈D / (global batch × seq)⌉ steps × the overlapped step time; GPU-hours
   = that × GPUs / 3600. Chinchilla-optimal tokens: 20 per parameter (Hoffmann et al. 2022, Table 3
   gives 20.2 tokens per parameter at 1B ... 21 at 67B; the usual rounding is 20).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation

from tfcalc.config import ModelConfig
from tfcalc.count import flops as count_flops
from tfcalc.count.layout import Layout
from tfcalc.errors import InputError

CHINCHILLA_TOKENS_PER_PARAM = 20


@dataclass(frozen=True)
class Hardware:
    """The numbers of one GPU kind the step time needs (from tfcalc.devices)."""

    peak_flops_per_s: float  # dense, in the training dtype
    memory_bytes: int
    intra_node_bytes_per_s: float  # NVLink per GPU, one direction
    inter_node_bytes_per_s: float  # network per GPU
    gpus_per_node: int


@dataclass(frozen=True)
class StepTime:
    model_flops: int  # 3 × forward, the whole model, one step
    executed_flops: int  # with recompute
    compute_s: float  # one GPU, without the bubble
    bubble: float  # fraction of the pipelined step that is idle
    comm_s: dict[str, float]  # seconds per group: dp, tp, pp
    no_overlap_s: float
    overlap_s: float
    mfu: float  # model FLOPs / (overlap_s × peak × GPUs)

    @property
    def pipelined_s(self) -> float:
        return self.compute_s / (1 - self.bubble)


def executed_flops(cfg: ModelConfig, layout: Layout) -> tuple[int, int]:
    """(model, executed) FLOPs of one step of global_batch sequences (step 1)."""
    model = count_flops.training_flops(cfg, layout.global_batch, layout.seq)
    if layout.recompute == "full":
        return model, count_flops.training_flops(cfg, layout.global_batch, layout.seq, recompute=True)
    if layout.recompute == "selective":
        totals = count_flops.breakdown(cfg, layout.global_batch, layout.seq).totals()  # every layer's, each stack's
        scores = totals["attention_scores"] + totals["cross_attention_scores"]
        return model, model + scores
    return model, model


def bubble_fraction(pp: int, micro_batches: int) -> float:
    """(p − 1)/(m + p − 1) (step 3)."""
    return (pp - 1) / (micro_batches + pp - 1)


def group_in_node(group: str, layout: Layout, gpus_per_node: int) -> bool:
    """Whether every rank of the group shares a node (Megatron's order: tp, then dp, then pp)."""
    span = {"tp": layout.tp, "dp": layout.tp * layout.dp, "pp": layout.gpus}[group]
    return span <= gpus_per_node


MIN_UTILIZATION = 1e-4  # below 0.01% of the peak a step time is not a plan (1e-300 made it infinite)


def check_utilization(utilization: object) -> float:
    """--mfu (the API's mfu=): a number in [MIN_UTILIZATION, 1]; InputError, one line, otherwise."""
    if isinstance(utilization, bool) or not isinstance(utilization, (int, float)):
        raise InputError(f"--mfu must be a number in [{MIN_UTILIZATION:g}, 1]; got {type(utilization).__name__} "
                         f"{str(utilization)[:40]!r}")
    if not MIN_UTILIZATION <= utilization <= 1:  # NaN fails this too
        raise InputError(f"--mfu must be a number in [{MIN_UTILIZATION:g}, 1]; got {utilization:g}")
    return float(utilization)


def step_time(cfg: ModelConfig, layout: Layout, collectives, hw: Hardware, utilization: float) -> StepTime:
    """Steps 1-5."""
    check_utilization(utilization)
    model, executed = executed_flops(cfg, layout)
    compute = executed / layout.gpus / (hw.peak_flops_per_s * utilization)
    bubble = bubble_fraction(layout.pp, layout.micro_batches)
    comm = dict.fromkeys(("dp", "tp", "pp"), 0.0)
    for c in collectives:
        fast = group_in_node(c.group, layout, hw.gpus_per_node)
        comm[c.group] += c.sent_bytes / (hw.intra_node_bytes_per_s if fast else hw.inter_node_bytes_per_s)
    pipelined = compute / (1 - bubble)
    no_overlap = pipelined + sum(comm.values())
    overlap = max(pipelined, comm["dp"]) + comm["tp"] + comm["pp"]
    mfu = model / (overlap * hw.peak_flops_per_s * layout.gpus)
    return StepTime(model, executed, compute, bubble, comm, no_overlap, overlap, mfu)


@dataclass(frozen=True)
class TrainingRun:
    tokens: int
    steps: int
    seconds: float
    gpu_hours: float
    chinchilla_tokens: int


def training_run(tokens: int, params: int, layout: Layout, step_s: float) -> TrainingRun:
    """Step 6."""
    steps = math.ceil(tokens / (layout.global_batch * layout.seq))
    seconds = steps * step_s
    return TrainingRun(tokens, steps, seconds, seconds * layout.gpus / 3600, CHINCHILLA_TOKENS_PER_PARAM * params)


_SUFFIX = {"": 1, "k": 10**3, "m": 10**6, "b": 10**9, "g": 10**9, "t": 10**12, "p": 10**15}
_COUNT = re.compile(r"\s*([0-9]*\.?[0-9]+(?:e[+-]?[0-9]+)?)\s*([kmbgtp]?)\s*", re.IGNORECASE)
MAX_TOKENS = 10**30  # a million times the largest training runs (~1e25 tokens would take every GPU for ages)


def parse_count(text: str, option: str = "--tokens") -> int:
    """'2T' -> 2·10¹², '300B' -> 3·10¹¹, '1.4e12', '500M', '1000'. Decimal suffixes, case ignored. At most
    MAX_TOKENS: the exponent is checked before any number is built ('1e999999' was a 31 s int())."""
    shown = text if len(text or "") <= 40 else text[:40] + "…"
    m = _COUNT.fullmatch(text or "") if len(text or "") <= 100 else None
    if not m:
        raise InputError(f"{option}: cannot read {shown!r} as a token count; write e.g. 2T, 300B, 1.4e12")
    mantissa, _, exponent = m.group(1).lower().partition("e")
    digits = len(mantissa.split(".")[0].lstrip("0"))
    if digits + int(exponent or 0) + len(str(_SUFFIX[m.group(2).lower()])) - 1 > 31:
        raise InputError(f"{option}: {shown!r} is more than {MAX_TOKENS:.0e} tokens")
    try:
        value = int(Decimal(m.group(1)) * _SUFFIX[m.group(2).lower()])
    except InvalidOperation:  # pragma: no cover - the pattern admits only decimal numbers
        raise InputError(f"{option}: cannot read {shown!r} as a token count") from None
    if value <= 0:
        raise InputError(f"{option}: a token count must be positive; got {shown!r}")
    if value > MAX_TOKENS:
        raise InputError(f"{option}: {shown!r} is more than {MAX_TOKENS:.0e} tokens")
    return value
