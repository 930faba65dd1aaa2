"""OLMo 2 config.json files (modeling_olmo2.py), Llama-shaped (tfcalc.hf_config.llama_like): no input norms -- each
sub-layer's output is normed before the residual add (``post_attention_layernorm``, ``post_feedforward_layernorm``)
-- and RMSNorms over the whole Q and K projections (n_head·d_head and n_kv_head·d_head wide).
"""

from __future__ import annotations

from tfcalc.architecture import Architecture
from tfcalc.hf_config.llama_like import base_fields, llama_names
from tfcalc.hf_config.names import Rule
from tfcalc.hf_config.reader import Reader


def olmo2(r: Reader) -> None:
    base_fields(r, dict(max_position_embeddings=2048, rms_norm_eps=1e-5, rope_theta=10000.0))
    r.take("attention_bias", "attn_bias", False)
    r.fields.update(norm_placement="output", qk_norm=True, qk_norm_over="projection")
    r.causal_or_base("Olmo2")


def checkpoint_names(arch: Architecture, model_type: str) -> list[Rule]:
    """Llama's tensor names (tfcalc.hf_config.llama_like)."""
    return llama_names(arch)
