"""A parallel training plan: one layout's memory per rank, collectives per step, step time; and the
search over layouts. Pure arithmetic, no torch.

The pieces, each with its derivation: tfcalc.count.training.shard (which tensor goes where), rank_memory (ZeRO
model states, Korthikanti activations), comm (collective bytes by cause, ring conventions), steptime
(FLOPs, bubble, bandwidths, overlap). The rank shown is TP rank 0 of the pipeline stage with the
largest memory total (every stage's first TP rank holds the largest torch.chunk blocks).

Search (no layout given): every layout of the GPUs (tfcalc.count.training.layout.candidate_layouts) whose rank
fits the device memory, fastest first (overlapped step time, then less memory); memory is computed
first, the collectives and step time only of the layouts that fit; shapes (tp, pp, cp, dp) whose lower
bound (tfcalc.count.training.search_bound) exceeds the memory are not built; a layout that offloads fits only
where its node's host memory holds what its ranks offload (host_fits). What else it varies, and offload
only where nothing fits: tfcalc.count.training.search_space. ``--gpus auto``: the fewest GPUs with at least one
layout that fits, trying powers of two up to a node, then whole nodes (tfcalc.count.training.layout.gpu_counts),
from a lower bound on: no layout holds less model state per rank than (2·e_w + e_opt)·Ψ/N bytes --
everything split N ways (ZeRO-3 across all N ranks) -- so fewer GPUs than that bound are not tried; and
of those only the counts with a shape the search's bound lets through (it counts 1F1B's micro-batches
in flight: a long-context model needs dp large enough that few are). And before any, a floor: data
parallelism shrinks the split model states (up to global batch / micro-batch ranks) but not the
activations, nor the weights that stay whole (ZeRO-2) or are gathered (ZeRO-3); when, over every
tensor- and pipeline-parallel degree, at the least recompute and one micro-batch in flight, those alone
exceed the memory, no number of GPUs fits, and the search stops at once -- or turns to offload, where
the request leaves it open (a mixture's experts counted as split over every expert, as expert
parallelism can; no floor when activations are offloaded).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Callable, Optional

from tfcalc.config import ModelConfig
from tfcalc.count.model import muon
from tfcalc.count.model.params import total as param_total
from tfcalc.count.perf.optimizer import optimizer_seconds
from tfcalc.count.perf.pipeline import head_stage, stages_held
from tfcalc.count.perf.slowest_rank import with_slowest_rank
from tfcalc.count.training import lora_plan
from tfcalc.count.training.comm import Collective, by_key, step_collectives
from tfcalc.count.training.experts_folded import implied
from tfcalc.count.training.experts_parallel import ep_collectives
from tfcalc.count.training.layout import (
    Layout,
    candidate_layouts,
    check_layout,
    divisors,
    sequence_parallel_modelled,
)
from tfcalc.count.training.muon_plan import MuonStep, muon_step
from tfcalc.count.training.offload import GEN4, pcie_seconds, with_pcie
from tfcalc.count.training.rank_memory import (
    RankMemory,
    adam_states,
    gathered_bytes,
    model_states,
    optimizer_element_bytes,
    priced_stages,
    rank_memory,
    rank_offload,
    stage_activations,
    stage_memory,
    stage_params,
    weight_element_bytes,
)
from tfcalc.count.training.search_bound import ShapeBound, least_recomputes
from tfcalc.count.training.search_space import (
    FIXED,
    SearchSpace,
    cp_applies,
    cp_degrees,
    fsdp_variants,
    micro_batches,
    offload_bases,
    offload_words,
    schedules,
)
from tfcalc.count.training.shard import stage_block_counts, total_blocks, tp_split_widths
from tfcalc.count.training.sharding import expert_counts, grad_element_bytes
from tfcalc.count.training.stage_classes import stage_block_count
from tfcalc.count.training.steptime import (
    Hardware,
    StepTime,
    collective_seconds,
    micro_batch_at,
    step_time,
    with_optimizer,
)
from tfcalc.errors import InputError

GPU_LIMIT = 16384  # --gpus auto gives up beyond this many


@dataclass(frozen=True)
class Plan:
    layout: Layout
    memory: RankMemory
    collectives: tuple[Collective, ...]
    step: StepTime
    memory_limit: int  # the device's memory, bytes
    host_limit: Optional[int] = None  # a node's host memory, bytes (None: not known, not checked)
    ranks_per_node: int = 1  # the ranks that share a node's host memory

    @property
    def host_per_node(self) -> int:
        """Offloaded bytes of a node: the rank's times the ranks a node holds (see host_fits)."""
        return self.memory.host * self.ranks_per_node

    @property
    def host_fits(self) -> bool:
        return self.host_limit is None or self.host_per_node <= self.host_limit

    @property
    def fits(self) -> bool:
        return self.memory.total <= self.memory_limit and self.host_fits

    @property
    def comm_bytes(self) -> dict[str, int]:
        return by_key(self.collectives)


def make_plan(cfg: ModelConfig, layout: Layout, hw: Hardware, utilization: float, lora=None) -> Plan:
    """``lora``: a tfcalc.count.model.lora.LoraSpec, LoRA fine-tuning (tfcalc.count.training.lora_plan)."""
    check_layout(cfg, layout)
    mem = rank_memory(cfg, layout)
    if lora is not None:
        lora_plan.check_lora_layout(layout, lora)
        mem = lora_plan.lora_memory(cfg, layout, mem, lora)
    return _plan(cfg, layout, mem, hw, utilization, lora)


def _plan(cfg: ModelConfig, layout: Layout, mem: RankMemory, hw: Hardware, utilization: float, lora=None) -> Plan:
    collectives = tuple(step_collectives(cfg, layout, mem.stage, mem.params) + ep_collectives(cfg, layout, mem.stage,
                                                                                            hw.gpus_per_node))
    if lora is not None:  # the adapters' gradients alone (tfcalc.count.training.lora_plan, step 2)
        collectives = tuple(lora_plan.lora_collectives(cfg, layout, mem.params, lora))
    step = step_time(cfg, layout, collectives, hw, utilization, mem.stage)
    if lora is not None:  # the base's matmuls forward and input-gradient only, the adapters' (lora_plan, step 3)
        step = lora_plan.lora_step(cfg, layout, step, lora, hw, collectives)
    if mem.optimizer:  # Adam over the rank's shard, memory-bound (tfcalc.count.perf.optimizer)
        params = mem.optimizer // optimizer_element_bytes(layout.dtype)
        seconds = optimizer_seconds(params, weight_element_bytes(layout.dtype), grad_element_bytes(layout),
                                    hw.bandwidth_bytes_per_s * hw.perf.bandwidth_efficiency)
        if layout.optimizer == "muon":  # gather, Newton-Schulz, the elementwise pass (count.training.muon_plan)
            seconds = plan_muon_step(cfg, layout, mem, hw).seconds
        step = with_optimizer(step, seconds, hw.peak_flops_per_s, layout.gpus)
    # the step waits for its slowest GPU (tfcalc.count.perf.slowest_rank)
    step = with_slowest_rank(step, hw.perf.gpu_variation, hw.peak_flops_per_s, layout.gpus)
    if layout.offload_optimizer or layout.offload_activations:  # the PCIe traffic (tfcalc.count.training.offload)
        off = rank_offload(cfg, layout, mem.stage, model_states(cfg, layout, mem.stage)[3])
        pcie, exposed = pcie_seconds(off, hw.pcie_bytes_per_s or GEN4, hw.perf.link_efficiency["pcie"],
                                     step.compute_s)
        step = with_pcie(step, pcie, exposed, hw.peak_flops_per_s, layout.gpus)
    return Plan(layout, mem, collectives, step, hw.memory_bytes, hw.host_memory_bytes,
                min(layout.gpus, hw.gpus_per_node))


def plan_muon_step(cfg: ModelConfig, layout: Layout, mem: RankMemory, hw: Hardware) -> MuonStep:
    """The Muon step of the plan's rank (tfcalc.count.training.muon_plan): its shard, the AdamW states' elements."""
    stages = tuple(stages_held(layout, mem.stage))
    shard = sum(adam_states(cfg, layout, s)[3] for s in stages)
    def gather_s(group: str, ranks: int, payload: int, calls: int) -> float:
        return collective_seconds(Collective("muon_gather", "all_gather", group, ranks, payload, calls), layout, hw)

    return muon_step(cfg, layout, stages, shard // optimizer_element_bytes(layout.dtype), mem.params, hw,
                     grad_element_bytes(layout), weight_element_bytes(layout.dtype), gather_s)


def muon_json(cfg: ModelConfig, plan: Plan, hw: Hardware) -> Optional[dict]:
    """The JSON of the plan's Muon step (tfcalc.count.training.muon_plan); None under Adam or --offload optimizer."""
    if plan.layout.optimizer != "muon" or not plan.memory.optimizer:
        return None
    m = plan_muon_step(cfg, plan.layout, plan.memory, hw)
    return {"matrix_params": m.matrix_elements, "ns_steps": muon.NS_STEPS, "ns_flops": m.ns_flops, "ns_s": m.ns_s,
            "gather_bytes": m.gather_bytes, "gather_s": m.gather_s, "elementwise_s": m.elementwise_s}


def host_fits(mem: RankMemory, layout: Layout, hw: Hardware) -> bool:
    """Whether the offloaded bytes of a node fit its host memory: the rank's (the stage with the largest GPU
    total) times the ranks of a node, min(GPUs, GPUs per node) -- a node's ranks share a stage where pp is the
    outermost group (Megatron's rank order); where a node spans stages, the shown stage's ranks stand for all."""
    return hw.host_memory_bytes is None or mem.host * min(layout.gpus, hw.gpus_per_node) <= hw.host_memory_bytes


def search(cfg: ModelConfig, gpus: int, base: Layout, hw: Hardware, utilization: float,
           zero: Optional[int] = None, recompute: Optional[str] = None, ep: Optional[int] = None,
           space: SearchSpace = FIXED, bound: Optional[ShapeBound] = None) -> list[Plan]:
    """The layouts of ``gpus`` GPUs that fit, fastest first (only ZeRO stage ``zero``, recompute
    ``recompute`` and expert-parallel degree ``ep`` when given; the micro-batch, schedule, CP, HSDP,
    resharding and offload as ``space`` leaves them open: tfcalc.count.training.search_space -- offload only when
    nothing fits without it). ``bound``: the shapes it rules out are not built (tfcalc.count.training.search_bound;
    by default one for this search)."""
    plans = _fitting(cfg, gpus, base, hw, utilization, zero, recompute, ep, space, bound)
    if not plans and space.offload and not (base.offload_optimizer or base.offload_activations):
        for offloaded in offload_bases(base):
            plans += _fitting(cfg, gpus, offloaded, hw, utilization, zero, recompute, ep, space)
    return sorted(plans, key=lambda p: (p.step.overlap_s, p.memory.total))


def _legacy_bound(bound: ShapeBound, base: Layout, ep: Optional[int]):
    """The bound's ``fits`` where a shape keeps the legacy expert grid it is derived for; a shape whose
    experts fold (--etp, or an --ep only tp·cp·dp can hold: tfcalc.count.training.experts_folded) is built."""
    if base.etp is not None:
        return None
    if ep is None:
        return bound.fits
    return lambda tp, pp, cp, dp: implied(ep, tp, cp, dp) or bound.fits(tp, pp, cp, dp)


def _fitting(cfg: ModelConfig, gpus: int, base: Layout, hw: Hardware, utilization: float, zero: Optional[int],
             recompute: Optional[str], ep: Optional[int], space: SearchSpace,
             bound: Optional[ShapeBound] = None) -> list[Plan]:
    """search's layouts of ``base`` as given (its offload)."""
    plans = []
    start = replace(base, micro_batch=space.micro_batch or 1)
    if bound is None:
        bound = ShapeBound(cfg, start, hw.memory_bytes, hw.gpus_per_node, recompute, ep)
    for layout in candidate_layouts(cfg, gpus, start, hw.gpus_per_node, zero, recompute, ep,
                                    tuple(cp_degrees(base.seq, gpus, space, cp_applies(cfg, base.attention))),
                                    keep=_legacy_bound(bound, base, ep)):
        for b in micro_batches(layout, space):
            fitted = False
            for option in schedules(cfg, replace(layout, micro_batch=b), space):
                try:
                    check_layout(cfg, option)
                except InputError:
                    continue
                mem = rank_memory(cfg, option)
                if mem.total <= hw.memory_bytes and host_fits(mem, option, hw):
                    plans.append(_plan(cfg, option, mem, hw, utilization))
                    fitted = True
                    plans += _variants(cfg, option, hw, utilization, space)
                elif option.schedule == "1f1b":
                    break  # the least memory of any schedule: the others do not fit either
            if not fitted:
                break  # a larger micro-batch needs more (tfcalc.count.training.search_space)
    return plans


def _variants(cfg: ModelConfig, layout: Layout, hw: Hardware, utilization: float, space: SearchSpace) -> list[Plan]:
    """The HSDP and no-reshard variants of a ZeRO-3 layout that fits, those that fit too (they hold more)."""
    out = []
    for variant in fsdp_variants(layout, hw.gpus_per_node, space):
        try:
            check_layout(cfg, variant)
        except InputError:
            continue
        mem = rank_memory(cfg, variant)
        if mem.total <= hw.memory_bytes and host_fits(mem, variant, hw):
            out.append(_plan(cfg, variant, mem, hw, utilization))
    return out


def min_gpus(cfg: ModelConfig, base: Layout, hw: Hardware) -> int:
    """The lower bound of the module docstring: model states split over every GPU must fit."""
    optimizer = 0 if base.offload_optimizer else optimizer_element_bytes(base.dtype)  # on the host: not a GPU's
    if base.optimizer == "muon" and optimizer:  # no second moment on the matrices: 4 less everywhere, still a bound
        optimizer -= 4  # (as search_bound.ShapeBound's e_o)
    per_param = 2 * weight_element_bytes(base.dtype) + optimizer
    return max(1, -(-per_param * param_total(cfg) // hw.memory_bytes))


def rank_floor(cfg: ModelConfig, base: Layout, gpus_per_node: int, cp: int = 1,
               recompute: Optional[str] = None) -> int:
    """The least bytes any layout's rank holds, however many data-parallel ranks (see the module
    docstring): per tp, the largest stage's activations (the least over the recomputes tried -- full
    recompute keeps least but on a stage of one block, where it holds the block's input beside the
    rebuilt block: tfcalc.count.training.search_bound.least_recomputes -- one micro-batch in flight)
    plus what no ZeRO stage splits -- the weights whole (ZeRO-2) or ZeRO-3's gathered units -- at the
    most pipeline stages the layout takes. Why the most is the least: with one micro-batch in flight a
    stage's bytes are its blocks' plus its end's (the embeddings on the first, the head and the loss on
    the last); each stage of pp + 1 stages holds a subset of the blocks some stage of pp holds, and
    the same end, so the largest stage never grows as pp grows (``stage_floor`` at every pp agrees:
    tests/count/test_plan.py). One pp per tp instead of every pp: --gpus auto's floor in ~1/40 the time."""
    if base.offload_activations:  # activations may leave the GPU: no floor to stop at
        return 0
    best = None
    # tp splits the heads and widths evenly (check_tp): only divisors of their gcd, not 1..gpus_per_node
    widths = math.gcd(*(n for _, n in tp_split_widths(cfg)))
    for tp in (t for t in divisors(widths) if t <= gpus_per_node):
        # an encoder-decoder takes pp 1 only (check_layout): not a walk down from its depth
        for pp in (1,) if cfg.arch == "encoder-decoder" else range(total_blocks(cfg), 0, -1):
            most = stage_floor(cfg, base, tp, pp, cp, recompute)
            if most is not None:  # the most stages this tp takes (an encoder-decoder: pp 1)
                best = most if best is None else min(best, most)
                break
    if best is None:
        raise InputError(f"no tensor-parallel degree up to {gpus_per_node} splits {cfg.name} evenly")
    return best


def stage_floor(cfg: ModelConfig, base: Layout, tp: int, pp: int, cp: int = 1,
                recompute: Optional[str] = None) -> Optional[int]:
    """rank_floor's bytes at one (tp, pp): the largest stage's; None when the layout is not valid."""
    sp = sequence_parallel_modelled(cfg)  # where it is not (experts, cross-attention), plain TP's floor
    tried = least_recomputes(cfg, base, recompute) or ("full",)
    layout = replace(base, tp=tp, pp=pp, dp=1, zero=0, recompute=tried[0], global_batch=base.micro_batch,
                     sequence_parallel=sp and tp > 1 and (base.seq // cp) % tp == 0, cp=cp,
                     schedule="1f1b", virtual_stages=1, overlap=(), pp_split_counts=(), pp_layers=(),  # 1F1B: least
                     hsdp=None, reshard_after_forward=True, ep=1)  # ZeRO-3's flavours hold more: a floor still
    try:
        check_layout(cfg, layout)
    except InputError:
        return None
    ew = weight_element_bytes(base.dtype)
    # the fewest experts a rank can hold (expert parallelism over them all): still a lower bound
    split = replace(layout, ep=math.gcd(*expert_counts(cfg)) if expert_counts(cfg) else 1)
    gathered = gathered_bytes(cfg, replace(split, zero=3))
    blocks = total_blocks(cfg)
    # stages alike (neither end, the same layer kinds: one micro-batch in flight each) priced once
    return max(min(stage_activations(cfg, replace(layout, recompute=r), s, stage_block_count(blocks, pp, s))
                   for r in tried)
               + min(ew * stage_params(cfg, split, s), gathered) for s in priced_stages(cfg, pp, 1))


def fewest_gpus(cfg: ModelConfig, base: Layout, hw: Hardware, utilization: float, limit: int = GPU_LIMIT,
                zero: Optional[int] = None, recompute: Optional[str] = None,
                ep: Optional[int] = None, space: SearchSpace = FIXED,
                on_try: Optional[Callable[[int, int], None]] = None) -> tuple[int, list[Plan]]:
    """(the fewest GPUs with a layout that fits, those layouts fastest first); the floor at the largest
    context-parallel degree the search may take (it divides the activations). Offload, where ``space``
    allows it, only when no number of GPUs up to the limit fits without: then the fewest GPUs with any
    offload. ``on_try(gpus, limit)`` is told each GPU count before it is searched (a long search shows
    where it is: tfcalc.cli.plan)."""
    floor = rank_floor(cfg, base, hw.gpus_per_node,
                       max(cp_degrees(base.seq, 2**40, space, cp_applies(cfg, base.attention))), recompute)
    limit = min(limit, hw.gpus_per_node * total_blocks(cfg) * (base.global_batch // base.micro_batch))
    may_offload = space.offload and not (base.offload_optimizer or base.offload_activations)
    if floor > hw.memory_bytes and not may_offload:
        raise InputError(f"no number of GPUs fits {cfg.name} at micro-batch {base.micro_batch} and seq {base.seq}: "
                         f"every layout's rank needs at least {floor / 1e9:.3g} GB (activations at the least recompute "
                         f"and the weights no ZeRO stage splits), more than {hw.memory_bytes / 1e9:g} GB")
    only = dict(zero=zero, recompute=recompute, ep=ep, space=replace(space, offload=False))
    bases = [base] if floor <= hw.memory_bytes else []
    for tried in (bases, offload_bases(base) if may_offload else []):
        found = _fewest(cfg, tried, hw, utilization, limit, only, on_try)
        if found is not None:
            return found
    raise InputError(f"no layout of up to {limit} GPUs fits {cfg.name} at global batch {base.global_batch}, "
                     f"micro-batch {base.micro_batch}, seq {base.seq} in {hw.memory_bytes / 1e9:g} GB per GPU"
                     + (offload_words(base) if may_offload else ""))


def _fewest(cfg: ModelConfig, bases: list[Layout], hw: Hardware, utilization: float, limit: int, only: dict,
            on_try: Optional[Callable[[int, int], None]]) -> Optional[tuple[int, list[Plan]]]:
    """The fewest GPUs with a layout of any of ``bases`` that fits (each its own bound), or None."""
    space = only["space"]
    bounds = {b: ShapeBound(cfg, replace(b, micro_batch=space.micro_batch or 1), hw.memory_bytes, hw.gpus_per_node,
                            only["recompute"], only["ep"]) for b in bases}
    cps = tuple(cp_degrees(bases[0].seq, 2**40, space, cp_applies(cfg, bases[0].attention))) if bases else ()
    counts = sorted({n for b in bases for n in bounds[b].gpu_counts(cps, min_gpus(cfg, b, hw), limit)})
    for gpus in counts:  # the counts with a shape some bound lets through
        if on_try is not None:
            on_try(gpus, limit)
        plans = [p for b in bases for p in search(cfg, gpus, b, hw, utilization, **only, bound=bounds[b])]
        if plans:
            return gpus, sorted(plans, key=lambda p: (p.step.overlap_s, p.memory.total))
    return None


def pipeline_stages(cfg: ModelConfig, layout: Layout, hw: Hardware) -> list[dict]:
    """Each pipeline stage's blocks, its forward + backward seconds for one micro-batch (its blocks', the head's on
    the last: tfcalc.count.training.micro_batch_time) and its rank's memory (1F1B: stage i holds min(p − i, m)
    micro-batches' activations): the step is paced by the slowest, the plan shows the largest."""
    t = micro_batch_at(cfg, layout, hw)
    counts = stage_block_counts(total_blocks(cfg), layout.pp, layout.virtual_stages, layout.stage_split)
    return [{"stage": s, "layers": n, "micro_batch_s": t.stage_s(n, s == head_stage(layout)),
             "total_bytes": stage_memory(cfg, layout, s).total} for s, n in enumerate(counts)]
