"""A parallel training plan: one layout's memory per rank, collectives per step, step time; and the
search over layouts. Pure arithmetic, no torch.

The pieces, each with its derivation: tfcalc.count.shard (which tensor goes where), rank_memory (ZeRO
model states, Korthikanti activations), comm (collective bytes by cause, ring conventions), steptime
(FLOPs, bubble, bandwidths, overlap). The rank shown is TP rank 0 of the pipeline stage with the
largest memory total (every stage's first TP rank holds the largest torch.chunk blocks).

Search (no layout given): every layout of the GPUs (tfcalc.count.layout.candidate_layouts) whose rank
fits the device memory, fastest first (overlapped step time, then less memory). ``--gpus auto``: the
fewest GPUs with at least one layout that fits, trying powers of two up to a node, then whole nodes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from tfcalc.config import ModelConfig
from tfcalc.count.comm import Collective, by_key, step_collectives
from tfcalc.count.layout import Layout, candidate_layouts, check_layout, gpu_counts
from tfcalc.count.rank_memory import RankMemory, rank_memory
from tfcalc.count.steptime import Hardware, StepTime, step_time
from tfcalc.errors import InputError

GPU_LIMIT = 16384  # --gpus auto gives up beyond this many


@dataclass(frozen=True)
class Plan:
    layout: Layout
    memory: RankMemory
    collectives: tuple[Collective, ...]
    step: StepTime
    memory_limit: int  # the device's memory, bytes

    @property
    def fits(self) -> bool:
        return self.memory.total <= self.memory_limit

    @property
    def comm_bytes(self) -> dict[str, int]:
        return by_key(self.collectives)


def make_plan(cfg: ModelConfig, layout: Layout, hw: Hardware, utilization: float) -> Plan:
    check_layout(cfg, layout)
    mem = rank_memory(cfg, layout)
    collectives = tuple(step_collectives(cfg, layout, mem.stage, mem.params))
    return Plan(layout, mem, collectives, step_time(cfg, layout, collectives, hw, utilization), hw.memory_bytes)


def search(cfg: ModelConfig, gpus: int, base: Layout, hw: Hardware, utilization: float,
           zero: Optional[int] = None, recompute: Optional[str] = None) -> list[Plan]:
    """The layouts of ``gpus`` GPUs that fit, fastest first (only ZeRO stage ``zero`` and recompute
    ``recompute`` when given)."""
    layouts = candidate_layouts(cfg, gpus, base, hw.gpus_per_node, zero, recompute)
    plans = [make_plan(cfg, layout, hw, utilization) for layout in layouts]
    fitting = [p for p in plans if p.fits]
    return sorted(fitting, key=lambda p: (p.step.overlap_s, p.memory.total))


def fewest_gpus(cfg: ModelConfig, base: Layout, hw: Hardware, utilization: float, limit: int = GPU_LIMIT,
                zero: Optional[int] = None, recompute: Optional[str] = None) -> tuple[int, list[Plan]]:
    """(the fewest GPUs with a layout that fits, those layouts fastest first)."""
    for gpus in gpu_counts(hw.gpus_per_node, limit):
        plans = search(cfg, gpus, base, hw, utilization, zero, recompute)
        if plans:
            return gpus, plans
    raise InputError(f"no layout of up to {limit} GPUs fits {cfg.name} at global batch {base.global_batch}, "
                     f"micro-batch {base.micro_batch}, seq {base.seq} in {hw.memory_bytes / 1e9:g} GB per GPU")
