"""Llama 4: ``llama4_text`` (the language model) and ``llama4`` (it, inside Llama4ForConditionalGeneration).

llama4_text (modeling_llama4.py, configuration_llama4.py, defaults of Llama4TextConfig): Llama's blocks;
a mixture of ``num_local_experts`` experts of ``intermediate_size``, top ``num_experts_per_tok`` (1), with
a shared expert of the same width, on the layers ``moe_layers`` lists (default every
``interleave_moe_layer_step``-th), dense FFNs of ``intermediate_size_mlp`` on the others; the router's
sigmoid of the chosen logit scales the token's input to its expert; layers without RoPE
(``no_rope_layers``, 1 = RoPE, default every 4th without) which attend to the whole context, the others
chunked (``attention_chunk_size``, 8192; ``layer_types``); Q and K L2-normed after RoPE on RoPE layers
(``use_qk_norm``); the attention temperature on NoPE layers (``attn_temperature_tuning``, ``floor_scale``,
``attn_scale``). RoPE scaling (Scout: llama3) changes no count; tfcalc's model refuses to run it.

llama4: ``text_config`` counted as above; the vision model (Llama4VisionModel, from ``vision_config``)
and the projector counted apart and named beside (``vision_params``).
"""

from __future__ import annotations

from tfcalc.architecture import Architecture
from tfcalc.errors import shown
from tfcalc.hf_config import layers
from tfcalc.hf_config.llama_like import base_fields, llama_names
from tfcalc.hf_config.names import Rule
from tfcalc.hf_config.reader import Reader


def llama4_text(r: Reader) -> None:
    base_fields(r, dict(max_position_embeddings=4096 * 32, rms_norm_eps=1e-5, rope_theta=500000.0, head_dim=128,
                        n_kv_head=8))
    n = r.fields["n_layer"]
    r.fields.update(attn_bias=r.flag("attention_bias", False))
    r.take("num_local_experts", "n_expert", 16)
    r.take("num_experts_per_tok", "n_expert_active", 1)
    r.fields.update(shared_expert_d_ff=r.fields["d_ff"], router_norm_topk=False, router_sigmoid_input=True)
    r.per_layer_list("moe_layers, no_rope_layers and layer_types")
    _moe_layers(r, n)
    rope = layers.rope_flags(r, n)
    r.raw = {**r.raw, "attention_chunk_size": r.get("attention_chunk_size", 8192)}
    default = ["chunked_attention" if has_rope else "full_attention" for has_rope in rope]
    if r.raw.get("attention_chunk_size") is None:
        default = ["full_attention"] * n
    layers.layer_types(r, n, default, rope)
    r.fields["qk_l2_norm"] = r.flag("use_qk_norm", True) and any(rope)
    # a published Scout file writes attn_temperature_tuning as 4 (truthy), the config class as a bool
    tuning = r.get("attn_temperature_tuning", True)
    if isinstance(tuning, (bool, int)) and tuning and not all(rope):
        r.fields["attn_temperature_floor"] = r.number("floor_scale", 8192, integer=True)
        r.fields["attn_temperature_scale"] = float(r.number("attn_scale", 0.1))
    if r.head({"Llama4ForCausalLM": "causal", "Llama4TextModel": "base"}, "Llama4ForCausalLM") == "base":
        r.base_model()


def _moe_layers(r: Reader, n: int) -> None:
    """moe_layers (default: every interleave_moe_layer_step-th layer) as moe_every, dense_d_ff the width of
    the others (intermediate_size_mlp)."""
    step = r.number("interleave_moe_layer_step", 1, integer=True)
    if step is None or step < 1:
        raise r.fail(f"'interleave_moe_layer_step' must be a positive integer; got {shown(step)}")
    listed = r.raw.get("moe_layers")
    moe = list(range(step - 1, n, step)) if listed is None else listed
    if not isinstance(moe, list) or not moe:
        raise r.fail(f"'moe_layers' must be a list of layer indices; got {shown(listed)}")
    every = moe[0] + 1
    if moe != list(range(every - 1, n, every)):
        raise r.fail(f"'moe_layers' {shown(moe)} is not every k-th layer, the only interleaving tfcalc builds "
                     "(moe_every)")
    if every > 1:
        r.fields["moe_every"] = every
        r.take("intermediate_size_mlp", "dense_d_ff", 16384)


def llama4(r: Reader) -> None:
    """The language model of Llama4ForConditionalGeneration (its text_config)."""
    (text,) = r.objects("text_config")
    defaults = dict(vocab_size=202048, hidden_size=5120, intermediate_size=8192, num_hidden_layers=48,
                    num_attention_heads=40, num_key_value_heads=8)  # Llama4TextConfig's
    inner = Reader({**defaults, **text, "model_type": "llama4_text", "architectures": ["Llama4ForCausalLM"]},
                   f"{r.where} (text_config)")
    llama4_text(inner)
    r.fields.update(inner.fields)
    if r.fields.get("dtype") is None:
        r.dtype()
    vision = r.raw.get("vision_config") or {}
    if not isinstance(vision, dict):
        raise r.fail(f"'vision_config' must be an object of config fields; got {shown(vision)}")
    r.fields["vision_params"] = vision_params(Reader({**vision, "model_type": "llama4_vision_model"},
                                                     f"{r.where} (vision_config)"), r.fields["d_model"])
    if r.head({"Llama4ForConditionalGeneration": "causal"}, "Llama4ForConditionalGeneration") != "causal":
        raise r.fail("only Llama4ForConditionalGeneration is supported")


def vision_params(v: Reader, d_text: int) -> int:
    """Llama4VisionModel and Llama4MultiModalProjector (modeling_llama4.py), defaults of Llama4VisionConfig:
    patch embedding Linear(c·p², h) without bias (Llama4UnfoldConvolution), a class embedding (h), learned
    positions ((image / patch)² + 1 rows), LayerNorms before and after (2h each), L blocks (two LayerNorms,
    Q/K/V/O h×h with biases, MLP h -> i -> h with biases), the pixel-shuffle adapter's two bias-free
    Linears (i -> projector_input_dim, projector_output_dim -> projector_output_dim), and the projector
    vision_output_dim -> text d (bias with multi_modal_projector_bias)."""
    size = v.size
    h, i, n = size("hidden_size", 768), size("intermediate_size", 5632), size("num_hidden_layers", 34)
    c, image, patch = size("num_channels", 3), size("image_size", 448), size("patch_size", 14)
    p_in, p_out, out = size("projector_input_dim", 4096), size("projector_output_dim", 4096), size(
        "vision_output_dim", 7680)
    block = 2 * 2 * h + 4 * (h * h + h) + h * i + i + i * h + h
    tower = c * patch * patch * h + h + ((image // patch) ** 2 + 1) * h + 2 * 2 * h + n * block
    adapter = i * p_in + p_out * p_out
    projector = out * d_text + (d_text if v.flag("multi_modal_projector_bias", False) else 0)
    return tower + adapter + projector


def checkpoint_names(arch: Architecture, model_type: str) -> list[Rule]:
    """modeling_llama4.py: complex (interleaved-pair) RoPE (``rope_pairs``), feed_forward names, experts stored
    (E, d, 2f) and (E, f, d): the transposes of tfcalc's grouped layout (``mT``)."""
    ff = r"layers\.(\d+)\.feed_forward\."
    return llama_names(arch, [
        (r"layers\.(\d+)\.self_attn\.([qk])_proj\.(weight|bias)", "blocks.{0}.attn.qkv.{2}|{1}|rope_pairs"),
        (ff + r"router\.weight", "blocks.{0}.ffn.router.weight"),
        (ff + r"experts\.gate_up_proj", "blocks.{0}.ffn.experts.up.weight||mT"),
        (ff + r"experts\.down_proj", "blocks.{0}.ffn.experts.down.weight||mT"),
        (ff + r"shared_expert\.(gate|up)_proj\.weight", "blocks.{0}.ffn.shared.up.weight|{1}"),
        (ff + r"shared_expert\.down_proj\.weight", "blocks.{0}.ffn.shared.down.weight"),
        (ff + r"(gate|up)_proj\.weight", "blocks.{0}.ffn.up.weight|{1}"),
        (ff + r"down_proj\.weight", "blocks.{0}.ffn.down.weight")])
