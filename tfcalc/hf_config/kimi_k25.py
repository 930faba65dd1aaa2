"""Kimi K2.5 config.json files (model_type ``kimi_k25``; transformers 5.24, configuration_kimi_k25.py,
modeling_kimi_k25.py): Kimi K2's language model (DeepSeek-V3's architecture: tfcalc.hf_config.deepseek; its
``text_config`` says model_type kimi_k2 or deepseek_v3, Kimi_K25Config.__post_init__ reads both as deepseek_v3)
beside a vision tower (Kimi_K25VisionModel, from ``vision_config``) and a projector (``mm_projector``), the two
counted apart and named beside the language model (``vision_params``).

The LM head is tied to the token table as the top-level ``tie_word_embeddings`` says (Kimi_K25Config's, default
true; Kimi_K25ForConditionalGeneration ties by it, whatever text_config says). The head class is transformers'
Kimi_K25ForConditionalGeneration, or KimiK25ForConditionalGeneration as the checkpoints' own remote code names it.
A ``quantization_config`` is read where it stands, at the top level or in text_config (one of the two, or the
same in both), so that a quantized checkpoint's weights are counted as stored.
"""

from __future__ import annotations

from tfcalc.architecture import Architecture
from tfcalc.errors import shown
from tfcalc.hf_config.deepseek import checkpoint_names as deepseek_names, deepseek_v3
from tfcalc.hf_config.names import Rule
from tfcalc.hf_config.reader import Reader

TEXT_TYPES = ("deepseek_v3", "kimi_k2")  # what Kimi_K25Config's text_config may say (both DeepSeek-V3's model)
HEADS = ("Kimi_K25ForConditionalGeneration", "KimiK25ForConditionalGeneration")


def kimi_k25(r: Reader) -> None:
    text, vision = r.objects("text_config", "vision_config")
    kind = text.get("model_type", "deepseek_v3")
    if kind not in TEXT_TYPES:
        raise r.fail(f"'text_config' model_type {shown(kind)} is not supported ({' or '.join(TEXT_TYPES)}: "
                     "Kimi K2.5's language model is DeepSeek-V3's)")
    inner_q, outer_q = text.get("quantization_config"), r.raw.get("quantization_config")
    if inner_q is not None and outer_q is not None and inner_q != outer_q:
        raise r.fail("'quantization_config' differs between the top level and text_config: which one the "
                     "checkpoint's tensors follow is not said")
    if inner_q is not None:  # read as every family's (tfcalc.hf_config.quantization), never dropped for bf16
        r.raw = {**r.raw, "quantization_config": inner_q}
    inner = Reader({**text, "model_type": "deepseek_v3", "architectures": ["DeepseekV3ForCausalLM"]},
                   f"{r.where} (text_config)")
    deepseek_v3(inner)
    r.fields.update(inner.fields)
    r.fields["tie_embeddings"] = r.flag("tie_word_embeddings", True)  # Kimi_K25Config's, outside text_config
    if r.fields.get("dtype") is None:
        r.dtype()
    projection = r.raw.get("projection_hidden_size")
    r.fields["vision_params"] = vision_params(Reader({**vision, "model_type": "kimi_k25_vision"},
                                                     f"{r.where} (vision_config)"),
                                              r.fields["d_model"], projection)
    heads = {name: "causal" for name in HEADS}
    if r.head(heads, HEADS[0]) != "causal":
        raise r.fail(f"only {' or '.join(HEADS)} is supported")


def vision_params(v: Reader, d_text: int, projection: object) -> int:
    """Parameters of Kimi_K25VisionModel and Kimi_K25MultimodalProjection (modeling_kimi_k25.py;
    Kimi_K25VisionConfig's defaults), h the tower's width, i its MLP's, p the patch, m = mh·mw the merge kernel:
    a Conv2d patch embedding 3 -> h of p×p with bias, a learned position grid pos_emb_height × pos_emb_width × h
    (the time table is a buffer), ``num_hidden_layers`` blocks (two LayerNorms; Q, K, V and the output h -> h,
    with biases; an MLP h -> i -> h with biases), a final LayerNorm; the projector: a LayerNorm over
    projection_hidden_size (default 1152, which must be h for the forward to run), then (h·m) -> (h·m) and
    (h·m) -> the language model's hidden_size, with biases."""
    size = v.size
    h, i, depth = size("hidden_size", 1152), size("intermediate_size", 4304), size("num_hidden_layers", 27)
    p, rows, cols = size("patch_size", 14), size("pos_emb_height", 64), size("pos_emb_width", 64)
    size("num_attention_heads", 16)
    merge = v.get("merge_kernel_size", [2, 2])
    if (not isinstance(merge, list) or len(merge) != 2
            or not all(isinstance(k, int) and not isinstance(k, bool) and k > 0 for k in merge)):
        raise v.fail(f"'merge_kernel_size' must be two positive integers; got {shown(merge)}")
    if projection is None:
        projection = 1152  # Kimi_K25Config.projection_hidden_size
    if isinstance(projection, bool) or not isinstance(projection, int) or projection < 1:
        raise v.fail(f"'projection_hidden_size' must be a positive integer; got {shown(projection)}")
    block = 2 * 2 * h + 4 * (h * h + h) + (h * i + i + i * h + h)
    wide = h * merge[0] * merge[1]
    projector = 2 * projection + wide * wide + wide + wide * d_text + d_text
    return 3 * p * p * h + h + rows * cols * h + depth * block + 2 * h + projector


def checkpoint_names(arch: Architecture, model_type: str) -> list[Rule]:
    """DeepSeek-V3's names (tfcalc.hf_config.deepseek) behind the language model's prefix; the vision tower and
    mm_projector counted apart (tfcalc.checkpoint.names)."""
    return deepseek_names(arch, model_type)
