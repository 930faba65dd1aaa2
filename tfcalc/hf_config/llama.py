"""Llama config.json files (modeling_llama.py): the Llama-shaped keys (tfcalc.hf_config.llama_like), plus
attention_bias and mlp_bias (biases on Q/K/V/O and on the FFN).
"""

from __future__ import annotations

from tfcalc.architecture import Architecture
from tfcalc.hf_config.llama_like import base_fields, llama_names
from tfcalc.hf_config.names import Rule
from tfcalc.hf_config.reader import Reader


def llama(r: Reader) -> None:
    r.divisible_heads()
    base_fields(r, dict(max_position_embeddings=2048, rms_norm_eps=1e-6, rope_theta=10000.0))
    r.take("attention_bias", "attn_bias", False)
    r.take("mlp_bias", "ffn_bias", False)
    r.causal_or_base("Llama")


def checkpoint_names(arch: Architecture, model_type: str) -> list[Rule]:
    """Llama's tensor names (tfcalc.hf_config.llama_like)."""
    return llama_names(arch)
