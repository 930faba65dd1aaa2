"""The Muon optimizer under a parallel layout (``plan --optimizer muon``): its states on a rank and its step's
time. Pure arithmetic. The optimizer itself -- which tensors it steps, its state, Newton-Schulz's FLOPs -- is
tfcalc.count.model.muon; the rest of the training step is the same as under AdamW.

1. States: the rank's ZeRO shard of X elements (tfcalc.count.training.rank_memory, steps 1-4) holds AdamW's 12 bytes
   (bf16: fp32 master and two moments) for the elements that are not hidden matrices' and 8 (master and one
   momentum) for those that are: eo·X − 4·X_m, X_m = X·M/Ψ the hidden matrices' share of the shard (M of the
   stage's Ψ TP-local elements; exact at ZeRO-0 and for FSDP2 shards of rows N divides; a flat ZeRO-1/2 buffer
   cuts through tensors, so its share is the stage's mean).
2. Gather (Liu et al. 2025, "Muon is Scalable for LLM Training", arXiv 2502.16982, sec. 2.3, Distributed Muon):
   Newton-Schulz needs a whole matrix, so after the reduce-scatter each rank all-gathers, over the
   ZeRO group (N > 1, ZeRO ≥ 1), the momentum-applied gradient of the matrices, in bf16 (the paper's DP gather):
   payload 2·M bytes (TP-local M), and under tensor parallelism the TP shards too (its TP gather), 2·M·tp over tp,
   each in the distributed optimizer's buckets (calls as ZeRO-1's parameter all-gather).
   The routed experts' matrices, whose states split over their own EDP group under expert parallelism, gather
   there. Both after the last reduction, before the next forward: exposed, added to the step.
3. Newton-Schulz compute (tfcalc.count.model.muon): 5 steps of X·Xᵀ, A·A and B·X on each whole matrix, at the
   GEMM model's efficiency (tfcalc.count.perf.gemm). Which matrices a rank computes: under ZeRO-0 (DDP) every
   rank its stage's all (redundant, torch.optim.Muon as it is); under ZeRO-1/2 (the paper's setting: a flat
   buffer partitioned over DP) the matrices of its partition, 1/N of the stage's (each rank computes the full update
   of its partition's matrices and keeps its part of it); under ZeRO-3 (FSDP2: every rank holds a dim-0 shard of every
   matrix) each rank needs every matrix's full update to keep its shard: all of them, redundantly. Under TP every
   TP rank computes the whole matrix (the paper's TP gather). Under EP only the rank's experts.
4. The elementwise pass, priced as the fused Adam pass is (tfcalc.count.perf.optimizer): per matrix element,
   clipping 3g, the momentum (read g, read and write the fp32 buffer 8, write the bf16 Newton-Schulz input 2),
   the update (read the bf16 orthogonalized update 2, read and write the fp32 master 8, write the 16-bit weight
   w): 4g + 20 + w (30 in bf16, where AdamW's is 34); the other elements AdamW's 24 + 4g + w.

Published check (tests/count/test_muon_plan.py): Moonlight, sec. 2.3, puts Distributed Muon's extra latency at
1-3 % of the forward-backward: the gather and Newton-Schulz of Llama 2 7B at DP 64 (8 nodes),
ZeRO-1, 4M tokens on H100s: 12 ms + 63 ms beside 5.8 s of compute, 1.3 %.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tfcalc.config import ModelConfig
from tfcalc.count.model import muon
from tfcalc.count.perf import gemm
from tfcalc.count.perf.optimizer import adam_bytes_per_param
from tfcalc.count.training.shard import stage_tensors
from tfcalc.count.training.sharding import (
    expert_dp,
    experts_apart,
    flat_buckets,
    local_copies,
    local_shape,
    routed_expert,
    shard_dp,
)
from tfcalc.workload import Layout

FP32, BF16 = 4, 2


@dataclass(frozen=True)
class MuonStep:
    """The Muon step of one rank (module docstring): seconds of each part and what they move and compute."""

    matrix_elements: int  # X_m: the hidden matrices' elements of the rank's shard
    ns_flops: int  # step 3
    ns_s: float
    gather_bytes: int  # step 2: payloads of the DP and TP all-gathers
    gather_s: float
    elementwise_s: float  # step 4, the matrices' and the rest's

    @property
    def seconds(self) -> float:
        return self.ns_s + self.gather_s + self.elementwise_s


@dataclass(frozen=True)
class StageMatrices:
    """The hidden matrices of a stage on one rank: ``local`` their TP-local elements (``experts`` of them the routed
    experts'), ``tp_whole`` the whole elements of those TP splits (what the TP gather assembles), and ``shapes``
    (rows, cols, count, routed expert) of the whole matrices, counted as the rank holds them (its EP share)."""

    local: int
    experts: int
    tp_whole: int
    shapes: tuple[tuple[int, int, int, bool], ...]


def stage_matrices(cfg: ModelConfig, layout: Layout, stage: int) -> StageMatrices:
    local = experts = tp_whole = 0
    shapes: dict[tuple[int, int, bool], int] = {}
    for t, n in stage_tensors(cfg, layout.pp, stage, layout.virtual_stages, layout.stage_split):
        if not muon.hidden_matrix(tuple(t.shape), t.per_block):
            continue
        expert = routed_expert(t.name)
        count = n // t.copies * local_copies(t.name, t.copies, layout) if expert else n
        here = count * math.prod(local_shape(t, layout))
        local, experts = local + here, experts + (here if expert else 0)
        tp_whole += count * math.prod(t.shape) if here < count * math.prod(t.shape) else 0
        key = (*t.shape, expert)
        shapes[key] = shapes.get(key, 0) + count
    return StageMatrices(local, experts, tp_whole, tuple((r, c, k, e) for (r, c, e), k in shapes.items()))


def muon_states(adam_optimizer_bytes: int, eo: int, psi: int, matrices: int) -> int:
    """Step 1: the shard's Muon states from its AdamW states (eo bytes an element)."""
    shard = adam_optimizer_bytes // eo
    return adam_optimizer_bytes - FP32 * (shard * matrices // psi if psi else 0)


def _ns_seconds(m: int, n: int, peak: float, perf) -> float:
    """One matrix's Newton-Schulz (m ≤ n): 5 × (X·Xᵀ, A·A, B·X)."""
    if perf.matmul_efficiency is not None:
        return muon.ns_flops(m, n) / (peak * perf.matmul_efficiency)
    one = (gemm.seconds(m, m, n, peak, perf.sm_count, perf.matmul_ceiling)
           + gemm.seconds(m, m, m, peak, perf.sm_count, perf.matmul_ceiling)
           + gemm.seconds(m, n, m, peak, perf.sm_count, perf.matmul_ceiling))
    return muon.NS_STEPS * one


def _groups(layout: Layout) -> tuple[int, int]:
    """(N, N_e): the ranks ZeRO splits the dense and the routed experts' states over (count.training.sharding)."""
    n = shard_dp(layout)
    return n, expert_dp(layout) if experts_apart(layout) else n


def gathers(layout: Layout, m: StageMatrices) -> list[tuple[str, int, int, int]]:
    """Step 2's all-gathers, bf16: (group, ranks, payload bytes, calls) of each, in the distributed optimizer's
    buckets (Megatron-Core's, where Moonlight's Distributed Muon runs: tfcalc.count.training.sharding.flat_buckets):
    the dense matrices over the ZeRO group, the routed experts' over theirs (EDP) where they are apart, the TP
    shards over TP."""
    (n, ne), out = _groups(layout), []
    apart = experts_apart(layout)
    for group, ranks, elements in (("dp", n, m.local - (m.experts if apart else 0)),
                                   ("edp", ne, m.experts if apart else 0), ("tp", layout.tp, m.tp_whole)):
        if elements and ranks > 1 and (group == "tp" or layout.zero >= 1):
            out.append((group, ranks, BF16 * elements, flat_buckets(1, elements, ranks)))
    return out


def muon_step(cfg: ModelConfig, layout: Layout, stages: tuple[int, ...], shard: int, psi: int, hw, grad_bytes: int,
              weight_bytes: int, gather_seconds) -> MuonStep:
    """Steps 2-4 for the rank holding ``stages`` (two under DualPipe) stepping ``shard`` elements of their ``psi``;
    ``gather_seconds(group, ranks, payload, calls)`` prices an all-gather (tfcalc.count.training.steptime)."""
    held = [stage_matrices(cfg, layout, s) for s in stages]
    m = StageMatrices(sum(h.local for h in held), sum(h.experts for h in held), sum(h.tp_whole for h in held),
                      tuple(shape for h in held for shape in h.shapes))
    share = shard * m.local // psi if psi else 0
    # step 3: which matrices this rank orthogonalizes: 1/N of each group's under ZeRO-1/2, else all
    n, ne = _groups(layout) if layout.zero in (1, 2) else (1, 1)
    peak, perf = hw.peak_flops_per_s, hw.perf
    flops = sum(k * muon.ns_flops(r, c) / (ne if e else n) for r, c, k, e in m.shapes)
    ns_s = sum(k * _ns_seconds(min(r, c), max(r, c), peak, perf) / (ne if e else n) for r, c, k, e in m.shapes)
    cs = gathers(layout, m)
    bw = hw.bandwidth_bytes_per_s * perf.bandwidth_efficiency
    elementwise = (share * (4 * grad_bytes + 20 + (weight_bytes if weight_bytes < FP32 else 0))
                   + (shard - share) * adam_bytes_per_param(weight_bytes, grad_bytes)) / bw
    return MuonStep(share, round(flops), ns_s, sum(c[2] for c in cs),
                    sum(gather_seconds(*c) for c in cs), elementwise)
