"""Expert-parallel serving's all-to-all (tfcalc.count.serving.expert_parallel, steps 4 and 6): the dispatch and
combine of a step's tokens on one GPU -- the route by phase and span, the bytes per link, the seconds -- and the SMs
its kernels hold while two half batches overlap it; or, under attention DP (``infer --ep-comm``, comm_method),
TensorRT-LLM's allgather of every rank's tokens before the experts and reduce-scatter of their outputs after
(allgather_reducescatter). Pure arithmetic; the layout is expert_parallel.ExpertLayout."""

from __future__ import annotations

from dataclasses import dataclass

from tfcalc.config import ModelConfig
from tfcalc.count.model.memory import activation_element_bytes
from tfcalc.count.model.quant import WeightFormat
from tfcalc.count.serving.roofline import Step
from tfcalc.count.training.experts_parallel import FP8_SCALE_CHANNELS, FP32, token_routes
from tfcalc.errors import InputError


def moe_of(cfg: ModelConfig):
    """The first mixture's FFN (every MoE layer's, in the presets), or None for a dense model."""
    return next((b.ffn for _, b, _ in cfg.architecture.kinds() if b.is_moe), None)


def moe_layers(cfg: ModelConfig) -> int:
    """The MoE layers, each one dispatch and one combine a step."""
    return sum(n for _, b, n in cfg.architecture.kinds() if b.is_moe)


@dataclass(frozen=True)
class AllToAll:
    """Step 4 for one step on one GPU."""

    tokens: float  # tokens this GPU dispatches (B·q/E)
    layers: int  # MoE layers
    dispatch_bytes_per_token: float  # per layer, both links
    combine_bytes_per_token: float
    network_bytes: float  # per step, both calls, every layer
    intra_bytes: float
    seconds: float
    how: str = "alltoall"  # step 4's route: alltoall (one copy per pair), deepep (node-limited), low_latency;
    # allgather: every token to every GPU, the outputs reduce-scattered back (allgather_reducescatter)


EP_COMMS = ("auto", "alltoall", "allgather")  # infer --ep-comm


def comm_method(asked: str, ep: int, dp: int, gpus_per_node: int) -> str:
    """``--ep-comm``'s method for E GPUs, D attention-DP groups. ``auto`` is TensorRT-LLM's rule for its CUTLASS MoE
    (the Hopper FP8 backend; v1.0's tensorrt_llm/_torch/models/modeling_qwen3_moe.py, Qwen3MoE.should_enable_alltoall,
    and modules/fused_moe/fused_moe_wide_ep.py, select_alltoall_method_type): an all-to-all only under attention DP
    with a multi-node NVLink domain (MnnvlMemory.supports_mnnvl: GB200 NVL72's fabric) and more EP ranks than top-k;
    otherwise, under attention DP, every rank allgathers all ranks' tokens before the experts and reduce-scatters
    their outputs (fused_moe_cutlass.py, forward_chunk's allgather and reducescatter_or_allreduce). tfcalc's device
    table names no multi-node NVLink domain, so ``auto`` is ``allgather`` with D > 1 inside one node; across nodes
    it keeps step 4's DeepEP routes (DeepSeek's and SGLang's stacks, which the cross-node rows measured), and
    without attention DP (D = 1) the all-to-all."""
    if asked not in EP_COMMS:
        raise InputError(f"--ep-comm {asked!r}: give one of {', '.join(EP_COMMS)}")
    if asked != "auto":
        return asked
    return "allgather" if dp > 1 and ep <= gpus_per_node else "alltoall"


EXPERT_ID_BYTES = 4  # int32 token_selected_slots, one per top-k choice (fused_moe_cutlass.py's allgather list)


def allgather_reducescatter(cfg: ModelConfig, lay, tokens: float, act_bytes: int, fp8: bool) -> AllToAll:
    """The exchange under attention DP without an all-to-all, for ``tokens`` tokens on each of the E GPUs (a step's
    tokens the same on every rank). Per MoE layer: an allgather of every GPU's rows to every GPU -- each row the
    token's h activations (FP8: h bytes, one per-tensor scale: static_quantize_e4m3_per_tensor before the gather)
    with its top-k expert ids (int32) and weights (fp32) -- then the experts' h-wide outputs (act bytes each)
    reduce-scattered back. Unpadded: for FP8 on the CUTLASS MoE the gather's sizes are all_rank_num_tokens
    (modeling_qwen3_moe.py pads to the largest rank's count only for other backends or NVFP4; the ranks' equal
    steps here make the two the same). NCCL's ring collectives: a GPU receives (E − 1)·t rows in the gather and
    sends (E − 1)·t in the reduce-scatter, every row whether or not one of its experts is routed (so no fullest-GPU
    factor, expert_parallel step 7), against the all-to-all's top-k·(E − 1)/E copies: at top-k = E the two move
    the same bytes, below it the allgather moves E/top-k times more. Each call one latency, as step 4's."""
    moe, L = moe_of(cfg), moe_layers(cfg)
    if lay.ep == 1:
        return AllToAll(tokens, L, 0.0, 0.0, 0.0, 0.0, 0.0, "allgather")
    d = moe.dispatch_width
    gather_row = (d if fp8 else act_bytes * d) + moe.top_k * (EXPERT_ID_BYTES + FP32)
    scatter_row = act_bytes * d
    peers = lay.ep - 1
    moved = tokens * L * peers * (gather_row + scatter_row)
    across = lay.nodes > 1  # a ring over nodes runs at its network hop's pace
    bw, eff = ((lay.network_bytes_per_s, lay.network_efficiency) if across
               else (lay.intra_bytes_per_s, lay.intra_efficiency))
    latency = lay.network_latency_s if across else lay.intra_latency_s
    return AllToAll(tokens, L, peers * gather_row, peers * scatter_row, moved if across else 0.0,
                    0.0 if across else moved, 2 * L * latency + moved / (bw * eff), "allgather")


def route(lay, decode: bool) -> str:
    """Step 4's route: inside one node one copy per (token, expert) pair over NVLink; across nodes the prefill's
    DeepEP normal kernels (node-limited, forwarded over NVLink), the decode's low-latency kernels (one RDMA message
    per pair, DeepEP docs/legacy.md, "Low-latency kernels with pure RDMA": 128 tokens × top-8 × 7,168 FP8 in 173 µs
    at EP 64, 43 GB/s, as the per-pair bytes give)."""
    if lay.nodes == 1:
        return "alltoall"
    return "low_latency" if decode else "deepep"


def all_to_all(cfg: ModelConfig, lay, tokens: float, act_bytes: int, fp8: bool,
               decode: bool = True) -> AllToAll:
    """Step 4: the dispatch and combine of ``tokens`` tokens of this GPU at every MoE layer (the layout's
    ``comm`` allgather: allgather_reducescatter's exchange instead)."""
    if getattr(lay, "comm", "alltoall") == "allgather":
        return allgather_reducescatter(cfg, lay, tokens, act_bytes, fp8)
    moe, L, how = moe_of(cfg), moe_layers(cfg), route(lay, decode)
    if lay.ep == 1:
        return AllToAll(tokens, L, 0.0, 0.0, 0.0, 0.0, 0.0, how)
    d = moe.dispatch_width  # a latent MoE dispatches its L-wide rows (tfcalc.architecture.ffn, step 7)
    routes = token_routes(moe, lay.ep, lay.nodes, "deepep" if how == "deepep" else "alltoall", moe.top_k)
    dispatch_row = d + FP32 * -(-d // FP8_SCALE_CHANNELS) if fp8 else act_bytes * d
    per_row = dispatch_row + act_bytes * d  # a row goes out in the dispatch and back in the combine
    network = tokens * L * routes.network_rows * per_row
    intra = tokens * L * routes.intra_rows * per_row
    rows = routes.network_rows + routes.intra_rows
    latency = lay.network_latency_s if lay.nodes > 1 else lay.intra_latency_s
    wire = max(network / (lay.network_bytes_per_s * lay.network_efficiency) if network else 0.0,
               intra / (lay.intra_bytes_per_s * lay.intra_efficiency) if intra else 0.0)
    return AllToAll(tokens, L, rows * dispatch_row, rows * act_bytes * d, network, intra, 2 * L * latency + wire, how)


def step_all_to_all(cfg: ModelConfig, fmt: WeightFormat, lay, whole: Step) -> AllToAll:
    return all_to_all(cfg, lay, whole.batch * whole.queries / lay.ep, activation_element_bytes(fmt.compute_dtype),
                      fmt.compute_dtype == "fp8", whole.phase == "decode")


def held_sms(lay, decode: bool, perf) -> int:
    """Step 6's SMs the all-to-all's kernels hold while the other half computes: DeepEP's normal kernels
    (``PerfSpec.ep_comm_sms``, 20: DeepSeek-V3 sec. 3.2.2), none for its low-latency decode kernels (the RDMA
    messages fly without an SM: profile-data's README), NCCL's ``comm_sms`` for one node's all-to-all."""
    how = route(lay, decode)
    return 0 if perf is None or how == "low_latency" else perf.ep_comm_sms if how == "deepep" else perf.comm_sms


def slowed(rows_s: float, lay, decode: bool, perf) -> float:
    """The rows' seconds on the SMs the all-to-all leaves them (step 6): × sm_count / (sm_count − held)."""
    sms = held_sms(lay, decode, perf)
    return rows_s if not sms else rows_s * perf.sm_count / (perf.sm_count - sms)
