"""Held-out published figures for benchmarks/calibration.py: the same kinds as the calibration set, not in
it, never used to choose a parameter of the performance model. Reported beside it, not fitted.

- Dubey et al. 2024, "The Llama 3 Herd of Models", Table 4: Llama 3 405B on H100s, BF16 MFU 43 % on 8,192
  GPUs (TP 8, CP 1, PP 16, DP 64, seq 8,192, 32 sequences per DP rank, 16M tokens a batch) and 41 % on
  16,384 (DP 128, 16 per DP rank). Shapes: 126 layers, d_model 16,384, 128 heads, 8 KV heads, FFN 53,248,
  vocabulary 128,256 (sec. 3.2, Table 3). CP 1 (Table 4): no context parallelism at 8K. Meta ran an
  interleaved schedule with one layer taken from the first and the last stage (sec. 3.3.2, "Pipeline
  parallelism improvements"): 126 layers over 16 stages, which no V splits evenly -- tfcalc's interleaved
  schedule needs the blocks divisible by pp × V (Megatron-LM's rule), so the rows run 1F1B; and ZeRO-1
  for their FSDP-style sharding.
- Touvron et al. 2023, "Llama 2", Table 2: GPU-hours on A100-80GB for 2T tokens (7B 184,320; 13B 368,640;
  70B 1,720,320), as tokens per second per GPU. The layout is not published: tfcalc's own search over 1,024
  GPUs (seq 4,096, 4M tokens a step, Llama 2's) picks it.
"""

from __future__ import annotations

from typing import Callable

import tfcalc

LLAMA3_405B = dict(n_layer=126, d_model=16384, n_head=128, n_kv_head=8, d_ff=53248, vocab_size=128256,
                   max_seq_len=8192)


def llama3_mfu(dp: int, per_dp: int) -> Callable[[], float]:
    def run() -> float:
        r = tfcalc.plan("llama3-70b", tp=8, pp=16, dp=dp, global_batch=dp * per_dp, micro_batch=1, seq=8192,
                        zero=1, recompute="none", sequence_parallel=True, device_spec="h100-sxm", **LLAMA3_405B)
        return r.plan.step.mfu * 100
    return run


def llama2_rate(preset: str) -> Callable[[], float]:
    def run() -> float:
        r = tfcalc.plan(preset, gpus=1024, seq=4096, device_spec="a100-80gb")
        return r.tokens_per_s / r.plan.layout.gpus
    return run


def held_out_rows(gpt) -> list:
    from calibration import Row

    out = [Row("training throughput", f"Llama 3 405B, {g:,} H100, TP 8, PP 16, DP {dp}", "Dubey et al. 2024, Table 4",
               mfu, "% MFU", llama3_mfu(dp, per)) for g, dp, per, mfu in ((8192, 64, 32, 43), (16384, 128, 16, 41))]
    for preset, label, hours in (("llama2-7b", "7B", 184320), ("llama2-13b", "13B", 368640),
                                 ("llama2-70b", "70B", 1720320)):
        out.append(Row("training throughput", f"Llama 2 {label}, A100-80GB, tfcalc's layout of 1,024 GPUs",
                       "Touvron et al. 2023, Table 2 (GPU-hours for 2T tokens)", 2e12 / (hours * 3600), "tok/s/GPU",
                       llama2_rate(preset)))
    return out
