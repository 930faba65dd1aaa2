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
3. Which link carries what (``--ep-dispatch``; the EP group's E ranks over ν nodes, r = E/ν in each, Megatron's
   rank order: tfcalc.count.training.steptime.group_nodes). Both split a rank's sent bytes into the network's
   and the intra-node link's, which run at once (the time is the longer of the two, plus each peer's latency):
   - ``alltoall`` (Megatron-Core's alltoall dispatcher, torchtitan's, NCCL's pairwise all-to-all): one copy per
     (token, expert) pair, straight to the expert's rank: of the k copies per token k·(E − r)/E cross the
     network, k·(r − 1)/E stay on NVLink. Inside one node (ν = 1) that is step 2's (E − 1)/E, all on NVLink.
   - ``deepep`` (DeepSeek-V3, arXiv 2412.19437, sec. 3.2.2; DeepEP's normal kernels, Megatron-Core's flex
     dispatcher): a token crosses the network once per remote node that holds any of its experts, to the GPU
     of its own local index there, which forwards it over NVLink to each GPU of that node holding its
     experts, once per GPU. Per token and all-to-all, in rows of d_model: network (ν − 1)·P_node, NVLink
     (E − ν)·P_gpu, where P_unit is the chance that a unit (a node, a GPU: a contiguous share of the experts)
     holds at least one of the token's k experts (``touched``). Node-limited routing comes from the model:
     DeepSeek's grouped routing (tfcalc.architecture.routing: n_group groups, topk_group kept) with whole
     groups on each node sends a token to at most topk_group nodes (sec. 2.1.2, "Node-Limited Routing":
     M = 4 of DeepSeek-V3's 8 groups). Under --compute-dtype fp8 the two dispatches (forward, and the
     backward's gradients before the down projection) carry FP8 with one fp32 scale per 128 channels, the
     combines bf16 (sec. 3.3.2, "Low-Precision Communication").
   - ``auto`` (the default): deepep where the EP group spans nodes, alltoall inside one node.
   P_unit under a balanced router (every kept group, and every expert within the kept groups, equally
   likely; DeepSeek-V3's auxiliary-loss-free balancing aims at this), units of n_expert/u experts, G =
   topk_group of n_group groups kept, p experts a group: with whole groups on a unit (u divides n_group, g
   groups a unit) the unit is touched when one of its groups is kept, 1 − C(n_group − g, G)/C(n_group, G)
   (a group is kept for its best experts' scores, which then rank among the token's k ≥ G: each kept group
   is reached); with a unit inside one group (n_group divides u, q experts a unit), its group kept and one
   of the k drawn from the kept G·p experts its own: G/n_group · (1 − C(G·p − q, k)/C(G·p, k)); otherwise
   the groups are ignored (ungrouped, n_group = 1, where top-k of exchangeable scores is a uniform k-subset).
   DeepSeek-V3 at EP 64 over 8 nodes: P_node = 1/2, 3.5 remote nodes per token (against 7.9 copies crossing
   nodes under alltoall), P_gpu = 0.115; transformers' DeepseekV3TopkRouter on random inputs reaches 0.496
   and 0.117 (tests/count/test_ep_dispatch.py).
4. Time (tfcalc.count.training.steptime): on every micro-batch's critical path, between the router and the
   experts and between the experts and the next layer (Megatron-Core's default). ``--overlap ep`` runs each
   micro-batch's all-to-alls under another micro-batch's compute (DualPipe, sec. 3.2.1, which pairs a
   forward chunk with a backward chunk; Megatron-Core's --overlap-moe-expert-parallel-comm, 1F1B with A2A
   overlap): hidden but the first micro-batch's forward and the last one's backward (no partner: 1/m of
   it), and what outlasts the compute. Its cost: the communication kernels hold SMs for as long as they
   run, so the compute beside them runs on the rest (``comm_sms``): DeepEP's 20 (sec. 3.2.2, "only 20 SMs
   are sufficient to fully utilize the bandwidths of IB and NVLink"; deep_ep Buffer.num_sms = 20), NCCL's
   ``PerfSpec.comm_sms`` for alltoall (``PerfSpec.ep_comm_sms`` and ``comm_sms``, tfcalc.count.perf.hardware).
"""

from __future__ import annotations

from dataclasses import dataclass
from math import comb

from tfcalc.config import ModelConfig
from tfcalc.count.model.memory import activation_element_bytes
from tfcalc.count.training.comm import Collective, Links
from tfcalc.count.training.experts_folded import rank_tokens
from tfcalc.count.training.shard import stage_kinds
from tfcalc.count.training.sharding import dispatcher, ep_nodes
from tfcalc.workload import Layout

INT64 = 8
FP8_SCALE_CHANNELS = 128  # step 3: one fp32 scale per 128 channels of an FP8 dispatch (DeepSeek-V3 sec. 3.3.2)
FP32 = 4


def _untouched(pool: int, held: int, k: int) -> float:
    """Chance that none of k experts drawn from ``pool`` (without replacement) is one of ``held`` of them."""
    return comb(pool - held, k) / comb(pool, k) if pool - held >= k else 0.0


def touched(n_expert: int, k: int, n_group: int, topk_group: int, units: int) -> float:
    """Step 3's P_unit: the chance that one of ``units`` equal contiguous shares of the experts holds at least
    one of a token's k experts, under grouped routing and a balanced router."""
    if units <= 1:
        return 1.0
    G, per_group = topk_group, n_expert // n_group
    if n_group % units and units % n_group:  # groups and units do not nest: the groups ignored
        n_group, G, per_group = 1, 1, n_expert
    pool = G * per_group
    if n_group > 1 and n_group % units == 0:
        # whole groups on each unit: a kept group is reached (it was kept for its best experts' scores, which
        # then rank among the token's top k; with k < G, k of them): the unit is touched when one of its is
        reached = min(G, k)
        return 1 - comb(n_group - n_group // units, reached) / comb(n_group, reached)
    return G / n_group * (1 - _untouched(pool, n_expert // units, k))  # a unit within one group (or ungrouped)


@dataclass(frozen=True)
class TokenRoutes:
    """Step 3 for one MoE block under one dispatcher: rows of d_model a rank sends per token and all-to-all
    over the network and over the intra-node link, and the peers each call pays a latency to."""

    network_rows: float
    intra_rows: float
    network_peers: int
    intra_peers: int


def token_routes(ffn, E: int, nodes: int, how: str, copies: float) -> TokenRoutes:
    """``copies``: the rows step 2 exchanges per token (k, or the capacity's buffers per token)."""
    r = E // nodes
    if how == "alltoall":
        return TokenRoutes(copies * (E - r) / E, copies * (r - 1) / E, E - r, r - 1)
    routing = ffn.routing
    args = (ffn.n_expert, ffn.top_k, routing.n_group, routing.topk_group)
    return TokenRoutes((nodes - 1) * touched(*args, nodes), (E - nodes) * touched(*args, E), nodes - 1, r - 1)


def ep_collectives(cfg: ModelConfig, layout: Layout, stage: int, gpus_per_node: int = 8) -> list[Collective]:
    """Steps 1-3: the stage's MoE layers' all-to-alls in one step of m micro-batches."""
    E, m = layout.ep, layout.micro_batches
    if E == 1:
        return etp_collectives(cfg, layout, stage)
    tokens = rank_tokens(layout)  # b·s; folded, the rank's b·s/(cp·tp) (tfcalc.count.training.experts_folded, 3)
    e = activation_element_bytes(layout.dtype)
    nodes = ep_nodes(layout, gpus_per_node)
    how = dispatcher(layout, nodes)
    # deepep under FP8: two of the four all-to-alls in FP8 with their scales (step 3), the combines in e bytes
    fp8 = how == "deepep" and layout.compute_dtype == "fp8"
    counts = rows = layers = 0  # rows: summed as elements, rows × d_model
    network = intra = 0.0  # step 3's bytes, all four all-to-alls
    peers = (0, 0)
    for block, _, n in stage_kinds(cfg, layout.pp, stage, layout.virtual_stages, layout.stage_split):
        if block.is_moe:
            ffn, h = block.ffn, block.ffn.dispatch_width  # L wide in a latent MoE (architecture.ffn, step 7)
            layers += n
            counts += n * ffn.n_expert * INT64
            rows += n * ffn.routed_rows(tokens) * h
            routes = token_routes(ffn, E, nodes, how, ffn.routed_rows(tokens) / tokens)
            per_row = (2 * (h + FP32 * -(-h // FP8_SCALE_CHANNELS)) + 2 * e * h) if fp8 else 4 * e * h
            network += n * tokens * routes.network_rows * per_row
            intra += n * tokens * routes.intra_rows * per_row
            peers = (routes.network_peers, routes.intra_peers)
    if not layers:
        return []
    out = [Collective("ep_counts", "all_to_all", "ep", E, m * counts, m * layers)]
    if how == "alltoall" and nodes == 1:  # step 2 as it always was: every byte on the node's link
        return out + [Collective("ep_tokens", "all_to_all", "ep", E, m * 4 * rows * e, m * 4 * layers)] \
            + etp_collectives(cfg, layout, stage)
    links = Links(round(m * network), round(m * intra), *peers)
    payload = m * 4 * rows * e if how == "alltoall" else links.network_bytes + links.intra_bytes
    return out + [Collective("ep_tokens", "all_to_all", "ep", E, payload, m * 4 * layers, links)] \
        + etp_collectives(cfg, layout, stage)


def etp_collectives(cfg: ModelConfig, layout: Layout, stage: int) -> list[Collective]:
    """Expert tensor parallelism's token gathers (tfcalc.count.training.experts_folded, step 4): per MoE layer
    and micro-batch 2 all-gathers and 2 reduce-scatters over the ETP group, each of the ETP ranks' received
    rows, ETP·T_r·k·h·e (T_r·k the rows a rank receives under balanced routing)."""
    T = layout.etp or 1
    if T == 1:
        return []
    tokens, e = rank_tokens(layout), activation_element_bytes(layout.dtype)
    rows = layers = 0
    for block, _, n in stage_kinds(cfg, layout.pp, stage, layout.virtual_stages, layout.stage_split):
        if block.is_moe:
            layers += n
            rows += n * block.ffn.routed_rows(tokens) * block.ffn.dispatch_width
    if not layers:
        return []
    m = layout.micro_batches
    return [Collective("etp_tokens", op, "etp", T, m * 2 * T * rows * e, m * 2 * layers)
            for op in ("all_gather", "reduce_scatter")]
