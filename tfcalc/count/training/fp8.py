"""FP8 matmuls in training (``--compute-dtype fp8``): which GEMMs run in FP8, at what peak, and the memory
the recipe adds. Pure arithmetic.

The recipe modelled: NVIDIA Transformer Engine's delayed scaling (``transformer_engine.common.recipe.
DelayedScaling``, format HYBRID: E4M3 activations and weights forward, E5M2 gradients backward, one scale
per tensor from an amax history of 1,024 steps), as Megatron-LM's --fp8-format hybrid runs it:

1. In FP8: every linear of the blocks (Q, K, V and their latent projections, O, gate, up, down, routed and
   shared experts), all three GEMMs of each (forward, input gradient, weight gradient), at the device's
   dense FP8 peak (the datasheet table, tfcalc.devices: H100 SXM 1,979 TFLOP/s, "NVIDIA H100 Tensor Core
   GPU" datasheet, FP8 column, sparse rate halved) times the same shape model and ceiling as bf16 GEMMs
   (tfcalc.count.perf.gemm; Bekman's MAMF table has no FP8 row: the bf16 ceiling, assumed).
2. Not in FP8: attention's score products (FlashAttention runs in bf16), the router (Megatron keeps it in
   fp32/bf16) and the LM head (Transformer Engine recipes and torchtitan's float8 ``filter_fqns =
   ["output"]`` leave the output layer in bf16).
3. Storage does not change: weights, gradients and master weights stay as --dtype and --grad-dtype. The
   memory the recipe adds, per FP8 linear of the rank's stage, kept from its forward to its backward
   (Transformer Engine saves the cast weight for the backward GEMMs): its weight cast to FP8 and that
   cast's transpose (Hopper's FP8 GEMMs take only the TN layout), 2 bytes per weight element; and the
   amax histories of its three scaled tensors (input, weight, output gradient), 3 × 1,024 fp32.
   Not modelled: Transformer Engine also saves each linear's input as its FP8 cast, 1 byte per element
   instead of 2 -- the activations here stay counted in --dtype (an overestimate under FP8).
4. FP8 all-gather (``--fp8-all-gather``; torchao's ``Float8LinearConfig(enable_fsdp_float8_all_gather=True)``,
   torchtitan's --float8.enable_fsdp_float8_all_gather with --float8.precompute_float8_dynamic_scale_for_fsdp):
   under ZeRO-3 with tensorwise scaling each FP8 linear's weight shard is cast to FP8 before FSDP2 gathers it
   (torchao.float8.fsdp_utils.WeightWithDynamicFloat8CastTensor.fsdp_pre_all_gather), with the scale of the
   whole weight from the amaxes of its shards, computed after each optimizer step for every FP8 weight at
   once and all-reduced in one call (``precompute_float8_dynamic_scale_for_fsdp``: one fp32 per weight). So:
   the gather moves 1 byte per element of those weights, not 2 (tfcalc.count.training.comm, cause 2; FSDP2's
   copy-in and copy-out with it, tfcalc.count.training.overlap_costs); the gathered unit holds them in
   FP8 (rank_memory.gathered_bytes); the weight's casts run on the shard, 1/N of the weight, once per
   gather (read e, write 1), its amax once a step (read e), and the gathered FP8 weight is transposed for the
   input gradient's GEMM (read 1, write 1) where the 16-bit weight was cast twice
   (tfcalc.count.perf.fp8_recipes.casts, ``gathered_in``).
"""

from __future__ import annotations

import math

from tfcalc.config import ModelConfig
from tfcalc.count.perf.fp8_recipes import keeps_fp8_weights
from tfcalc.count.training.shard import stage_tensors
from tfcalc.count.training.sharding import experts_apart, local_copies, local_shape, routed_expert
from tfcalc.workload import Layout

AMAX_HISTORY = 1024  # DelayedScaling(amax_history_len=1024), Transformer Engine's default
SCALED_TENSORS = 3  # input, weight, output gradient
FP32 = 4


def runs_fp8(layout: Layout, component: str, group: str, mixing: bool = False) -> bool:
    """Whether the matmul runs in FP8 under the layout (steps 1 and 2); ``mixing``: a position-mixing matmul
    (MatmulEntry.mixing: attention's score products, any mixer's), which stays 16-bit."""
    if layout.compute_dtype != "fp8" or group in ("lm_head", "pooler") or mixing:
        return False
    return not component.endswith("router")


def _fp8_weight(name: str) -> bool:
    """A stored 2-D weight of a block linear that step 1 casts (not a norm, bias, router or embedding)."""
    return name.endswith("_weight") and "norm" not in name and "router" not in name


FP8_BYTES = 1


def fp8_linear_weight(t) -> bool:
    """A block tensor (tfcalc.count.training.shard.Tensor) that is an FP8 linear's weight (steps 1 and 4)."""
    return t.per_block and len(t.shape) == 2 and _fp8_weight(t.name)


def gathers_fp8(layout: Layout) -> bool:
    """Step 4 applies: --fp8-all-gather on a ZeRO-3 layout of tensorwise FP8."""
    return (layout.fp8_all_gather and layout.zero == 3 and layout.compute_dtype == "fp8"
            and layout.fp8_recipe == "tensorwise")


def fp8_linears(cfg: ModelConfig, layout: Layout, stage: int, experts: bool = False) -> int:
    """FP8 linear weights on one rank of the stage (step 4's amaxes): the blocks' (``experts``: the routed
    experts' grouped tensors alone, else the rest)."""
    return sum(copies for t, copies in stage_tensors(cfg, layout.pp, stage, layout.virtual_stages, layout.stage_split)
               if fp8_linear_weight(t) and (not experts_apart(layout) or routed_expert(t.name) == experts))


def fp8_cache_bytes(cfg: ModelConfig, layout: Layout, stage: int) -> int:
    """Step 3: bytes the recipe adds on one rank of the stage (TP rank 0, EP rank 0)."""
    if layout.compute_dtype != "fp8" or not keeps_fp8_weights(layout.fp8_recipe):  # torchao's keep none
        return 0
    elements = linears = 0
    for t, copies in stage_tensors(cfg, layout.pp, stage, layout.virtual_stages, layout.stage_split):
        if t.per_block and len(t.shape) == 2 and _fp8_weight(t.name):
            n = local_copies(t.name, copies, layout)
            elements += n * math.prod(local_shape(t, layout))  # a folded expert's ETP share
            linears += n
    return 2 * elements + linears * SCALED_TENSORS * AMAX_HISTORY * FP32
