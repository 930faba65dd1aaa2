"""Held-out published figures of expert-parallel serving (`infer --ep`, tfcalc.count.serving.expert_parallel), beside
benchmarks/calibration_held_out.py's: DeepSeek-V3 served with its routed experts over many GPUs and attention data-
parallel, each at the setup its source states, never used to choose a constant (added with `infer --ep`, issue 31).
The weights in FP8 (the checkpoint's format, DeepGEMM's FP8 GEMMs), the KV cache (MLA's latents) in bf16.

- The SGLang Team, "Deploying DeepSeek with PD Disaggregation and Large-scale Expert Parallelism on 96 H100 GPUs"
  (lmsys.org/blog/2025-05-05-large-scale-ep, May 2025), "Evaluation": decode on 9 nodes of 8 H100 (EP 72, DP
  attention 72), 256 sequences per GPU at a KV length of 2,000: 22,282 output tokens/s per node; prefill on 4 nodes
  (EP 32), 16,384 tokens per GPU at prompts of 1K, 2K and 4K: 57,674, 54,543 and 50,302 input tokens/s per node;
  "Profile Results": 59,337 at 4K under a "simulated perfect EPLB (random expert selection following group-limited
  routing semantics)", priced at --expert-imbalance uniform (a row added with the imbalance term).
  EPLB with 32 redundant experts (the reproduction's --ep-num-redundant-experts 32, sglang issue 6017), two-batch
  overlap on (--overlap ep). The decode priced at 2,000 positions plus 100 generated; the prefill as one step of
  16,384 tokens a GPU. The post's TBO ablation ("the speedup reaches 25.5 % at 256 tokens with a performance of
  22,310 tokens per second") gives the same decode without the overlap: 22,310 / 1.255 = 17,777, a derived row.
- DeepSeek-AI, "DeepSeek-V3/R1 Inference System Overview" (open-infra-index, Open Source Week day 6, March 2025):
  decode on H800 with routed experts EP 144 (18 nodes, 32 redundant: 2 a GPU), MLA and the shared expert DP 144,
  ~14.8k output tokens/s per node, a day's production average; the batch (128 a GPU) and the mean KV length
  (4,989) as the SGLang post's decode table reads them; dual micro-batch overlap (the note's 5-stage decode
  pipeline: --overlap ep). Whether MTP's speculative tokens are in the figure is not said (the V3 report, sec.
  5.4.3, gives MTP 1.8x tokens per step): tfcalc prices one token a step.
- The same SGLang table, "DeepSeek Profile": 18,598 output tokens/s per node, derived from DeepSeek's profile-data
  (github.com/deepseek-ai/profile-data, README: decode at EP 128, TP 1, 4K prompts, 128 requests per GPU, a
  perfectly balanced routing, two micro-batches overlapping the all-to-all): 16 H800 nodes, no redundant experts;
  priced at that routing (--expert-imbalance uniform: the routing's noise alone). The other rows at tfcalc's
  default, EPLB's measured spread (tfcalc.count.perf.expert_imbalance).

What tfcalc leaves out (tfcalc.count.serving.expert_parallel): MTP, the disaggregated KV transfer, an imbalance
worse than TensorRT-LLM's measured after-EPLB spread (SGLang measures its 4K prefill 18 % slower with its default
placement than with a perfect one; tfcalc's EPLB factor there is 1.09 on the experts and the all-to-all alone), and
-- the prefill rows, still 1.4-1.55x too fast under the overlap -- what makes the real overlapped prefill compute and
communication slower than their rooflines beside each other (SGLang: "the no-TBO 8k case outperforms the TBO 16k
case in per-kernel speed", communication "slower than unit test results ... achievable when disabling TBO"; no
figure to price it by).
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Optional

from calibration_row import Row

import tfcalc

H800 = str(Path(__file__).parent / "devices" / "h800-sxm.yaml")
SGLANG = "SGLang, lmsys.org/blog/2025-05-05-large-scale-ep, Evaluation"
DEEPSEEK = "DeepSeek open-infra-index day 6, inference system overview (batch, KV length: SGLang's table)"
PROFILE = "SGLang's table from DeepSeek profile-data (EP 128, balanced routing)"


def decode_per_node(device: str, nodes: int, per_gpu: int, kv: int, redundant: int,
                    overlap: bool = True, imbalance: Optional[str] = None) -> Callable[[], float]:
    def run() -> float:
        E = 8 * nodes
        r = tfcalc.infer("deepseek-v3", batch=per_gpu * E, seq=kv, gen=100, dtype="fp8", kv_dtype="bf16",
                         device_spec=device, ep=E, redundant_experts=redundant, ep_overlap=overlap,
                         expert_imbalance=imbalance)
        return r.to_json()["expert_parallel"]["decode_tokens_per_s_per_node"]
    return run


def prefill_per_node(seq: int, imbalance: Optional[str] = None) -> Callable[[], float]:
    def run() -> float:
        B = 16384 // seq * 32  # 16,384 tokens a GPU over EP 32
        r = tfcalc.infer("deepseek-v3", batch=B, seq=seq, gen=1, dtype="fp8", kv_dtype="bf16", device_spec="h100-sxm",
                         ep=32, redundant_experts=32, ep_overlap=True, expert_imbalance=imbalance)
        return B * seq / r.estimates[0].prefill_s / 4
    return run


def expert_parallel_rows() -> list[Row]:
    out = [Row("inference throughput", "DeepSeek-V3 decode, 9 × 8 H100, EP 72 + DP attention, 256 seqs/GPU, KV 2,000",
               SGLANG, 22282, "tok/s/node", decode_per_node("h100-sxm", 9, 256, 2000, 32)),
           Row("inference throughput", "the same without two-batch overlap (derived: 22,310 / 1.255)",
               SGLANG + ", TBO ablation", 22310 / 1.255, "tok/s/node",
               decode_per_node("h100-sxm", 9, 256, 2000, 32, overlap=False)),
           Row("inference throughput", "DeepSeek-V3 decode, 18 × 8 H800, EP 144 + DP attention, 128 seqs/GPU, KV 4,989",
               DEEPSEEK, 14800, "tok/s/node", decode_per_node(H800, 18, 128, 4989, 32)),
           Row("inference throughput", "DeepSeek-V3 decode, 16 × 8 H800, EP 128 + DP attention, 128 seqs/GPU, KV 4,096",
               PROFILE, 18598, "tok/s/node", decode_per_node(H800, 16, 128, 4096, 0, imbalance="uniform"))]
    for seq, rate in ((1024, 57674), (2048, 54543), (4096, 50302)):
        out.append(Row("inference throughput", f"DeepSeek-V3 prefill, 4 × 8 H100, EP 32, 16,384 tokens/GPU, prompts "
                       f"{seq:,}", SGLANG, rate, "tok/s/node", prefill_per_node(seq)))
    out.append(Row("inference throughput", "the same at 4,096, simulated perfect EPLB (random experts: --expert-"
                   "imbalance uniform)", SGLANG.replace("Evaluation", "Profile Results"), 59337, "tok/s/node",
                   prefill_per_node(4096, "uniform")))
    return out
