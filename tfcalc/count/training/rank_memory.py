"""Memory of one rank under a parallel layout: model states (ZeRO) and activations (Korthikanti et al.
2022). Pure arithmetic, no torch. Bytes throughout; ``e`` is bytes per activation element.

Model states, mixed-precision Adam (Rajbhandari et al. 2020, "ZeRO", sec. 3.1, K = 12): per parameter,
weights e_w (2 in bf16), gradients e_w, fp32 master weights 4 (only when e_w < 4) and fp32 moments 8:
16 bytes in bf16 and in fp32 alike (fp32 has no master copy but 4-byte weights and gradients). Ψ below is
the parameters this rank's tensor-parallel slice of its pipeline stage holds (``stage_params``).

1. ZeRO-0 (DDP): everything whole, 16Ψ.
2. ZeRO-1: optimizer states (master and moments) split over the N dp ranks (dp × cp under context
   parallelism, whose ranks hold the same weights): 4Ψ + 12Ψ/N (bf16).
3. ZeRO-2: gradients split too: 2Ψ + 14Ψ/N.
4. ZeRO-3: weights split too: 16Ψ/N. Under FSDP2's mixed precision with an fp32 reduction
   (``MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32)``, --grad-dtype fp32: torchtitan's default)
   the shard is one fp32 tensor, the optimizer's parameter -- the master weights -- and its gradient the
   reduce-scatter's fp32 output (torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py casts it to the
   shard's dtype): 4 + 4 + 8 = 16 bytes a parameter, no 16-bit shard beside the master (``fp32_master_shard``:
   weights 0, the master counted with the optimizer states), where 2 + 4 + 12 = 18 would count it twice.
   Llama 2 7B (Ψ = 6,738,415,616), N = 8: 107,814,649,856 / 37,061,285,888 / 25,269,058,560 /
   13,476,831,232 bytes.
Splitting conventions (what makes the plan equal a real run): ZeRO-1 and -2 split a flat buffer of all
Ψ parameters (DeepSpeed), ⌈Ψ/N⌉ per rank; ZeRO-3 splits every tensor along dim 0 as FSDP2 does, padded
to ⌈rows/N⌉ (tfcalc.count.training.shard.fsdp_shard) -- equal to Ψ/N whenever N divides every tensor's rows.
ZeRO-3 also holds gathered (unsharded) weights while a unit runs: FSDP2 keeps the running unit and
prefetches the next, 2 × the largest unit, in the weight dtype (``gathered``); under a pipeline the whole
stage's, and its unsharded gradients accumulated over the micro-batches (``accumulated_grads``:
tfcalc.count.training.pipeline_fsdp).

Activations: tfcalc.count.training.rank_activations, the one activation model (the terms of the real module,
tfcalc.count.model.activations, shared out by tensor and sequence parallelism, recompute and the pipeline's
micro-batches in flight), the same that `memory --training` reports for one GPU.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, replace
from typing import Optional

from tfcalc.config import ModelConfig
from tfcalc.count.model.activations import Activations, activations
from tfcalc.count.model.dtypes import BITS_PER_ELEMENT
from tfcalc.count.perf.pipeline import stages_held
from tfcalc.count.training.experts_folded import expert_local_shape
from tfcalc.count.training.fp8 import FP8_BYTES, fp8_cache_bytes, fp8_linear_weight, gathers_fp8
from tfcalc.count.training.muon_plan import muon_states, stage_matrices
from tfcalc.count.training.offload import Offload, offload
from tfcalc.count.training.pipeline_fsdp import accumulated_grad_bytes, stage_gathered
from tfcalc.count.training.rank_activations import micro_batch, stage_activation_bytes
from tfcalc.count.training.shard import (
    fsdp_shard,
    module_tensors,
    stage_ranges,
    stage_tensors,
    total_blocks,
    tp_local_shape,
    units,
)
from tfcalc.count.training.sharding import (
    expert_dp,
    experts_apart,
    flat_shard,
    grad_element_bytes,
    greedy_rank0_grouped,
    local_copies,
    local_shape,
    routed_expert,
    shard_dp,
    split_states,
)
from tfcalc.count.training.stage_classes import priced_stages, stage_block_count
from tfcalc.workload import Layout, Workload

FP32 = 4
ADAM_MOMENTS = 2 * FP32  # exp_avg and exp_avg_sq, fp32


@dataclass(frozen=True)
class RankMemory:
    """Bytes one rank holds: model states, activations, and ZeRO-3's gathered weights."""

    stage: int
    params: int  # parameters of the rank's TP slice of its stage (Ψ above), before ZeRO
    weights: int
    grads: int
    optimizer: int  # fp32 master weights (below fp32) and the Adam moments
    activations: int
    gathered: int  # ZeRO-3 only: unsharded weights of the running and the prefetched unit
    fp8_cache: int = 0  # --compute-dtype fp8: FP8 weight casts and amax histories (tfcalc.count.training.fp8)
    host: int = 0  # --offload: bytes held in host memory instead (tfcalc.count.training.offload), not in the total
    # ZeRO-3 under a pipeline: the stage's gradients accumulated unsharded (tfcalc.count.training.pipeline_fsdp)
    accumulated_grads: int = 0

    @property
    def states(self) -> int:
        return self.weights + self.grads + self.optimizer

    @property
    def total(self) -> int:
        return self.states + self.activations + self.gathered + self.fp8_cache + self.accumulated_grads


def weight_element_bytes(dtype: str) -> int:
    return BITS_PER_ELEMENT[dtype] // 8


def optimizer_element_bytes(dtype: str) -> int:
    """fp32 master copy (only below fp32) and the two fp32 moments, per parameter."""
    return (FP32 if weight_element_bytes(dtype) < FP32 else 0) + ADAM_MOMENTS


def _local_shapes(cfg: ModelConfig, layout: Layout, stage: int) -> tuple[tuple[tuple[int, ...], int, bool], ...]:
    """(TP rank 0's shape as stored, copies, whether a routed expert's) of every tensor on the stage. A
    block's routed experts are one grouped tensor (E / ep, *shape) per block, EP rank 0's experts
    (tfcalc.model.experts; tfcalc.count.training.sharding, step 1): FSDP2 splits it along the experts, so with E
    not a multiple of the ranks each holds ⌈E/N⌉ experts' rows, padded -- not ⌈rows/N⌉ of each expert."""
    return _shapes(cfg, layout.tp, layout.pp, layout.ep, stage, layout.virtual_stages, layout.stage_split, layout.etp)


@functools.lru_cache(maxsize=16384)  # a search prices the same stages under many layouts
def _shapes(cfg: ModelConfig, tp: int, pp: int, ep: int, stage: int, virtual: int, counted: tuple[str, ...] = (),
            etp: Optional[int] = None) -> tuple[tuple[tuple[int, ...], int, bool], ...]:
    """``etp``: the experts' own TP split where they are folded (tfcalc.count.training.experts_folded), else whole."""
    out = []
    for t, n in stage_tensors(cfg, pp, stage, virtual, counted):
        if routed_expert(t.name):  # n = experts × blocks: one grouped tensor per block
            out.append(((t.copies // ep, *expert_local_shape(t.name, tp_local_shape(t, tp), etp)), n // t.copies,
                        True))
        else:
            out.append((tp_local_shape(t, tp), n, False))
    return tuple(out)


@functools.lru_cache(maxsize=16384)
def _sums(cfg: ModelConfig, tp: int, pp: int, ep: int, stage: int, virtual: int,
          counted: tuple[str, ...] = (), etp: Optional[int] = None) -> tuple[int, int]:
    """(all the parameters, the routed experts') of the stage's local shapes."""
    shapes = _shapes(cfg, tp, pp, ep, stage, virtual, counted, etp)
    return (sum(n * math.prod(shape) for shape, n, _ in shapes),
            sum(n * math.prod(shape) for shape, n, expert in shapes if expert))


param_sums = _sums  # (all, routed experts') of (cfg, tp, pp, ep, stage, virtual[, counted]): the search's bound


def stage_params(cfg: ModelConfig, layout: Layout, stage: int) -> int:
    """Ψ: parameters of TP rank 0's slice of the stage (EP rank 0's experts)."""
    return _sums(cfg, layout.tp, layout.pp, layout.ep, stage, layout.virtual_stages, layout.stage_split, layout.etp)[0]


def stored_sizes(cfg: ModelConfig, layout: Layout, stage: int) -> dict[int, int]:
    """{elements: how many tensors} of every parameter tensor of the stage as the real module stores them:
    each block's own (a mixture's routed experts one grouped tensor per block, tfcalc.model.experts), the
    ends' once -- counted, not listed (a stage may hold 2**40 blocks)."""
    out: dict[int, int] = {}
    for t, n in stage_tensors(cfg, layout.pp, stage, layout.virtual_stages, layout.stage_split):
        size = math.prod(local_shape(t, layout))
        if routed_expert(t.name):  # n = experts × blocks
            size, n = local_copies(t.name, t.copies, layout) * size, n // t.copies
        out[size] = out.get(size, 0) + n
    return out


def stage_expert_params(cfg: ModelConfig, layout: Layout, stage: int) -> int:
    """Of Ψ, the routed experts' parameters: split by ZeRO over dp / ep ranks (tfcalc.count.training.sharding)."""
    return _sums(cfg, layout.tp, layout.pp, layout.ep, stage, layout.virtual_stages, layout.stage_split, layout.etp)[1]


def model_states(cfg: ModelConfig, layout: Layout, stage: int) -> tuple[int, int, int, int]:
    """(Ψ, weights, grads, optimizer) bytes of one rank of the stage (steps 1-4; gradients in
    --grad-dtype, the routed experts' states split over dp / ep, HSDP's over its groups:
    tfcalc.count.training.sharding); under Muon one momentum instead of two for the hidden matrices' share
    (tfcalc.count.training.muon_plan, step 1)."""
    psi, w, g, o = adam_states(cfg, layout, stage)
    if layout.optimizer == "muon":
        o = muon_states(o, optimizer_element_bytes(layout.dtype), psi, stage_matrices(cfg, layout, stage).local)
    return psi, w, g, o


def adam_states(cfg: ModelConfig, layout: Layout, stage: int) -> tuple[int, int, int, int]:
    """model_states under AdamW."""
    psi = stage_params(cfg, layout, stage)
    ew, eo, eg = weight_element_bytes(layout.dtype), optimizer_element_bytes(layout.dtype), grad_element_bytes(layout)
    experts = stage_expert_params(cfg, layout, stage) if experts_apart(layout) else 0
    flat = flat_shard(split_states(psi - experts, experts, layout))  # ZeRO-1/2: flat buffers split N ways
    if layout.zero_engine == "deepspeed":  # the bf16 .grad kept beside the fp32 buffer (sharding, 8)
        eg += ew
    if layout.zero == 0:
        return psi, ew * psi, eg * psi, eo * psi
    if layout.zero == 1 and layout.zero_engine == "torch":  # whole tensors dealt out (count.training.sharding, 7)
        return psi, ew * psi, eg * psi, eo * greedy_rank0_grouped(stored_sizes(cfg, layout, stage), layout.data_ranks)
    if layout.zero == 1:
        return psi, ew * psi, eg * psi, eo * flat
    if layout.zero == 2:
        return psi, ew * psi, eg * flat, eo * flat
    N, Ne = shard_dp(layout), expert_dp(layout)
    shards = [(n * fsdp_shard(shape, Ne if expert else N)) for shape, n, expert in _local_shapes(cfg, layout, stage)]
    ws = 0 if fp32_master_shard(layout) else ew  # step 4: the fp32 shard is the master
    return psi, ws * sum(shards), eg * sum(shards), eo * sum(shards)


def fp32_master_shard(layout: Layout) -> bool:
    """Step 4: ZeRO-3 (FSDP2) with 16-bit weights and an fp32 reduction keeps one fp32 shard, the master."""
    return layout.zero == 3 and layout.grad_dtype == "fp32" and weight_element_bytes(layout.dtype) < FP32


def gathered_bytes(cfg: ModelConfig, layout: Layout) -> int:
    """ZeRO-3: 2 × the largest FSDP unit (one block, or the root's tensors), unsharded, TP-local; under
    expert parallelism a block's routed experts (EP rank 0's) are a unit of their own, as
    tfcalc.count.training.comm counts them. Without resharding after forward, see ``rank_memory``. Under
    --fp8-all-gather the FP8 linears' weights are gathered, and held, in FP8 (tfcalc.count.training.fp8, step 4)."""
    if layout.zero != 3:
        return 0
    ew, fp8 = weight_element_bytes(layout.dtype), gathers_fp8(layout)

    def size(t) -> int:  # bytes; a folded expert's ETP share (local_shape)
        b = FP8_BYTES if fp8 and fp8_linear_weight(t) else ew
        return b * local_copies(t.name, t.copies, layout) * math.prod(local_shape(t, layout))

    # which tensors (routed or not) make a unit
    parts = [(False, True)] if not experts_apart(layout) else [(False,), (True,)]
    block = max(sum(size(t) for t in tensors if routed_expert(t.name) in part)
                for tensors, _ in units(cfg) for part in parts)  # the largest unit of a block kind
    root = sum(size(t) for t in module_tensors(cfg) if not t.per_block)
    return 2 * max(block, root)


@functools.lru_cache(maxsize=256)
def _activations(cfg: ModelConfig, w: Workload, attention: str, recompute: str, dropout: bool) -> Activations:
    """The single-device terms of one micro-batch; a search prices many layouts of the same terms."""
    return activations(cfg, w, attention, recompute, dropout)


def layout_activations(cfg: ModelConfig, layout: Layout) -> Activations:
    L = layout  # a CP rank's s/C positions (rank_activations.micro_batch; tfcalc.count.training.context_parallel)
    return _activations(cfg, micro_batch(L), L.attention, L.recompute, L.dropout)


def stage_activations(cfg: ModelConfig, layout: Layout, stage: int, blocks: int) -> int:
    """Activation bytes of one rank of the stage (``blocks`` of them, counted over every stack in model
    order, an encoder's first, as tfcalc.count.training.rank_activations numbers them) at its peak."""
    return _stage_activations(cfg, _activation_alike(layout), stage, blocks)


def _activation_alike(layout: Layout) -> Layout:
    """The layout with what activations do not depend on set alike, so that a search's many layouts share
    one pricing: dp and ZeRO (and expert parallelism, HSDP, resharding, offload, the gradients' dtype),
    and micro-batches past 2p (every schedule's in-flight count has saturated
    by then: tfcalc.count.perf.pipeline.chunk_micro_batches)."""
    m = min(layout.micro_batches, 2 * layout.pp)
    return replace(layout, dp=1, zero=0, global_batch=layout.micro_batch * m, overlap=(), ep=1, hsdp=None,
                   reshard_after_forward=True, offload_optimizer=False, offload_activations=False,
                   grad_dtype=None, zero_engine="flat")  # the sharding variants too (offload: rank_offload)


@functools.lru_cache(maxsize=16384)
def _stage_activations(cfg: ModelConfig, layout: Layout, stage: int, blocks: int) -> int:
    ranges = stage_ranges(total_blocks(cfg), layout.pp, stage, layout.virtual_stages, layout.stage_split)
    assert sum(map(len, ranges)) == blocks
    return stage_activation_bytes(layout_activations(cfg, layout), layout, stage, ranges)


def rank_memory(cfg: ModelConfig, layout: Layout) -> RankMemory:
    """The rank with the largest total: over pipeline stages, TP rank 0 (the largest blocks). Stages alike
    -- neither end, the same kinds and counts of blocks -- hold the same states, and a later one keeps no
    more micro-batches in flight (1F1B's p − i, the interleaved schedule's warm-up alike), so only the
    first of each kind is priced: a search's layouts of 96 stages price a handful."""
    return max((stage_memory(cfg, layout, s) for s in priced_stages(cfg, layout.pp, layout.virtual_stages,
                                                                    layout.stage_split)), key=lambda m: m.total)


def stage_memory(cfg: ModelConfig, layout: Layout, stage: int) -> RankMemory:
    """What TP rank 0 of pipeline stage ``stage`` holds (rank_memory's figure of one stage)."""
    blocks = stage_block_count(total_blocks(cfg), layout.pp, stage, layout.virtual_stages, layout.stage_split)
    # dualpipe: the rank holds its stage and the mirrored one, each with its states (tfcalc.count.perf.pipeline, 4)
    psi, w, g, o = map(sum, zip(*(model_states(cfg, layout, s) for s in stages_held(layout, stage)), strict=True))
    # without resharding (or under a pipeline: pipeline_fsdp, 1) every unit of the stage stays gathered
    gathered = weight_element_bytes(layout.dtype) * psi if stage_gathered(layout) else gathered_bytes(cfg, layout)
    acts = _stage_activations(cfg, _activation_alike(layout), stage, blocks)
    off = rank_offload(cfg, layout, stage, o)
    return RankMemory(stage, psi, w, g, o - off.optimizer_saved, acts - off.activations_saved, gathered,
                      fp8_cache_bytes(cfg, layout, stage), off.host_bytes,
                      accumulated_grad_bytes(layout, psi, grad_element_bytes(layout)))


def rank_offload(cfg: ModelConfig, layout: Layout, stage: int, optimizer_bytes: int) -> Offload:
    """What one rank of the stage offloads (tfcalc.count.training.offload); ``optimizer_bytes`` its ZeRO shard's
    optimizer states (before offload)."""
    if not (layout.offload_optimizer or layout.offload_activations):
        return NO_OFFLOAD
    return offload(layout, stage, layout_activations(cfg, layout), optimizer_bytes,
                   optimizer_bytes // optimizer_element_bytes(layout.dtype), weight_element_bytes(layout.dtype),
                   grad_element_bytes(layout))


NO_OFFLOAD = Offload(0, 0, 0, 0, 0)
