"""Held-out published figures of context parallelism for benchmarks/calibration.py (beside calibration_held_out.py),
not fitted: torchtitan, benchmarks/llama3_h100_202412_torchtitan.md (pytorch/torchtitan, end of 2024; torch
1963fc8, torchtitan 9dec370), on the page's Grand Teton H100s (96GB HBM2e, 500 W:
benchmarks/devices/grand-teton-h100-500w.yaml), TPS per GPU.

- Table 2: Llama 3.1 8B, FSDP × CP on 8 GPUs at 32K-256K tokens, torch.compile + Float8 (tensorwise), full AC,
  local batch 1 (added with ring attention's merges, issue 31; the RoPE table stretched to the length,
  ``max_seq_len``). Attention at FlashAttention-2's published H100 rates, the ring's later steps unmasked
  (calibration_held_out.py's docstring). The ring as torchtitan ran it (tfcalc.count.training.context_parallel,
  step 7: K/V repeated to the 32 query heads, dK/dV passed in fp32, the transfers exposed where torch.compile
  traces the ring, its merges fused): the 64K, 128K and 256K rows 1.11, 1.49, 1.56 → 1.08, 1.45, 1.51. What
  remains at CP 4 and 8 is not the ring's as its code runs it: every rank of every row holds 32K positions and
  runs C kernels of 32K × 16K (or 16K × 32K) positions a layer (load-balanced, measured on gloo ranks), yet the
  page's steps leave 5.3 and 4.9 s of attention per 32K-causal unit of work at CP 1 and 2 and 6.9 and 7.1 s at
  CP 4 and 8 (the rest taken at tfcalc's × 1.19, the CP 1 row's ratio): no cost linear in the ring's steps does
  both.
- Table 6: Llama 3.1 405B, 4D: FSDP × CP × TP 8 × PP 8 on 512 GPUs at 32K-256K tokens (FSDP × CP = 8), torch.compile
  + Float8 + AsyncTP + 1F1B, local batch 8 (8 micro-batches of one sequence), full AC. The setup of the page's
  memory rows (calibration_held_out_memory.py, TT_405B: sequence parallel, no resharding after forward under PP,
  the embedding and head counted as a block each) with --kernels compile (each block compiled, so torchtitan's
  ring, step 7) and AsyncTP as --overlap tp (PyTorch's async TP: tfcalc.count.perf.pipeline). The CP group spans
  nodes (TP 8 fills one: tfcalc's rank order tp, cp, dp, pp, torchtitan's mesh ["pp", "dp", "cp", "tp"]), so
  the exposed ring crosses the 400 Gb/s network: the CP 2, 4 and 8 rows were 1.40, 1.38 and 1.57 with the ring
  hidden behind attention and its K/V at the KV heads, 1.20, 1.11 and 1.20 with step 7 -- figures the term was
  not built on (added after it, issue 31).
"""

from __future__ import annotations

from typing import Callable

from calibration_row import GRAND_TETON, LLAMA3_405B, Row

import tfcalc

PAGE = "torchtitan benchmarks/llama3_h100_202412_torchtitan.md"
# Table 6's setup (the memory rows' TT_405B, calibration_held_out_memory.py, compiled and with AsyncTP: docstring)
TT_4D = dict(zero=3, grad_dtype="fp32", device_spec=GRAND_TETON, compute_dtype="fp8", fp8_recipe="tensorwise",
             kernels="compile", overlap=("tp",), tp=8, pp=8, recompute="full", sequence_parallel=True,
             reshard_after_forward=False, pp_split_counts=("embedding", "head"), **LLAMA3_405B)
# Table 2: (FSDP, CP, sequence, TPS/GPU)
TORCHTITAN_CP = [(8, 1, 32768, 3890), (4, 2, 65536, 2540), (2, 4, 131072, 1071), (1, 8, 262144, 548)]
# Table 6: (FSDP, CP, sequence, TPS/GPU)
TORCHTITAN_CP_405B = [(8, 1, 32768, 76), (4, 2, 65536, 47), (2, 4, 131072, 31), (1, 8, 262144, 16)]


def torchtitan_cp_rate(dp: int, cp: int, seq: int) -> Callable[[], float]:
    def run() -> float:
        r = tfcalc.plan("llama3-8b", dp=dp, cp=cp, zero=3, global_batch=dp, micro_batch=1, seq=seq, recompute="full",
                        grad_dtype="fp32", device_spec=GRAND_TETON, kernels="compile", compute_dtype="fp8",
                        fp8_recipe="tensorwise", max_seq_len=seq)
        return r.tokens_per_s / r.plan.layout.gpus
    return run


def torchtitan_4d_rate(dp: int, cp: int, seq: int) -> Callable[[], float]:
    def run() -> float:
        r = tfcalc.plan("llama3-70b", dp=dp, cp=cp, global_batch=8 * dp, micro_batch=1, **{**TT_4D, "seq": seq,
                                                                                             "max_seq_len": seq})
        return r.tokens_per_s / r.plan.layout.gpus
    return run


def context_parallel_rows() -> list[Row]:
    out = [Row("training throughput", f"Llama 3.1 8B, FSDP {dp} × CP {cp}, {seq // 1024}K tokens, compile + Float8, "
               "8 H100 (500 W)", PAGE + ", Table 2", tps, "tok/s/GPU", torchtitan_cp_rate(dp, cp, seq))
           for dp, cp, seq, tps in TORCHTITAN_CP]
    out += [Row("training throughput", f"Llama 3.1 405B, FSDP {dp} × CP {cp} × TP 8 × PP 8 1F1B, {seq // 1024}K "
                "tokens, compile + Float8 + AsyncTP, 512 H100 (500 W)", PAGE + ", Table 6", tps, "tok/s/GPU",
                torchtitan_4d_rate(dp, cp, seq))
            for dp, cp, seq, tps in TORCHTITAN_CP_405B]
    return out
