"""LFM2 and LFM2-MoE config.json files (Liquid AI; modeling_lfm2.py, configuration_lfm2.py, modeling_lfm2_moe.py,
configuration_lfm2_moe.py), with the defaults of each config class.

Both: pre-norm blocks (``operator_norm``, ``ffn_norm``: RMSNorm, ``norm_eps``), the final norm (named
``embedding_norm``, applied after the last layer), a tied LM head (``tie_word_embeddings``, older files'
``tie_embedding``), a SwiGLU MLP (w2(silu(w1 x) · w3 x), no biases), RoPE (base 1,000,000). Each layer's
token mixer is given by ``layer_types``: "conv", the short gated convolution (tfcalc.architecture.short_conv:
``conv_L_cache`` taps, ``conv_bias``), or "full_attention": grouped-query attention without biases, RMSNorms
over each head's Q and K (q_layernorm, k_layernorm), its output projection out_proj. An lfm2 file without
``layer_types`` lists its attention layers in ``full_attn_idxs`` (Lfm2Config.__post_init__; neither: every
layer attention); an lfm2_moe file must list ``layer_types`` (Lfm2MoeConfig has no other source).

lfm2's MLP width: ``intermediate_size`` (older files: ``block_ff_dim``), and with ``block_auto_adjust_ff_dim``
(default true) int(2·w/3), then, where ``block_ffn_dim_multiplier`` is given, int(multiplier·w) rounded up to a
multiple of ``block_multiple_of`` (Lfm2MLP.__init__; LFM2-1.2B: 12288 -> 8192). lfm2_moe: the first
``num_dense_layers`` layers have a dense MLP of ``intermediate_size``, the rest ``num_experts`` experts of
``moe_intermediate_size``, ``num_experts_per_tok`` per token, chosen by sigmoid(router) + ``expert_bias`` (a
buffer, with ``use_expert_bias``), weighted by the sigmoids renormalized (``norm_topk_prob``) and scaled
(``routed_scaling_factor``): DeepSeek-V3's routing without groups (Lfm2MoeTopKRouter; its renormalization adds
1e-6 to the sum where DeepSeek-V3's adds 1e-20: a relative 5e-7 on the weights, no count).
"""

from __future__ import annotations

from tfcalc.architecture import Architecture
from tfcalc.errors import shown
from tfcalc.hf_config.layer_pattern import compact
from tfcalc.hf_config.names import Rule, tied_head
from tfcalc.hf_config.reader import Reader

THETA = 1_000_000.0  # Lfm2Config.default_theta, Lfm2MoeConfig.default_theta


def _common(r: Reader, defaults: dict) -> None:
    r.take("num_hidden_layers", "n_layer", defaults["layers"])
    r.take("hidden_size", "d_model", defaults["hidden"])
    r.take("num_attention_heads", "n_head", 32)
    r.take("num_key_value_heads", "n_kv_head", 8)
    r.take("head_dim", "d_head")  # Lfm2Attention: getattr(config, "head_dim", hidden_size // heads)
    r.take("vocab_size", "vocab_size", 65536)
    r.take("max_position_embeddings", "max_seq_len", 128_000)
    r.take("norm_eps", "norm_eps", 1e-5)
    r.rope(THETA)
    r.fields["rope_fraction"] = 1.0  # every channel rotates (apply_rotary_pos_emb over head_dim)
    r.take("tie_word_embeddings", "tie_embeddings", True, aliases=("tie_embedding",))
    r.dtype()
    r.take("conv_L_cache", "conv_kernel", 3)
    r.take("conv_bias", "conv_bias", False)
    r.fields.update(norm="rmsnorm", norm_bias=False, norm_placement="pre", final_norm=True, gated_ffn=True,
                    activation="silu", attn_bias=False, ffn_bias=False, qk_norm=True)


def _layer_types(r: Reader, fallback: bool) -> None:
    """layer_pattern from ``layer_types`` ("conv" or "full_attention" each), or (``fallback``: lfm2) from
    ``full_attn_idxs``; a model of attention layers only needs no pattern."""
    n = r.fields["n_layer"]
    kinds = r.raw.get("layer_types")
    if kinds is None and not fallback:
        raise r.fail("'layer_types' is required: Lfm2MoeConfig reads each layer's kind from it alone")
    if kinds is None:
        idxs = r.raw.get("full_attn_idxs")
        if idxs is None:
            return  # Lfm2Config: every layer attention
        if not isinstance(idxs, list) or not all(isinstance(i, int) and not isinstance(i, bool) and 0 <= i < n
                                                 for i in idxs):
            raise r.fail(f"'full_attn_idxs' must list layer numbers 0 .. {n - 1}; got {shown(idxs)}")
        kinds = ["full_attention" if i in set(idxs) else "conv" for i in range(n)]
    if not isinstance(kinds, list) or not all(k in ("conv", "full_attention") for k in kinds if isinstance(k, str)) \
            or not all(isinstance(k, str) for k in kinds):
        raise r.fail(f"'layer_types' must be a list of conv and full_attention; got {shown(kinds)}")
    if len(kinds) != n:
        raise r.fail(f"'layer_types' lists {len(kinds)} layers; 'num_hidden_layers' is {n}")
    if "conv" in kinds:
        r.fields["layer_pattern"] = compact(["conv" if k == "conv" else "full" for k in kinds])


def lfm2(r: Reader) -> None:
    _common(r, dict(layers=32, hidden=2560))
    width = r.number("intermediate_size", None, integer=True)
    width = r.number("block_ff_dim", 12288, integer=True) if width is None else width  # Lfm2Config's kwarg
    if width is None or width < 1:
        raise r.fail(f"'intermediate_size' must be a positive integer; got {shown(width)}")
    if r.flag("block_auto_adjust_ff_dim", True):
        width = int(2 * width / 3)
        multiplier = r.positive("block_ffn_dim_multiplier", 1.0)
        if multiplier is not None:
            multiple = r.number("block_multiple_of", 256, integer=True)
            if multiple is None or multiple < 1:
                raise r.fail(f"'block_multiple_of' must be a positive integer; got {shown(multiple)}")
            width = int(multiplier * width)
            width = multiple * ((width + multiple - 1) // multiple)
    r.fields["d_ff"] = width
    _layer_types(r, fallback=True)
    r.causal_or_base("Lfm2")


def lfm2_moe(r: Reader) -> None:
    _common(r, dict(layers=32, hidden=2048))
    r.take("moe_intermediate_size", "d_ff", 1792)
    r.take("intermediate_size", "dense_d_ff", 7168)
    dense = r.number("num_dense_layers", 2, integer=True)
    if dense is None or dense < 0:
        raise r.fail(f"'num_dense_layers' must be a non-negative integer; got {shown(dense)}")
    r.take("num_experts", "n_expert", 32)
    r.take("num_experts_per_tok", "n_expert_active", 4)
    r.fields.update(first_dense_layers=dense or None, router_scoring="sigmoid",
                    router_norm_topk=r.flag("norm_topk_prob", True),
                    router_score_bias=r.flag("use_expert_bias", True))
    r.take("routed_scaling_factor", "routed_scaling", 1.0)
    if not dense:  # no dense layer: intermediate_size is no layer's width (Lfm2MoeDecoderLayer builds none)
        r.fields.pop("dense_d_ff")
    elif dense >= r.fields["n_layer"]:  # every layer dense (layer_idx < num_dense_layers): no experts built
        r.fields["d_ff"] = r.fields.pop("dense_d_ff")
        for field in ("n_expert", "n_expert_active", "first_dense_layers", "router_scoring", "router_norm_topk",
                      "router_score_bias", "routed_scaling"):
            r.fields.pop(field, None)
    _layer_types(r, fallback=False)
    r.causal_or_base("Lfm2Moe")


def checkpoint_names(arch: Architecture, model_type: str) -> list[Rule]:
    """LFM2 and LFM2-MoE (modeling_lfm2.py, modeling_lfm2_moe.py): the short convolution's in_proj, conv and
    out_proj are its component's Weights (tfcalc.architecture.short_conv) by name; the router's expert_bias
    is a buffer (DeepSeek-V3's score bias); experts grouped (transformers 5) or one by one (4's w1, w3, w2)."""
    layer, ff = r"layers\.(\d+)\.", r"layers\.(\d+)\.feed_forward\."
    return [
        (r"embed_tokens\.weight", "tok_emb.weight"), (r"embedding_norm\.weight", "final_norm.weight"),
        (r"lm_head\.weight", tied_head(arch)),
        (layer + r"operator_norm\.weight", "blocks.{0}.attn_norm.weight"),
        (layer + r"ffn_norm\.weight", "blocks.{0}.ffn_norm.weight"),
        (layer + r"conv\.(in_proj|conv|out_proj)\.(weight|bias)", "blocks.{0}.attn.{1}.{2}"),
        (layer + r"self_attn\.([qkv])_proj\.weight", "blocks.{0}.attn.qkv.weight|{1}"),
        (layer + r"self_attn\.out_proj\.weight", "blocks.{0}.attn.out.weight"),
        (layer + r"self_attn\.([qk])_layernorm\.weight", "blocks.{0}.attn.{1}_norm.weight"),
        (ff + r"w1\.weight", "blocks.{0}.ffn.up.weight|gate"), (ff + r"w3\.weight", "blocks.{0}.ffn.up.weight|up"),
        (ff + r"w2\.weight", "blocks.{0}.ffn.down.weight"),
        (ff + r"gate\.weight", "blocks.{0}.ffn.router.weight"),
        (ff + r"expert_bias", "buffer:blocks.{0}.ffn.score_bias"),
        (ff + r"experts\.gate_up_proj", "blocks.{0}.ffn.experts.up.weight"),
        (ff + r"experts\.down_proj", "blocks.{0}.ffn.experts.down.weight"),
        (ff + r"experts\.(\d+)\.w1\.weight", "blocks.{0}.ffn.experts.up.weight@{1}|gate"),
        (ff + r"experts\.(\d+)\.w3\.weight", "blocks.{0}.ffn.experts.up.weight@{1}|up"),
        (ff + r"experts\.(\d+)\.w2\.weight", "blocks.{0}.ffn.experts.down.weight@{1}"),
    ]
