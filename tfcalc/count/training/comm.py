"""Collectives of one training step, per rank and by cause: pure arithmetic, no torch.

What a collective's bytes mean (the same for the plan and for tfcalc.measure.collectives, which records
the tensors handed to torch.distributed):
- payload: all-reduce, the tensor reduced; all-gather, the gathered output (N × each rank's input);
  reduce-scatter, the input (N × each rank's output); send/recv, the tensor sent.
- sent per rank, ring algorithms on a group of N ranks (Patarasuk & Yuan 2009; the convention of
  Rajbhandari et al. 2020 and Narayanan et al. 2021): all-gather and reduce-scatter (N − 1)/N × payload;
  all-reduce = reduce-scatter + all-gather, 2(N − 1)/N × payload (rounded down to a whole byte when N
  does not divide it); send/recv the payload; broadcast (ZeroRedundancyOptimizer's, every rank the
  root of its own bucket), like an all-gather, (N − 1)/N of all the buckets. So DDP sends 2Ψ(N − 1)/N
  gradient elements per rank and step, ZeRO-3 3Ψ(N − 1)/N (two gathers and a reduce-scatter).

Causes, per step of m micro-batches on a rank of the shown pipeline stage (TP rank 0), X = e·b·s·h the
bytes of one micro-batch's hidden states (e activation bytes, b micro-batch, s sequence, h d_model):

1. dp_grads (dp > 1): ZeRO-0 (DDP) all-reduces the gradients once per step (accumulating micro-batches
   under no_sync), in buckets PyTorch chooses (25 MiB), so calls are not predicted; ZeRO-1 reduce-scatters
   them once per step, ZeRO-2 and ZeRO-3 once per micro-batch (they keep only their gradient shard);
   ZeRO-1/2 in buckets, a call each (Megatron-Core's for ZeRO-1, DeepSpeed's for ZeRO-2:
   tfcalc.count.training.sharding.flat_buckets), gathered back in the same buckets.
   Gradients travel in the weight dtype. ZeRO-1/2 split a flat buffer (⌈Ψ/N⌉ per rank); ZeRO-3 each
   FSDP unit (a block, or the root's tensors) padded per tensor (tfcalc.count.training.shard.fsdp_shard).
2. zero_params: ZeRO-1/2 all-gather the updated weights once per step; ZeRO-3 (FSDP2 defaults)
   all-gathers every block before its forward and again before its backward (resharded after forward),
   and the root unit once per micro-batch (FSDP2 does not reshard the root after forward).
3. tp_activations (tp > 1), per micro-batch, Megatron's f/g operators (Narayanan et al. 2021, sec. 2.3):
   each block all-reduces X twice in the forward pass (after the attention and FFN row-parallel layers)
   and twice in the backward pass (the inputs' gradients of the column-parallel layers); a block with
   cross-attention (an encoder-decoder's decoder) adds one each way for it, and one more in the backward
   pass for the gradient of its K/V projection's input, the encoder output (X of the sources: the plan
   takes as many source tokens as target tokens); the hidden-split token embedding all-gathers its
   lookups (X, once per stack: an encoder-decoder looks up its source and its target) on the first
   stage, and the LM head's input gradient is all-reduced (X) on the last. A tied, vocabulary-parallel
   embedding all-reduces (X) instead. (All measured: tests/measure/test_tp_architectures.py.)
   Sequence parallelism (Korthikanti et al. 2022, sec. 4.2.2) turns each all-reduce into an all-gather
   and a reduce-scatter of the same X: per block 4 all-gathers and 4 reduce-scatters per micro-batch;
   the embedding's all-gather stays and the first block's input gradient is all-gathered; the head's
   input is all-gathered forward and its gradient reduce-scattered.
4. tp_loss: the vocabulary-parallel cross-entropy (torch's loss_parallel, Megatron's alike) all-reduces
   three fp32 values per token (the logits' max, the sum of exponentials, the target's logit).
5. tp_norm_grads: under sequence parallelism each rank sees part of the sequence, so the gradients of
   the replicated norms (SequenceParallel) are partial sums: all-reduced over the TP group once per step,
   or once per micro-batch under ZeRO-3 (FSDP2 makes each micro-batch's gradients whole before it
   reduce-scatters them).
   (DTensor adds a row-parallel bias before the reduce-scatter and gathers its gradient whole, so unlike
   Megatron's, those biases need no reduction: measured.)
6. pp_activations: per micro-batch, a stage sends its output forward (X, or X/t under sequence
   parallelism) and its input gradient backward; the shown rank sends in each direction it has.
7. pp_tied_embedding: a tied embedding held by the first and last stages has its gradient all-reduced
   between the two once per step (Megatron).
8. Issue 20's variants (tfcalc.count.training.sharding): gradients travel in --grad-dtype; under expert
   parallelism the routed experts' gradients and gathers are their own causes, expert_grads and
   expert_params, on the group of dp / ep ranks that hold the same experts (edp), and their FSDP units
   are apart from the blocks'; HSDP reduce-scatters and gathers within its groups (dp_shard) and
   all-reduces each unit's shard across the replicas (dp_grads on dp_replicate), per micro-batch;
   without resharding after forward a block is gathered once per micro-batch; ZeRO-1 as PyTorch's
   ZeroRedundancyOptimizer all-reduces (DDP) and broadcasts one bucket per rank. The token all-to-alls
   of expert parallelism: tfcalc.count.training.experts_parallel.
9. fp8_amax (--fp8-all-gather, ZeRO-3 with torchao's tensorwise Float8): the FP8 linears' weights are
   gathered in FP8 (cause 2's bytes for them halved) and their amaxes all-reduced once a step, one fp32
   each (tfcalc.count.training.fp8, step 4).
10. cp_kv (cp > 1): context parallelism's ring passes of K/V and their gradients, point-to-point
   (tfcalc.count.training.context_parallel). Under CP, every message above that carries positions carries the
   rank's s/C of them, and the dp group of causes 1-2 is the dp × cp ranks that hold the same weights.
   Under the interleaved schedule cause 6 counts a send at every chunk boundary (tfcalc.count.perf.pipeline).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

from tfcalc.config import ModelConfig
from tfcalc.count.model.memory import activation_element_bytes
from tfcalc.count.perf.pipeline import head_stage, sends_per_micro_batch
from tfcalc.count.training.context_parallel import kv_ring
from tfcalc.count.training.fp8 import FP8_BYTES, fp8_linear_weight, fp8_linears, gathers_fp8
from tfcalc.count.training.fsdp_edges import edge_shares
from tfcalc.count.training.layout import Layout
from tfcalc.count.training.rank_memory import FP32, stage_expert_params, weight_element_bytes
from tfcalc.count.training.shard import fsdp_shard, stage_kinds, stage_tensors, tied_stage_copy, tp_local_shape
from tfcalc.count.training.sharding import (
    expert_dp,
    experts_apart,
    flat_buckets,
    grad_element_bytes,
    local_copies,
    local_shape,
    routed_expert,
    shard_dp,
    split_states,
)

OPS = ("all_reduce", "all_gather", "reduce_scatter", "send_recv", "all_to_all", "broadcast")
# cp (context parallelism's ring); ep, edp (each routed expert's replicas), dp_shard and dp_replicate
# (HSDP): tfcalc.count.training.sharding
GROUPS = ("dp", "tp", "pp", "cp", "ep", "edp", "dp_shard", "dp_replicate", "etp")  # etp: experts_folded


@dataclass(frozen=True)
class Links:
    """Bytes one rank sends over the network and over the intra-node link, where a collective uses both at
    once (expert parallelism's all-to-alls across nodes: tfcalc.count.training.experts_parallel, step 3),
    summed over the calls; and the peers each call pays a latency to over each."""

    network_bytes: int
    intra_bytes: int
    network_peers: int
    intra_peers: int


@dataclass(frozen=True)
class Collective:
    """All the calls of one collective op for one cause in one step, on one rank."""

    cause: str
    op: str  # one of OPS
    group: str  # one of GROUPS
    group_size: int
    payload_bytes: int  # summed over the calls (see the module docstring)
    calls: Optional[int]  # None where PyTorch chooses (DDP's buckets)
    links: Optional[Links] = None  # the sent bytes by link, where they take two (else the group's one link)
    edge_share: float = 0.0  # of its bytes, at the step's ends where nothing hides it (ZeRO-3: fsdp_edges)

    @property
    def key(self) -> str:
        return f"{self.cause}_{self.op}"

    @property
    def sent_bytes(self) -> int:
        if self.links is not None:
            return self.links.network_bytes + self.links.intra_bytes
        return sent_bytes(self.op, self.payload_bytes, self.group_size)


def sent_bytes(op: str, payload: int, n: int) -> int:
    """Bytes one rank sends for a payload on a ring of n ranks (see the module docstring)."""
    if op == "send_recv":
        return payload
    factor = 2 if op == "all_reduce" else 1
    return factor * (n - 1) * payload // n


def by_key(collectives) -> dict[str, int]:
    """{cause_op: bytes sent per rank per step} and their 'total'."""
    out: dict[str, int] = {}
    for c in collectives:
        out[c.key] = out.get(c.key, 0) + c.sent_bytes
    out["total"] = sum(out.values())
    return out


def _unit_shards(cfg: ModelConfig, layout: Layout, stage: int, experts: bool = False, fp8_only: bool = False
                 ) -> tuple[int, int, int]:
    """(FSDP units of the stage's blocks, all their shards, the root's tensors on the stage): elements per
    rank under FSDP2's padded split. Under expert parallelism the routed experts are units of their own
    over dp / ep ranks (``experts``: those units; else the rest, as torchtitan wraps them). ``fp8_only``: the
    shards of the FP8 linears' weights alone (tfcalc.count.training.fp8, step 4)."""
    apart = experts_apart(layout)
    n = expert_dp(layout) if experts else shard_dp(layout)

    def shard(t, copies) -> int:
        shape = local_shape(t, layout)
        if routed_expert(t.name):  # a block's experts: one grouped tensor split along them (rank_memory._shapes)
            return fsdp_shard((local_copies(t.name, copies, layout), *shape), n)
        return copies * fsdp_shard(shape, n)

    def ours(t) -> bool:
        return (not apart or routed_expert(t.name) == experts) and (not fp8_only or fp8_linear_weight(t))

    kinds = stage_kinds(cfg, layout.pp, stage, layout.virtual_stages, layout.stage_split)
    blocks = sum(k * sum(shard(t, t.copies) for t in tensors if ours(t)) for _, tensors, k in kinds)
    units = sum(k for b, _, k in kinds if not experts or b.is_moe)
    held = stage_tensors(cfg, layout.pp, stage, layout.virtual_stages, layout.stage_split)
    root = 0 if experts else sum(shard(t, 1) for t, _ in held if not t.per_block)
    return units, blocks, root


def _zero3(cfg: ModelConfig, layout: Layout, stage: int, experts: bool) -> list[Collective]:
    """ZeRO-3 (FSDP2) on one group: gathers before each block's forward and, resharded after forward,
    again before its backward; the root's once per micro-batch; a reduce-scatter per unit and
    micro-batch, and under HSDP an all-reduce of each unit's shard across the replicas."""
    m, ew, eg = layout.micro_batches, weight_element_bytes(layout.dtype), grad_element_bytes(layout)
    group, N = ("edp", expert_dp(layout)) if experts else (
        ("dp_shard", layout.hsdp) if layout.hsdp is not None else ("dp", layout.data_ranks))
    if N == 1:
        return []
    blocks, shards, root = _unit_shards(cfg, layout, stage, experts)
    units = blocks + (root > 0)
    again = 2 if layout.reshard_after_forward else 1
    cause = "expert" if experts else "dp"
    # --fp8-all-gather: the FP8 linears' shards travel cast to FP8, one byte an element (fp8, step 4)
    fp8 = _unit_shards(cfg, layout, stage, experts, fp8_only=True)[1] if gathers_fp8(layout) else 0
    gathered = ew * (shards - fp8) + FP8_BYTES * fp8
    # the root's and the first block's gathers before the forward, their reductions after the backward (fsdp_edges)
    first, last = (0.0, 0.0) if experts else edge_shares(blocks, shards, root, m, layout.reshard_after_forward)
    out = [Collective("expert_params" if experts else "zero_params", "all_gather", group, N,
                      N * m * (again * gathered + ew * root), m * (again * blocks + (root > 0)), edge_share=first),
           Collective(f"{cause}_grads", "reduce_scatter", group, N, eg * N * m * (shards + root), m * units,
                      edge_share=last)]
    if fp8:  # precompute_float8_dynamic_scale_for_fsdp: the shards' amaxes, one fp32 each, all-reduced once a step
        out.append(Collective("fp8_amax", "all_reduce", group, N,
                              FP32 * fp8_linears(cfg, layout, stage, experts), 1))
    if layout.hsdp is not None and not experts:
        out.append(Collective("dp_grads", "all_reduce", "dp_replicate", layout.dp // layout.hsdp,
                              eg * m * (shards + root), m * units, edge_share=last))
    return out


def dp_collectives(cfg: ModelConfig, layout: Layout, stage: int, psi: int) -> list[Collective]:
    """Causes 1 and 2 over the dp × cp ranks that hold the same weights (gradients in --grad-dtype; under
    expert parallelism the routed experts' on their own group of dp / ep ranks, causes expert_grads and
    expert_params: tfcalc.count.training.sharding)."""
    N, m = layout.data_ranks, layout.micro_batches
    ew, eg = weight_element_bytes(layout.dtype), grad_element_bytes(layout)
    if N == 1:
        return []
    if layout.zero == 3:
        return _zero3(cfg, layout, stage, False) + (_zero3(cfg, layout, stage, True) if experts_apart(layout) else [])
    if layout.zero == 1 and layout.zero_engine == "torch":  # DDP's all-reduce, a broadcast per rank (sharding, 7)
        return [Collective("dp_grads", "all_reduce", "dp", N, eg * psi, None),
                Collective("zero_params", "broadcast", "dp", N, ew * psi, N)]
    experts = stage_expert_params(cfg, layout, stage) if experts_apart(layout) else 0
    out = []
    for (elements, n), (group, cause, gather) in zip(split_states(psi - experts, experts, layout),
                                                     (("dp", "dp_grads", "zero_params"),
                                                      ("edp", "expert_grads", "expert_params")), strict=False):
        if n == 1 or not elements:
            continue
        if layout.zero == 0:
            out.append(Collective(cause, "all_reduce", group, n, eg * elements, None))
            continue
        flat = n * -(-elements // n)
        times = 1 if layout.zero == 1 else m
        buckets = flat_buckets(layout.zero, flat, n)  # a call per bucket (tfcalc.count.training.sharding)
        out += [Collective(cause, "reduce_scatter", group, n, times * eg * flat, times * buckets),
                Collective(gather, "all_gather", group, n, ew * flat, buckets)]
    return out


def tp_collectives(cfg: ModelConfig, layout: Layout, stage: int) -> list[Collective]:
    """Causes 3, 4 and 5."""
    t, m = layout.tp, layout.micro_batches
    if t == 1:
        return []
    # TP-split sub-layers of the stage: every attention and cross-attention, and every FFN but a mixture of
    # experts (its experts are whole on every rank: replicated, so their output needs no reduction) --
    # unless it has a shared expert, split as a dense FFN is (its tensors' ``tp``, tfcalc.architecture.ffn)
    kinds = stage_kinds(cfg, layout.pp, stage, layout.virtual_stages, layout.stage_split)
    split = sum(n * (1 + (b.cross_attention is not None) + (not b.is_moe or b.ffn.shared is not None))
                for b, _, n in kinds)
    # a cross-attention's K/V projection reads the encoder output: its input gradient is one more reduction
    # in the backward pass, of the source states (as many as the target's here: the plan's source is seq)
    cross = sum(n for b, _, n in kinds if b.cross_attention is not None)
    first, last = stage == 0, stage == head_stage(layout)
    tokens = layout.micro_batch * layout.seq // layout.cp  # a CP rank's positions (count.training.context_parallel)
    head = cfg.architecture.head
    X = activation_element_bytes(layout.dtype) * tokens * head.d_model
    tied = head.lm_head and head.tied
    lookups = len(cfg.architecture.stacks)  # each stack looks its tokens up (an encoder-decoder's two)
    calls = dict.fromkeys(OPS[:3], 0)
    sp = layout.sequence_parallel
    if sp:  # per block two all-gathers and two reduce-scatters each way; the head's input and its gradient
        calls["all_gather"] += 2 * split + last
        calls["reduce_scatter"] += 2 * split + last
    else:  # per split sub-layer an all-reduce each way (and the K/V inputs' gradients); the head's input gradient
        calls["all_reduce"] += 2 * split + cross + last
    if first and not tied:  # hidden-split lookups gathered; under SP, block 0's input gradient too
        calls["all_gather"] += lookups + sp
    elif first:  # vocabulary split: partial lookups all-reduced, or reduce-scattered (and gathered back) under SP
        calls["reduce_scatter" if sp else "all_reduce"] += lookups
        calls["all_gather"] += sp
    out = [Collective("tp_activations", op, "tp", t, m * n * X, m * n) for op, n in calls.items() if n]
    if last and head.lm_head:
        out.append(Collective("tp_loss", "all_reduce", "tp", t, m * 3 * FP32 * tokens, 3 * m))
    if layout.sequence_parallel:
        partial, times = sp_partial_grad_params(cfg, layout, stage), m if layout.zero == 3 else 1
        out.append(Collective("tp_norm_grads", "all_reduce", "tp", t,
                              times * weight_element_bytes(layout.dtype) * sum(partial), times * len(partial)))
    return out


def sp_partial_grad_params(cfg: ModelConfig, layout: Layout, stage: int) -> list[int]:
    """Sizes of the tensors whose gradients are partial under sequence parallelism (cause 5): the block
    norms, and the final norm on the last stage; a router's, which routes the rank's shard (experts folded:
    tfcalc.count.training.experts_folded, step 3)."""
    sizes = []
    for t, copies in stage_tensors(cfg, layout.pp, stage, layout.virtual_stages, layout.stage_split):
        if t.name.startswith(("attn_norm_", "ffn_norm_", "final_norm_", "router_")):
            sizes += [math.prod(t.shape)] * copies
    return sizes


def pp_collectives(cfg: ModelConfig, layout: Layout, stage: int) -> list[Collective]:
    """Causes 6 and 7."""
    p, m = layout.pp, layout.micro_batches
    if p == 1:
        return []
    tokens = layout.micro_batch * layout.seq // layout.cp
    h = cfg.architecture.d_model
    X = activation_element_bytes(layout.dtype) * tokens * h // (layout.tp if layout.sequence_parallel else 1)
    directions = sends_per_micro_batch(layout, stage)  # interleaved: every chunk boundary (perf.pipeline)
    out = [Collective("pp_activations", "send_recv", "pp", 2, m * directions * X, m * directions)]
    tied = tied_stage_copy(cfg, p, layout.stage_split)  # None under dualpipev: both ends on the first rank
    if tied is not None and stage in (0, p - 1):
        size = weight_element_bytes(layout.dtype) * math.prod(tp_local_shape(tied, layout.tp))
        out.append(Collective("pp_tied_embedding", "all_reduce", "pp", 2, size, 1))
    return out


def step_collectives(cfg: ModelConfig, layout: Layout, stage: int, psi: int) -> list[Collective]:
    """Every collective one rank of the stage takes part in during one step (causes 1-7)."""
    return (dp_collectives(cfg, layout, stage, psi) + tp_collectives(cfg, layout, stage)
            + pp_collectives(cfg, layout, stage) + cp_collectives(cfg, layout, stage))


def cp_collectives(cfg: ModelConfig, layout: Layout, stage: int) -> list[Collective]:
    """Cause 8."""
    payload, calls = kv_ring(cfg, layout, stage)
    return [Collective("cp_kv", "send_recv", "cp", layout.cp, payload, calls)] if calls else []
