"""OLMo-Hybrid config.json files (transformers 5.24, modeling_olmo_hybrid.py, configuration_olmo_hybrid.py; the
checkpoint allenai/Olmo-Hybrid-7B): gated-DeltaNet layers (``linear_attention`` in ``layer_types``) beside OLMo 3's
softmax attention (``full_attention``), a dense SwiGLU MLP in every layer.

- The attention layers are OLMo 3's (tfcalc.hf_config.olmo3, OlmoHybridAttentionDecoderLayer): each sub-layer's
  output normed before the residual add (``norm_placement: output``), RMSNorms over the whole Q and K projections,
  full rotary (rope_parameters' rope_theta, 10,000 by default; a rope_theta of null builds no rotary embedding,
  OlmoHybridModel's NoPE mode: ``pos_encoding: none``), no window.
- The DeltaNet layers (OlmoHybridLinearAttentionDecoderLayer, a LlamaDecoderLayer) norm each sub-layer's input
  (``linear_norm_placement: pre``); their DeltaNet (OlmoHybridGatedDeltaNet) has six projections of its own
  (q, k, v, g, b, a_proj: ``linear_separate_projections``), β = 2·sigmoid(b) when ``linear_allow_neg_eigval``
  (default true: ``linear_beta_scale`` 2), its gated norm (``o_norm``) at eps 1e-5 whatever rms_norm_eps says.
- Defaults (OlmoHybridConfig.__post_init__): without ``layer_types``, every 4th layer (3, 7, ...) full and the rest
  linear, the last layer full if none is; linear_num_key_heads and linear_num_value_heads default to
  num_attention_heads, linear_key_head_dim to int(0.75·hidden_size / linear_num_key_heads), linear_value_head_dim
  to twice that; num_key_value_heads to num_attention_heads. transformers refuses a model without a linear layer
  or without an attention layer (validate_architecture): so does tfcalc.
"""

from __future__ import annotations

from tfcalc.architecture import Architecture
from tfcalc.errors import shown
from tfcalc.hf_config.layers import attention_layers
from tfcalc.hf_config.llama_like import base_fields, llama_names
from tfcalc.hf_config.names import Rule
from tfcalc.hf_config.reader import Reader

KINDS = ("linear_attention", "full_attention")
DEFAULTS = dict(vocab_size=100352, hidden_size=3840, intermediate_size=11008, num_hidden_layers=32,
                num_attention_heads=30)  # OlmoHybridConfig's, which a published file may leave out


def olmo_hybrid(r: Reader) -> None:
    r.raw = {**DEFAULTS, **r.raw}
    nested = r.raw.get("rope_parameters")
    nope = isinstance(nested, dict) and "rope_theta" in nested and nested["rope_theta"] is None
    if nope:  # OlmoHybridModel builds no rotary embedding without a rope_theta: no positions at all (NoPE)
        r.raw = {**r.raw, "rope_parameters": {k: v for k, v in nested.items() if k != "rope_theta"}}
    base_fields(r, dict(max_position_embeddings=65536, rms_norm_eps=1e-6, rope_theta=10000.0))
    if nope:
        r.fields["pos_encoding"] = "none"
        r.fields.pop("rope_theta", None)
        r.fields.pop("rope_fraction", None)
    if r.fields["activation"] != "silu":  # the DeltaNet convolution's activation and the MLP's (hidden_act)
        raise r.fail(f"'hidden_act' {shown(r.raw.get('hidden_act'))}: tfcalc builds the gated DeltaNet with SiLU "
                     "only (its convolution's activation)")
    r.take("attention_bias", "attn_bias", False)
    r.fields.update(norm_placement="output", qk_norm=True, qk_norm_over="projection")
    _layers(r)
    heads = r.fields["n_head"]
    r.fields["linear_mixer"] = "gated_deltanet"
    k_heads = r.take("linear_num_key_heads", "linear_key_heads", heads)
    if not isinstance(k_heads, int) or isinstance(k_heads, bool) or k_heads < 1:
        raise r.fail(f"'linear_num_key_heads' must be a positive integer; got {shown(k_heads)}")
    v_heads = r.take("linear_num_value_heads", "linear_value_heads", heads)
    # grouped value heads: OlmoHybridGatedDeltaNet's torch path repeats each query/key head over its
    # linear_num_value_heads // linear_num_key_heads value heads (repeat_interleave, modeling_olmo_hybrid.py)
    if not isinstance(v_heads, int) or isinstance(v_heads, bool) or v_heads < 1 or v_heads % k_heads:
        raise r.fail(f"'linear_num_value_heads' {shown(v_heads)} must be a positive multiple of "
                     f"'linear_num_key_heads' {shown(k_heads)}: each key head serves a whole group of value heads")
    k_dim = r.take("linear_key_head_dim", "linear_key_head_dim", int(0.75 * r.fields["d_model"] / k_heads))
    if not isinstance(k_dim, int) or isinstance(k_dim, bool) or k_dim < 1:
        raise r.fail(f"'linear_key_head_dim' must be a positive integer; got {shown(k_dim)}")
    r.take("linear_value_head_dim", "linear_value_head_dim", 2 * k_dim)
    r.take("linear_conv_kernel_dim", "linear_conv_kernel", 4)
    r.fields.update(linear_separate_projections=True, linear_norm_eps=1e-5, linear_norm_placement="pre")
    if r.flag("linear_allow_neg_eigval", True):
        r.fields["linear_beta_scale"] = 2.0
    r.causal_or_base("OlmoHybrid")


def _layers(r: Reader) -> None:
    """layer_types, or OlmoHybridConfig's default; at least one layer of each kind (validate_architecture)."""
    n = r.fields["n_layer"]
    kinds = r.raw.get("layer_types")
    if kinds is None:
        if n >= 4:  # layers 3, 7, ... full: a period, no list (a file may say 2**40 layers)
            r.fields["full_attention_every"] = 4
            return
        kinds = ["linear_attention"] * (n - 1) + ["full_attention"]
    if not isinstance(kinds, list) or not all(isinstance(k, str) and k in KINDS for k in kinds):
        raise r.fail(f"'layer_types' must be a list of {', '.join(KINDS)}; got {shown(kinds)}")
    if len(kinds) != n:
        raise r.fail(f"'layer_types' lists {len(kinds)} layers; 'num_hidden_layers' is {n}")
    if set(kinds) != set(KINDS):
        raise r.fail("'layer_types' needs at least one linear_attention and one full_attention layer (OlmoHybrid "
                     "builds no model of one kind alone)")
    attention_layers(r, n, [k == "linear_attention" for k in kinds], [True] * n)


def checkpoint_names(arch: Architecture, model_type: str) -> list[Rule]:
    """OLMo-Hybrid's names, as its checkpoints store them (conversion_mapping.py, olmo_hybrid: transformers renames
    attention_layer_norm to input_layernorm, feedforward_layer_norm to post_attention_layernorm, and concatenates
    q/k/v_conv1d into conv1d on load, and writes them back so on save) or as transformers' modules name them: the
    DeltaNet under linear_attn.* (its o_norm and o_proj are tfcalc's norm and out_proj; the three convolutions
    kept apart); post_attention_layernorm is the attention's output norm in an attention layer (OLMo 3's) and the
    MLP's input norm in a DeltaNet layer (Llama's); Llama's other names."""
    pre = "|".join(str(i) for i, b in enumerate(arch.output.layers()) if b.placement == "pre") or "-1"
    return llama_names(arch, [
        (r"layers\.(\d+)\.attention_layer_norm\.weight", "blocks.{0}.attn_norm.weight"),
        (rf"layers\.({pre})\.(?:post_attention_layernorm|feedforward_layer_norm)\.weight",
         "blocks.{0}.ffn_norm.weight"),
        (r"layers\.(\d+)\.feedforward_layer_norm\.weight", "blocks.{0}.attn_post_norm.weight"),
        (r"layers\.(\d+)\.linear_attn\.(dt_bias|A_log)", "blocks.{0}.attn.{1}"),
        (r"layers\.(\d+)\.linear_attn\.o_norm\.weight", "blocks.{0}.attn.norm.weight"),
        (r"layers\.(\d+)\.linear_attn\.o_proj\.weight", "blocks.{0}.attn.out_proj.weight"),
        (r"layers\.(\d+)\.linear_attn\.(\w+)\.weight", "blocks.{0}.attn.{1}.weight")])
