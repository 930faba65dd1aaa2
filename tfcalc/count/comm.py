"""Collectives of one training step, per rank and by cause: pure arithmetic, no torch.

What a collective's bytes mean (the same for the plan and for tfcalc.measure.collectives, which records
the tensors handed to torch.distributed):
- payload: all-reduce, the tensor reduced; all-gather, the gathered output (N × each rank's input);
  reduce-scatter, the input (N × each rank's output); send/recv, the tensor sent.
- sent per rank, ring algorithms on a group of N ranks (Patarasuk & Yuan 2009; the convention of
  Rajbhandari et al. 2020 and Narayanan et al. 2021): all-gather and reduce-scatter (N − 1)/N × payload;
  all-reduce = reduce-scatter + all-gather, 2(N − 1)/N × payload (rounded down to a whole byte when N
  does not divide it); send/recv the payload. So DDP sends 2Ψ(N − 1)/N gradient elements per rank and
  step, ZeRO-3 3Ψ(N − 1)/N (two gathers and a reduce-scatter).

Causes, per step of m micro-batches on a rank of the shown pipeline stage (TP rank 0), X = e·b·s·h the
bytes of one micro-batch's hidden states (e activation bytes, b micro-batch, s sequence, h d_model):

1. dp_grads (dp > 1): ZeRO-0 (DDP) all-reduces the gradients once per step (accumulating micro-batches
   under no_sync), in buckets PyTorch chooses (25 MiB), so calls are not predicted; ZeRO-1 reduce-scatters
   them once per step, ZeRO-2 and ZeRO-3 once per micro-batch (they keep only their gradient shard).
   Gradients travel in the weight dtype. ZeRO-1/2 split a flat buffer (⌈Ψ/N⌉ per rank); ZeRO-3 each
   FSDP unit (a block, or the root's tensors) padded per tensor (tfcalc.count.shard.fsdp_shard).
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
8. cp_kv (cp > 1): context parallelism's ring passes of K/V and their gradients, point-to-point
   (tfcalc.count.context_parallel). Under CP, every message above that carries positions carries the
   rank's s/C of them, and the dp group of causes 1-2 is the dp × cp ranks that hold the same weights.
   Under the interleaved schedule cause 6 counts a send at every chunk boundary (tfcalc.count.perf.pipeline).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

from tfcalc.config import ModelConfig
from tfcalc.count.context_parallel import kv_ring
from tfcalc.count.layout import Layout
from tfcalc.count.memory import activation_element_bytes
from tfcalc.count.perf.pipeline import sends_per_micro_batch
from tfcalc.count.rank_memory import FP32, weight_element_bytes
from tfcalc.count.shard import fsdp_shard, stage_kinds, stage_tensors, tied_stage_copy, tp_local_shape

OPS = ("all_reduce", "all_gather", "reduce_scatter", "send_recv")
GROUPS = ("dp", "tp", "pp", "cp")


@dataclass(frozen=True)
class Collective:
    """All the calls of one collective op for one cause in one step, on one rank."""

    cause: str
    op: str  # one of OPS
    group: str  # one of GROUPS
    group_size: int
    payload_bytes: int  # summed over the calls (see the module docstring)
    calls: Optional[int]  # None where PyTorch chooses (DDP's buckets)

    @property
    def key(self) -> str:
        return f"{self.cause}_{self.op}"

    @property
    def sent_bytes(self) -> int:
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


def _unit_shards(cfg: ModelConfig, layout: Layout, stage: int) -> tuple[int, int, int]:
    """(blocks on the stage, all their shards, the root's tensors on the stage): elements per rank under
    FSDP2's padded split."""
    def shard(t) -> int:
        return t.copies * fsdp_shard(tp_local_shape(t, layout.tp), layout.data_ranks)

    kinds = stage_kinds(cfg, layout.pp, stage, layout.virtual_stages)
    blocks = sum(n * sum(shard(t) for t in tensors) for _, tensors, n in kinds)
    root = sum(shard(t) for t, _ in stage_tensors(cfg, layout.pp, stage, layout.virtual_stages) if not t.per_block)
    return sum(n for _, _, n in kinds), blocks, root


def dp_collectives(cfg: ModelConfig, layout: Layout, stage: int, psi: int) -> list[Collective]:
    """Causes 1 and 2."""
    N, m, ew = layout.data_ranks, layout.micro_batches, weight_element_bytes(layout.dtype)  # dp × cp ranks
    if N == 1:
        return []

    def c(cause, op, payload, calls):
        return Collective(cause, op, "dp", N, payload, calls)

    if layout.zero == 0:
        return [c("dp_grads", "all_reduce", ew * psi, None)]
    flat = ew * N * -(-psi // N)
    if layout.zero in (1, 2):
        times = 1 if layout.zero == 1 else m
        return [c("dp_grads", "reduce_scatter", times * flat, times), c("zero_params", "all_gather", flat, 1)]
    blocks, shards, root = _unit_shards(cfg, layout, stage)
    units = blocks + (root > 0)
    gathers = m * (2 * shards + root)
    return [c("zero_params", "all_gather", ew * N * gathers, m * (2 * blocks + (root > 0))),
            c("dp_grads", "reduce_scatter", ew * N * m * (shards + root), m * units)]


def tp_collectives(cfg: ModelConfig, layout: Layout, stage: int) -> list[Collective]:
    """Causes 3, 4 and 5."""
    t, m = layout.tp, layout.micro_batches
    if t == 1:
        return []
    # TP-split sub-layers of the stage: every attention and cross-attention, and every FFN but a mixture of
    # experts (its experts are whole on every rank: replicated, so their output needs no reduction) --
    # unless it has a shared expert, split as a dense FFN is (its tensors' ``tp``, tfcalc.architecture.ffn)
    kinds = stage_kinds(cfg, layout.pp, stage, layout.virtual_stages)
    split = sum(n * (1 + (b.cross_attention is not None) + (not b.is_moe or b.ffn.shared is not None))
                for b, _, n in kinds)
    # a cross-attention's K/V projection reads the encoder output: its input gradient is one more reduction
    # in the backward pass, of the source states (as many as the target's here: the plan's source is seq)
    cross = sum(n for b, _, n in kinds if b.cross_attention is not None)
    first, last = stage == 0, stage == layout.pp - 1
    tokens = layout.micro_batch * layout.seq // layout.cp  # a CP rank's positions (tfcalc.count.context_parallel)
    X = activation_element_bytes(layout.dtype) * tokens * cfg.d_model
    tied = cfg.lm_head and cfg.tie_embeddings
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
    if last and cfg.lm_head:
        out.append(Collective("tp_loss", "all_reduce", "tp", t, m * 3 * FP32 * tokens, 3 * m))
    if layout.sequence_parallel:
        partial, times = sp_partial_grad_params(cfg, layout, stage), m if layout.zero == 3 else 1
        out.append(Collective("tp_norm_grads", "all_reduce", "tp", t,
                              times * weight_element_bytes(layout.dtype) * sum(partial), times * len(partial)))
    return out


def sp_partial_grad_params(cfg: ModelConfig, layout: Layout, stage: int) -> list[int]:
    """Sizes of the tensors whose gradients are partial under sequence parallelism (cause 5): the block
    norms, and the final norm on the last stage."""
    sizes = []
    for t, copies in stage_tensors(cfg, layout.pp, stage, layout.virtual_stages):
        if t.name.startswith(("attn_norm_", "ffn_norm_", "final_norm_")):
            sizes += [math.prod(t.shape)] * copies
    return sizes


def pp_collectives(cfg: ModelConfig, layout: Layout, stage: int) -> list[Collective]:
    """Causes 6 and 7."""
    p, m = layout.pp, layout.micro_batches
    if p == 1:
        return []
    tokens = layout.micro_batch * layout.seq // layout.cp
    X = activation_element_bytes(layout.dtype) * tokens * cfg.d_model // (layout.tp if layout.sequence_parallel else 1)
    directions = sends_per_micro_batch(layout, stage)  # interleaved: every chunk boundary (perf.pipeline)
    out = [Collective("pp_activations", "send_recv", "pp", 2, m * directions * X, m * directions)]
    tied = tied_stage_copy(cfg, p)
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
