"""ZeRO-3's collectives at the ends of a step, which no compute can hide (FSDP2). Pure arithmetic.

Under FSDP2 (torch.distributed.fsdp.fully_shard, as torchtitan and OLMo-core wrap a model: each block a unit, then
the whole model, the root, holding the embedding, the final norm and the output layer) a unit's all-gather is
prefetched during the previous unit's compute and its reduce-scatter runs during the next unit's backward, so the
bulk of ZeRO-3's traffic overlaps (tfcalc.count.training.steptime, step 5). Two ends have nothing to hide behind:

1. The step starts with the root's all-gather (its forward needs the embedding before anything runs) and the first
   block's (prefetched behind the embedding lookup alone, a memory copy of B·T rows): both exposed, once a step (the
   first micro-batch; the root is not resharded after forward, FSDP2's default for it).
2. The backward ends with the first block's reduce-scatter and then the root's: the root's gradients (the
   embedding's last, through the lookup's backward) are complete only when the backward is, and FSDP2's root
   post-backward callback waits on every pending reduce-scatter before the optimizer step (torch/distributed/fsdp/
   _fully_shard/_fsdp_state.py, ``_root_post_backward_final_callback``), so both are exposed, on the last
   micro-batch; under HSDP the replicas' all-reduce of those shards after them (OLMo-core's HSDP: the same).

A DDP bucket (25 MiB, the old charge for every ZeRO stage) is the wrong size for these: a Llama 3.1 8B's root is
its 525M-element embedding and output layer, 2.1 GB gathered in bf16 and 4.2 GB reduce-scattered in fp32.
Each end's share of a collective is its units' share of that collective's bytes over the step (the shards of the
root and of one block among every gather, or every reduce), so the NCCL time of the whole collective (its
algorithm and latency per call: tfcalc.count.training.steptime, step 4) is split by bytes.
"""

from __future__ import annotations


def edge_shares(blocks: int, shards: int, root: int, micro_batches: int, reshard_after_forward: bool
                ) -> tuple[float, float]:
    """(the all-gathers', the reductions') share of their bytes over the step at the step's ends (steps 1 and 2):
    the root's shard and one block's among every gather, or every reduce, of ``blocks`` units of ``shards``
    elements in all and the root's ``root`` (tfcalc.count.training.comm's ZeRO-3 units, one rank)."""
    if shards + root == 0:
        return 0.0, 0.0
    edge = root + (shards / blocks if blocks else 0.0)
    again = 2 if reshard_after_forward else 1
    return (min(1.0, edge / (micro_batches * (again * shards + root))),
            min(1.0, edge / (micro_batches * (shards + root))))


def edge_s(collectives, seconds) -> float:
    """Seconds of ZeRO-3's collectives on the step's critical path at its ends: each collective's ``edge_share``
    of its time as ``seconds`` prices it (tfcalc.count.training.steptime, step 4)."""
    return sum(c.edge_share * seconds(c) for c in collectives if c.edge_share)
