"""What `tfcalc plan` is asked (``PlanRequest``: a layout, or none for a search; batch sizes; dtype; the
sharding, precision and schedule variants) and the checks of its every field, for the Python API as for the
command line (tfcalc.report.plan builds the report from it)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Union

from tfcalc.count.model.activations import TRAINING_ATTENTION
from tfcalc.count.perf.hardware import check_fraction
from tfcalc.count.training.layout import RECOMPUTE, ZERO_STAGES, check_kernels, check_rope
from tfcalc.count.training.sharding import OFFLOAD
from tfcalc.count.training.steptime import MAX_TOKENS, check_utilization
from tfcalc.errors import InputError, shown
from tfcalc.report.plan_schedule import check_schedule_request
from tfcalc.workload import check_size

DEFAULT_MFU = None  # the performance model (was a flat 0.4 of the peak on every executed FLOP)


@dataclass(frozen=True, kw_only=True)
class PlanRequest:
    """What was asked: a layout (any of tp, pp, dp), or none (a search); batch sizes; dtype."""

    gpus: Union[int, str, None] = None  # an integer, 'auto', or None (auto without a layout)
    tp: Optional[int] = None
    pp: Optional[int] = None
    dp: Optional[int] = None
    zero: Optional[int] = None  # None: 0 for a layout, every stage for a search
    recompute: Optional[str] = None  # None: none for a layout, every kind for a search
    attention: str = TRAINING_ATTENTION  # the kernel the activations assume: flash, or math (T×T scores kept)
    sequence_parallel: bool = False
    micro_batch: Optional[int] = None  # None: 1 for a layout; a search tries powers of two up to what fits
    global_batch: Optional[int] = None  # None: 2²² tokens / seq, rounded to the layout
    seq: Optional[int] = None
    dtype: str = "bf16"
    mfu: Optional[float] = DEFAULT_MFU  # end-to-end MFU stated (the printed MFU equals it); None: the physics
    matmul_efficiency: Optional[float] = None  # every matmul at this share of the peak, not the shape model
    bandwidth_efficiency: Optional[float] = None  # share of the datasheet memory bandwidth; None: the device's
    tokens: Optional[int] = None
    lora: object = None  # --lora-rank/--lora-targets: a tfcalc.count.model.lora.LoraSpec (count.training.lora_plan)
    top: int = 10
    # --- issue 20, sharding and precision (helper X): tfcalc.count.training.sharding ---
    ep: Optional[int] = None  # None: 1 for a layout; a search tries expert parallelism on a mixture of experts
    etp: Optional[int] = None  # experts folded over TP × DP, ETP ways (count.training.experts_folded); None: implied
    ep_dispatch: str = "auto"  # how EP's tokens travel: auto, alltoall, deepep (count.training.experts_parallel)
    expert_imbalance: object = None  # the fullest EP rank's rows over the mean: a skew or a factor (expert_imbalance)
    compute_dtype: Optional[str] = None  # fp8: the blocks' linears in FP8 (tfcalc.count.training.fp8)
    fp8_recipe: str = "delayed"  # its recipe by name (tfcalc.count.perf.fp8_recipes)
    reshard_after_forward: bool = True  # False: --no-reshard-after-forward (ZeRO-3)
    fp8_all_gather: bool = False  # --fp8-all-gather: ZeRO-3 gathers the FP8 linears' weights in FP8
    hsdp: Optional[int] = None  # ZeRO-3 within groups of R ranks, replicated across them
    grad_dtype: Optional[str] = None  # fp32: a main_grad buffer beside narrower weights
    offload: tuple[str, ...] = ()  # "optimizer", "activations" (tfcalc.count.training.offload)
    # --- pipeline schedule, overlap, context parallelism (issue 20; tfcalc.count.perf.pipeline) ---
    schedule: Optional[str] = None  # None: 1f1b for a layout; a search tries 1f1b and interleaved
    virtual_stages: Optional[int] = None  # None: 2 with the interleaved schedule, else 1 (a search tries more)
    overlap: tuple[str, ...] = ()  # of "tp", "pp"
    cp: Optional[int] = None  # None: 1 for a layout; a search tries CP for long sequences
    pp_split_counts: Optional[tuple[str, ...]] = None  # "embedding", "head"; None: none, a search may count them
    pp_layers: Optional[tuple[int, ...]] = None  # each pipeline stage's blocks (--pp-layers); None: an even split
    kernels: Optional[str] = None  # eager, fused or compile; None: the model's (count.training.layout.default_kernels)
    rope: str = "complex"  # complex products (torchtitan's) or rotate-half, under compile (count.perf.elementwise, 6)
    power_limit: Optional[float] = None  # W: the clock it sustains (count.training.overlap_costs.power_capped_clock)
    zero_engine: str = "flat"  # ZeRO 0/1 states: flat (Megatron), torch, deepspeed (count.training.sharding, 7-8)
    dropout: bool = False  # dropout in training: its masks and dropped tensors kept (tfcalc.count.model.activations)
    optimizer: str = "adam"  # adam (AdamW) or muon (tfcalc.count.training.muon_plan)

    @property
    def micro(self) -> int:
        """The micro-batch of a layout (and of the search's first try)."""
        return 1 if self.micro_batch is None else self.micro_batch

    @property
    def virtual(self) -> int:
        if self.virtual_stages is not None:
            return self.virtual_stages
        return 2 if self.schedule == "interleaved" else 1

    @property
    def searching(self) -> bool:
        return self.tp is None and self.pp is None and self.dp is None



def check_request(request: PlanRequest) -> None:
    """Types and ranges of every field, for the Python API as for the command line (whose flags are typed
    already): one InputError line each, the same words as the flag's."""
    r = request
    if not (r.gpus is None or r.gpus == "auto" or (isinstance(r.gpus, int) and not isinstance(r.gpus, bool))):
        raise InputError(f"--gpus: expected a number of GPUs or 'auto'; got {shown(r.gpus)}")
    for name, value in (("--tp", r.tp), ("--pp", r.pp), ("--dp", r.dp), ("--global-batch", r.global_batch),
                        ("--seq", r.seq)):
        if value is not None:
            check_size(name, value)
    if r.micro_batch is not None:
        check_size("--micro-batch", r.micro_batch)
    check_size("--top", r.top)
    check_schedule_request(r)
    check_kernels(r.kernels)
    check_rope(r.rope)
    if r.tokens is not None and (isinstance(r.tokens, bool) or not isinstance(r.tokens, int)
                                 or not 1 <= r.tokens <= MAX_TOKENS):
        raise InputError(f"--tokens must be a whole number of tokens from 1 to {MAX_TOKENS:.0e}; got {shown(r.tokens)}")
    if r.zero is not None and (isinstance(r.zero, bool) or r.zero not in ZERO_STAGES):
        raise InputError(f"--zero must be 0, 1, 2 or 3; got {shown(r.zero)}")
    if r.recompute is not None and (not isinstance(r.recompute, str) or r.recompute not in RECOMPUTE):
        raise InputError(f"--recompute must be one of {', '.join(RECOMPUTE)}; got {shown(r.recompute)}")
    if not isinstance(r.sequence_parallel, bool):
        raise InputError(f"sequence_parallel must be True or False; got {shown(r.sequence_parallel)}")
    if not isinstance(r.dtype, str):
        raise InputError(f"--dtype must be a dtype name; got {shown(r.dtype)}")
    check_utilization(r.mfu)
    if r.matmul_efficiency is not None:
        check_fraction("--matmul-efficiency", r.matmul_efficiency)
        if r.mfu is not None:
            raise InputError("--mfu states the end-to-end MFU, --matmul-efficiency the matmuls' share of the peak: "
                             "give one")
    if r.bandwidth_efficiency is not None:
        check_fraction("--bandwidth-efficiency", r.bandwidth_efficiency)
    check_sharding_request(r)


def check_sharding_request(r: PlanRequest) -> None:
    """The types of the sharding and precision fields (their values: tfcalc.count.training.sharding)."""
    if r.ep is not None:
        check_size("--ep", r.ep)
    if r.etp is not None:
        check_size("--etp", r.etp)
    if r.hsdp is not None:
        check_size("--hsdp", r.hsdp)
    if not isinstance(r.offload, (tuple, list)) or any(w not in OFFLOAD for w in r.offload):
        raise InputError(f"--offload must be optimizer, activations or both; got {shown(r.offload)}")
    if r.optimizer not in ("adam", "muon"):  # tfcalc.count.training.muon_plan
        raise InputError(f"--optimizer must be adam or muon; got {shown(r.optimizer)}")
    if r.optimizer == "muon" and "optimizer" in r.offload:
        raise InputError("--offload optimizer with --optimizer muon is not modelled (ZeRO-Offload steps Adam)")
    if len(set(r.offload)) != len(r.offload):  # as the flag's rule (tfcalc.name_lists)
        raise InputError(f"--offload names each of {', '.join(OFFLOAD)} once; got {shown(r.offload)}")
    if not isinstance(r.reshard_after_forward, bool):
        raise InputError(f"reshard_after_forward must be True or False; got {shown(r.reshard_after_forward)}")
    if not isinstance(r.fp8_all_gather, bool):
        raise InputError(f"fp8_all_gather must be True or False; got {shown(r.fp8_all_gather)}")
    # torchao casts a weight to FP8 before FSDP2 gathers it under tensorwise scaling only (one scale per tensor,
    # from the shards' amaxes all-reduced: tfcalc.count.training.fp8, step 4)
    if r.fp8_all_gather and (r.compute_dtype != "fp8" or r.fp8_recipe != "tensorwise" or r.zero not in (None, 3)):
        raise InputError("--fp8-all-gather needs ZeRO-3 (FSDP) with --compute-dtype fp8 --fp8-recipe tensorwise "
                         "(torchao gathers FP8 weights under tensorwise scaling only)")
