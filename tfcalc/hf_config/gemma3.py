"""Gemma 3: ``gemma3_text`` (the language model) and ``gemma3`` (it, inside a vision-language model).

gemma3_text (modeling_gemma3.py, configuration_gemma3.py): Gemma 2's blocks -- sandwich norms, (1 + w)
RMSNorms, GeGLU, embeddings × √d, tied head, scores scaled by query_pre_attn_scalar^-1/2 -- plus Q/K
RMSNorms over each head, local (sliding-window) and global layers in the pattern ``layer_types`` gives
(default: ``sliding_window_pattern`` 6, five local then one global), two RoPE bases (global
``rope_theta`` 1e6, local ``rope_local_base_freq`` 1e4; transformers 5 nests them in ``rope_parameters``
under full_attention and sliding_attention), the final soft-cap only where given (none by default; the
scores are never capped: transformers stores attn_logit_softcapping and passes it to no attention). RoPE scaling
(Gemma 3 27B: linear, factor 8, on the global layers) changes no count; tfcalc's model refuses to run it.

gemma3 (modeling_gemma3.py, Gemma3ForConditionalGeneration): ``text_config`` is counted as above; the
vision tower (SigLIP, modeling_siglip.py SiglipVisionModel, from ``vision_config``) and the projector
(Gemma3MultiModalProjector: a (vision d, text d) matrix and an RMSNorm) are counted apart and named beside
(``vision_params``).
"""

from __future__ import annotations

from tfcalc.architecture import Architecture
from tfcalc.errors import shown
from tfcalc.hf_config import layers
from tfcalc.hf_config.gemma import gemma_common
from tfcalc.hf_config.llama_like import llama_names
from tfcalc.hf_config.names import Rule
from tfcalc.hf_config.reader import Reader


def gemma3_text(r: Reader) -> None:
    r.divisible_heads()
    gemma_common(r, 4)
    r.take("max_position_embeddings", "max_seq_len", 131_072)  # Gemma3TextConfig's default
    r.activation("hidden_activation", "gelu_pytorch_tanh")
    nested = r.rope_parameters()
    full, local = nested.get("full_attention"), nested.get("sliding_attention")
    full = full if isinstance(full, dict) else {}
    local = local if isinstance(local, dict) else {}
    theta = r.get("rope_theta", full.get("rope_theta", 1_000_000.0))
    local_theta = r.get("rope_local_base_freq", local.get("rope_theta", 10_000.0))
    for key, value in (("rope_theta", theta), ("rope_local_base_freq", local_theta)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
            raise r.fail(f"'{key}' must be a positive number; got {shown(value)}")
    r.fields.update(rope_theta=float(theta), rope_local_theta=float(local_theta), rope_fraction=1.0,
                    norm_placement="sandwich", qk_norm=True,
                    attn_scale=r.positive("query_pre_attn_scalar", 256) ** -0.5,
                    # attn_logit_softcapping is stored but read by no module: Gemma3Attention.forward passes no
                    # softcap to its attention function (modeling_gemma3.py), so scores are never capped
                    attn_softcap=None,
                    logit_softcap=r.number("final_logit_softcapping", None))
    n = r.fields["n_layer"]
    period = r.number("sliding_window_pattern", 6, integer=True)
    if period is None or period < 1:
        raise r.fail(f"'sliding_window_pattern' must be a positive integer; got {shown(period)}")
    r.raw = {**r.raw, "sliding_window": r.get("sliding_window", 4096)}
    r.per_layer_list("layer_types")
    default = ["sliding_attention" if (i + 1) % period else "full_attention" for i in range(n)]
    layers.layer_types(r, n, default)
    if r.head({"Gemma3ForCausalLM": "causal", "Gemma3TextModel": "base"}, "Gemma3ForCausalLM") == "base":
        r.base_model()


def gemma3(r: Reader) -> None:
    """The language model of Gemma3ForConditionalGeneration, with its vision tower and projector named."""
    text, vision = r.objects("text_config", "vision_config")
    # a published text_config leaves out what equals Gemma3TextConfig's defaults (configuration_gemma3.py)
    defaults = dict(vocab_size=262_208, hidden_size=2304, intermediate_size=9216, num_hidden_layers=26,
                    num_attention_heads=8)
    inner = Reader({**defaults, **text, "model_type": "gemma3_text", "architectures": ["Gemma3ForCausalLM"]},
                   f"{r.where} (text_config)")
    gemma3_text(inner)
    r.fields.update(inner.fields)
    # Gemma3Config.tie_word_embeddings (default true) ties the outer lm_head to the language model's table
    r.fields["tie_embeddings"] = r.flag("tie_word_embeddings", True)
    if r.fields.get("dtype") is None:  # the dtype is often given once, outside text_config
        r.dtype()
    tower = siglip_params(Reader({**vision, "model_type": "siglip_vision_model"}, f"{r.where} (vision_config)"))
    d_vision, d_text = tower["hidden_size"], r.fields["d_model"]
    projector = d_vision * d_text + d_vision  # mm_input_projection_weight, mm_soft_emb_norm
    r.fields["vision_params"] = tower["params"] + projector
    if r.head({"Gemma3ForConditionalGeneration": "causal"}, "Gemma3ForConditionalGeneration") != "causal":
        raise r.fail("only Gemma3ForConditionalGeneration is supported")


def siglip_params(v: Reader) -> dict[str, int]:
    """Parameters of SigLIP's vision transformer (modeling_siglip.py, SiglipVisionModel), defaults of
    SiglipVisionConfig: patch embedding Conv2d(c, h, p, p) with bias, a learned position per patch
    ((image / patch)² of them), L pre-norm blocks (two LayerNorms, Q/K/V/O h×h with biases, MLP h -> i -> h
    with biases), a final LayerNorm, and with vision_use_head the attention-pooling head (a probe, torch's
    MultiheadAttention: in-projection 3h×h + 3h, out h×h + h; a LayerNorm; an MLP)."""
    size = v.size
    h, i, n = size("hidden_size", 768), size("intermediate_size", 3072), size("num_hidden_layers", 12)
    c, image, patch = size("num_channels", 3), size("image_size", 224), size("patch_size", 16)
    mlp = h * i + i + i * h + h
    block = 2 * 2 * h + 4 * (h * h + h) + mlp
    total = c * patch * patch * h + h + (image // patch) ** 2 * h + n * block + 2 * h
    if v.flag("vision_use_head", True):
        total += h + 3 * h * h + 3 * h + h * h + h + 2 * h + mlp
    return {"params": total, "hidden_size": h}


def checkpoint_names(arch: Architecture, model_type: str) -> list[Rule]:
    """Gemma's tensor names (gemma3's language model's behind the multimodal prefix, tfcalc.checkpoint.names);
    its Q/K norms scale by (1 + w) too (modeling_gemma3.py, Gemma3RMSNorm)."""
    first = [(r"layers\.(\d+)\.self_attn\.([qk])_norm\.weight", "blocks.{0}.attn.{1}_norm.weight||norm+1")]
    return llama_names(arch, first, unit_offset=True)
