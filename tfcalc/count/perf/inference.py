"""The performance model on a serving step (tfcalc.count.serving.roofline's rows): each matmul's compute
efficiency from its shape, and the fixed costs around the matmuls. Pure arithmetic.

A roofline row takes max(FLOPs / (peak × efficiency), bytes / achievable bandwidth):

- efficiency of a weight matmul: its GEMM shape's (tfcalc.count.perf.gemm: m = batch × new tokens per
  sequence, n and k the weight's; a mixture's routed rows spread over its experts); attention's score
  products: the fused kernel's forward efficiency (FlashAttention's, tfcalc.count.perf.hardware);
- achievable bandwidth: the datasheet's × ``bandwidth_efficiency``.

Then, per step (``overhead``), added to the rows' sum:

1. kernels: every matmul and non-matmul kernel of every layer pays ``kernel_s`` (attention's Q·Kᵀ,
   softmax and ·V fused into one kernel; a mixer's work in as many kernels as it says, ``Elementwise.kernels``:
   Mamba-1's prompt scan, chunked, about 3·sqrt(T) a layer, tfcalc.architecture.mamba1.scan_kernels);
2. dequantization of int8/int4 weights (tfcalc.count.perf.elementwise, step 4): each quantized weight
   the step reads, once;
3. the non-matmul kernels' memory traffic (norms, activations, RoPE, residuals: read and written once); a
   decode step's in each mixer's decode form (tfcalc.count.model.non_matmul, ``step``: latent attention's
   absorbed step, with its latent norms, one rotary key head and the copies it makes, 7 kernels a layer
   more than the naive form's count);
   under FP8 weights the GEMMs' inputs are quantized inside the kernels that produce them (no pass of
   their own: tfcalc.count.perf.fp8_time, step 3); FP8 GEMMs run at the FP8 peak under the FP8 ceiling,
   attention and the LM head at the 16-bit peak (``Ceilings.high_flops_per_s``, tfcalc.count.serving.roofline);
3b. a mixture of experts' router top-k and its sort of the pairs by expert, as vLLM's fused MoE runs them
   (tfcalc.count.perf.moe_dispatch, step 5: the rows gathered inside the expert GEMMs, the weighted sum step 3's),
   every TP rank routing all the step's tokens (``Overhead.moe_s``; its 2 kernels a layer in step 1's count);
3c. under expert parallelism (``infer --ep``), the rows one GPU's experts receive copied into expert order before
   the grouped GEMM (tfcalc.count.perf.moe_serving, step 1: ``Overhead.moe_permute_s``, its kernels in step 1's
   count); the routed experts' GEMMs at the grouped GEMM's efficiency by tokens per expert (moe_serving, step 2);
4. the prefill only: the runtime's fixed work per request (``request_s``, tfcalc.count.perf.hardware),
   once per request, in the time to first token;
5. under tensor parallelism (``infer --tp``): the step's all-reduces (tfcalc.count.serving.serving_tp);
6. the host, when the step runs eager (``PerfSpec.launch`` "eager"): every kernel of step 1 issued from
   Python, ``host_s`` = kernels × ``PerfSpec.host_op_s`` (31 µs, fitted on the H100: hardware's docstring).
   A kernel launch is asynchronous: it returns to the host before the kernel has run, queued on its stream
   (CUDA C++ Programming Guide, "Asynchronous Concurrent Execution": kernel launches are among the operations
   that return control to the host thread before the device completes them; PyTorch, "CUDA semantics",
   "Asynchronous execution"). tfcalc's step never reads a value back (tfcalc.model.generate: no sync in a
   step), so the host issues step i+1 while the GPU runs step i, and the slower of the two sets the pace:
   step time = max(device time, host time), not their sum (``Overhead.step_s``). The measurement agrees: on
   the H100 the eager 7B step took 14.0-17.4 ms, no more than the host's issue time alone, not 6.6 ms of
   kernels + the host's. The runtime's per-request work (step 4) synchronizes (the prompt's upload, the first
   token's download): it is added after, not overlapped. Under "graph" (a captured step: CUDA graphs,
   torch.compile mode="reduce-overhead") one launch replaces the step's hundreds and no host term is charged.

Worked example (tests/count/perf/test_inference.py): Llama 2 7B decode, batch 1: per layer 8 matmul
kernels (Q, K, V, the fused attention, O, gate, up, down) and 6 non-matmul ones (2 RMSNorms, 2 residual
adds, SiLU·gate, RoPE), 32 × 14 = 448, plus the LM head and the final norm: 450 kernels, 1.8 ms at 4 µs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from tfcalc.config import ModelConfig
from tfcalc.count.model.flops import matmul_entries
from tfcalc.count.model.non_matmul import non_matmul_entries
from tfcalc.count.model.quant import WeightFormat
from tfcalc.count.perf import elementwise, gemm, moe_dispatch, moe_serving
from tfcalc.count.perf.hardware import PerfSpec


def runs_fp8(component: str, mixing: bool = False) -> bool:
    """Under FP8 weights (``infer --dtype fp8``), whether a row's matmul is an FP8 GEMM: the quantized block
    matrices (tfcalc.count.model.quant), not attention's score products, the router or the LM head (16-bit:
    tfcalc.count.perf.fp8_time, step 3); ``mixing``: a position-mixing matmul (MatmulEntry.mixing)."""
    return not mixing and component not in ("lm_head", "other") \
        and not component.endswith("router")


def row_efficiency(component: str, shape: tuple[int, int, int], count: int, perf: PerfSpec,
                   fp8: bool = False, mixing: bool = False) -> float:
    """The fraction of the peak one roofline row's matmul reaches (see the module docstring); a mixture's
    rows come as one GEMM per expert (tfcalc.count.serving.roofline); ``fp8``: an FP8 GEMM, under the FP8 ceiling."""
    if perf.matmul_efficiency is not None:
        return perf.matmul_efficiency
    if mixing:  # a position-mixing matmul: its fused kernel's (MatmulEntry.mixing)
        return perf.flash_efficiency[0]
    m, k, n = shape
    ceiling = perf.fp8_ceiling if fp8 else perf.matmul_ceiling
    if moe_serving.is_routed(component) and count > 1:  # each expert's rows in its own tiles (moe_serving, step 2)
        return moe_serving.efficiency(shape, count, perf.sm_count, ceiling)
    return gemm.efficiency(m, n, k, perf.sm_count, ceiling, count)


@dataclass(frozen=True)
class Overhead:
    """Seconds a step spends beside its matmuls' roofline (see the module docstring)."""

    kernels: int
    kernel_s: float
    dequant_s: float
    traffic_s: float
    comm_s: float = 0.0  # tensor-parallel serving: the step's all-reduces (tfcalc.count.serving.serving_tp)
    request_s: float = 0.0  # the prefill only: the runtime's fixed work per request (PerfSpec.request_s)
    host_s: float = 0.0  # eager steps only: the host issuing the step's kernels (step 6), overlapped, not added
    launch: str = "graph"  # the launch mode priced (PerfSpec.launch)
    moe_s: float = 0.0  # a mixture's top-k, index work and permutes' traffic (step 3b; its kernels in kernel_s)
    moe_permute_s: float = 0.0  # expert parallelism: the received rows copied into expert order (step 3c)

    @property
    def total_s(self) -> float:
        """The device's seconds beside the rows (steps 1-5); the host's are ``step_s``'s."""
        return self.kernel_s + self.dequant_s + self.traffic_s + self.comm_s + self.request_s + self.moe_s \
            + self.moe_permute_s

    def step_s(self, rows_s: float) -> float:
        """The step's time from its rows' roofline: max(device, host) + the request's fixed work (step 6)."""
        return max(rows_s + self.total_s - self.request_s, self.host_s) + self.request_s


def step_seconds(rows_s: float, over: "Overhead | None") -> float:
    """A step's time: its rows alone without a performance model, else ``Overhead.step_s``."""
    return rows_s if over is None else over.step_s(rows_s)


def kernel_count(cfg: ModelConfig, batch: int, queries: int, keys: int) -> int:
    """Step 1's kernels of one forward over ``queries`` new tokens per sequence."""
    n = 0
    for e in matmul_entries(cfg, batch, queries, keys, encoder=queries > 1, absorbed=queries == 1):
        if not e.component.endswith("_av"):  # Q·Kᵀ, softmax and ·V: one fused kernel
            n += e.copies
    for e in non_matmul_entries(cfg, batch, queries, step=queries == 1):  # a decode step's own form, as above
        if not elementwise.is_score_level(e):
            n += e.copies * e.kernels  # a mixer's work in several kernels (Mamba-1's chunked scan)
    return n


def overhead(cfg: ModelConfig, batch: int, queries: int, keys: int, quantized_weights: int, dtype: str,
             act_bytes: int, bandwidth: float, fp32_flops: float, perf: PerfSpec, tp: int = 1,
             permute: Optional[moe_dispatch.Dispatch] = None) -> Overhead:
    """Steps 1-3 for one step on one GPU of ``tp``; ``quantized_weights`` the int8/int4 weights it reads,
    ``bandwidth`` the achievable bytes/s; ``permute``: step 3c's copy under expert parallelism."""
    moe = moe_forward(cfg, batch * queries, act_bytes)
    permute = permute or moe_dispatch.Dispatch(0.0, 0.0, 0, 0)
    kernels = kernel_count(cfg, batch, queries, keys) + moe.forward_kernels + permute.forward_kernels
    traffic = elementwise.forward_traffic(non_matmul_entries(cfg, batch, queries, step=queries == 1), act_bytes, tp)
    dequant = elementwise.dequant_seconds(quantized_weights, dtype, perf.dequant_ops_per_weight, fp32_flops)
    host = kernels * perf.host_op_s if perf.launch == "eager" else 0.0
    return Overhead(kernels, kernels * perf.kernel_s, dequant, traffic / bandwidth, host_s=host, launch=perf.launch,
                    moe_s=moe.forward_bytes / bandwidth, moe_permute_s=permute.forward_bytes / bandwidth)


def moe_forward(cfg: ModelConfig, tokens: int, act_bytes: int) -> moe_dispatch.Dispatch:
    """Step 3b: every MoE layer's dispatch for a forward over ``tokens`` tokens (of the decoder: an encoder's
    are the decoder's alike)."""
    out = moe_dispatch.Dispatch(0.0, 0.0, 0, 0)
    for _, block, layers in cfg.architecture.kinds():
        if block.is_moe:
            out = out + moe_dispatch.layer(block.ffn, tokens, act_bytes, "serving").scaled(layers)
    return out


def quantized_weights(step, fmt: WeightFormat) -> int:
    """The int8/int4 weights a step reads (tfcalc.count.serving.roofline's rows of the block matrices: their bytes
    over the format's bits per weight, scales and zero points included); 0 for plain formats."""
    if fmt.dtype not in ("int8", "int4"):
        return 0
    bits = {"int8": 8, "int4": 4}[fmt.dtype]
    per_weight = bits + ((16 + (bits if fmt.zero_point else 0)) / fmt.group_size if fmt.group_size else 0)
    read = sum(r.weight_bytes for r in step.rows if r.component not in ("lm_head", "other") and r.flops)
    return round(read * 8 / per_weight)
