"""Qwen3.5 config.json files (modeling_qwen3_5.py, modeling_qwen3_5_moe.py; configuration_qwen3_5.py,
configuration_qwen3_5_moe.py): Qwen3-Next's hybrid of gated-DeltaNet and gated softmax attention layers
(tfcalc.hf_config.qwen3_next), the DeltaNet's projections as four tensors (in_proj_qkv, in_proj_z, in_proj_b,
in_proj_a: tfcalc's linear_split_projections). ``qwen3_5_text``: a dense SwiGLU MLP of intermediate_size in every
layer; ``qwen3_5_moe_text``: in every layer ``num_experts`` experts of moe_intermediate_size, the top
``num_experts_per_tok`` renormalized (Qwen3_5MoeTopKRouter always renormalizes), and a shared expert of
shared_expert_intermediate_size with a sigmoid gate. Defaults of each transformers text config (the two share
rope_theta 10,000 and partial_rotary_factor 0.25). The multimodal RoPE (mrope_section, mrope_interleaved) is the
plain rotary on text, whose three position rows are equal.

``qwen3_5`` and ``qwen3_5_moe`` (Qwen3_5ForConditionalGeneration): ``text_config`` is the language model above;
the vision tower (Qwen3_5VisionModel, from ``vision_config``) is counted apart and named beside (``vision_params``).
"""

from __future__ import annotations

from tfcalc.architecture import Architecture
from tfcalc.hf_config.llama_like import base_fields
from tfcalc.hf_config.names import Rule
from tfcalc.hf_config.qwen3_next import checkpoint_names as qwen3_next_names, gated_attention, linear_layers
from tfcalc.hf_config.reader import Reader

TEXT = dict(max_position_embeddings=32768, rms_norm_eps=1e-6, rope_theta=10000.0, head_dim=256)
# the sizes a published text_config may leave out (Qwen3_5TextConfig's and Qwen3_5MoeTextConfig's defaults)
DENSE_DEFAULTS = dict(vocab_size=248320, hidden_size=4096, intermediate_size=12288, num_hidden_layers=32,
                      num_attention_heads=16, num_key_value_heads=4)
MOE_DEFAULTS = dict(vocab_size=248320, hidden_size=2048, num_hidden_layers=40, num_attention_heads=16,
                    num_key_value_heads=2)


def qwen3_5_text(r: Reader) -> None:
    base_fields(r, dict(TEXT, n_kv_head=4))  # Qwen3_5TextConfig's num_key_value_heads
    _hybrid(r, "Qwen3_5")


def qwen3_5_moe_text(r: Reader) -> None:
    base_fields(r, dict(TEXT, n_kv_head=2), d_ff_key=None)  # Qwen3_5MoeTextConfig's
    r.take("moe_intermediate_size", "d_ff", 512)
    r.take("num_experts", "n_expert", 256)
    r.take("num_experts_per_tok", "n_expert_active", 8)
    r.fields["router_norm_topk"] = True
    r.fields.update(shared_expert_d_ff=r.take("shared_expert_intermediate_size", "shared_expert_d_ff", 512),
                    shared_expert_gate=True)
    _hybrid(r, "Qwen3_5Moe")


def _hybrid(r: Reader, prefix: str) -> None:
    gated_attention(r)
    linear_layers(r, split=True)
    r.causal_or_base(prefix)


def qwen3_5(r: Reader) -> None:
    _multimodal(r, qwen3_5_text, "qwen3_5_text", DENSE_DEFAULTS, "Qwen3_5")


def qwen3_5_moe(r: Reader) -> None:
    _multimodal(r, qwen3_5_moe_text, "qwen3_5_moe_text", MOE_DEFAULTS, "Qwen3_5Moe")


def _multimodal(r: Reader, text_mapper, text_type: str, defaults: dict, prefix: str) -> None:
    """The language model of <prefix>ForConditionalGeneration, its vision tower named beside it."""
    text, vision = r.objects("text_config", "vision_config")
    inner = Reader({**defaults, **text, "model_type": text_type, "architectures": [f"{prefix}ForCausalLM"]},
                   f"{r.where} (text_config)")
    text_mapper(inner)
    r.fields.update(inner.fields)
    r.fields["tie_embeddings"] = r.flag("tie_word_embeddings", False)  # Qwen3_5Config's, outside text_config
    if r.fields.get("dtype") is None:
        r.dtype()
    r.fields["vision_params"] = vision_params(Reader({**vision, "model_type": f"{text_type}_vision"},
                                                     f"{r.where} (vision_config)"))
    if r.head({f"{prefix}ForConditionalGeneration": "causal"}, f"{prefix}ForConditionalGeneration") != "causal":
        raise r.fail(f"only {prefix}ForConditionalGeneration is supported")


def vision_params(v: Reader) -> int:
    """Parameters of Qwen3_5VisionModel (modeling_qwen3_5.py; Qwen3_5VisionConfig's defaults): a Conv3d patch
    embedding (c, t, p, p) -> h with bias, a learned table of num_position_embeddings positions, ``depth`` blocks
    (two LayerNorms; fused QKV h -> 3h and its output h -> h, with biases; an MLP h -> i -> h with biases), and the
    merger: a LayerNorm over h, then (h·m²) -> (h·m²) -> out_hidden_size with biases, m = spatial_merge_size."""
    size = v.size
    h, i, depth = size("hidden_size", 1152), size("intermediate_size", 4304), size("depth", 27)
    c, p, t = size("in_channels", 3), size("patch_size", 16), size("temporal_patch_size", 2)
    m, out, positions = size("spatial_merge_size", 2), size("out_hidden_size", 3584), size("num_position_embeddings",
                                                                                             2304)
    block = 2 * 2 * h + (3 * h * h + 3 * h) + (h * h + h) + (h * i + i + i * h + h)
    wide = h * m * m
    merger = 2 * h + wide * wide + wide + wide * out + out
    return c * t * p * p * h + h + positions * h + depth * block + merger


def checkpoint_names(arch: Architecture, model_type: str) -> list[Rule]:
    """Qwen3-Next's names (its DeltaNet's four input projections are Weights of their own names); qwen3_5's
    language model's behind the multimodal prefix, its vision tower counted apart (tfcalc.checkpoint.names)."""
    return qwen3_next_names(arch, model_type)
