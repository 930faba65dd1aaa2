"""Granite-4.0-H config.json files (IBM; modeling_granitemoehybrid.py, configuration_granitemoehybrid.py): every
layer a mixer -- Mamba2 or attention, per ``layer_types`` (mamba / linear_attention, attention / full_attention;
tfcalc's ``hybrid_pattern`` M and *) -- then an FFN: ``num_local_experts`` SwiGLU experts of ``intermediate_size``
(softmax over the top-k logits: the renormalized top-k of a softmax) beside an always-on SwiGLU ``shared_mlp`` of
``shared_intermediate_size``, or the shared MLP alone when num_local_experts is 0 (``hybrid_with_ffn``). Granite's
multipliers: embedding_multiplier, residual_multiplier (both sub-layers), attention_multiplier (the score scale),
logits_scaling (logits divided by it). Positions: none (position_embedding_type "nope" or absent) or RoPE.
Mamba2 sizes: mamba_n_heads, mamba_d_head ("auto": expand·hidden / heads), mamba_n_groups, mamba_d_state,
mamba_d_conv, mamba_chunk_size, mamba_conv_bias, mamba_proj_bias; the SSM state in fp32 (transformers' scan).
"""

from __future__ import annotations

from tfcalc.architecture import Architecture
from tfcalc.errors import shown
from tfcalc.hf_config.mamba2 import mamba2_mixer, ssm_fields
from tfcalc.hf_config.names import Rule, tied_head
from tfcalc.hf_config.reader import Reader

LETTERS = {"mamba": "M", "linear_attention": "M", "attention": "*", "full_attention": "*"}


def granitemoehybrid(r: Reader) -> None:
    r.required(("hidden_size", "d_model"), ("vocab_size", "vocab_size"))
    n = r.size("num_hidden_layers", 32)
    kinds = r.get("layer_types", r.get("layers_block_type", ["mamba"] * n))
    if not isinstance(kinds, list) or any(not isinstance(k, str) or k not in LETTERS for k in kinds) or not kinds:
        raise r.fail(f"'layer_types' must list layer kinds of {', '.join(LETTERS)}; got {shown(kinds)}")
    r.fields.update(n_layer=len(kinds), hybrid_pattern="".join(LETTERS[k] for k in kinds), hybrid_with_ffn=True)
    expand = r.number("mamba_expand", 2, integer=True)
    heads = r.size("mamba_n_heads", 128)
    if r.get("mamba_d_head", "auto") == "auto":
        if (expand * r.fields["d_model"]) % heads:
            raise r.fail("'mamba_n_heads' must divide mamba_expand·hidden_size, as GraniteMoeHybridConfig requires")
        r.raw = dict(r.raw, mamba_d_head=expand * r.fields["d_model"] // heads)
    ssm_fields(r, "mamba_n_heads", "mamba_d_head", "mamba_d_state", "mamba_n_groups", "mamba_d_conv",
               "mamba_chunk_size", "mamba_proj_bias", {"mamba_n_heads": 128, "mamba_d_head": 0, "mamba_d_state": 256,
                                                       "mamba_n_groups": 1, "mamba_d_conv": 4,
                                                       "mamba_chunk_size": 256, "mamba_proj_bias": False})
    r.fields["ssm_conv_bias"] = r.flag("mamba_conv_bias", True)
    if r.fields["ssm_heads"] * r.fields["ssm_head_dim"] != expand * r.fields["d_model"]:
        raise r.fail("mamba_d_head·mamba_n_heads must equal mamba_expand·hidden_size, as GraniteMoeHybridConfig "
                     "requires")
    r.take("num_attention_heads", "n_head", 32)
    r.take("num_key_value_heads", "n_kv_head")
    r.take("attention_bias", "attn_bias", False)
    r.take("max_position_embeddings", "max_seq_len", 2048)
    r.take("rms_norm_eps", "norm_eps", 1e-6)
    r.take("tie_word_embeddings", "tie_embeddings", False)
    r.activation("hidden_act", "silu")
    r.dtype()
    kind = r.get("position_embedding_type")
    if kind not in (None, "nope", "rope"):
        raise r.fail(f"'position_embedding_type' {shown(kind)} is none of nope, rope")
    if kind == "rope":
        r.rope(10000.0)
    r.fields["pos_encoding"] = "rope" if kind == "rope" else "none"
    experts = r.number("num_local_experts", 8, integer=True) or 0
    if experts:
        r.fields["n_expert"] = experts
        r.take("num_experts_per_tok", "n_expert_active", 2)
        r.take("intermediate_size", "d_ff", 11008)
        r.take("shared_intermediate_size", "shared_expert_d_ff", 1024)
        r.fields["router_norm_topk"] = True  # softmax of the top-k logits = the top-k of a softmax, renormalized
    else:  # the shared MLP alone, a dense SwiGLU FFN
        r.take("shared_intermediate_size", "d_ff", 1024)
    multipliers = {key: r.positive(key, 1.0) for key in ("embedding_multiplier", "residual_multiplier",
                                                          "attention_multiplier", "logits_scaling")}
    r.fields.update(embedding_multiplier=multipliers["embedding_multiplier"],
                    residual_multiplier=multipliers["residual_multiplier"],
                    attn_scale=multipliers["attention_multiplier"], norm="rmsnorm", norm_bias=False,
                    norm_placement="pre", final_norm=True, gated_ffn=True, ffn_bias=False)
    r.causal_or_base("GraniteMoeHybrid")
    if r.fields.get("lm_head", True):
        r.fields["logit_scale"] = 1 / multipliers["logits_scaling"]


# ---- its checkpoint names (tfcalc.hf_config.names): modeling_granitemoehybrid.py, after ``model.`` ----

def checkpoint_names(arch: Architecture, model_type: str) -> list[Rule]:
    """Llama's layer norms and attention, the Mamba2 mixer under ``mamba.``, the experts' stored
    ``block_sparse_moe.input_linear`` (E, 2f, d: [gate | up] per expert, tfcalc's layout) and ``output_linear``,
    the router ``router.layer``, and the ``shared_mlp`` (input_linear [gate | up], output_linear): the shared
    expert, or the FFN itself where the model has no experts."""
    layer = r"layers\.(\d+)\."
    shared = "shared." if any(b.is_moe for b, _ in arch.output.kinds()) else ""
    return [(rule.replace(r"\.mixer\.", r"\.mamba\."), target) for rule, target in mamba2_mixer(r"layers\.(\d+)")] + [
        (r"embed_tokens\.weight", "tok_emb.weight"), (r"lm_head\.weight", tied_head(arch)),
        (r"norm\.weight", "final_norm.weight"),
        (layer + r"input_layernorm\.weight", "blocks.{0}.attn_norm.weight"),
        (layer + r"post_attention_layernorm\.weight", "blocks.{0}.ffn_norm.weight"),
        (layer + r"self_attn\.([qkv])_proj\.(weight|bias)", "blocks.{0}.attn.qkv.{2}|{1}"),
        (layer + r"self_attn\.o_proj\.(weight|bias)", "blocks.{0}.attn.out.{1}"),
        (layer + r"block_sparse_moe\.input_linear\.weight", "blocks.{0}.ffn.experts.up.weight"),
        (layer + r"block_sparse_moe\.output_linear\.weight", "blocks.{0}.ffn.experts.down.weight"),
        (layer + r"block_sparse_moe\.router\.layer\.weight", "blocks.{0}.ffn.router.weight"),
        (layer + r"shared_mlp\.input_linear\.weight", "blocks.{0}.ffn.%sup.weight" % shared),
        (layer + r"shared_mlp\.output_linear\.weight", "blocks.{0}.ffn.%sdown.weight" % shared),
    ]
