"""Gemma 4: ``gemma4_text`` (the language model) and ``gemma4`` (it, inside a vision-language model).

gemma4_text (modeling_gemma4.py, configuration_gemma4.py, Gemma4TextConfig's defaults): Gemma 3's layout --
sandwich norms, GeGLU, embeddings × √d, tied head, Q/K RMSNorms over each head, local (sliding-window) and global
layers as ``layer_types`` says (default: five local then one global; the last layer is always global, as
Gemma4TextConfig forces it), the final soft-cap where given -- with these changes (Gemma4TextAttention,
Gemma4TextDecoderLayer):

- every RMSNorm scales by w, not (1 + w) (Gemma4RMSNorm); scores are not scaled (scaling 1.0: the Q/K norms
  set their size);
- each V head is RMS-normed without a weight (v_norm: tfcalc's ``v_norm``);
- the global layers have heads of ``global_head_dim`` (512) and, with ``attention_k_eq_v``, read V from K's
  projection (no v_proj there) and keep ``num_global_key_value_heads`` K/V heads (tfcalc's global_d_head,
  global_v_from_k, global_n_kv_head). transformers 5.24 writes these as ``per_layer_config`` (each global layer's
  head_dim and num_key_value_heads), older files as the two keys: both are read;
- RoPE per layer type (``rope_parameters`` nested by full_attention and sliding_attention): the local layers the
  default RoPE on the whole head (base 10,000; a partial_rotary_factor there is read by no function), the global
  ones proportional RoPE (base 1,000,000; 0.25 of the head's frequencies turn: tfcalc.architecture.rope);
- every block's output times its ``layer_scalar`` (a buffer, no parameter: tfcalc's layer_scalar).

The last ``num_kv_shared_layers`` layers read the K/V of the last earlier layer of their type and hold no cache
(tfcalc's kv_shared_layers); with ``use_double_wide_mlp`` their MLP is twice intermediate_size wide
(kv_shared_d_ff).

Per-layer inputs (Gemma 4 E2B and E4B): ``hidden_size_per_layer_input`` p (Gemma4TextConfig's default 256; 0:
none) channels per layer and token, from a table of ``vocab_size_per_layer_input`` rows and a projection of the
embeddings (tfcalc's per_layer_dim and per_layer_vocab; tfcalc.architecture.per_layer). Either written null is
refused in one line, as transformers refuses the file (both are plain ``int`` fields of its strict config).

Experts (Gemma 4 26B-A4B, ``enable_moe_block``): in every layer ``num_experts`` of ``moe_intermediate_size``, the
top ``top_k_experts``, beside the MLP of intermediate_size (tfcalc's moe_beside_mlp: the MLP as the shared expert,
the router's scales and the three norms of tfcalc.architecture.ffn, step 5).

Not built, refused in one line: bidirectional attention over every token (``use_bidirectional_attention`` "all").

gemma4 (Gemma4ForConditionalGeneration): ``text_config`` is read as above; the vision tower (Gemma4VisionModel, from
``vision_config``) and the audio tower (Gemma4AudioModel, from ``audio_config``; Gemma 4 E2B and E4B), each with the
projection into the language model (Gemma4MultimodalEmbedder), are counted apart and named beside it
(``vision_params``: both towers).
"""

from __future__ import annotations

from typing import Any

from tfcalc.architecture import Architecture
from tfcalc.errors import shown
from tfcalc.hf_config import layers
from tfcalc.hf_config.llama_like import base_fields, llama_names
from tfcalc.hf_config.names import Rule
from tfcalc.hf_config.reader import Reader

THETAS = {"full_attention": 1_000_000.0, "sliding_attention": 10_000.0}  # Gemma4TextConfig.__post_init__
DEFAULT_ROPE = {"sliding_attention": {"rope_type": "default", "rope_theta": 10_000.0},
                "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25,
                                   "rope_theta": 1_000_000.0}}
# the sizes a published text_config may leave out (Gemma4TextConfig's defaults)
TEXT_DEFAULTS = dict(vocab_size=262_144, hidden_size=2304, intermediate_size=9216, num_hidden_layers=30,
                     num_attention_heads=8, num_key_value_heads=4, head_dim=256)


def gemma4_text(r: Reader) -> None:
    r.raw = {**TEXT_DEFAULTS, **r.raw}
    _refuse_unbuilt(r)
    base_fields(r, dict(max_position_embeddings=131_072, rms_norm_eps=1e-6, rope_theta=THETAS["full_attention"],
                        head_dim=256, tie=True, hidden_act="gelu_pytorch_tanh"))
    r.take("attention_bias", "attn_bias", False)
    r.fields.update(embedding_scale=True, norm_placement="sandwich", qk_norm=True, v_norm=True, layer_scalar=True,
                    attn_scale=1.0, attn_softcap=None, logit_softcap=r.number("final_logit_softcapping", None))
    n = r.fields["n_layer"]
    r.raw = {**r.raw, "sliding_window": r.get("sliding_window", 512)}
    kinds = _layer_types(r, n)
    layers.layer_types(r, n, kinds)
    _global_heads(r, kinds)  # every global layer's, all-global models included (per_layer_config names each)
    if "sliding_attention" not in kinds:  # every layer global: the global heads are the model's heads
        if r.fields.get("global_d_head"):
            r.fields["d_head"] = r.fields.pop("global_d_head")
        if r.fields.get("global_n_kv_head"):
            r.fields["n_kv_head"] = r.fields.pop("global_n_kv_head")
        if r.fields.get("global_v_from_k"):  # V read from K in every layer: the window stays, no layer is local
            r.fields["sliding_window"] = r.raw["sliding_window"]
    _rope(r, kinds)
    _shared_kv(r, n, kinds)
    _per_layer_inputs(r)
    _experts(r)
    r.causal_or_base("Gemma4")


def _experts(r: Reader) -> None:
    """enable_moe_block: in every layer num_experts experts of moe_intermediate_size, the top top_k_experts,
    beside the MLP of intermediate_size (Gemma4TextExperts, Gemma4TextRouter: tfcalc's moe_beside_mlp)."""
    if not r.flag("enable_moe_block", False):
        return
    for key in ("num_experts", "top_k_experts", "moe_intermediate_size"):
        value = r.number(key, None, integer=True)
        if value is None or value < 1:
            raise r.fail(f"'{key}' must be a positive integer with enable_moe_block; got {shown(value)}")
    dense = r.fields["d_ff"]
    r.take("moe_intermediate_size", "d_ff")
    r.take("num_experts", "n_expert")
    r.take("top_k_experts", "n_expert_active")
    r.fields.update(shared_expert_d_ff=dense, moe_beside_mlp=True, router_norm_topk=True)
    if r.fields.get("kv_shared_d_ff"):  # the wide MLP of the shared layers is the shared expert's, 2 · intermediate
        r.fields["kv_shared_d_ff"] = 2 * dense

def per_layer_not_null(r: Reader, config_class: str, off: str = "") -> None:
    """Refuse hidden_size_per_layer_input or vocab_size_per_layer_input written null: transformers 5.24's
    Gemma4TextConfig and Gemma3nTextConfig declare both plain ``int`` fields, validated strictly (huggingface_hub's
    strict dataclass: "expected int, got NoneType", StrictDataclassFieldValidationError), so no transformers loads
    such a file; reading the null as absent (the default) or as none would count a model nobody can build."""
    for key in ("hidden_size_per_layer_input", "vocab_size_per_layer_input"):
        if key in r.raw and r.raw[key] is None:
            raise r.fail(f"'{key}' is null: {config_class} requires an integer there{off}")


def _per_layer_inputs(r: Reader) -> None:
    """Per-layer inputs: hidden_size_per_layer_input p (absent: Gemma4TextConfig's 256; 0: none, as
    Gemma4TextModel tests it for truth), from a table of vocab_size_per_layer_input rows (default 262,144); null
    refused (per_layer_not_null)."""
    per_layer_not_null(r, "Gemma4TextConfig", " (0 for no per-layer inputs)")
    key = "hidden_size_per_layer_input"
    p = r.number(key, 256, integer=True)
    if p == 0:
        return
    if p < 0:
        raise r.fail(f"'{key}' must be 0 or more; got {shown(p)}")
    vocab = r.number("vocab_size_per_layer_input", 262_144, integer=True)
    if vocab is None or vocab < 1:
        raise r.fail(f"'vocab_size_per_layer_input' must be a positive integer; got {shown(vocab)}")
    r.fields.update(per_layer_dim=p, per_layer_vocab=vocab if vocab != r.fields["vocab_size"] else None)


def _shared_kv(r: Reader, n: int, kinds: list[str]) -> None:
    """num_kv_shared_layers (Gemma4TextConfig.kv_sharing_modes): the last ones read the K/V of the last earlier
    layer of their type, each type among them having one (transformers refuses the file otherwise); with
    use_double_wide_mlp their MLP is 2 · intermediate_size wide (Gemma4TextMLP)."""
    shared = kv_shared_layers(r, n, kinds, 0)
    wide = r.flag("use_double_wide_mlp", False)
    if shared and wide:
        r.fields["kv_shared_d_ff"] = 2 * r.fields["d_ff"]


def kv_shared_layers(r: Reader, n: int, kinds: list[str], default: int) -> int:
    """num_kv_shared_layers, Gemma 3n's and Gemma 4's (default: the config class's; 0 none): checked and set as
    the ``kv_shared_layers`` field when above 0 -- the last ones read the K/V of an earlier layer of their type, so
    they are fewer than the layers and each type among them has an earlier layer."""
    shared = r.number("num_kv_shared_layers", default, integer=True)
    if not shared:
        return 0
    if not 0 < shared < n:
        raise r.fail(f"'num_kv_shared_layers' must be 0 or more and below 'num_hidden_layers' ({n}): the layers "
                     f"whose K/V they read come before them; got {shown(shared)}")
    if set(kinds[:n - shared]) != set(kinds):
        raise r.fail("'num_kv_shared_layers': a layer type among the shared layers has no earlier layer of its type "
                     "to read K/V from (transformers refuses this file too)")
    r.fields["kv_shared_layers"] = shared
    return shared


def _refuse_unbuilt(r: Reader) -> None:
    bidirectional = r.get("use_bidirectional_attention")
    if bidirectional not in (None, "vision"):  # "vision": text tokens stay causal, all that is counted here
        raise r.fail(f"'use_bidirectional_attention' {shown(bidirectional)} is not supported: tfcalc's language "
                     "model is causal (null or \"vision\")")
    r.flag("attention_k_eq_v", False)


def _layer_types(r: Reader, n: int) -> list[str]:
    """layer_types, or Gemma4TextConfig's default (every 6th global); the last layer global either way."""
    kinds = r.raw.get("layer_types")
    if kinds is None:
        r.per_layer_list("layer_types")
        kinds = ["sliding_attention" if (i + 1) % 6 else "full_attention" for i in range(n)]
    if not isinstance(kinds, list) or not all(k in ("sliding_attention", "full_attention") for k in kinds):
        raise r.fail(f"'layer_types' must be a list of sliding_attention and full_attention; got {shown(kinds)}")
    if kinds and kinds[-1] != "full_attention":  # Gemma4TextConfig.__post_init__ forces it (with a warning)
        kinds = [*kinds[:-1], "full_attention"]
    r.raw = {**r.raw, "layer_types": kinds}
    return kinds


def _global_heads(r: Reader, kinds: list[str]) -> None:
    """The global layers' head width and K/V heads: per_layer_config (transformers 5.24 writes it) or
    global_head_dim (default 512) and num_global_key_value_heads (read with attention_k_eq_v only)."""
    k_eq_v = r.flag("attention_k_eq_v", False)
    per_layer = r.raw.get("per_layer_config")
    if per_layer is not None:
        head_dim, kv_heads = _per_layer(r, per_layer, kinds)
    else:
        head_dim = r.number("global_head_dim", 512, integer=True)
        kv_heads = r.number("num_global_key_value_heads", None, integer=True) if k_eq_v else None
    for key, value in (("global_head_dim", head_dim), ("num_global_key_value_heads", kv_heads)):
        if value is not None and value < 1:
            raise r.fail(f"'{key}' must be a positive integer; got {shown(value)}")
    if head_dim is not None and head_dim != r.fields["d_head"]:
        r.fields["global_d_head"] = head_dim
    if kv_heads is not None and kv_heads != (r.fields["n_kv_head"] or r.fields["n_head"]):
        r.fields["global_n_kv_head"] = kv_heads
    r.fields["global_v_from_k"] = k_eq_v


def _per_layer(r: Reader, per_layer: Any, kinds: list[str]) -> tuple[Any, Any]:
    """(head_dim, num_key_value_heads) every global layer's per_layer_config entry gives alike (None: not given);
    any other override, or one on a sliding layer, or global layers told apart, is refused."""
    if not isinstance(per_layer, dict):
        raise r.fail(f"'per_layer_config' must be an object of layer index -> overrides; got {shown(per_layer)}")
    seen, listed = set(), set()
    for key, value in per_layer.items():  # keys as transformers writes them: "5", or "05" in a 30-layer model
        i = int(key) if isinstance(key, str) and key.isdigit() else None
        if i is None or i >= len(kinds) or not isinstance(value, dict):
            raise r.fail(f"'per_layer_config' entry {shown(key)} must be a layer index below {len(kinds)} with an "
                         "object of overrides")
        if kinds[i] != "full_attention" or set(value) - {"head_dim", "num_key_value_heads"}:
            raise r.fail(f"'per_layer_config' layer {i}: tfcalc builds head_dim and num_key_value_heads overrides "
                         "of the full_attention layers only")
        seen.add((value.get("head_dim"), value.get("num_key_value_heads")))
        listed.add(i)
    full = {i for i, k in enumerate(kinds) if k == "full_attention"}
    if len(seen) > 1 or (seen and full != listed):
        raise r.fail("'per_layer_config' must give every full_attention layer the same overrides: tfcalc builds one "
                     "kind of global layer")
    return next(iter(seen)) if seen else (None, None)


def _rope(r: Reader, kinds: list[str]) -> None:
    """Bases per layer type; the global layers' proportional RoPE is read by tfcalc.hf_config.rope_scaling (its
    proportion and factor), the rest checked here: default on the local layers, default or proportional on the
    global ones."""
    nested = r.raw.get("rope_parameters")
    if nested is None:
        nested = DEFAULT_ROPE
        r.raw = {**r.raw, "rope_parameters": nested}
    if not isinstance(nested, dict):
        raise r.fail(f"'rope_parameters' must be an object nested by layer type; got {shown(nested)}")
    got = {}
    for kind in set(kinds):
        value = nested.get(kind)
        if not isinstance(value, dict):
            raise r.fail(f"'rope_parameters' {kind} must be an object; got {shown(value)}")
        rope_type = value.get("rope_type", "default")
        allowed = ("default", "proportional") if kind == "full_attention" else ("default",)
        if rope_type not in allowed:
            raise r.fail(f"'rope_parameters' {kind} rope_type {shown(rope_type)} is not supported "
                         f"({' or '.join(allowed)})")
        theta = value.get("rope_theta", THETAS[kind])
        if isinstance(theta, bool) or not isinstance(theta, (int, float)) or not theta > 0:
            raise r.fail(f"'rope_parameters' {kind} rope_theta must be a positive number; got {shown(theta)}")
        got[kind] = float(theta)
    r.fields.update(pos_encoding="rope", rope_fraction=1.0,
                    rope_theta=got.get("full_attention", THETAS["full_attention"]))
    if "sliding_attention" in got:
        r.fields["rope_local_theta"] = got["sliding_attention"]


def gemma4(r: Reader) -> None:
    """The language model of Gemma4ForConditionalGeneration; its vision and audio towers and their projections
    counted apart and named beside it (``vision_params``)."""
    text, vision, audio = r.objects("text_config", "vision_config", "audio_config")
    inner = Reader({**text, "model_type": "gemma4_text", "architectures": ["Gemma4ForCausalLM"]},
                   f"{r.where} (text_config)")
    gemma4_text(inner)
    r.fields.update(inner.fields)
    r.raw = {**r.raw, "text_config": inner.raw}  # the defaults filled in, for tfcalc.hf_config.rope_scaling
    r.fields["tie_embeddings"] = r.flag("tie_word_embeddings", True)  # Gemma4Config's, outside text_config
    if r.fields.get("dtype") is None:
        r.dtype()
    d = r.fields["d_model"]
    towers = 0
    if r.raw.get("vision_config") is not None:
        towers += vision_params(Reader({**vision, "model_type": "gemma4_vision"}, f"{r.where} (vision_config)"), d)
    if r.raw.get("audio_config") is not None:
        towers += audio_params(Reader({**audio, "model_type": "gemma4_audio"}, f"{r.where} (audio_config)"), d)
    if towers:
        r.fields["vision_params"] = towers
    if r.head({"Gemma4ForConditionalGeneration": "causal"}, "Gemma4ForConditionalGeneration") != "causal":
        raise r.fail("only Gemma4ForConditionalGeneration is supported")


def vision_params(v: Reader, d_text: int) -> int:
    """Gemma4VisionModel and its Gemma4MultimodalEmbedder (modeling_gemma4.py; Gemma4VisionConfig's defaults), h
    its width, i its MLP's: a patch projection 3·p² -> h and two position tables (2, position_embedding_size, h);
    ``num_hidden_layers`` blocks of bias-free Q (h -> H·hd), K and V (h -> G·hd), O, Q/K norms of head_dim, a gated
    MLP h -> i -> h and four norms h wide (the V norm and clipping bounds hold no parameter); then h -> the text
    width, bias-free (its norm has no weight)."""
    size = v.size
    h, i, depth = size("hidden_size", 768), size("intermediate_size", 3072), size("num_hidden_layers", 16)
    heads, kv, hd = size("num_attention_heads", 12), size("num_key_value_heads", 12), size("head_dim", 64)
    p, positions = size("patch_size", 16), size("position_embedding_size", 10 * 1024)
    if v.flag("attention_bias", False):
        raise v.fail("'attention_bias' true is not counted by tfcalc (Gemma4VisionAttention's projections are "
                     "bias-free)")
    block = 2 * h * heads * hd + 2 * h * kv * hd + 2 * hd + 3 * h * i + 4 * h
    return 3 * p * p * h + 2 * positions * h + depth * block + h * d_text


def audio_params(a: Reader, d_text: int) -> int:
    """Gemma4AudioModel and its Gemma4MultimodalEmbedder (modeling_gemma4.py; Gemma4AudioConfig's defaults), h its
    width: two 3×3 bias-free convolutions 1 -> c0 -> c1 with a LayerNorm (weight only) each, (c0 // 4)·c1 -> h;
    ``num_hidden_layers`` conformer blocks, each two feed-forwards (h -> 4h -> h, two norms), attention (Q, K, V,
    the output and the relative-position key h -> h, a per-channel scale of h / heads), a light convolution (h ->
    2h, a depthwise kernel of conv_kernel_size, h -> h, two norms) and three norms; h -> output_proj_dims with a
    bias; then output_proj_dims -> the text width, bias-free."""
    size = a.size
    h, depth, heads = size("hidden_size", 1024), size("num_hidden_layers", 12), size("num_attention_heads", 8)
    kernel, out = size("conv_kernel_size", 5), size("output_proj_dims", 1536)
    channels = a.get("subsampling_conv_channels", [128, 32])
    if (not isinstance(channels, list) or len(channels) != 2
            or not all(isinstance(c, int) and not isinstance(c, bool) and c > 0 for c in channels)):
        raise a.fail(f"'subsampling_conv_channels' must be two positive integers; got {shown(channels)}")
    c0, c1 = channels
    subsample = 9 * c0 + c0 + 9 * c0 * c1 + c1 + (c0 // 4) * c1 * h
    feed_forward = 8 * h * h + 2 * h
    block = 2 * feed_forward + (5 * h * h + h // heads) + (3 * h * h + h * kernel + 2 * h) + 3 * h
    return subsample + depth * block + h * out + out + out * d_text


def checkpoint_names(arch: Architecture, model_type: str) -> list[Rule]:
    """Llama's names with Gemma's sandwich norms, w (not 1 + w) in every norm (Gemma4RMSNorm), no v_proj in a
    global layer that reads V from K, none of K, V or K's norm in a layer that reads another's K/V, and each
    layer's layer_scalar a buffer (the language model's behind the multimodal prefix, tfcalc.checkpoint.names)."""
    moe = [
        (r"layers\.(\d+)\.mlp\.(gate|up)_proj\.weight", "blocks.{0}.ffn.shared.up.weight|{1}"),
        (r"layers\.(\d+)\.mlp\.down_proj\.weight", "blocks.{0}.ffn.shared.down.weight"),
        (r"layers\.(\d+)\.router\.proj\.weight", "blocks.{0}.ffn.router.weight"),
        (r"layers\.(\d+)\.router\.scale", "blocks.{0}.ffn.beside.router_scale"),
        (r"layers\.(\d+)\.router\.per_expert_scale", "blocks.{0}.ffn.beside.per_expert_scale"),
        (r"layers\.(\d+)\.experts\.gate_up_proj", "blocks.{0}.ffn.experts.up.weight"),
        (r"layers\.(\d+)\.experts\.down_proj", "blocks.{0}.ffn.experts.down.weight"),
        (r"layers\.(\d+)\.post_feedforward_layernorm_1\.weight", "blocks.{0}.ffn.beside.mlp_post_norm.weight"),
        (r"layers\.(\d+)\.pre_feedforward_layernorm_2\.weight", "blocks.{0}.ffn.beside.moe_pre_norm.weight"),
        (r"layers\.(\d+)\.post_feedforward_layernorm_2\.weight", "blocks.{0}.ffn.beside.moe_post_norm.weight"),
    ] if arch.has_moe else []
    return llama_names(arch, moe + [
        (r"layers\.(\d+)\.layer_scalar", "buffer:blocks.{0}.layer_scalar"),
        (r"embed_tokens_per_layer\.weight", "ple_in.table.weight"),
        (r"per_layer_model_projection\.weight", "ple_in.proj.weight"),
        (r"per_layer_projection_norm\.weight", "ple_in.norm.weight"),
        (r"layers\.(\d+)\.per_layer_input_gate\.weight", "blocks.{0}.ple.gate.weight"),
        (r"layers\.(\d+)\.per_layer_projection\.weight", "blocks.{0}.ple.out.weight"),
        (r"layers\.(\d+)\.post_per_layer_input_norm\.weight", "blocks.{0}.ple.norm.weight"),
    ])
