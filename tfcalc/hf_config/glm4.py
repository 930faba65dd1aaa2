"""GLM-4 config.json files (modeling_glm4.py), Llama-shaped (tfcalc.hf_config.llama_like): Gemma 2's four norms
(input, post_self_attn, post_attention -- the FFN's input -- and post_mlp), partial rotary (``partial_rotary_factor``
0.5) of interleaved channel pairs, Q/K/V biases (``attention_bias``, default true) and no O bias, [gate | up] fused
in ``gate_up_proj``. .
"""

from __future__ import annotations

from tfcalc.architecture import Architecture
from tfcalc.hf_config.llama_like import base_fields, llama_names
from tfcalc.hf_config.names import Rule
from tfcalc.hf_config.reader import Reader


def glm4(r: Reader) -> None:
    base_fields(r, dict(max_position_embeddings=131072, rms_norm_eps=1.5625e-07, rope_theta=10000.0, head_dim=128,
                        n_kv_head=2))
    r.rope(10000.0, fraction=0.5)
    r.fields.update(attn_bias=r.flag("attention_bias", True), attn_out_bias=False, norm_placement="sandwich")
    r.causal_or_base("Glm4")


def checkpoint_names(arch: Architecture, model_type: str) -> list[Rule]:
    """modeling_glm4.py: rotary on interleaved channel pairs (``rope_pairs``), and its own norm names: the
    attention's output norm is post_self_attn_layernorm, so post_attention_layernorm is the FFN's input norm."""
    return llama_names(arch, [
        (r"layers\.(\d+)\.self_attn\.([qk])_proj\.(weight|bias)", "blocks.{0}.attn.qkv.{2}|{1}|rope_pairs"),
        (r"layers\.(\d+)\.post_self_attn_layernorm\.weight", "blocks.{0}.attn_post_norm.weight"),
        (r"layers\.(\d+)\.post_mlp_layernorm\.weight", "blocks.{0}.ffn_post_norm.weight")], sandwich=False)
