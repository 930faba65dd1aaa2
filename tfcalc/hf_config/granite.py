"""Granite config.json files (ibm-granite/granite-3.1-8b-instruct; modeling_granite.py): Llama's, plus
embedding_multiplier (token embeddings), residual_multiplier (each sub-layer's output before its residual add),
attention_multiplier (the score scale, in place of 1/sqrt(d_head)) and logits_scaling (logits divided by it).
"""

from __future__ import annotations

from tfcalc.architecture import Architecture
from tfcalc.hf_config.llama_like import base_fields, llama_names
from tfcalc.hf_config.names import Rule
from tfcalc.hf_config.reader import Reader


def granite(r: Reader) -> None:
    r.divisible_heads()
    base_fields(r, dict(max_position_embeddings=2048, rms_norm_eps=1e-6, rope_theta=10000.0))
    r.take("attention_bias", "attn_bias", False)
    r.take("mlp_bias", "ffn_bias", False)
    multipliers = {key: r.number(key, 1.0) for key in ("embedding_multiplier", "residual_multiplier",
                                                       "attention_multiplier", "logits_scaling")}
    for key, value in multipliers.items():
        if value is not None and value <= 0:
            raise r.fail(f"'{key}' must be positive; got {value}")
    r.fields.update(embedding_multiplier=multipliers["embedding_multiplier"],
                    residual_multiplier=multipliers["residual_multiplier"],
                    attn_scale=multipliers["attention_multiplier"])  # modeling_granite.py: scaling = multiplier
    r.causal_or_base("Granite")
    if r.fields.get("lm_head", True):
        r.fields["logit_scale"] = 1 / multipliers["logits_scaling"]  # logits / logits_scaling


def checkpoint_names(arch: Architecture, model_type: str) -> list[Rule]:
    """Llama's tensor names (modeling_granite.py keeps them; its multipliers are no tensors)."""
    return llama_names(arch)
