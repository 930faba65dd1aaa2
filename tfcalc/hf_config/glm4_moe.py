"""GLM-4.5 / 4.6 / 4.7 config.json files (model_type glm4_moe; modeling_glm4_moe.py, configuration_glm4_moe.py):
Llama's GQA attention (tfcalc.hf_config.llama_like) with Q/K/V biases (``attention_bias``; no O bias), RMSNorms
over each Q and K head with ``use_qk_norm``, rotary on the first half of each head (``partial_rotary_factor``,
0.5 by default, rotate-half pairs as Llama's -- not GLM-4's interleaved ones); DeepSeek-V3's mixture of experts
(tfcalc.hf_config.deepseek): the first ``first_k_dense_replace`` layers dense (``intermediate_size``), then
``n_routed_experts`` experts of ``moe_intermediate_size`` beside ``n_shared_experts`` shared ones, routed by a
sigmoid with a correction bias over ``n_group`` groups (Glm4MoeTopkRouter), renormalized (``norm_topk_prob``)
and scaled (``routed_scaling_factor``). ``num_nextn_predict_layers`` MTP modules are counted beside the model, as
DeepSeek-V3's (transformers builds none).
"""

from __future__ import annotations

from tfcalc.architecture import Architecture
from tfcalc.hf_config.deepseek import experts, moe_names, sigmoid_router
from tfcalc.hf_config.llama_like import base_fields, llama_names
from tfcalc.hf_config.names import Rule
from tfcalc.hf_config.reader import Reader

DEFAULTS = dict(n_routed_experts=128, moe_intermediate_size=1408, num_experts_per_tok=8, n_shared_experts=1,
                first_k_dense_replace=1)  # Glm4MoeConfig's


def glm4_moe(r: Reader) -> None:
    base_fields(r, dict(max_position_embeddings=131072, rms_norm_eps=1e-5, rope_theta=10000.0, n_kv_head=8),
                d_ff_key=None)
    r.rope(10000.0, fraction=0.5)  # Glm4MoeConfig.__post_init__: partial_rotary_factor 0.5 unless given
    r.take("attention_bias", "attn_bias", False)
    r.fields.update(attn_out_bias=False, qk_norm=r.flag("use_qk_norm", False))
    experts(r, DEFAULTS)
    if "n_expert" in r.fields:
        sigmoid_router(r, 1, 1, 1.0)
    r.take("num_nextn_predict_layers", "mtp_layers", 0)
    r.causal_or_base("Glm4Moe")


def checkpoint_names(arch: Architecture, model_type: str) -> list[Rule]:
    """DeepSeek-V3's mixture of experts (tfcalc.hf_config.deepseek.moe_names) beside Llama's attention."""
    return llama_names(arch, moe_names(arch))
