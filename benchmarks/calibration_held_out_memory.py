"""Held-out published figures of peak memory per GPU in training (the "memory" group), beside
benchmarks/calibration_held_out.py's: each at the setup its source states, reported, never fitted (added with the
memory of pipelines, FSDP and DeepSpeed's optimizer, issue 31).

- torchtitan, benchmarks/llama3_h100_202412_torchtitan.md (pytorch/torchtitan, end of 2024; the same figures as
  the torchtitan paper, arXiv 2410.06511), Tables 1-6: Llama 3.1 8B, 70B and 405B under FSDP, FSDP × CP, FSDP × TP,
  FSDP × TP × PP and 4D. "Memory(GiB)" is what torchtitan logs, torch.cuda.memory_stats' reserved peak
  (metrics.DeviceMemoryMonitor: max_reserved_gib), the maximum over the ranks.
- torchao, torchao/float8/README.md (torchao 0.10), e2e training benchmarks on 8 H100: Llama3-8b, batch 1, bf16
  and Float8 tensorwise (float8 all-gather) and rowwise; "Peak Memory (GB)" read from the same torchtitan logs (GiB).
- BigScience, "BigScience 176B Model" page (bigscience.notion.site): BLOOM on 384 A100 80GB, "one copy of the model
  takes 48 GPUs (using 60 GB of memory on each GPU)", an nvidia-smi figure (the CUDA context and NCCL's buffers
  included). Layout as the BLOOM paper states it: TP 4, PP 12, DP 8, ZeRO-1, bf16, micro-batch 2, sequence 2,048.
- transformers docs, model_memory_anatomy.md: bert-large-uncased (AutoModelForSequenceClassification) trained by
  Trainer on a V100-SXM2 16GB in fp32, 14,949 MiB at batch 4 and 8,681 MiB at batch 1 (4 steps accumulated), read
  with pynvml (nvidia-smi's "used"); the page measures the CUDA context and kernels alone at 1,343 MiB.

tfcalc's total is what its tensors need (allocated); the caching allocator's cache and fragmentation (torchtitan's
reserved figure) are part of each ratio's miss.
"""

from __future__ import annotations

from typing import Callable

from calibration_held_out import GRAND_TETON, LLAMA3_405B
from calibration_row import Row

import tfcalc
from tfcalc import devices

# ---------- memory: peak bytes a GPU holds in training, as published (issue 31; reported, not fitted) ----------
# torchtitan's "Memory(GiB)" is torch.cuda.memory_stats' "reserved_bytes.all.peak" (the caching allocator's
# reserved peak, allocations and the blocks it keeps cached: torchtitan metrics.DeviceMemoryMonitor, logged as
# max_reserved_gib), the maximum over the ranks; tfcalc's total is what its tensors need (allocated), so the
# allocator's cache and fragmentation are part of each ratio's miss. nvidia-smi's figures (BLOOM, bert-large)
# also count the CUDA context and NCCL's buffers: tfcalc's own constants for those (tfcalc.devices) are added.
# torchtitan's pipeline runs (Tables 5 and 6) take its defaults of Dec. 2024: micro-batches = stages
# (pipelining_utils.build_pipeline_schedule: n_microbatches None -> pp × stages a rank, so 1F1B's 32 sequences
# go as 8 micro-batches of 4, Interleaved 1F1B's as 16 of 2), two stages a rank for the interleaved schedule
# and the layers split with one fewer on the first and last stage (generate_split_points: --pp-split-counts
# embedding,head), no resharding after forward under PP (apply_fsdp), full AC, TP with sequence parallelism.
# BLOOM (Megatron-DeepSpeed, bf16): DeepSpeed's BF16_Optimizer with its fp32 gradient accumulation, ZeRO-1 as the
# BLOOM paper states it (--zero-engine deepspeed --grad-dtype fp32), full recompute, micro-batch 2 (tr11-176B-ml).
GiB = 2**30


def plan_gib(preset: str, plus: int = 0, **kw) -> Callable[[], float]:
    def run() -> float:
        return (tfcalc.plan(preset, **kw).to_json()["per_rank"]["total_bytes"] + plus) / GiB
    return run


TT_FSDP = dict(zero=3, seq=8192, grad_dtype="fp32", device_spec=GRAND_TETON)
TT_FP8 = dict(compute_dtype="fp8", fp8_recipe="tensorwise", kernels="fused")
TT_405B = dict(TT_FSDP, **TT_FP8, tp=8, pp=8, recompute="full", sequence_parallel=True, reshard_after_forward=False,
               pp_split_counts=("embedding", "head"), **LLAMA3_405B)
# Tables 1 and 3, Llama 3.1 8B, local batch 2, selective op AC: (GPUs, technique, tfcalc's options, GiB)
TT_MEMORY_8B = [(8, "FSDP", {}, 82.4), (8, "FSDP + torch.compile", dict(kernels="fused"), 77.0),
                (8, "FSDP + torch.compile + Float8", TT_FP8, 76.8), (128, "FSDP", {}, 67.0),
                (128, "FSDP + torch.compile", dict(kernels="fused"), 62.0),
                (128, "FSDP + torch.compile + Float8", TT_FP8, 61.8)]
# Table 2 (8B, FSDP × CP) and Table 6 (405B, FSDP × CP × TP 8 × PP 8, 1F1B, local batch 8): (FSDP, CP, seq, GiB)
TT_MEMORY_CP_8B = [(8, 1, 32768, 83.9), (4, 2, 65536, 84.2), (2, 4, 131072, 84.0), (1, 8, 262144, 84.5)]
TT_MEMORY_CP_405B = [(8, 1, 32768, 75.3), (4, 2, 65536, 75.9), (2, 4, 131072, 77.1), (1, 8, 262144, 84.9)]
BLOOM = dict(n_layer=70, d_model=14336, n_head=112, d_head=128, vocab_size=250880, max_seq_len=2048,
             pos_encoding="alibi", embedding_norm=True, activation="gelu_tanh", tie_embeddings=True)


def memory_rows() -> list[Row]:
    tt = "torchtitan benchmarks/llama3_h100_202412_torchtitan.md"
    out = [Row("memory", f"Llama 3.1 8B, {technique}, {gpus} H100, local batch 2, selective op AC", tt +
               f", Table {1 if gpus == 8 else 3} (reserved peak)", gib, "GiB",
               plan_gib("llama3-8b", dp=gpus, global_batch=2 * gpus, micro_batch=2, recompute="op", **TT_FSDP, **over))
           for gpus, technique, over, gib in TT_MEMORY_8B]
    for recipe, label, gib in (("", "bf16", 47.65), ("tensorwise", "Float8 tensorwise, float8 all-gather", 47.77),
                               ("rowwise", "Float8 rowwise, bf16 all-gather", 47.79)):
        fp8 = dict(compute_dtype="fp8", fp8_recipe=recipe) if recipe else {}
        out.append(Row("memory", f"Llama3-8b, torch.compile, {label}, FSDP 8 H100, batch 1, per-op SAC",
                       "torchao torchao/float8/README.md, e2e training benchmarks (H100, peak memory)", gib, "GiB",
                       plan_gib("llama3-8b", dp=8, global_batch=8, micro_batch=1, recompute="op", kernels="fused",
                                **TT_FSDP, **fp8)))
    for dp, cp, seq, gib in TT_MEMORY_CP_8B:
        out.append(Row("memory", f"Llama 3.1 8B, FSDP {dp} × CP {cp}, {seq // 1024}K tokens, compile + Float8, full AC",
                       tt + ", Table 2 (reserved peak)", gib, "GiB",
                       plan_gib("llama3-8b", dp=dp, cp=cp, global_batch=dp, micro_batch=1, recompute="full",
                                max_seq_len=seq, **{**TT_FSDP, "seq": seq}, **TT_FP8)))
    for label, gib in (("2D", 71.9), ("2D + AsyncTP (not modelled)", 67.6)):
        out.append(Row("memory", f"Llama 3.1 70B, FSDP 32 × TP 8, {label}, compile + Float8, local batch 16, full AC",
                       tt + ", Table 4 (reserved peak)", gib, "GiB",
                       plan_gib("llama3-70b", dp=32, tp=8, global_batch=512, micro_batch=16, recompute="full",
                                sequence_parallel=True, **TT_FSDP, **TT_FP8)))
    for label, micro, sched, gib in (("1F1B", 4, dict(schedule="1f1b"), 82.5),
                                     ("Interleaved 1F1B", 2, dict(schedule="interleaved", virtual_stages=2), 72.7)):
        out.append(Row("memory", f"Llama 3.1 405B, FSDP 8 × TP 8 × PP 8 {label}, 8K tokens, local batch 32 in micro-"
                       f"batches of {micro}", tt + ", Table 5 (reserved peak)", gib, "GiB",
                       plan_gib("llama3-70b", dp=8, global_batch=256, micro_batch=micro, **TT_405B, **sched)))
    for dp, cp, seq, gib in TT_MEMORY_CP_405B:
        out.append(Row("memory", f"Llama 3.1 405B, FSDP {dp} × CP {cp} × TP 8 × PP 8 1F1B, {seq // 1024}K tokens",
                       tt + ", Table 6 (reserved peak)", gib, "GiB",
                       plan_gib("llama3-70b", dp=dp, cp=cp, global_batch=8 * dp, micro_batch=1,
                                **{**TT_405B, "seq": seq, "max_seq_len": seq})))
    context = devices.CUDA_CONTEXT_BYTES
    out.append(Row("memory", "BLOOM 176B, TP 4 × PP 12 × DP 8, ZeRO-1, bf16, micro-batch 2, full recompute, nvidia-smi",
                   "BigScience 176B model page (Notion): 'using 60 GB of memory on each GPU'", 60 * 1e9 / GiB, "GiB",
                   plan_gib("gpt3", context + devices.COMM_BUFFER_BYTES, tp=4, pp=12, dp=8, zero=1, global_batch=2048,
                            micro_batch=2, seq=2048, recompute="full", grad_dtype="fp32", zero_engine="deepspeed",
                            device_spec="a100-80gb", **BLOOM)))
    # the page's own V100-SXM2 16GB: 1,343 MiB occupied by the CUDA context and kernels before the model, 14,949 MiB
    # after training at batch 4 and 8,681 MiB at batch 1 (4 steps accumulated); Trainer's defaults: fp32, AdamW,
    # dropout 0.1 in train mode, transformers' eager attention of 2022 (scores materialized)
    for batch, mib in ((4, 14949), (1, 8681)):
        out.append(Row("memory", f"bert-large-uncased + classifier, fp32 AdamW, batch {batch} × 512, dropout, eager "
                       "attention, V100 (nvidia-smi)", "transformers docs, model_memory_anatomy.md ('GPU memory "
                       f"occupied: {mib} MB', the context's 1343 MB added)", mib / 1024, "GiB",
                       plan_gib("bert-large", 1343 * 2**20, dp=1, global_batch=4, micro_batch=batch, seq=512,
                                dtype="fp32", attention="math", dropout=True, device_spec="v100")))
    return out
