"""Gemma 3n: ``gemma3n_text`` (the language model) and ``gemma3n`` (it, inside Gemma3nForConditionalGeneration).

gemma3n_text (modeling_gemma3n.py, configuration_gemma3n.py, Gemma3nTextConfig's defaults): Gemma 3's layout --
sandwich norms, GeGLU, embeddings × √d, tied head, Q/K RMSNorms over each head, local (sliding-window) and global
layers (``layer_types``; default every 5th global), RoPE bases per layer type (``rope_parameters``, or
``rope_theta`` 1,000,000 and ``rope_local_base_freq`` 10,000), the final soft-cap (30) -- with Gemma 4's RMSNorms
by w (not 1 + w), unscaled scores and weightless V norms, and (tfcalc.architecture.per_layer):

- AltUp (``altup_num_inputs`` streams, default 4; ``altup_correct_scale``): tfcalc's altup_inputs; ``altup_active_idx``
  must be 0 (the active stream first) and ``altup_coef_clip`` clamps weights in training only;
- LAuReL of ``laurel_rank`` (64) beside each attention;
- per-layer inputs (``hidden_size_per_layer_input`` 256, a table of ``vocab_size_per_layer_input`` rows, ids past
  it reading row 0), added to AltUp's other streams;
- K/V shared by the last ``num_kv_shared_layers`` (15) layers with the last earlier layer of their type;
- activation sparsity (``activation_sparsity_pattern``: one share per layer; default 0.95 on the first 10 layers
  of a model deeper than 10): the gate's Gaussian top-k.

``intermediate_size`` may be one width or one per layer: per-layer widths that differ are refused in one line.

gemma3n (Gemma3nForConditionalGeneration): ``text_config`` read as above. Its vision tower (a timm MobileNetV5) and
audio tower (Gemma3nAudioEncoder) are not counted by tfcalc: a file with a ``vision_config`` or ``audio_config`` is
refused in one line (count its language model from its text_config as a gemma3n_text config.json).
"""

from __future__ import annotations

from tfcalc.architecture import Architecture
from tfcalc.errors import shown
from tfcalc.hf_config import layers
from tfcalc.hf_config.gemma4 import kv_shared_layers, per_layer_not_null
from tfcalc.hf_config.llama_like import base_fields, llama_names
from tfcalc.hf_config.names import Rule
from tfcalc.hf_config.reader import Reader

DEFAULTS = dict(vocab_size=262_400, hidden_size=2048, intermediate_size=16_384, num_hidden_layers=35,
                num_attention_heads=8, num_key_value_heads=2, head_dim=256)
THETAS = {"full_attention": 1_000_000.0, "sliding_attention": 10_000.0}  # Gemma3nTextConfig.default_theta


def gemma3n_text(r: Reader) -> None:
    r.raw = {**DEFAULTS, **r.raw}
    r.divisible_heads()
    n = r.number("num_hidden_layers", 35, integer=True)
    widths = r.raw.get("intermediate_size")
    if isinstance(widths, list):
        if len(widths) != n or len(set(map(repr, widths))) != 1:
            raise r.fail(f"'intermediate_size' lists {shown(widths)[:60]}: tfcalc builds one width in every layer "
                         f"(one value, or {n} equal ones)")
        r.raw = {**r.raw, "intermediate_size": widths[0]}
    base_fields(r, dict(max_position_embeddings=32_768, rms_norm_eps=1e-6, rope_theta=THETAS["full_attention"],
                        head_dim=256, tie=True, hidden_act="gelu_pytorch_tanh"))
    r.take("attention_bias", "attn_bias", False)
    if r.get("use_bidirectional_attention"):
        raise r.fail("'use_bidirectional_attention' is not supported: tfcalc's language model is causal")
    r.fields.update(embedding_scale=True, norm_placement="sandwich", qk_norm=True, v_norm=True, attn_scale=1.0,
                    attn_softcap=None, logit_softcap=r.number("final_logit_softcapping", 30.0))
    n = r.fields["n_layer"]
    r.raw = {**r.raw, "sliding_window": r.get("sliding_window", 512)}
    kinds = r.raw.get("layer_types")
    if kinds is None:
        r.per_layer_list("layer_types")
        kinds = ["full_attention" if (i + 1) % 5 == 0 else "sliding_attention" for i in range(n)]
        r.raw = {**r.raw, "layer_types": kinds}
    layers.layer_types(r, n, kinds)
    _rope(r)
    _streams(r, n, kinds)
    r.causal_or_base("Gemma3n")


def _rope(r: Reader) -> None:
    """Bases per layer type, default RoPE on the whole head in each (Gemma3nTextConfig.convert_rope_params_to_dict)."""
    nested = r.raw.get("rope_parameters") or {}
    if not isinstance(nested, dict):
        raise r.fail(f"'rope_parameters' must be an object nested by layer type; got {shown(nested)}")
    old = {"full_attention": r.raw.get("rope_theta"), "sliding_attention": r.raw.get("rope_local_base_freq")}
    got = {}
    for kind, theta in THETAS.items():
        value = nested.get(kind) or {}
        if not isinstance(value, dict) or value.get("rope_type", "default") != "default":
            raise r.fail(f"'rope_parameters' {kind} must be an object of the default rope_type; got {shown(value)}")
        base = value.get("rope_theta", old[kind] if old[kind] is not None else theta)
        if isinstance(base, bool) or not isinstance(base, (int, float)) or not base > 0:
            raise r.fail(f"'rope_parameters' {kind} rope_theta must be a positive number; got {shown(base)}")
        got[kind] = float(base)
    r.raw = {k: v for k, v in r.raw.items() if k != "rope_parameters"}  # read here: no scaling for the common reader
    r.fields.update(pos_encoding="rope", rope_fraction=1.0, rope_theta=got["full_attention"],
                    rope_local_theta=got["sliding_attention"])
    if not r.fields.get("sliding_window"):
        r.fields.pop("rope_local_theta")


def _streams(r: Reader, n: int, kinds: list[str]) -> None:
    """AltUp, LAuReL, per-layer inputs, shared K/V and activation sparsity (the module docstring)."""
    streams = r.number("altup_num_inputs", 4, integer=True)
    if streams is None or streams < 2:
        raise r.fail(f"'altup_num_inputs' must be an integer of at least 2; got {shown(streams)}")
    if r.number("altup_active_idx", 0, integer=True) != 0:
        raise r.fail(f"'altup_active_idx' {shown(r.raw.get('altup_active_idx'))} is not supported (0: the first "
                     "stream active)")
    rank = r.number("laurel_rank", 64, integer=True)
    per_layer_not_null(r, "Gemma3nTextConfig")  # not the default 256 in silence: transformers refuses the file
    per_layer = r.number("hidden_size_per_layer_input", 256, integer=True)
    vocab = r.number("vocab_size_per_layer_input", 262_144, integer=True)
    for key, value in (("laurel_rank", rank), ("hidden_size_per_layer_input", per_layer),
                       ("vocab_size_per_layer_input", vocab)):
        if value is None or value < 1:
            raise r.fail(f"'{key}' must be a positive integer; got {shown(value)}")
    r.fields.update(altup_inputs=streams, altup_correct_scale=r.flag("altup_correct_scale", True), laurel_rank=rank,
                    per_layer_dim=per_layer, per_layer_vocab=vocab if vocab != r.fields["vocab_size"] else None)
    kv_shared_layers(r, n, kinds, 15)  # Gemma3nTextConfig's default
    sparsity = r.raw.get("activation_sparsity_pattern")
    if sparsity is None:
        sparse = 10 if n > 10 else 0
        sparsity = [0.95] * sparse + [0.0] * (n - sparse)
    if isinstance(sparsity, (int, float)) and not isinstance(sparsity, bool):
        sparsity = [sparsity] * n
    if (not isinstance(sparsity, list) or len(sparsity) != n
            or not all(isinstance(s, (int, float)) and not isinstance(s, bool) and 0 <= s < 1 for s in sparsity)):
        raise r.fail(f"'activation_sparsity_pattern' must give one share in [0, 1) for each of the {n} layers")
    if any(sparsity):
        r.fields["activation_sparsity"] = [float(s) for s in sparsity]


def gemma3n(r: Reader) -> None:
    """The language model of Gemma3nForConditionalGeneration; its towers are refused (the module docstring)."""
    text, vision, audio = r.objects("text_config", "vision_config", "audio_config")
    for key, value in (("vision_config", vision), ("audio_config", audio)):
        if value:
            raise r.fail(f"'{key}': Gemma 3n's {key.split('_')[0]} tower is not counted by tfcalc; count the "
                         "language model alone (its text_config as a gemma3n_text config.json)")
    inner = Reader({**text, "model_type": "gemma3n_text", "architectures": ["Gemma3nForCausalLM"]},
                   f"{r.where} (text_config)")
    gemma3n_text(inner)
    r.fields.update(inner.fields)
    r.raw = {**r.raw, "text_config": inner.raw}
    r.fields["tie_embeddings"] = r.flag("tie_word_embeddings", True)
    if r.fields.get("dtype") is None:
        r.dtype()
    if r.head({"Gemma3nForConditionalGeneration": "causal"}, "Gemma3nForConditionalGeneration") != "causal":
        raise r.fail("only Gemma3nForConditionalGeneration is supported")


def checkpoint_names(arch: Architecture, model_type: str) -> list[Rule]:
    """Llama's names with Gemma's sandwich norms by w, no K/V in a layer that reads another's, the per-layer
    inputs as Gemma 4's, AltUp's and LAuReL's tensors (the language model's behind the multimodal prefix)."""
    return llama_names(arch, [
        (r"embed_tokens_per_layer\.weight", "ple_in.table.weight"),
        (r"per_layer_model_projection\.weight", "ple_in.proj.weight"),
        (r"per_layer_projection_norm\.weight", "ple_in.norm.weight"),
        (r"layers\.(\d+)\.per_layer_input_gate\.weight", "blocks.{0}.ple.gate.weight"),
        (r"layers\.(\d+)\.per_layer_projection\.weight", "blocks.{0}.ple.out.weight"),
        (r"layers\.(\d+)\.post_per_layer_input_norm\.weight", "blocks.{0}.ple.norm.weight"),
        (r"altup_projections\.(\d+)\.weight", "altup_io.proj_in@{0}"),
        (r"altup_unembed_projections\.(\d+)\.weight", "altup_io.proj_out@{0}"),
        (r"layers\.(\d+)\.altup\.correct_output_scale", "blocks.{0}.altup.output_scale"),
        (r"layers\.(\d+)\.altup\.correction_coefs\.weight", "blocks.{0}.altup.correction.weight"),
        (r"layers\.(\d+)\.altup\.prediction_coefs\.weight", "blocks.{0}.altup.prediction.weight"),
        (r"layers\.(\d+)\.altup\.modality_router\.weight", "blocks.{0}.altup.router.weight"),
        (r"layers\.(\d+)\.altup\.router_norm\.weight", "blocks.{0}.altup.router_norm.weight"),
        (r"layers\.(\d+)\.laurel\.linear_left\.weight", "blocks.{0}.laurel.left.weight"),
        (r"layers\.(\d+)\.laurel\.linear_right\.weight", "blocks.{0}.laurel.right.weight"),
        (r"layers\.(\d+)\.laurel\.post_laurel_norm\.weight", "blocks.{0}.laurel.norm.weight"),
    ])
