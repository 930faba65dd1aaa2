"""Hugging Face ``generate`` timed on the shape of a tfcalc preset, beside tfcalc's own decode step: the
reference benchmarks/gpu_report.py prints next to `bench decode` and tests/gpu/test_decode_runtime_cuda.py
holds tfcalc to. Random weights (nothing is downloaded), the same dtype and device.

Shapes built: a Llama-like preset (RoPE, gated SiLU FFN, RMSNorm, no window, no experts: LlamaConfig) and
a GPT-2-like one (learned positions, LayerNorm, GELU: GPT2Config); None for others.

Timing: a whole greedy generation of 1 token (the prefill) and of N + 1 tokens, each the median of
``repeat`` runs after a warm-up of each (with the static cache on CUDA, transformers compiles the decode
step on the first call: the warm-up takes it), synchronized at both ends; per decode step =
(t(N + 1) − t(1)) / N. ``static``: ``cache_implementation="static"`` (transformers' StaticCache, the
setting whose step has fixed shapes, as tfcalc's has).
"""

from __future__ import annotations

import statistics
import time
from typing import Optional

import torch

from tfcalc.config import ModelConfig


def hf_model(cfg: ModelConfig, device: str, dtype: torch.dtype):
    """A transformers model of cfg's shape, random weights, eval mode; None for a shape not built here."""
    import transformers

    plain = not cfg.n_expert and cfg.sliding_window is None and cfg.arch == "decoder"
    if plain and cfg.pos_encoding == "rope" and cfg.gated_ffn and cfg.norm == "rmsnorm" and cfg.activation == "silu":
        config = transformers.LlamaConfig(
            hidden_size=cfg.d_model, intermediate_size=cfg.d_ff, num_hidden_layers=cfg.n_layer,
            num_attention_heads=cfg.n_head, num_key_value_heads=cfg.kv_heads, vocab_size=cfg.vocab_size,
            max_position_embeddings=cfg.max_seq_len, rope_theta=cfg.rope_theta, rms_norm_eps=cfg.norm_eps,
            tie_word_embeddings=cfg.tie_embeddings, attention_bias=cfg.attn_bias)
        cls = transformers.LlamaForCausalLM
    elif plain and cfg.pos_encoding == "learned" and cfg.norm == "layernorm" and not cfg.gated_ffn:
        config = transformers.GPT2Config(n_embd=cfg.d_model, n_layer=cfg.n_layer, n_head=cfg.n_head,
                                         vocab_size=cfg.vocab_size, n_positions=cfg.max_seq_len)
        cls = transformers.GPT2LMHeadModel
    else:
        return None
    with torch.device(device):
        model = cls(config)
    return model.to(dtype).eval()


def _seconds(fn, device: str) -> float:
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    start = time.perf_counter()
    fn()
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    return time.perf_counter() - start


def hf_decode_s_per_token(cfg: ModelConfig, device: str, dtype: torch.dtype, seq: int, new: int, repeat: int = 3,
                          static: bool = True) -> Optional[float]:
    """Seconds per decode step of transformers' greedy generate on cfg's shape (module docstring); None
    where no transformers model of that shape is built here."""
    model = hf_model(cfg, device, dtype)
    if model is None:
        return None
    prompt = torch.randint(0, cfg.vocab_size, (1, seq), device=device, generator=torch.Generator(device).manual_seed(1))
    mask = torch.ones_like(prompt)
    extra = {"cache_implementation": "static"} if static else {}

    def run(n: int) -> None:
        with torch.inference_mode():
            out = model.generate(prompt, attention_mask=mask, max_new_tokens=n, min_new_tokens=n, do_sample=False,
                                 pad_token_id=0, **extra)
        assert out.shape[1] == seq + n

    run(new + 1)  # warm-up: allocations, kernel choice, transformers' compile of the static-cache step
    run(1)
    one = statistics.median(_seconds(lambda: run(1), device) for _ in range(repeat))
    whole = statistics.median(_seconds(lambda: run(new + 1), device) for _ in range(repeat))
    return max(0.0, whole - one) / new
