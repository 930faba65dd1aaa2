"""Step time and training time of a parallel plan: pure arithmetic, no torch.

1. FLOPs of one step: model FLOPs = 3 × forward (tfcalc.count.model.flops.training_flops); executed FLOPs
   add what recompute runs again: full recompute a whole forward (4 × forward), selective recompute the
   attention scores' matmuls (Q·Kᵀ and ·V) of every layer (Korthikanti et al. 2022, sec. 5).
2. Compute time per micro-batch on the slowest pipeline stage, from physics (tfcalc.count.training.micro_batch_time):
   every matmul of the description at its TP-split shape and the micro-batch, forward and backward
   GEMMs each at its shape's efficiency (tile and wave quantization, tfcalc.count.perf.gemm), fused
   attention at its kernel's efficiency, the non-matmul kernels' memory traffic at the achievable
   bandwidth, a fixed cost per kernel; the peak at the clock the GPU sustains through training
   (``sustained_clock``: 0.926 on A100s). ``compute_s`` = m micro-batches of it.
   ``--matmul-efficiency X`` runs every matmul at the flat fraction X of the peak instead of the shape
   model; everything else stays.
3. Pipeline bubble, 1F1B or GPipe with p stages and m micro-batches: (p − 1)/(m + p − 1) of the step
   is idle (Huang et al. 2019; Narayanan et al. 2021, sec. 2.2), so compute stretches by (m + p − 1)/m;
   the interleaved and zero-bubble schedules' bubbles: tfcalc.count.perf.pipeline.
4. Communication time: each collective's α-β time (tfcalc.count.perf.collectives): its calls' ring
   steps times the link's latency, plus the bytes one rank sends (tfcalc.count.training.comm) over the link's
   bandwidth times NCCL's bus efficiency on it: NVLink (or PCIe: intra_link) when the whole group sits
   in one node under Megatron's rank order (tfcalc.count.training.layout), else the network: one NIC per GPU, and
   a group with r ranks in each node drives r of them (group_bus_bytes_per_s, NCCL's channels). All-reduces,
   all-gathers and reduce-scatters call by call as NCCL's own cost model picks ring or tree and LL,
   LL128 or Simple, over the nodes the group spans (collectives.nccl_seconds).
5. What overlaps with what:
   - tensor-parallel collectives sit on every micro-batch's critical path (Megatron's default: not
     overlapped), so they stretch each micro-batch, bubble included: tp × (m + p − 1)/m; with
     --overlap tp the blocks' collectives hide behind the matmuls (tfcalc.count.perf.pipeline);
   - pipeline sends and receives on the critical path: added (with --overlap pp, only the fill's and
     the drain's);
   - context parallelism's K/V ring hides behind attention; what outlasts it stretches as TP does;
   - data-parallel gradient reduction overlaps with the backward pass that produces the gradients
     (DDP's buckets, FSDP's reduce-scatter): with ZeRO-0/1 only the last micro-batch's backward (the
     earlier ones accumulate under no_sync), with ZeRO-2/3 every micro-batch's; ZeRO-3's gathers overlap
     with forward and backward (FSDP's prefetch). What does not fit in that window is exposed, and so is
     the last bucket (25 MiB), which starts only when the backward ends; under ZeRO-3 instead FSDP2's
     ends: the root's and first block's gathers before the forward, their reductions after the backward
     (tfcalc.count.training.fsdp_edges).
   Without overlap: everything added (``no_overlap_s``). The step time is ``overlap_s``.
   Overlap is not free: a NCCL collective is a kernel whose CTAs (one per channel) hold SMs while it
   runs, so the compute it overlaps runs its GEMMs' tiles in waves over the SMs left
   (tfcalc.count.perf.gemm) -- on an H100, an FSDP-style all-gather of 24 CTAs beside a 132-tile GEMM
   pushed the GEMM into a second wave and nearly doubled its time (NVIDIA developer forums, "Compute-
   Communication Overlap Causes Severe GEMM Performance Degradation because of Tail Effect", 2025,
   measured with Nsight Systems). ``contention_s`` = (micro-batch time on S − C SMs at (S − C)/S of the
   peak ÷ that on all S, minus 1) × the overlapped seconds: DP's reduction within its window and, with --overlap tp,
   the hidden TP collectives; C = ``PerfSpec.comm_sms`` (tfcalc.count.perf.hardware). Pipeline and
   context-parallel sends (NCCL's point-to-point kernels, a channel or two per peer) are left out.
   --overlap ep hides expert parallelism's all-to-alls under another micro-batch's compute (but 1/m of them)
   at the same kind of cost: the compute beside them on the SMs the all-to-all's kernels leave
   (``ep_contention_s``; tfcalc.count.training.experts_parallel, step 4).
   Nor in HBM: overlapped DP traffic slows the memory-bound kernels beside it (``hbm_contention_s``), and
   FSDP2's copy-out and reduce-scatter copy-in run on the compute stream (``fsdp_copy_s``): overlap_costs.
6. MFU = model FLOPs / (step time × peak × GPUs). ``--mfu X`` states the end-to-end MFU instead: the
   step time is then model FLOPs / (X × peak × GPUs), so the printed MFU is X; the physics' own
   prediction stays in ``physics_s``.
7. Training time for D tokens: ⌈D / (global batch × seq)⌉ steps × the step time; GPU-hours
   = that × GPUs / 3600. Chinchilla-optimal tokens: Hoffmann et al. 2022, Table 3 (approach 1's
   compute-optimal tokens per model size: 400M 8.0B, 1B 20.2B, 10B 205.1B, 67B 1.5T, 175B 3.7T, 280B
   5.9T, 520B 11.0T, 1T 21.2T, 10T 216.2T), interpolated linearly in tokens per parameter against
   log(parameters) and held at the ends: 20 per parameter at 400M rising to 21.6 at 10T, not a flat 20.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Optional

from tfcalc.config import ModelConfig
from tfcalc.count.model import flops as count_flops
from tfcalc.count.model.dtypes import BITS_PER_ELEMENT
from tfcalc.count.model.op_recompute import RECOMPUTED
from tfcalc.count.perf import collectives as alpha_beta, pipeline
from tfcalc.count.perf.hardware import PerfSpec
from tfcalc.count.training import experts_folded
from tfcalc.count.training.context_parallel import ring_exposed
from tfcalc.count.training.fp8 import gathers_fp8
from tfcalc.count.training.fsdp_edges import edge_s
from tfcalc.count.training.layout import Layout
from tfcalc.count.training.micro_batch_time import micro_batch_time
from tfcalc.count.training.overlap_costs import dp_hbm_bytes, fsdp_copy_s, hbm_contention_s
from tfcalc.count.training.shard import stage_block_counts, total_blocks
from tfcalc.count.training.sharding import dispatcher, ep_nodes, grad_element_bytes
from tfcalc.count.training.token_count import (  # noqa: F401 (their old home)
    CHINCHILLA_TABLE_3,
    CHINCHILLA_TOKENS_PER_PARAM,
    MAX_TOKENS,
    chinchilla_tokens,
    parse_count,
)
from tfcalc.errors import InputError
from tfcalc.workload import Workload


@dataclass(frozen=True)
class Hardware:
    """The numbers of one GPU kind the step time needs (from tfcalc.devices)."""

    peak_flops_per_s: float  # dense, in the training dtype
    memory_bytes: int
    intra_node_bytes_per_s: float  # NVLink per GPU, one direction
    inter_node_bytes_per_s: float  # network per GPU
    gpus_per_node: int
    bandwidth_bytes_per_s: float = 3.35e12  # memory, datasheet (the achievable share: perf.bandwidth_efficiency)
    intra_link: str = "nvlink"  # the link kind inside a node: nvlink or pcie
    perf: PerfSpec = field(default_factory=PerfSpec)
    fp8_peak_flops_per_s: Optional[float] = None  # dense FP8, for --compute-dtype fp8 (tfcalc.count.training.fp8)
    fp4_peak_flops_per_s: Optional[float] = None  # dense NVFP4, for --compute-dtype nvfp4 (count.perf.fp8_recipes)
    pcie_bytes_per_s: Optional[float] = None  # host link per GPU and direction, for --offload (count.training.offload)
    host_memory_bytes: Optional[int] = None  # CPU memory of one node, what offload fills (None: not checked)


@dataclass(frozen=True)
class StepTime:
    model_flops: int  # 3 × forward, the whole model, one step
    executed_flops: int  # with recompute
    compute_s: float  # one GPU, without the bubble (m micro-batches on the slowest stage)
    bubble: float  # fraction of the pipelined step that is idle
    comm_s: dict[str, float]  # α-β seconds per group: dp, tp, pp
    no_overlap_s: float
    overlap_s: float  # the step time
    mfu: float  # model FLOPs / (overlap_s × peak × GPUs)
    physics_s: float = 0.0  # the performance model's step time (= overlap_s unless --mfu is given)
    exposed_s: dict[str, float] = field(default_factory=dict)  # communication on the critical path, per group
    matmul_s: float = 0.0  # of compute_s: the matmuls
    basis: str = "physics"  # physics, mfu (--mfu given) or matmul-efficiency (--matmul-efficiency given)
    contention_s: float = 0.0  # the overlapped compute's slowdown while NCCL's kernels hold SMs (step 5)
    optimizer_s: float = 0.0  # the optimizer step on the rank's shard (tfcalc.count.perf.optimizer)
    hbm_contention_s: float = 0.0  # memory-bound compute waiting on overlapped collectives' HBM traffic (step 5)
    fsdp_copy_s: float = 0.0  # FSDP2's copy-out and reduce-scatter copy-in on the compute stream (step 5)
    ep_contention_s: float = 0.0  # --overlap ep's cost: the compute beside the all-to-alls' SMs (step 5)
    slowest_rank_s: float = 0.0  # the slowest GPU's extra matmul time (tfcalc.count.perf.slowest_rank)

    @property
    def pipelined_s(self) -> float:
        return self.compute_s / (1 - self.bubble)


def executed_flops(cfg: ModelConfig, layout: Layout) -> tuple[int, int]:
    """(model, executed) FLOPs of one step of global_batch sequences (step 1)."""
    return _executed_flops(cfg, layout.global_batch, layout.seq, layout.recompute)


@lru_cache(maxsize=1024)  # a search prices many layouts of the same batch, sequence and recompute
def _executed_flops(cfg: ModelConfig, global_batch: int, seq: int, recompute: str) -> tuple[int, int]:
    step = Workload(batch=global_batch, seq=seq)
    model = count_flops.training_flops(cfg, step)
    if recompute == "full":
        return model, count_flops.training_flops(cfg, step, recompute=True)
    if recompute == "op":  # the O and down projections run forward again (tfcalc.count.model.op_recompute)
        again = sum(e.total for e in count_flops.matmul_entries(cfg, global_batch, seq) if e.component in RECOMPUTED)
        return model, model + again
    if recompute == "selective":
        totals = count_flops.breakdown(cfg, step).totals()  # every layer's, each stack's
        scores = totals["attention_scores"] + totals["cross_attention_scores"]
        return model, model + scores
    return model, model


def bubble_fraction(pp: int, micro_batches: int) -> float:
    """(p − 1)/(m + p − 1) (step 3, 1F1B; every schedule: tfcalc.count.perf.pipeline.bubble_fraction)."""
    return (pp - 1) / (micro_batches + pp - 1)


def group_in_node(group: str, layout: Layout, gpus_per_node: int) -> bool:
    """Whether every rank of the group shares a node (Megatron's order: tp, then cp, then dp, then pp; the
    dp group of the gradients spans the cp ranks too)."""
    span = {"tp": layout.tp, "cp": layout.tp * layout.cp, "dp": layout.tp * layout.cp * layout.dp,
            "pp": layout.gpus,
            # tfcalc.count.training.sharding: the EP group is ep adjacent DP ranks, an HSDP shard group hsdp of them;
            # the experts' replicas (edp) and HSDP's replicas stride across the whole DP group (cp is 1 with
            # either: check_sharding)
            "ep": layout.tp * layout.ep, "dp_shard": layout.tp * (layout.hsdp or layout.dp),
            "edp": layout.tp * layout.dp, "dp_replicate": layout.tp * layout.dp}.get(group)
    return (experts_folded.group_span(group, layout) or span) <= gpus_per_node


MIN_UTILIZATION = 1e-4  # below 0.01% of the peak a step time is not a plan (1e-300 made it infinite)


def check_utilization(utilization: object, option: str = "--mfu") -> Optional[float]:
    """--mfu (the API's mfu=): None (the physics), or a number in [MIN_UTILIZATION, 1]; InputError, one
    line, otherwise."""
    if utilization is None:
        return None
    if isinstance(utilization, bool) or not isinstance(utilization, (int, float)):
        raise InputError(f"{option} must be a number in [{MIN_UTILIZATION:g}, 1]; got {type(utilization).__name__} "
                         f"{str(utilization)[:40]!r}")
    if not MIN_UTILIZATION <= utilization <= 1:  # NaN fails this too
        raise InputError(f"{option} must be a number in [{MIN_UTILIZATION:g}, 1]; got {utilization:g}")
    return float(utilization)


# groups whose time counts with another's: the data-parallel variants overlap with the backward as dp does
TIME_GROUP = {"edp": "dp", "dp_shard": "dp", "dp_replicate": "dp", "etp": "ep"}  # etp: on the path as EP's


def group_nodes(group: str, layout: Layout, gpus_per_node: int, size: int) -> int:
    """Nodes a group of ``size`` ranks spans under Megatron's rank order (group_in_node's spans): its ranks
    sit ``stride`` apart, so a node holds gpus_per_node / stride of them (at least one)."""
    t = layout.tp
    stride = {"tp": 1, "cp": t, "dp": t, "ep": t, "dp_shard": t, "pp": t * layout.cp * layout.dp,
              "edp": t * layout.ep, "dp_replicate": t * (layout.hsdp or layout.dp)}.get(group)
    stride = experts_folded.group_stride(group, layout) or stride  # the experts' own grid, where folded
    per_node = min(size, max(1, gpus_per_node // stride))
    return -(-size // per_node)


def group_bus_bytes_per_s(hw: Hardware, size: int, nodes: int) -> float:
    """Step 4's bus bandwidth β of a group of ``size`` ranks over ``nodes`` nodes (group_nodes; bytes/s,
    NCCL's Simple protocol). Inside a node (nodes 1), the intra-node link's. Across nodes, NCCL runs one
    channel per network interface the group's ranks in a node own and sums them -- ``busBw = nChannels ×
    bwInter`` (NVIDIA/nccl src/graph/tuning.cc, ncclTopoTuneModel; the topology search in
    src/graph/search.cc gives a rail-optimized node one channel per NIC): a group with r ranks in each node
    moves r × (the network per GPU) across it, up to what the links inside the node carry. A data-parallel
    group of 64 A100s in 8 nodes: min(8 × 25 × 0.9, 300 × 0.8) = 180 GB/s, not 22.5 -- the ~190 GB/s
    nccl-tests all_reduce_perf reaches between DGX A100 nodes with eight 200 Gb/s HDR NICs; one rank per
    node (TP 8 fills the node, or HSDP's replicas) stays at one NIC's 22.5 GB/s."""
    intra = hw.intra_node_bytes_per_s * hw.perf.link_efficiency[hw.intra_link]
    if nodes == 1:
        return intra
    return min(-(-size // nodes) * hw.inter_node_bytes_per_s * hw.perf.link_efficiency["network"], intra)


def collective_seconds(c, layout: Layout, hw: Hardware) -> float:
    """Step 4 for one collective: all-reduce, all-gather and reduce-scatter as NCCL's cost model runs them
    (tfcalc.count.perf.collectives.nccl_seconds: ring or tree, LL, LL128 or Simple, per call), the rest
    α-β."""
    if c.links is not None:  # both links at once (expert parallelism across nodes: experts_parallel, step 3)
        L, perf = c.links, hw.perf
        return alpha_beta.two_link_seconds(
            c.calls or 1,
            (L.network_bytes, L.network_peers, hw.inter_node_bytes_per_s or 1.0, perf.link_latency_s["network"],
             perf.link_efficiency["network"]),
            (L.intra_bytes, L.intra_peers, hw.intra_node_bytes_per_s, perf.link_latency_s[hw.intra_link],
             perf.link_efficiency[hw.intra_link]))
    inside = group_in_node(c.group, layout, hw.gpus_per_node)
    kind = hw.intra_link if inside else "network"
    rate = hw.intra_node_bytes_per_s if inside else hw.inter_node_bytes_per_s
    calls = c.calls if c.calls is not None else alpha_beta.ddp_calls(c.payload_bytes)
    if c.op in alpha_beta.NCCL_OPS and calls:
        nodes = 1 if inside else group_nodes(c.group, layout, hw.gpus_per_node, c.group_size)
        return alpha_beta.nccl_seconds(c.op, c.payload_bytes, c.sent_bytes, c.group_size, nodes, calls,
                                       hw.intra_link, group_bus_bytes_per_s(hw, c.group_size, nodes))
    return alpha_beta.seconds(c.op, c.sent_bytes, c.group_size, calls, rate, hw.perf.link_latency_s[kind],
                              hw.perf.link_efficiency[kind])


def comm_seconds(collectives, layout: Layout, hw: Hardware) -> dict[str, float]:
    """Step 4: α-β seconds per group."""
    out = dict.fromkeys(("dp", "tp", "pp", "cp"), 0.0)
    for c in collectives:
        bucket = TIME_GROUP.get(c.group, c.group)
        out[bucket] = out.get(bucket, 0.0) + collective_seconds(c, layout, hw)
    return out


@dataclass(frozen=True)
class StageSeconds:
    """One micro-batch on the slowest stage: in all, and the parts the schedule and overlap read."""

    total: float
    matmuls: float
    backward: float  # what follows the forward (the window DP's reduction hides in)
    forward: float  # zero-bubble's F
    weight_grad: float  # zero-bubble's W (weight-gradient GEMMs)
    attention: float  # attention's kernels, which context parallelism's ring hides behind


@lru_cache(maxsize=4096)
def _alike(layout: Layout) -> Layout:
    """What a micro-batch's time depends on (a search prices many layouts that share it); under --fp8-all-gather
    the ZeRO-3 shards too (the weights' casts run on them: tfcalc.count.training.fp8, step 4)."""
    sharded = gathers_fp8(layout)
    return replace(layout, dp=layout.dp if sharded else 1, pp=1, zero=3 if sharded else 0,
                   global_batch=layout.micro_batch * (layout.dp if sharded else 1), schedule="1f1b", virtual_stages=1,
                   overlap=(), pp_split_counts=(), pp_layers=())


@lru_cache(maxsize=64)
def _fewer_sms(perf: PerfSpec, sms: int) -> PerfSpec:
    return replace(perf, sm_count=sms)


def micro_batch_at(cfg: ModelConfig, layout: Layout, hw: Hardware, held_sms: int = 0):
    """Step 2's micro-batch times; ``held_sms`` SMs a collective's kernel takes (step 5): the GEMMs run on the rest."""
    # the clock a GPU sustains through training at its power limit (tfcalc.count.perf.hardware)
    peak = hw.peak_flops_per_s * (1.0 if hw.perf.matmul_efficiency else hw.perf.sustained_clock)
    narrow = hw.fp4_peak_flops_per_s if layout.fp8_recipe == "nvfp4" else hw.fp8_peak_flops_per_s
    fp8 = (narrow or 0.0) * (peak / hw.peak_flops_per_s) if layout.compute_dtype == "fp8" else 0.0
    perf, sms = hw.perf, hw.perf.sm_count
    if 0 < held_sms < sms:
        share = (sms - held_sms) / sms
        perf, peak, fp8 = _fewer_sms(perf, sms - held_sms), peak * share, fp8 * share
    return micro_batch_time(cfg, _alike(layout), peak, hw.bandwidth_bytes_per_s * perf.bandwidth_efficiency, perf, fp8)


def _stage_s(cfg: ModelConfig, layout: Layout, hw: Hardware, held_sms: int = 0) -> StageSeconds:
    """Step 2 for one micro-batch on the slowest stage (each stage holds its blocks' count, whatever the schedule
    or split: tfcalc.count.training.shard.stage_ranges)."""
    t = micro_batch_at(cfg, layout, hw, held_sms)
    # each stage's blocks as placed (--pp-split-counts, --pp-layers: shard.stage_ranges); the embedding's lookup is
    # memory traffic spread over the blocks' non-matmul time (micro_batch_time), the head the last stage's own
    counts = stage_block_counts(total_blocks(cfg), layout.pp, layout.virtual_stages, layout.stage_split)
    h = pipeline.head_stage(layout)  # the last stage, the first rank under dualpipev (count.perf.pipeline, 5)
    others = [n for s, n in enumerate(counts) if s != h]
    stage = max(t.stage_s(max(others, default=0), False), t.stage_s(counts[h], True))
    last = stage == t.stage_s(counts[h], True)
    blocks = counts[h] if last else max(others)
    matmuls = blocks * t.block_matmul_s + t.head_matmul_s * last
    forward = blocks * t.block_forward_s
    weight_grad = blocks * t.block_weight_grad_s + t.head_weight_grad_s * last
    return StageSeconds(stage, matmuls, stage - forward * (1 + (layout.recompute == "full")), forward, weight_grad,
                        blocks * t.block_attention_s)


def step_time(cfg: ModelConfig, layout: Layout, collectives, hw: Hardware, mfu: Optional[float] = None,
              stage_index: int = 0) -> StepTime:
    """Steps 1-6; ``stage_index`` the pipeline stage whose rank the collectives are of."""
    mfu = check_utilization(mfu)
    model, executed = executed_flops(cfg, layout)
    m = layout.micro_batches
    s = _stage_s(cfg, layout, hw)
    compute = m * s.total
    bubble = pipeline.bubble_fraction(layout, s.forward, s.total - s.forward - s.weight_grad, s.weight_grad)
    comm = comm_seconds(collectives, layout, hw)
    pipelined = compute / (1 - bubble)
    stretch = pipelined / compute if compute else 1.0  # what sits inside each micro-batch stretches with it
    tp_by_cause: dict[str, float] = {}
    for c in collectives:
        if c.group == "tp":
            tp_by_cause[c.cause] = tp_by_cause.get(c.cause, 0.0) + collective_seconds(c, layout, hw)
    tp = pipeline.exposed_tp(tp_by_cause, m * s.matmuls, layout) * stretch
    # the ring hides behind attention, but not where torch.compile traces it (context_parallel, steps 3 and 7)
    cp = (comm["cp"] if ring_exposed(layout) else max(0.0, comm["cp"] - m * s.attention)) * stretch
    pp = pipeline.exposed_pp(comm["pp"], layout, stage_index)
    window = s.backward * (1 if layout.zero in (0, 1) else m) + (compute - s.backward * m) * (layout.zero == 3)
    last_bucket = min(comm["dp"], alpha_beta.DDP_BUCKET_BYTES / (hw.inter_node_bytes_per_s or 1.0))
    hideable = comm["dp"]
    if layout.zero == 3:  # FSDP2's root and first-block collectives at the step's ends, outside the window
        last_bucket = edge_s(collectives, lambda c: collective_seconds(c, layout, hw))
        hideable -= last_bucket
    exposed = {"tp": tp, "pp": pp, "dp": max(0.0, hideable - window) + last_bucket, "cp": cp}
    ep_hidden = ep_cost = 0.0
    if "ep" in comm:  # expert parallelism's all-to-alls: on every micro-batch's critical path, as TP's ...
        if "ep" in layout.overlap:  # ... or under another micro-batch's compute but 1/m (experts_parallel, 4)
            ep_hidden = min(comm["ep"] * (1 - 1 / m), compute)
            sms = hw.perf.ep_comm_sms if dispatcher(layout, ep_nodes(layout, hw.gpus_per_node)) == "deepep" \
                else hw.perf.comm_sms
            ep_held = _stage_s(cfg, layout, hw, sms) if sms else s
            ep_cost = (ep_held.total / s.total - 1 if s.total else 0.0) * ep_hidden * stretch
        exposed["ep"] = (comm["ep"] - ep_hidden) * stretch
    # step 5's contention: while a collective overlaps the compute, NCCL's kernel holds comm_sms SMs and the
    # overlapped compute runs on the rest (DP's reduction behind the backward, --overlap tp's behind the GEMMs)
    held = _stage_s(cfg, layout, hw, hw.perf.comm_sms) if hw.perf.comm_sms else s
    slow = held.total / s.total - 1 if s.total else 0.0
    hidden_tp = sum(v for cause, v in tp_by_cause.items() if cause in pipeline.OVERLAPPED_TP) \
        if "tp" in layout.overlap else 0.0
    contention = slow * (min(hideable, window) + min(hidden_tp, m * s.matmuls) * stretch)
    # ... and HBM's: the DP traffic's hidden share slows the memory-bound kernels; FSDP2's copies run on the
    # compute stream (tfcalc.count.training.overlap_costs)
    hbm = dp_hbm_bytes(collectives, layout.zero, BITS_PER_ELEMENT[layout.dtype] // 8, grad_element_bytes(layout))
    bandwidth = hw.bandwidth_bytes_per_s * hw.perf.bandwidth_efficiency
    hidden_dp = min(hideable, window) / comm["dp"] if comm["dp"] else 0.0
    hbm_s = hbm_contention_s(hbm.overlapped, hidden_dp, bandwidth, 1 - s.matmuls / s.total if s.total else 0.0)
    copy_s = fsdp_copy_s(hbm.exposed, hbm.copy_calls, bandwidth, hw.perf.kernel_s)
    physics = pipelined + sum(exposed.values()) + contention + hbm_s + copy_s + ep_cost
    no_overlap = (pipelined + (comm["tp"] + comm["cp"] + comm.get("ep", 0.0)) * stretch + comm["pp"] + comm["dp"]
                  + copy_s)
    overlap = physics if mfu is None else model / (mfu * hw.peak_flops_per_s * layout.gpus)
    basis = "mfu" if mfu is not None else "matmul-efficiency" if hw.perf.matmul_efficiency else "physics"
    return StepTime(model, executed, compute, bubble, comm, no_overlap, overlap,
                    model / (overlap * hw.peak_flops_per_s * layout.gpus), physics, exposed, m * s.matmuls, basis,
                    contention, hbm_contention_s=hbm_s, fsdp_copy_s=copy_s, ep_contention_s=ep_cost)


def with_optimizer(step: StepTime, optimizer_s: float, peak_flops_per_s: float, gpus: int) -> StepTime:
    """The step with the optimizer's seconds added (tfcalc.count.perf.optimizer): after the last reduction,
    on nothing else; a step stated by --mfu stays."""
    physics = step.physics_s + optimizer_s
    overlap = step.overlap_s if step.basis == "mfu" else physics
    return replace(step, optimizer_s=optimizer_s, no_overlap_s=step.no_overlap_s + optimizer_s, physics_s=physics,
                   overlap_s=overlap, mfu=step.model_flops / (overlap * peak_flops_per_s * gpus))


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
    return TrainingRun(tokens, steps, seconds, seconds * layout.gpus / 3600, chinchilla_tokens(params))
