"""Seed-OSS config.json files (ByteDance Seed; modeling_seed_oss.py, configuration_seed_oss.py), Llama-shaped
(tfcalc.hf_config.llama_like): Llama's blocks with biases on Q, K and V (``attention_bias``, default true), on O
only with ``attention_out_bias`` (default false), on the MLP with ``mlp_bias`` (default false); head_dim 128 by
default (80 heads of 128 over a 5120-wide model in Seed-OSS-36B); RoPE base 10,000,000 (SeedOssConfig's default
rope_parameters). Its dropouts (attention_dropout, residual_dropout) change no count and act in training only.
"""

from __future__ import annotations

from tfcalc.architecture import Architecture
from tfcalc.hf_config.llama_like import base_fields, llama_names
from tfcalc.hf_config.names import Rule
from tfcalc.hf_config.reader import Reader


def seed_oss(r: Reader) -> None:
    base_fields(r, dict(max_position_embeddings=524288, rms_norm_eps=1e-6, rope_theta=10_000_000.0, head_dim=128,
                        n_kv_head=8))
    r.take("attention_bias", "attn_bias", True)
    r.take("attention_out_bias", "attn_out_bias", False)
    r.take("mlp_bias", "ffn_bias", False)
    r.causal_or_base("SeedOss")


def checkpoint_names(arch: Architecture, model_type: str) -> list[Rule]:
    """Llama's tensor names (tfcalc.hf_config.llama_like)."""
    return llama_names(arch)
