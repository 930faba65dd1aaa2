"""Qwen3 config.json files (modeling_qwen3.py): the Llama-shaped keys (tfcalc.hf_config.llama_like), q_norm and
k_norm (RMSNorm over each head), head_dim (default 128), attention_bias, and Qwen2's sliding windows
(tfcalc.hf_config.qwen2).
"""

from __future__ import annotations

from tfcalc.architecture import Architecture
from tfcalc.hf_config.llama_like import base_fields, llama_names
from tfcalc.hf_config.names import Rule
from tfcalc.hf_config.qwen2 import qwen_windows
from tfcalc.hf_config.reader import Reader


def qwen3(r: Reader) -> None:
    base_fields(r, dict(max_position_embeddings=32768, rms_norm_eps=1e-6, rope_theta=10000.0, head_dim=128))
    r.take("attention_bias", "attn_bias", False)
    r.fields.update(qk_norm=True)
    qwen_windows(r)
    r.causal_or_base("Qwen3")


def checkpoint_names(arch: Architecture, model_type: str) -> list[Rule]:
    """Llama's tensor names (tfcalc.hf_config.llama_like)."""
    return llama_names(arch)
