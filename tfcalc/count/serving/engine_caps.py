"""An engine's caps per rank on continuous batching: the most sequences in flight (``max_batch_size``) and, beside it,
the most tokens a step carries (``max_num_tokens``, tfcalc's ``--prefill-chunk``), as TensorRT-LLM's ``trtllm-bench
throughput`` picks them when the command names neither. Pure arithmetic.

The source (NVIDIA/TensorRT-LLM, the v1.0-era files; the same arithmetic in every stored version of 2025):
- tensorrt_llm/bench/benchmark/utils/general.py, ``get_settings``: without --max_batch_size and --max_num_tokens the
  PyTorch backend's settings come from ``get_benchmark_engine_settings(model_config, quant_config, tp, pp, avg_isl,
  avg_osl, kv_cache_free_gpu_mem_fraction)`` -- TP and PP only: neither --ep nor attention DP enters; without
  chunked prefill (its default, ``enable_chunked_prefill`` false) max_num_tokens is raised to at least
  max_isl + max_batch_size.
- tensorrt_llm/bench/build/tuning.py, ``calc_engine_setting`` and ``finetune_setting``:
  1. KV bytes per token over the TP group: 2 · layers · max(TP, KV heads) · head size · KV element bytes (1 for an
     FP8 cache, else 2), in GiB (1024³).
  2. memory for the cache: (the GPU's total per NVML, GiB, × TP·PP) − parameters × weight element bytes (1 for FP8
     or FP8 block scales, 0.5 NVFP4, else 2), × the fraction (the throughput command's
     --kv_cache_free_gpu_mem_fraction, default 0.90; perf-overview.md: "in many cases" 0.95).
  3. requests the cache holds: that memory ÷ (bytes per token × (ISL + OSL)) -- each request at its whole length.
  4. raw batch = min(requests, 4096) / PP ("to avoid decoder buffer size becoming too large"); raw tokens =
     min(raw batch × (1 + ISL/OSL), 32768).
  5. rounded up ("slightly optimistic"): batch below 256 to a multiple of 32 (at least 64), below 1,024 to 128, else
     256; tokens below 4,096 to a multiple of 256 (at least 2,048), below 8,192 to 512, else 1,024.
- tensorrt_llm/bench/build/build.py, ``get_benchmark_engine_settings``: only FP8, FP8 block scales, NVFP4 and
  unquantized checkpoints are tuned (TUNED_QUANTS); any other quantization (int8, int4 here) takes BuildConfig's
  defaults, max_batch_size 2,048 and max_num_tokens 8,192.
- tensorrt_llm/_torch/pyexecutor/py_executor.py, ``_fetch_new_requests``: under attention DP the requests in flight
  are capped at tp_size × max_num_active_requests in all, max_batch_size a rank -- the cap is each attention-DP
  group's (of one GPU each under TensorRT-LLM's attention DP).

Worked (tests/count/test_engine_caps.py): Llama 3.1 8B FP8 (8,030,261,248 parameters, 32 layers, 8 KV heads of 128),
one H100 (79.65 GiB), ISL = OSL = 1,000, fraction 0.90: 65,536 B a token; (79.65 − 7.479) · 0.9 = 64.95 GiB holds
1,064,150 tokens, 532.1 requests of 2,000; batch 532.1 → 640; tokens 1,064.2 → 2,048 (and 1,000 + 640 below it).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tfcalc.count.serving.static import BATCH_LIMIT  # the batch searches' end: a cap past it never binds
from tfcalc.errors import InputError

GIB = 1024 ** 3
BATCH_CAP = 4096  # tuning.py, finetune_setting: "Cap total batch size to avoid decoder buffer size becoming too large"
TOKEN_CAP = 32768  # tuning.py: "Cap num tokens to avoid TRT activation buffer becoming too large"
KV_FRACTION = 0.90  # trtllm-bench throughput --kv_cache_free_gpu_mem_fraction, default .90
ELEMENT_BYTES = {"fp8": 1.0, "nvfp4": 0.5}  # tuning.py BYTES_PER_ELEM; anything else 2
UNTUNED = ("int8", "int4")  # build.py: not in TUNED_QUANTS, BuildConfig's defaults instead
BUILD_DEFAULTS = (2048, 8192)  # BuildConfig.max_batch_size, BuildConfig.max_num_tokens


@dataclass(frozen=True)
class EngineCaps:
    max_batch_size: int  # sequences in flight a rank (an attention-DP group under attention DP)
    max_num_tokens: int  # tokens a step carries (whole prompts: at least max ISL + max_batch_size)
    kv_requests: float  # step 3's requests of ISL + OSL tokens the heuristic's cache holds
    source: str = "trtllm-bench throughput's heuristic (tensorrt_llm/bench/build/tuning.py)"


def finetune(requests: float, isl: int, osl: int, pp: int = 1) -> tuple[int, int]:
    """Steps 4-5 of the module docstring: (max_batch_size, max_num_tokens) from the requests the cache holds."""
    raw_bs = min(requests, BATCH_CAP) / pp
    raw_tokens = min(raw_bs * (1 + isl / osl), TOKEN_CAP)
    return rounded(raw_bs, (256, 1024), (32, 128, 256), 64), rounded(raw_tokens, (4096, 8192), (256, 512, 1024), 2048)


def rounded(raw: float, bands: tuple[int, int], steps: tuple[int, int, int], floor: int) -> int:
    """Step 5: ``raw`` rounded up to ``steps[0]`` below ``bands[0]``, ``steps[1]`` below ``bands[1]``, else
    ``steps[2]``; at least ``floor`` (tuning.py applies it in the first band only; past it every value exceeds it)."""
    step = steps[0] if raw < bands[0] else steps[1] if raw < bands[1] else steps[2]
    return max(floor, step * math.ceil(raw / step))


def trtllm_bench(params: int, layers: int, kv_heads: int, head_size: int, tp: int, pp: int, isl: int, osl: int,
                 gpu_bytes: int, weight_dtype: str, kv_dtype: str, fraction: float = KV_FRACTION,
                 chunked: bool = False) -> EngineCaps:
    """Steps 1-5 of the module docstring and get_settings' floor for whole prompts (``chunked`` false: the
    throughput command's default). ``gpu_bytes``: one GPU's total memory as NVML reports it."""
    if not (0 < fraction <= 1):
        raise InputError(f"the KV cache's share of free memory must be in (0, 1]; got {fraction}")
    per_token = 2 * layers * max(tp, kv_heads) * head_size * ELEMENT_BYTES.get(kv_dtype, 2.0) / GIB
    free = gpu_bytes / GIB * tp * pp - params * ELEMENT_BYTES.get(weight_dtype, 2.0) / GIB
    requests = free * fraction / (per_token * (isl + osl))
    if requests < 1:
        raise InputError(f"trtllm-bench's heuristic: the weights leave room for {requests:.2f} requests of "
                         f"{isl + osl:,} tokens; TensorRT-LLM refuses this mapping ('Please try with more GPUs')")
    bs, tokens = BUILD_DEFAULTS if weight_dtype in UNTUNED else finetune(requests, isl, osl, pp)
    if not chunked:
        tokens = max(tokens, isl + bs)
    return EngineCaps(bs, tokens, requests)


def check_max_batch(n) -> None:
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= BATCH_LIMIT:
        raise InputError(f"--max-batch must be a whole number of sequences from 1 to {BATCH_LIMIT:,}, or "
                         f"trtllm-bench; got {str(n)[:40]!r}")
