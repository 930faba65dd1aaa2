"""Held-out published training figures for benchmarks/calibration.py (beside calibration_held_out.py), not
fitted:

- Touvron et al. 2023a, "LLaMA: Open and Efficient Foundation Language Models", sec. 2.4: "When training a
  65B-parameter model, our code processes around 380 tokens/sec/GPU on 2048 A100 GPU with 80GB of RAM" (1.4T
  tokens in about 21 days). The setup as the paper states it: 80 layers, d_model 8,192, 64 heads (no GQA),
  FFN 22,016, vocabulary 32,000 (Table 2 and the released params.json: the multiple_of 256 rounding of
  2/3 · 4d), sequence 2,048, batches of 4M tokens (2,048 sequences, sec. 2.2), "model and sequence
  parallelism" (sequence_parallel=True; the degrees are not published: tfcalc's search over the 2,048 GPUs
  picks them, as for Llama 2), the A100-80GB's DGX network, and Table 15's 400 W a GPU. Its checkpointing
  saves the linears' outputs and recomputes the rest (sec. 2.4); the search's recompute is its own. Added
  with torchtitan's complex RoPE (issue 31).
"""

from __future__ import annotations

from calibration_row import Row

import tfcalc

LLAMA1_POWER_W = 400  # Touvron et al. 2023a, Table 15, "Power Consumption" of every LLaMA model's A100-80GB
# Touvron et al. 2023a, Table 2 and the released 65B params.json (dim, n_layers, n_heads, multiple_of 256)
LLAMA1_65B = dict(n_layer=80, d_model=8192, n_head=64, n_kv_head=64, d_ff=22016, vocab_size=32000, max_seq_len=2048)


def llama1_65b_rate() -> float:
    """tok/s per GPU at the paper's setup: 2,048 A100-80GB, seq 2,048, 4M-token batches, sequence parallel."""
    r = tfcalc.plan("llama2-70b", gpus=2048, seq=2048, global_batch=2048, sequence_parallel=True,
                    device_spec="a100-80gb", power_limit=LLAMA1_POWER_W, **LLAMA1_65B)
    return r.tokens_per_s / r.plan.layout.gpus


def llama1_rows() -> list[Row]:
    return [Row("training throughput", "LLaMA 65B, 2,048 A100-80GB at 400 W, sequence parallel, tfcalc's layout",
                "Touvron et al. 2023a, sec. 2.4 (380 tokens/s/GPU)", 380, "tok/s/GPU", llama1_65b_rate)]
