"""Expert parallelism's token all-to-all (``--ep E``): collectives per step on one rank. Pure arithmetic.

Under expert parallelism (tfcalc.count.training.sharding, step 1) a mixture of experts on E ranks runs, per
micro-batch and per MoE layer (GShard, Lepikhin et al. 2020, sec. 2.2; Megatron-Core's
``MoEAlltoAllTokenDispatcher``; torchtitan's ``ExpertParallel``):

1. ep_counts: an all-to-all of the tokens each local expert receives, one int64 per routed expert
   (n_expert × 8 bytes), so every rank can size its receive buffer (torchtitan exchanges
   ``num_tokens_per_expert`` so before the dispatch; Megatron-Core likewise);
2. ep_tokens, forward: the dispatch, every routed copy of a token (T·k rows of d_model) sent to the rank
   holding its expert, and the combine, the experts' outputs sent back: 2 all-to-alls of T·k·h·e bytes;
   backward: the gradients of both travel the other way: 2 more. So 4 all-to-alls of X_k = T·k·h·e
   bytes per MoE layer and micro-batch, T = micro-batch × seq the rank's tokens, e the activation bytes.
   With a capacity factor c each expert's buffer holds C = ⌈c·k·T/n_expert⌉ rows (Switch Transformers),
   so the tensors exchanged are n_expert·C rows, not T·k.
   Payload, as for every collective (tfcalc.count.training.comm): the tensor handed to the all-to-all; sent per
   rank (E − 1)/E of it under uniform routing (the share bound for the other E − 1 ranks) -- the payload
   is exact whatever the routing, the share sent off-rank an expectation.
3. Time (tfcalc.count.perf.collectives): E − 1 pairwise steps of latency α, plus the sent bytes over
   NVLink when the group's tp·E GPUs sit in one node, else the network. Not overlapped: each all-to-all
   sits between the router and the experts (or the experts and the next layer) on the critical path of
   every micro-batch (DeepSeek-V3's DualPipe hides it; Megatron's default does not).
"""

from __future__ import annotations

from tfcalc.config import ModelConfig
from tfcalc.count.model.memory import activation_element_bytes
from tfcalc.count.training.comm import Collective
from tfcalc.count.training.shard import stage_kinds
from tfcalc.workload import Layout

INT64 = 8


def ep_collectives(cfg: ModelConfig, layout: Layout, stage: int) -> list[Collective]:
    """Steps 1 and 2: the stage's MoE layers' all-to-alls in one step of m micro-batches."""
    E, m = layout.ep, layout.micro_batches
    if E == 1:
        return []
    tokens = layout.micro_batch * layout.seq
    e = activation_element_bytes(layout.dtype)
    counts = rows = layers = 0  # rows: summed as elements, rows × d_model
    for block, _, n in stage_kinds(cfg, layout.pp, stage, layout.virtual_stages, layout.stage_split):
        if block.is_moe:
            layers += n
            counts += n * block.ffn.n_expert * INT64
            rows += n * block.ffn.routed_rows(tokens) * block.ffn.d_model
    if not layers:
        return []
    return [Collective("ep_counts", "all_to_all", "ep", E, m * counts, m * layers),
            Collective("ep_tokens", "all_to_all", "ep", E, m * 4 * rows * e, m * 4 * layers)]
