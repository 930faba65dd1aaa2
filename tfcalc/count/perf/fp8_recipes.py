"""FP8 training recipes by name (``plan --compute-dtype fp8 --fp8-recipe R``): the casts each recipe runs around
one FP8 linear, and which of its three GEMMs run in FP8. Pure arithmetic.

A linear (m, k) @ (k, n) -> (m, n) runs three GEMMs (forward; input gradient, grad_output @ weight; weight
gradient, inputᵀ @ grad_output) on three 16-bit tensors cast to FP8: the input (m·k elements), the weight
(k·n) and the output gradient (m·n). Hopper's FP8 tensor cores take only the TN layout, so each tensor is
needed in FP8 twice, row-major and transposed (column-major), once for each GEMM it feeds. Per recipe, the
memory-bound kernels and the bytes each reads and writes, e the 16-bit element's bytes (2), FP8 one byte:

- ``delayed`` (the default: NVIDIA Transformer Engine's DelayedScaling, Megatron-LM's --fp8-format hybrid;
  tfcalc.count.perf.fp8_time, step 2): the scale from an amax history, the amax of this pass computed inside
  the cast; one fused cast-transpose per tensor (read e, write 1 + 1): input and weight in the forward
  pass, the output gradient in the backward: (e + 2)·numel each, three kernels.
- torchao's recipes (torchao.float8, ``Float8LinearConfig.from_recipe_name``; what torchtitan's float8
  converter runs), the kernels and bytes of torchao's own roofline model, torchao/testing/training/
  roofline_utils.py, ``get_tensor_memory_traffic_ovhd_s`` (its unfused case):
  - ``tensorwise`` (dynamic, one scale per tensor, cuBLAS): a two-stage amax reduction (stage 1 reads the
    tensor, e·numel; stage 2 reads a few partials: a kernel, no bytes), then the cast (read e, write 1 + 1
    for input and output gradient; the weight cast twice, once for the forward, once for the backward,
    read e, write 1 each): input 3 kernels (2e + 2)·mk, weight 3 + 1 kernels (3e + 2)·kn, output gradient 3
    kernels (2e + 2)·mn.
  - ``rowwise`` (dynamic, one scale per row; CUTLASS rowwise-scaled GEMMs): the row-major cast also writes
    a 16-bit transposed copy (read e, write 1 + e), a second kernel casts that copy (read e, write 1):
    input (2e + 1) + (e + 1), the output gradient the same, the weight cast (e + 1), transposed (2e) and
    cast again (e + 1); two, two and three kernels.
  - ``rowwise_with_gw_hp``: rowwise, with the weight-gradient GEMM in 16 bits (its inputs not cast): input
    and output gradient one cast each (e + 1)·numel; the weight's row-major cast (e + 1), a kernel folding its
    row scales into one, the column-major cast (e + 1): three kernels.
  - ``mxfp8`` (OCP Microscaling, one power-of-two scale per 32 elements; Blackwell's block-scaled tensor
    cores, torchao.prototype.mx_formats): each tensor cast twice, along each dimension (read e, write 1 +
    1/32 of scales): two kernels each. Refused where the device's table lists no MX rate.
- ``nvfp4`` (``--compute-dtype nvfp4``; NVIDIA, "Pretraining Large Language Models with NVFP4", arXiv
  2509.25149, as torchao's NVFP4 training tracker pytorch/ao#3293 lays its kernels out): E2M1 elements with an
  E4M3 scale per 16 and an fp32 scale per tensor from its amax, so every tensor first takes an amax pass
  (read e). The input: 1×16 blocks for the forward GEMM (read e, write 0.5 + 1/16), and in the backward a
  random Hadamard transform with 16×1 blocks for the weight gradient (the same bytes; the 16×16 transform's
  few FLOPs an element are left out). The weight: 16×16 blocks, one cast serving the forward and the input
  gradient (a 2-D block is its own transpose's). The output gradient: 1×16 blocks with stochastic rounding
  for the input gradient, and the Hadamard 16×1 cast for the weight gradient. All three GEMMs at the
  device's NVFP4 rate (refused where its table lists none: Blackwell's), under the FP8 ceiling (no
  measurement of its own). The paper keeps some layers in 16 bits: not modelled (every block linear in
  NVFP4).
Which pass runs each kernel: the input's and the weight's first casts in the forward pass (full recompute
runs them again), the rest in the backward pass.

Under torch.compile (``--kernels fused``) torchao's recipes' first kernel on the input and on the output
gradient fuses with the kernel that produces the tensor (the roofline's ``fuse_with_prev``, its
``enable_fusion_modeling``): that kernel's read of the 16-bit tensor goes, and tensorwise's amax first stage
is no kernel of its own. The weight's casts do not fuse (the weight is no kernel's output in the step).

GEMMs: all three at the FP8 rate under the FP8 ceiling (tfcalc.count.perf.fp8_time, step 1), except
rowwise_with_gw_hp's weight gradient at the 16-bit rate and ceiling. The rowwise recipes' GEMMs (per-row scales,
CUTLASS's kernel behind torch._scaled_mm) at ``ROWWISE_GEMM`` of that ceiling: 0.854, measured on an H100 with
torch 2.11 at Llama 3 8B's FFN shape 8192 × 4096 × 14336, 0.865 ms against 0.739 ms per-tensor (1,112 and
1,302 TFLOP/s; benchmarks/fp8_ring_gpu.py, benchmarks/results/h100-2026-11-27-fp8-ring.json).

Memory: the delayed recipe keeps each FP8 weight and its
transpose and the amax histories (tfcalc.count.training.fp8); torchao's recipes keep neither (the weight is
cast again in the backward: torchtitan's force_recompute_fp8_weight_in_bwd, no history).
"""

from __future__ import annotations

from dataclasses import dataclass

RECIPES = ("delayed", "tensorwise", "rowwise", "rowwise_with_gw_hp", "mxfp8", "nvfp4")
MX_BLOCK = 32  # elements per MX scale (OCP Microscaling Formats v1.0, sec. 5)
NVFP4_BYTES = 0.5 + 1 / 16  # an E2M1 element, and its block's E4M3 scale per 16 elements
NARROW = ("mxfp8", "nvfp4")  # --compute-dtype's names for their recipes


@dataclass(frozen=True)
class Casts:
    """One FP8 linear's cast kernels and bytes in each pass."""

    forward_bytes: float
    backward_bytes: float
    forward_kernels: int
    backward_kernels: int


def casts(recipe: str, m: int, k: int, n: int, e: int, ew: int, fused: bool = False, shards: int = 0,
          regathered: bool = True) -> Casts:
    """The module docstring's kernels and bytes for one linear; e the activations' and output gradient's
    bytes, ew the weight's; ``fused``: torch.compile's fusion (see the docstring's last paragraph); ``shards``:
    the weight gathered in FP8 from that many shards (tensorwise, --fp8-all-gather: ``gathered_in``),
    ``regathered`` again before the backward (FSDP2's reshard after forward)."""
    if shards:
        return gathered_in(casts(recipe, m, k, n, e, ew, fused), k * n, ew, shards, regathered)
    mk, kn, mn = m * k, k * n, m * n
    if fused and recipe != "delayed":  # the input's and output gradient's first read taken by the kernel before
        c = casts(recipe, m, k, n, e, ew)
        folded = recipe == "tensorwise"  # its amax's first stage is no kernel of its own then
        return Casts(c.forward_bytes - e * mk, c.backward_bytes - e * mn, c.forward_kernels - folded,
                     c.backward_kernels - folded)
    if recipe == "delayed":
        return Casts((e + 2) * mk + (ew + 2) * kn, (e + 2) * mn, 2, 1)
    if recipe == "tensorwise":
        return Casts((2 * e + 2) * mk + (2 * ew + 1) * kn, (2 * e + 2) * mn + (ew + 1) * kn, 6, 4)
    if recipe == "rowwise":
        return Casts((2 * e + 1) * mk + (ew + 1) * kn, (e + 1) * mk + (3 * ew + 1) * kn + (3 * e + 2) * mn, 2, 5)
    if recipe == "rowwise_with_gw_hp":
        return Casts((e + 1) * mk + (ew + 1) * kn, (ew + 1) * kn + (e + 1) * mn, 2, 3)
    if recipe == "mxfp8":
        w = 1 + 1 / MX_BLOCK
        return Casts((e + w) * mk + (ew + w) * kn, (e + w) * mk + (ew + w) * kn + 2 * (e + w) * mn, 2, 4)
    if recipe == "nvfp4":
        q = NVFP4_BYTES
        return Casts((2 * e + q) * mk + (2 * ew + q) * kn, (e + q) * mk + (3 * e + 2 * q) * mn, 4, 4)
    raise ValueError(recipe)


def gathered_in(c: Casts, kn: int, ew: int, shards: int, regathered: bool) -> Casts:
    """Tensorwise with the weight gathered in FP8 (tfcalc.count.training.fp8, step 4): the 16-bit weight's casts
    (forward: amax (read ew) and cast (read ew, write 1), 3 kernels; backward: cast again (read ew, write 1), 1
    kernel) give way to the shard's: its amax once (read ew, 1 kernel; precomputed once a step for every weight,
    charged here with each micro-batch's forward) and its cast before each gather (read ew, write 1, 1 kernel),
    and to the transposed copy the input gradient's GEMM takes of the gathered FP8 weight (read 1, write 1)."""
    shard = kn / shards
    forward = c.forward_bytes - (2 * ew + 1) * kn + (2 * ew + 1) * shard
    backward = c.backward_bytes - (ew + 1) * kn + 2 * kn + (ew + 1) * shard * regathered
    return Casts(forward, backward, c.forward_kernels - 3 + 2, c.backward_kernels - 1 + 1 + regathered)


ROWWISE_GEMM = 0.739 / 0.865  # per-row scaled FP8 GEMM time's share of per-tensor's (module docstring)


def gemm_share(recipe: str) -> float:
    """The share of the FP8 ceiling the recipe's FP8 GEMMs reach (ROWWISE_GEMM for the per-row recipes)."""
    return ROWWISE_GEMM if recipe in ("rowwise", "rowwise_with_gw_hp") else 1.0


def fp8_weight_grad(recipe: str) -> bool:
    """Whether the weight-gradient GEMM runs in FP8 (all but rowwise_with_gw_hp)."""
    return recipe != "rowwise_with_gw_hp"


def keeps_fp8_weights(recipe: str) -> bool:
    """Whether the recipe keeps each weight's FP8 casts and amax histories between forward and backward."""
    return recipe == "delayed"


def narrow(compute_dtype, fp8_recipe: str) -> tuple:
    """--compute-dtype mxfp8 or nvfp4 as what it means: FP8-path GEMMs (compute_dtype fp8) under that recipe."""
    return ("fp8", compute_dtype) if compute_dtype in NARROW else (compute_dtype, fp8_recipe)
