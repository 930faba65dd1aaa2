"""A mixture of experts' serving-step costs beyond the router's top-k and counting sort (tfcalc.count.perf.
moe_dispatch, step 5, charged by tfcalc.count.perf.inference, step 3b): the explicit permute of the expert-parallel
stacks, and the grouped GEMM's tiles by each expert's own row count. Pure arithmetic.

1. Permute (``infer --ep``). Every published expert-parallel stack copies the rows it received (or gathered) into
   one buffer sorted by local expert before the grouped GEMM: TensorRT-LLM's CUTLASS MoE (cpp/tensorrt_llm/kernels/
   cutlass_kernels/moe_gemm/moe_kernels.cu: fusedBuildExpertMapsSortFirstToken sorts the pairs by expert,
   expandInputRowsKernel copies each token's row once per local expert it chose, quantizing it to FP8 as it copies
   under FP8 GEMMs); SGLang's DeepEP path (python/sglang/srt/layers/moe/ep_moe/kernels.py, ep_scatter: the received
   rows into DeepGEMM's contiguous per-expert layout); vLLM under DeepEP high-throughput with DeepGEMM
   (fused_moe/deep_gemm_moe.py, deepgemm_moe_permute). One GPU's P pairs of width d: each row read once in the
   activation dtype (a bytes) and written once in the GEMM's input dtype (1 byte under FP8 weights: the copy is the
   quantization, tfcalc.count.perf.fp8_time step 3's fused cast; a otherwise): P·d·(a + a_in) bytes, PERMUTE_KERNELS
   (the sort and the copy) a layer. The unpermute (TensorRT-LLM's finalizeMoeRoutingKernel, SGLang's ep_gather,
   vLLM's moe_unpermute_and_reduce: the P rows read, weighted and summed into the tokens' rows) is
   tfcalc.count.model.non_matmul's "weight and add the expert outputs" (2·P·d·a, already in the step's traffic and
   its kernel in the step's count). Without EP the default serving kernel is vLLM's fused MoE
   (vllm/model_executor/layers/fused_moe/fused_moe.py, fused_moe_kernel): the GEMM loads each expert's rows through
   sorted_token_ids (moe_align_block_size), no copy of its own -- nothing charged. Nor in a decode step across
   nodes (tfcalc.count.serving.ep_all_to_all's "low_latency" route): DeepEP's low-latency dispatch writes each
   received row straight into its expert's slot of the (local experts, max tokens, d) buffer DeepGEMM's masked
   grouped GEMM reads (deep_ep/buffer.py, low_latency_dispatch; SGLang's DeepEP low-latency path,
   m_grouped_gemm_fp8_fp8_bf16_nt_masked), and its combine reads that layout back with the weights.
2. Grouped GEMM by tokens per expert (every layout): a routed-expert row's efficiency is
   tfcalc.count.perf.grouped_gemm's, each expert's binomial row count cut into its own tiles (vLLM's
   moe_align_block_size pads every expert's rows to BLOCK_SIZE_M, num_tokens_post_padded ≤ P + E·(BLOCK_SIZE_M − 1);
   DeepGEMM's contiguous layout aligns each expert's rows to get_m_alignment_for_contiguous_layout() = 128; CUTLASS's
   grouped kernel tiles each problem alone), not tfcalc.count.perf.gemm's at the mean rows per expert. The rows are
   the row's m × its expert count (m the mean rounded up: at a few tokens per expert the row is memory-bound and its
   efficiency does not set its time).
3. Router and top-k: moe_dispatch step 5 (one top-k/softmax kernel reading the (N, E) logits, one counting sort),
   on the tokens of the GPU's step (under EP its attention group's), unchanged.

Worked example (tests/count/test_moe_serving.py): Qwen3-235B-A22B (94 MoE layers, d 4,096, k 8, 128 experts) at
EP 8 with attention DP 8, FP8 weights, every group decoding 700 sequences: one GPU's 16 experts receive
8·700·8·16/128 = 5,600 pairs a layer on average (the fullest GPU f times that: tfcalc.count.serving.expert_parallel,
step 7); the permute moves 5,600·4,096·(2 + 1) = 68,812,800 bytes a layer, 6.47 GB a step, 1.59 ms at an H200's
4.8 TB/s × 0.85, and 188 kernels (0.75 ms at 4 µs): about 3 % of that step (≈ 83 ms). At 352 rows per expert the
grouped GEMM's uneven tiles cost under 0.1 %; at 128 rows per expert and 128-row tiles, 1.5 tiles run for 1.
"""

from __future__ import annotations

from tfcalc.count.perf import grouped_gemm, moe_dispatch

PERMUTE_KERNELS = 2  # step 1: the sort of the pairs by expert and the copy (a module constant the API may override)
ROUTED = "expert_ffn"  # the routed experts' matmul rows (roofline: expert_ffn_gate, _up, _down)


def permute(pairs: float, d: int, act_bytes: int, gemm_input_bytes: int, layers: int) -> moe_dispatch.Dispatch:
    """Step 1 for ``layers`` MoE layers of ``pairs`` pairs each on one GPU, forward only."""
    return moe_dispatch.Dispatch(layers * pairs * d * (act_bytes + gemm_input_bytes), 0.0, layers * PERMUTE_KERNELS, 0)


def is_routed(component: str) -> bool:
    return component.startswith(ROUTED)


def efficiency(shape: tuple[int, int, int], count: int, sms: int, ceiling: float) -> float:
    """Step 2: a routed-expert row of ``count`` experts, (m, k, n) each, m the mean rows per expert."""
    m, k, n = shape
    return grouped_gemm.efficiency(m * count, count, n, k, sms, ceiling)


def step_permute(rows, d: int, layers: int, act_bytes: int, gemm_input_bytes: int) -> moe_dispatch.Dispatch:
    """Step 1 for one GPU's step: its pairs over every MoE layer from its first routed-expert roofline row (FLOPs
    2·k·n per pair and layer, after EP's share and the imbalance's factor: tfcalc.count.serving.expert_parallel)."""
    row = next((r for r in rows if is_routed(r.component) and r.flops), None)
    if row is None or not layers:
        return moe_dispatch.Dispatch(0.0, 0.0, 0, 0)
    _, k, n = row.shape
    return permute(row.flops / (2 * k * n) / layers, d, act_bytes, gemm_input_bytes, layers)
