"""Held-out published figures for benchmarks/calibration.py: the same kinds as the calibration set, not in
it, never used to choose a parameter of the performance model. Reported beside it, not fitted.

- Dubey et al. 2024, "The Llama 3 Herd of Models", Table 4: Llama 3 405B on H100s, BF16 MFU 43 % on 8,192
  GPUs (TP 8, CP 1, PP 16, DP 64, seq 8,192, 32 sequences per DP rank, 16M tokens a batch) and 41 % on
  16,384 (DP 128, 16 per DP rank). Shapes: 126 layers, d_model 16,384, 128 heads, 8 KV heads, FFN 53,248,
  vocabulary 128,256 (sec. 3.2, Table 3). CP 1 (Table 4): no context parallelism at 8K. The schedule is
  Meta's (sec. 3.3.2, "Pipeline parallelism improvements"): interleaved, with one Transformer layer fewer on
  the first and the last stage -- "the first model chunk on the first stage has only the embedding, and
  the last model chunk on the last stage has only output projection and loss calculation" -- i.e. the
  embedding and the head counted as a layer each: 126 + 2 = 128 = 16 stages × V 8 chunks of one layer
  (``pp_split_counts=("embedding", "head")``, Megatron-LM's --account-for-embedding/loss-in-pipeline-
  split; tfcalc.count.training.shard.stage_ranges). ZeRO-1 for their FSDP-style sharding.
- Touvron et al. 2023, "Llama 2", Table 2: GPU-hours on A100-80GB for 2T tokens (7B 184,320; 13B 368,640;
  70B 1,720,320), as tokens per second per GPU. The layout is not published: tfcalc's own search over 1,024
  GPUs (seq 4,096, 4M tokens a step, Llama 2's) picks it. The hardware as sec. 2.2 ("Training Hardware &
  Carbon Footprint") states it: "200 Gbps end-points" (InfiniBand on the Research Super Cluster, RoCE on the
  production clusters) -- one 200 Gb/s link a GPU, the a100-80gb table's DGX A100 network (25 GB/s a GPU) --
  and the per-GPU power cap of Table 2's "Power Consumption" column, 400 W for 7B, 13B and 70B (the 350 W
  production cap is 34B's, not held out here): --power-limit 400, the A100 SXM's rated 400 W, so the
  A100's sustained clock (tfcalc.count.perf.hardware) unchanged. Table 2's GPU-hours are the whole runs'
  (restarts, evaluations and failures included); no goodput for them is published, and none is assumed.
- torchtitan, docs/performance.md (pytorch/torchtitan, 2024), FSDP2 on 64 A100-80GB: tokens per second per
  GPU ("WPS") of Llama 3 8B and 70B (seq 8,192, local batch 1) and Llama 2 13B and 70B (seq 4,096, local
  batch 1 or 2), global batch = local × 64, as the page states them. Its job config's defaults: no
  torch.compile (eager PyTorch), bf16 parameters with fp32 gradient reduction (``mixed_precision_reduce``
  "float32": tfcalc's --grad-dtype fp32), FSDP resharding after forward. AC "full" is --recompute full, "no"
  none, "selective op" --recompute op (the same policy, tfcalc.count.model.op_recompute: on torchtitan's
  unfused wq/wk/wv and w1/w3/w2 "every second mm" replays wk, wo and w3, on tfcalc's fused QKV and
  gate|up O and down -- the same FLOPs up to wk's). The two "selective layer" rows (every second block
  fully recomputed) are left out: tfcalc has no per-layer recompute frequency. The page does not name the
  network: the A100-80GB's 200 Gb/s a GPU. Chosen as the held-out check of the FSDP path (the calibration
  set has no FSDP row) and of the data-parallel network model across nodes (8 nodes of 8).
- torchtitan, benchmarks/llama3_h100_202412_torchtitan.md (pytorch/torchtitan, end of 2024), Tables 1 and 3:
  Llama 3.1 8B, FSDP on 8 and 128 H100 (local batch 2, seq 8,192 -- train_configs/llama3_8b.toml's --
  selective op AC, fp32 reduce: torchtitan's defaults), eager and torch.compile (--kernels compile: each
  TransformerBlock compiled, the embedding, final norm and loss eager, parallelize_llama.py's apply_compile
  at the page's torchtitan commit 9dec370; --kernels fused before, 1.36/1.40), and with
  torch.compile + Float8 (torchao's tensorwise dynamic scaling, torchtitan's recipe then: --fp8-recipe
  tensorwise, added with the recipes by name, issue 31); and its Table 2, context parallelism: FSDP × CP on
  8 GPUs at 32K-256K tokens, torch.compile + Float8 (tensorwise), full AC, local batch 1 (added with ring
  attention's merges, issue 31; the RoPE table stretched to the length, ``max_seq_len``). Attention runs
  PyTorch's SDPA flash backend, FlashAttention-2, at its published H100 rates (tfcalc.count.perf.hardware,
  HOPPER_ATTENTION: the h100-sxm table's, which the device file inherits), the ring's later steps unmasked. RoPE
  in complex numbers, left by Inductor to aten kernels (--rope complex: count.perf.elementwise, 6): 1.28 → 1.24.
  The step waits for the slowest of its GPUs (Sinha et al. 2022's 8 % spread: count.perf.slowest_rank): compile
  on 128 GPUs 1.26 → 1.22, on 8 1.23 → 1.21; the 8 → 128 loss 0 → 1.4 % (published 2.3 %). Table 2's rows and
  Table 6's: benchmarks/calibration_held_out_cp.py. The page's hardware
  is not a datasheet H100 SXM: 96GB HBM2e at 2.4 TB/s and a 500 W power limit, stated in
  benchmarks/devices/grand-teton-h100-500w.yaml (its clock from the power limit:
  tfcalc.count.training.overlap_costs.power_capped_clock). Added with FSDP's overlap costs (issue 31).
- OLMo-core README.md (allenai/OLMo-core, before commit 41f8ddc, March 2025), throughput table: tokens per
  second per H100 of its training scripts src/scripts/train/OLMo2-7B.py (10,000), Llama3-8B.py (9,500) and
  OLMo2-13B.py (4,600), BF16: torch.compile (--kernels fused), HSDP, bf16 parameters and fp32 reduction, no
  activation checkpointing, seq 4,096, micro-batch 2 × 4,096 tokens (13B: 1), global batch 1,024 × 4,096
  (13B: 2,048). The README names no GPU count: taken as many as make one micro-batch a step (512; 13B
  2,048), HSDP over the 8 GPUs of a node (OLMo-core's default: one replica per node), since OLMo-core delays
  HSDP's all-reduce across replicas to the last micro-batch (train_module/transformer.py,
  set_requires_all_reduce) where tfcalc runs it on every one: at one micro-batch the two agree. OLMo 2's
  blocks are Olmo 3 7B's (presets/olmo-3-7b.yaml) without the sliding window, vocabulary padded to 100,352;
  13B: 40 layers, d_model 5,120, 40 heads, FFN 13,824 (olmo_core TransformerConfig.olmo2_13B over
  llama2_13B).
- torchao, torchao/float8/README.md (pytorch/ao, torchao 0.10), "e2e training benchmarks", NVIDIA H100: Llama3-8b
  on 8 H100 with torchtitan, batch 1, seq 8,192, torch.compile, FSDP2, per-op SAC: tensorwise with float8
  all-gather 7,689.5 and rowwise with bf16 all-gather 6,768 tokens/s (per GPU, torchtitan's "tps"); bf16
  6,150. The README names no power limit or memory: the PyTorch team's Grand Teton H100s of the torchtitan
  rows taken. The tensorwise row's FP8 all-gather priced (--fp8-all-gather: half the gathered bytes, the weight
  casts on the shard, one amax all-reduce a step). Added with the recipes by name (issue 31). --rope complex.
- DeepSeek-AI 2024, "DeepSeek-V3 Technical Report" (arXiv 2412.19437), Table 1 and sec. 3: pre-training on 14.8T
  tokens took 2.664M H800 GPU-hours, read as tokens per second per GPU (1,543). The setup as published: 2,048
  H800 (benchmarks/devices/h800-sxm.yaml), 16-way pipeline, 64-way expert parallelism over 8 nodes, ZeRO-1 data
  parallelism (sec. 3.2), no tensor parallelism; FP8 GEMMs (sec. 3.3) and FP8 dispatches; DualPipe hiding the
  all-to-all (sec. 3.2.1: --overlap ep) through DeepEP's hierarchical dispatch with node-limited routing (at most 4
  of 8 nodes, sec. 2.1.2: --ep-dispatch, auto across nodes); sequence 4,096 and the final batch of 15,360
  sequences (sec. 4.2; the first 469B tokens ramp it up from 3,072, not priced); DualPipe's own schedule
  (--schedule dualpipe: Table 2's bubble, 2× parameters, PP + 1 activations; the row was 1.13 with 1F1B's
  bubble, 1.18 with DualPipe's). Added with expert parallelism across nodes (issue 31), its network and NVLink
  shares and overlap.
- Megatron-Bridge docs/performance-summary.md (NVIDIA-NeMo/Megatron-Bridge), "25.11 NeMo Container", DGX-H100:
  Qwen3_235B_a22B on 256 H100, FP8-CS, GBS 2,048, MBS 1, seq 4,096, TP 2, PP 8, CP 1, VP 4, EP 32: 1,575 tokens/s
  per GPU (233 model TFLOP/s). DP = 256 / (TP 2 × PP 8) = 16, so EP 32 spans TP × DP: Megatron's "EP 32 = TP 2 ×
  DP 16", said with experts folded (--ep 32 with --sp implies --etp 1: tfcalc.count.training.experts_folded). The
  rest of the setup from the recipe of that name (src/megatron/bridge/perf_recipes/qwen/h100/qwen3_moe.py,
  qwen3_235b_a22b_pretrain_256gpu_h100_fp8cs_config): sequence parallelism, no recompute, the alltoall
  dispatcher (--ep-dispatch alltoall), overlap_moe_expert_parallel_comm (--overlap ep), FP8 current scaling
  (--fp8-recipe tensorwise), the distributed optimizer (ZeRO-1), and 94 layers + embedding + loss over PP 8 ×
  VP 4 = 32 chunks of 3 (--pp-split-counts embedding,head). The table's MoE rows force-balance the routing, as
  tfcalc assumes. Added with experts folded over TP × DP (issue 31); tfcalc's memory for it (121 GiB a rank,
  activations 106 GiB) does not fit the 80 GB it ran on: the rate is the held-out figure, not the memory.
- TensorRT-LLM docs/source/performance.md (v0.6.1), "Low Latency" (data of v0.5): first-token latency at
  batch 1 on H100 SXM (FP8 weights and KV cache) and L40S (FP8), TP 1, the same LLaMA 7B and GPT-J 6B as
  the calibration set's A100 rows. Seen when the serving runtime's fixed cost per request was sized
  (tfcalc.count.perf.hardware, ``request_s``): a check of its size across GPUs, not a blind one.
- The same document, tensor-parallel rows on A100-80GB fp16 (tfcalc's `infer --tp`): first-token latency
  of LLaMA 70B at TP 4 (47 ms at 128 tokens in, 377 ms at 2,048), and the throughput rows at TP 2 and 4,
  read as output tokens/s per GPU (the H100 table's header and the document's later versions say per
  GPU; the A100 header of v0.6.1 says "out tok/s").
- TensorRT-LLM docs/source/performance/perf-overview.md (NVIDIA/TensorRT-LLM at 00f3768, the v1.0 tables, PyTorch
  backend), "Throughput Measurements": `trtllm-bench throughput`, every request queued at once ("an infinite
  rate"), synthetic prompts of exactly ISL tokens and outputs of exactly OSL, ModelOpt FP8 checkpoints (FP8
  weights and KV cache, nvidia/Llama-3.1-8B-Instruct-FP8 and the others the page lists), CUDA graphs; the page's
  metric "Total Output Throughput (tokens/sec)" for the whole TP group (the TP 2 H100 70B row, 6,378 at 128/128,
  is above one H100's compute for 70B FP8 and so a total), shown here per GPU. tfcalc: `infer --rate`'s capacity
  (``max_rate_per_s``, continuous batching with its default chunked prefill of 8,192 tokens a step) × OSL / TP.
  Llama 3.3 70B is Llama 3.1 70B's architecture (the llama3-70b preset). The MoE rows ran with
  ``enable_attention_dp`` and ``trtllm-bench --tp 8 --ep $ep_size`` (the page's "For MoE models"; its YAML prints
  enable_attention_dp indented under cuda_graph_config, and the ep size of the table is not printed): the layout of
  TensorRT-LLM's own Qwen3-235B-A22B configs (examples/configs/database/Qwen/Qwen3-235B-A22B/*/..._tp8_*.yaml:
  tensor_parallel_size 8, moe_expert_parallel_size 8, enable_attention_dp true) -- the H200 rows priced so,
  `infer --ep 8 --rate` (tfcalc.count.serving.ep_continuous: attention DP 8, each group its requests, KV cache and
  chunked prefill; the experts over 8 GPUs, the all-to-all after each MoE layer); the H100 rows still plain TP 8.
  Added with chunked prefill's mean over the decode batch (issue 31). The engine's settings: the page's commands
  name no --max_batch_size or --max_num_tokens, so trtllm-bench picked them (tensorrt_llm/bench/benchmark/utils/
  general.py, get_settings; tensorrt_llm/bench/build/tuning.py): tfcalc.count.serving.engine_caps at TP = the row's
  TP (the EP rows: TRT-LLM's tp_size 8), FP8 weights and cache, the default KV fraction 0.90, the GPU's memory as
  the driver reports it -- `infer --max-batch trtllm-bench`: max_batch_size a rank's (an attention-DP group's under
  attention DP), max_num_tokens as `--prefill-chunk` with `--context-chunking off` (chunked prefill off, its
  default). Eight rows moved (at most 0.93 -> 0.85, Qwen3-235B H100 1,000/1,000); the cap binds nowhere in the
  rows out of band: Llama 3.1 8B on an H200 at 128/128 gets 4,096 and 8,192 as the H100 does (the 4,096 cap of
  finetune_setting binds on both) and holds 2,046; Qwen3-235B on H200s gets 4,096/8,192 (128/128) and 2,304/4,608
  (1,000/1,000) a rank, where a group holds 3,491 and 735.
- NVIDIA NIM for LLMs benchmarking guide, docs.nvidia.com/nim/benchmarking/llm/1.0.0/performance ("Performance",
  Llama-3.3-70b-instruct, NIM 1.8.0, 2 × H100 80G, fp8, TP 2): AIPerf at a fixed concurrency C (closed loop),
  TTFT, ITL and output tokens/s, 5,000 input / 500 output tokens (and 500 / 2,000 at C = 1). tfcalc's
  `infer --concurrency C` (the closed loop: each user's next request when its last one ends,
  tfcalc.count.serving.closed_loop), its mean TTFT, inter-token latency and output tokens/s (the whole server's)
  beside the page's, for C up to 50. Until the closed loop was built these rows ran `infer --rate` at the rate
  Little's law gives from the page's throughput (output tokens/s ÷ O), its TTFT 0.76-0.80 at C = 5-50. The closed
  loop's mean-value TTFT assumes the users' requests end at random phases (lengths that vary); with every output
  exactly 500 tokens, as the page's runs, a simulation of the same chunked scheduler keeps users who end together
  together and queues their prompts: TTFT 375, 621 and 816 ms at C = 5, 25 and 50 (the page: 547, 689, 835), where
  random phases give 374, 392 and 425 (tests/count/test_closed_loop.py, test_equal_lengths_keep_users_together).
  The engine: NIM runs Llama 3.3 70B on H100s through its TensorRT-LLM backend (NIM for LLMs, "Optimization": the
  optimized profiles are TensorRT-LLM engines); the page does not print its scheduler settings, so the rows take
  TensorRT-LLM's defaults: in-flight batching without chunked context (ExecutorConfig enableChunkedContext false)
  and max_num_tokens 8,192 (trtllm-build's BuildConfig), `infer --context-chunking off` (tfcalc.count.serving.chunked,
  last paragraph). One 5,000-token prompt fits a step, so the users stagger into a train one step apart, each prompt
  arriving during its predecessor's prefill step (tfcalc.count.serving.lockstep, "Whole prompts"): TTFT 671, 734, 751
  ms where vLLM V1's chunked packing of 1.64 prompts a step gave 749, 1,182, 1,350. "fp8"
  read as FP8 weights and KV cache: with a bf16 cache 50 sequences of 5,250 positions do not fit 2 × 80 GB
  beside the weights (tfcalc: over capacity, 'memory'), and the page ran them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from calibration_held_out_cp import context_parallel_rows
from calibration_held_out_ep import expert_parallel_rows
from calibration_held_out_llama1 import llama1_rows
from calibration_row import GPTJ, GRAND_TETON, LLAMA3_405B, Row

import tfcalc


def llama3_mfu(dp: int, per_dp: int) -> Callable[[], float]:
    def run() -> float:
        r = tfcalc.plan("llama3-70b", tp=8, pp=16, dp=dp, global_batch=dp * per_dp, micro_batch=1, seq=8192,
                        zero=1, recompute="none", sequence_parallel=True, device_spec="h100-sxm",
                        schedule="interleaved", virtual_stages=8, pp_split_counts=("embedding", "head"), **LLAMA3_405B)
        return r.plan.step.mfu * 100
    return run


LLAMA2_POWER_W = 400  # Touvron et al. 2023, Table 2, "Power Consumption (W)" of 7B, 13B and 70B (docstring)


def llama2_rate(preset: str) -> Callable[[], float]:
    def run() -> float:
        r = tfcalc.plan(preset, gpus=1024, seq=4096, device_spec="a100-80gb", power_limit=LLAMA2_POWER_W)
        return r.tokens_per_s / r.plan.layout.gpus
    return run


def torchtitan_rate(preset: str, seq: int, local: int, recompute: str) -> Callable[[], float]:
    def run() -> float:
        r = tfcalc.plan(preset, dp=64, zero=3, global_batch=64 * local, micro_batch=local, seq=seq,
                        recompute=recompute, grad_dtype="fp32", device_spec="a100-80gb")
        return r.tokens_per_s / r.plan.layout.gpus
    return run




def torchtitan_h100_rate(gpus: int, kernels: str, local: int = 2, **fp8) -> Callable[[], float]:
    def run() -> float:
        r = tfcalc.plan("llama3-8b", dp=gpus, zero=3, global_batch=local * gpus, micro_batch=local, seq=8192,
                        recompute="op", grad_dtype="fp32", device_spec=GRAND_TETON, kernels=kernels, **fp8)
        return r.tokens_per_s / r.plan.layout.gpus
    return run


# benchmarks/llama3_h100_202412_torchtitan.md, Tables 1 and 3: (GPUs, technique, tfcalc's kernels, TPS/GPU)
TORCHTITAN_H100 = [(8, "FSDP", "eager", 5762), (8, "FSDP + torch.compile", "compile", 6667),
                   (128, "FSDP", "eager", 5605), (128, "FSDP + torch.compile", "compile", 6514),
                   (8, "FSDP + torch.compile + Float8", "tensorwise", 8532),
                   (128, "FSDP + torch.compile + Float8", "tensorwise", 8380)]
# torchao/float8/README.md, e2e training benchmarks on 8 H100: (recipe, label, FP8 all-gather, tokens/s per GPU)
TORCHAO_FLOAT8 = [("tensorwise", "tensorwise, float8 all-gather", True, 7689.5),
                  ("rowwise", "rowwise, bf16 all-gather", False, 6768)]


OLMO2 = dict(sliding_window=None, full_attention_every=None, vocab_size=100352)  # docstring: OLMo 2's blocks
OLMO2_13B = dict(OLMO2, n_layer=40, d_model=5120, n_head=40, n_kv_head=40, d_ff=13824)
# OLMo-core README (March 2025): (label, preset, overrides, micro-batch, global batch, GPUs, TPS per GPU)
OLMO_CORE = [("OLMo 2 7B", "olmo-3-7b", OLMO2, 2, 1024, 512, 10000),
             ("Llama 3 8B", "llama3-8b", {}, 2, 1024, 512, 9500),
             ("OLMo 2 13B", "olmo-3-7b", OLMO2_13B, 1, 2048, 2048, 4600)]


def olmo_core_rate(preset: str, over: dict, micro: int, batch: int, gpus: int) -> Callable[[], float]:
    def run() -> float:
        r = tfcalc.plan(preset, dp=gpus, zero=3, hsdp=8, global_batch=batch, micro_batch=micro, seq=4096,
                        recompute="none", grad_dtype="fp32", kernels="fused", **over)
        return r.tokens_per_s / r.plan.layout.gpus
    return run


# torchtitan docs/performance.md, A100 tables: (label, preset, seq, local batch, AC as the page names it,
# tfcalc's --recompute, WPS per GPU)
TORCHTITAN = [("Llama 3 8B", "llama3-8b", 8192, 1, "selective op", "op", 2973),
              ("Llama 3 70B", "llama3-70b", 8192, 1, "full", "full", 331),
              ("Llama 2 13B", "llama2-13b", 4096, 2, "no", "none", 2162),
              ("Llama 2 13B", "llama2-13b", 4096, 2, "selective op", "op", 1904),
              ("Llama 2 70B", "llama2-70b", 4096, 1, "selective op", "op", 355),
              ("Llama 2 70B", "llama2-70b", 4096, 2, "full", "full", 353)]


H800 = str(Path(__file__).parent / "devices" / "h800-sxm.yaml")
DEEPSEEK_V3_TOKENS, DEEPSEEK_V3_GPU_HOURS = 14.8e12, 2.664e6  # Table 1: pre-training


def deepseek_v3_rate() -> float:
    r = tfcalc.plan("deepseek-v3", pp=16, dp=128, ep=64, zero=1, seq=4096, global_batch=15360, micro_batch=1,
                    recompute="none", compute_dtype="fp8", overlap=("ep",), schedule="dualpipe", device_spec=H800)
    return r.tokens_per_s / r.plan.layout.gpus


def qwen3_235b_folded_rate() -> float:
    r = tfcalc.plan("qwen3-235b-a22b", tp=2, pp=8, dp=16, ep=32, sequence_parallel=True, zero=1, seq=4096,
                    global_batch=2048, micro_batch=1, recompute="none", schedule="interleaved", virtual_stages=4,
                    pp_split_counts=("embedding", "head"), compute_dtype="fp8", fp8_recipe="tensorwise",
                    overlap=("ep",), ep_dispatch="alltoall", device_spec="h100-sxm")
    return r.tokens_per_s / r.plan.layout.gpus


def first_token_ms(preset: str, inp: int, device: str, **over) -> Callable[[], float]:
    def run() -> float:
        r = tfcalc.infer(preset, batch=1, seq=inp, gen=1, dtype="fp8", kv_dtype="fp8", device_spec=device, **over)
        return r.estimates[0].prefill_s * 1e3
    return run


TRT_LOW_LATENCY = [("h100-sxm", "H100 SXM", "LLaMA 7B", 128, 7), ("h100-sxm", "H100 SXM", "LLaMA 7B", 2048, 36),
                   ("h100-sxm", "H100 SXM", "GPT-J 6B", 128, 7), ("h100-sxm", "H100 SXM", "GPT-J 6B", 2048, 29),
                   ("l40s", "L40S", "LLaMA 7B", 128, 14), ("l40s", "L40S", "LLaMA 7B", 2048, 73),
                   ("l40s", "L40S", "GPT-J 6B", 128, 12), ("l40s", "L40S", "GPT-J 6B", 2048, 71)]


def tp_first_token_ms(inp: int) -> Callable[[], float]:
    def run() -> float:
        r = tfcalc.infer("llama2-70b", batch=1, seq=inp, gen=1, dtype="fp16", device_spec="a100-80gb", tp=4)
        return r.estimates[0].prefill_s * 1e3
    return run


def tp_rate(preset: str, batch: int, inp: int, out: int, tp: int, **over) -> Callable[[], float]:
    def run() -> float:
        r = tfcalc.infer(preset, batch=batch, seq=inp, gen=out, dtype="fp16", device_spec="a100-80gb", tp=tp, **over)
        return batch * out / r.estimates[0].total_s / tp
    return run


# (label, preset, GPT-J overrides?, batch, input, output, TP, out tok/s per GPU)
TRT_TP = [("GPT-J 6B", "gpt3-6.7b", True, 120, 128, 2048, 2, 2192),
          ("LLaMA 7B", "llama2-7b", False, 64, 2048, 2048, 2, 782),
          ("LLaMA 70B", "llama2-70b", False, 1280, 128, 128, 4, 670),
          ("LLaMA 70B", "llama2-70b", False, 240, 128, 2048, 4, 525),
          ("LLaMA 70B", "llama2-70b", False, 120, 2048, 128, 4, 79)]


# perf-overview.md: (model, preset, GPU key, GPU label, TP, ISL, OSL, total output tok/s)
TRT_MAX = [("Llama 3.1 8B", "llama3-8b", "h100-sxm", "H100", 1, 128, 128, 28312),
           ("Llama 3.1 8B", "llama3-8b", "h100-sxm", "H100", 1, 1000, 1000, 15220),
           ("Llama 3.1 8B", "llama3-8b", "h100-sxm", "H100", 1, 2048, 128, 3450),
           ("Llama 3.1 8B", "llama3-8b", "h100-sxm", "H100", 1, 5000, 500, 3459),
           ("Llama 3.1 8B", "llama3-8b", "h100-sxm", "H100", 1, 20000, 2000, 1351),
           ("Llama 3.1 8B", "llama3-8b", "h200", "H200", 1, 128, 128, 27911),
           ("Llama 3.1 8B", "llama3-8b", "h200", "H200", 1, 1000, 1000, 17744),
           ("Llama 3.3 70B", "llama3-70b", "h100-sxm", "H100", 2, 128, 128, 6378),
           ("Llama 3.3 70B", "llama3-70b", "h100-sxm", "H100", 2, 1000, 1000, 4205),
           ("Llama 3.3 70B", "llama3-70b", "h100-sxm", "H100", 2, 2048, 128, 762),
           ("Llama 3.3 70B", "llama3-70b", "h100-sxm", "H100", 2, 5000, 500, 898),
           ("Llama 3.3 70B", "llama3-70b", "h100-sxm", "H100", 2, 20000, 2000, 437),
           ("Llama 3.3 70B", "llama3-70b", "h200", "H200", 1, 128, 128, 3803),
           ("Llama 3.3 70B", "llama3-70b", "h200", "H200", 1, 1000, 1000, 2909),
           ("Llama 3.1 405B", "llama3-70b", "h100-sxm", "H100", 8, 128, 128, 3627),
           ("Llama 3.1 405B", "llama3-70b", "h100-sxm", "H100", 8, 1000, 1000, 2919),
           ("Llama 3.1 405B", "llama3-70b", "h100-sxm", "H100", 8, 5000, 500, 610),
           ("Qwen3-235B-A22B", "qwen3-235b-a22b", "h100-sxm", "H100", 8, 1000, 1000, 14898),
           ("Qwen3-235B-A22B", "qwen3-235b-a22b", "h100-sxm", "H100", 8, 2048, 2048, 9924),
           ("Qwen3-235B-A22B", "qwen3-235b-a22b", "h100-sxm", "H100", 8, 5000, 500, 3225),
           ("Qwen3-235B-A22B", "qwen3-235b-a22b", "h200", "H200", 8, 128, 128, 30429),
           ("Qwen3-235B-A22B", "qwen3-235b-a22b", "h200", "H200", 8, 1000, 1000, 23789)]
# the MoE rows set with the page's MoE layout (attention DP 8 beside EP 8, `infer --ep 8`); the H100 rows not yet
EP_ROWS = {("qwen3-235b-a22b", "h200")}


def max_throughput(preset: str, device: str, tp: int, inp: int, out: int) -> Callable[[], float]:
    over = LLAMA3_405B if preset == "llama3-70b" and tp == 8 else {}
    layout = {"ep": tp} if (preset, device) in EP_ROWS else {"tp": tp}  # EP over the TP 8 GPUs, attention DP 8
    def run() -> float:
        # the page's commands name no --max_batch_size or --max_num_tokens: trtllm-bench's own (module docstring)
        r = tfcalc.infer(preset, dtype="fp8", kv_dtype="fp8", device_spec=device, rate=1.0, mean_input=inp,
                         mean_output=out, max_batch="trtllm-bench", **layout,
                         **{**over, "max_seq_len": max(8192, inp + out)})
        return r.to_json()["continuous"]["max_rate_per_s"] * out / tp
    return run


# NIM 1.8.0, Llama-3.3-70b-instruct, 2 × H100 fp8 TP 2: (ISL, OSL, concurrency, TTFT ms, ITL ms, output tok/s)
NIM_70B = [(5000, 500, 1, 406.77, 18.58, 51.67), (5000, 500, 5, 546.7, 21.83, 218.48),
           (5000, 500, 25, 688.69, 38.75, 623.4), (5000, 500, 50, 834.51, 59.73, 814.37),
           (500, 2000, 1, 47.77, 18.91, 52.85)]


def under_load(inp: int, out: int, users: int, key: str, scale: float = 1e3) -> Callable[[], float]:
    def run() -> float:
        r = tfcalc.infer("llama3-70b", dtype="fp8", kv_dtype="fp8", device_spec="h100-sxm", tp=2,
                         concurrency=users, mean_input=inp, mean_output=out, context_chunking="off")
        return r.to_json()["continuous"][key] * scale
    return run


def serving_rows() -> list[Row]:
    trt = "TensorRT-LLM perf-overview.md (00f3768, v1.0), max throughput, FP8"
    out = [Row("inference throughput", f"{label}, {gpu} "
               + (f"EP {tp} + attention DP {tp}" if (preset, device) in EP_ROWS else f"TP {tp}")
               + f", {inp:,} in, {outp:,} out, all requests at once", trt,
               total / tp, "tok/s/GPU", max_throughput(preset, device, tp, inp, outp))
           for label, preset, device, gpu, tp, inp, outp, total in TRT_MAX]
    nim = "NVIDIA NIM LLM benchmarking 1.0.0, Performance (Llama 3.3 70B, NIM 1.8.0)"
    for inp, outp, users, ttft, itl, rate in NIM_70B:
        label = f"Llama 3.3 70B, 2 H100 fp8 TP 2, {inp:,} in, {outp:,} out, {users} concurrent ({rate:g} tok/s)"
        out.append(Row("first-token latency", label, nim, ttft, "ms", under_load(inp, outp, users, "ttft_s")))
        out.append(Row("per-token latency", label, nim, itl, "ms", under_load(inp, outp, users, "itl_s")))
        out.append(Row("inference throughput", label, nim, rate, "tok/s",
                       under_load(inp, outp, users, "output_tokens_per_s", 1.0)))
    return out


def held_out_rows() -> list[Row]:
    out = [Row("training throughput", f"Llama 3 405B, {g:,} H100, TP 8, PP 16 interleaved V 8, DP {dp}",
               "Dubey et al. 2024, Table 4", mfu, "% MFU", llama3_mfu(dp, per))
           for g, dp, per, mfu in ((8192, 64, 32, 43), (16384, 128, 16, 41))]
    for preset, label, hours in (("llama2-7b", "7B", 184320), ("llama2-13b", "13B", 368640),
                                 ("llama2-70b", "70B", 1720320)):
        out.append(Row("training throughput", f"Llama 2 {label}, A100-80GB at 400 W, 200 Gb/s a GPU, tfcalc's layout "
                       "of 1,024 GPUs",
                       "Touvron et al. 2023, Table 2 (GPU-hours for 2T tokens)", 2e12 / (hours * 3600), "tok/s/GPU",
                       llama2_rate(preset)))
    out += llama1_rows()
    for label, preset, seq, local, ac, recompute, wps in TORCHTITAN:
        out.append(Row("training throughput", f"{label}, FSDP 64 A100, seq {seq:,}, local batch {local}, AC {ac}",
                       "torchtitan docs/performance.md (2024, eager, fp32 reduce)", wps, "tok/s/GPU",
                       torchtitan_rate(preset, seq, local, recompute)))
    for gpus, technique, kernels, tps in TORCHTITAN_H100:
        fp8 = dict(compute_dtype="fp8", fp8_recipe=kernels) if kernels == "tensorwise" else {}
        out.append(Row("training throughput", f"Llama 3.1 8B, {technique}, {gpus} H100 (HBM2e, 500 W), local batch 2",
                       "torchtitan benchmarks/llama3_h100_202412_torchtitan.md, Tables 1 and 3", tps, "tok/s/GPU",
                       torchtitan_h100_rate(gpus, "compile" if fp8 else kernels, **fp8)))
    out += context_parallel_rows()  # Tables 2 and 6 (benchmarks/calibration_held_out_cp.py)
    for recipe, label, gather, tps in TORCHAO_FLOAT8:
        out.append(Row("training throughput", f"Llama3-8b, torch.compile + Float8 {label}, FSDP 8 H100, batch 1",
                       "torchao torchao/float8/README.md, e2e training benchmarks (H100)", tps, "tok/s/GPU",
                       torchtitan_h100_rate(8, "compile", 1, compute_dtype="fp8", fp8_recipe=recipe,
                                            fp8_all_gather=gather)))
    for label, preset, over, micro, batch, gpus, tps in OLMO_CORE:
        out.append(Row("training throughput", f"{label}, HSDP 8 × {gpus // 8} H100, torch.compile, seq 4,096",
                       "OLMo-core README (2025-03), BF16 throughput table", tps, "tok/s/GPU",
                       olmo_core_rate(preset, over, micro, batch, gpus)))
    out.append(Row("training throughput", "DeepSeek-V3, 2,048 H800, PP 16, EP 64 over 8 nodes, DualPipe, FP8",
                   "DeepSeek-V3 technical report, Table 1 (2.664M GPU-hours for 14.8T tokens)",
                   DEEPSEEK_V3_TOKENS / (DEEPSEEK_V3_GPU_HOURS * 3600), "tok/s/GPU", deepseek_v3_rate))
    out.append(Row("training throughput", "Qwen3-235B-A22B, 256 H100, TP 2 + SP, PP 8 V 4, EP 32 over TP × DP, FP8-CS",
                   "Megatron-Bridge docs/performance-summary.md, 25.11 NeMo Container, DGX-H100", 1575, "tok/s/GPU",
                   qwen3_235b_folded_rate))
    trt = "TensorRT-LLM docs/source/performance.md v0.6.1, Low Latency (v0.5 data, FP8, TP 1)"
    for device, name, label, inp, ms in TRT_LOW_LATENCY:
        preset, over = ("llama2-7b", {}) if label.startswith("LLaMA") else ("gpt3-6.7b", GPTJ)
        out.append(Row("first-token latency", f"{label}, {name} fp8, batch 1, {inp} tokens in", trt, ms, "ms",
                       first_token_ms(preset, inp, device, **over)))
    trt_a100 = "TensorRT-LLM docs/source/performance.md v0.6.1 (A100-80GB fp16)"
    for inp, ms in ((128, 47), (2048, 377)):
        out.append(Row("first-token latency", f"LLaMA 70B, TP 4, batch 1, {inp} tokens in", trt_a100 + ", Low Latency",
                       ms, "ms", tp_first_token_ms(inp)))
    for label, preset, gptj, batch, inp, outp, tp, rate in TRT_TP:
        out.append(Row("inference throughput", f"{label}, TP {tp}, batch {batch}, {inp} in, {outp} out", trt_a100,
                       rate, "tok/s/GPU", tp_rate(preset, batch, inp, outp, tp, **(GPTJ if gptj else {}))))
    return out + expert_parallel_rows() + serving_rows()  # `infer --ep` (benchmarks/calibration_held_out_ep.py)
