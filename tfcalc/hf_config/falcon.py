"""Falcon config.json files (modeling_falcon.py): num_hidden_layers (n_layer), hidden_size, num_attention_heads
(n_head), vocab_size (required); multi_query (one K/V head), new_decoder_architecture (num_kv_heads K/V heads, and
with num_ln_in_parallel_attn 2 -- the default there -- two norms), parallel_attn (one shared norm: Falcon-7B), bias,
ffn_hidden_size (default 4·hidden), activation, layer_norm_epsilon, tie_word_embeddings (default true). ALiBi
(falcon-rw) is refused. FalconForCausalLM or FalconModel.
"""

from __future__ import annotations

from tfcalc.architecture import Architecture
from tfcalc.hf_config.names import Rule, tied_head
from tfcalc.hf_config.reader import Reader


def falcon(r: Reader) -> None:
    r.take("num_hidden_layers", "n_layer", required=True, aliases=("n_layer",))
    r.take("num_attention_heads", "n_head", required=True, aliases=("n_head",))
    r.required(("hidden_size", "d_model"), ("vocab_size", "vocab_size"))
    r.refuse("alibi", True, "Falcon's ALiBi variant (falcon-rw) is not built here")
    r.refuse("apply_residual_connection_post_layernorm", True, "the residual would start after the norm")
    new_arch, parallel = r.flag("new_decoder_architecture", False), r.flag("parallel_attn", True)
    if new_arch:  # modeling_falcon.py: grouped K/V heads; two norms (ln_attn, ln_mlp) unless told one
        r.take("num_kv_heads", "n_kv_head")
        norms = r.number("num_ln_in_parallel_attn", 2, integer=True)
        layout = "two_norms" if norms == 2 else "shared_norm"
    else:
        r.fields["n_kv_head"] = 1 if r.flag("multi_query", True) else None
        layout = "shared_norm" if parallel else "none"
    r.take("ffn_hidden_size", "d_ff")  # null: 4 * hidden_size
    r.take("max_position_embeddings", "max_seq_len", 2048)
    r.take("layer_norm_epsilon", "norm_eps", 1e-5)
    r.activation("activation", "gelu")
    r.rope(10000.0)
    r.take("tie_word_embeddings", "tie_embeddings", True)
    r.dtype()
    bias = r.flag("bias", False)
    r.fields.update(norm="layernorm", norm_bias=True, norm_placement="pre", final_norm=True, gated_ffn=False,
                    attn_bias=bias, ffn_bias=bias, parallel_block=layout)
    if r.head({"FalconForCausalLM": "causal", "FalconModel": "base"}, "FalconForCausalLM") == "base":
        r.base_model()


def checkpoint_names(arch: Architecture, model_type: str) -> list[Rule]:
    """modeling_falcon.py: Falcon-7B's multi-query [Q | K | V] is tfcalc's layout; with several K/V heads the
    rows are grouped, [kv head][its query heads..., k, v][d_head] (_split_heads; ``falcon_qkv``)."""
    return [
        (r"word_embeddings\.weight", "tok_emb.weight"), (r"lm_head\.weight", tied_head(arch)),
        (r"ln_f\.(weight|bias)", "final_norm.{0}"),
        (r"h\.(\d+)\.(?:input_layernorm|ln_attn)\.(weight|bias)", "blocks.{0}.attn_norm.{1}"),
        (r"h\.(\d+)\.(?:post_attention_layernorm|ln_mlp)\.(weight|bias)", "blocks.{0}.ffn_norm.{1}"),
        (r"h\.(\d+)\.self_attention\.query_key_value\.(weight|bias)", "blocks.{0}.attn.qkv.{1}||falcon_qkv"),
        (r"h\.(\d+)\.self_attention\.dense\.(weight|bias)", "blocks.{0}.attn.out.{1}"),
        (r"h\.(\d+)\.mlp\.dense_h_to_4h\.(weight|bias)", "blocks.{0}.ffn.up.{1}"),
        (r"h\.(\d+)\.mlp\.dense_4h_to_h\.(weight|bias)", "blocks.{0}.ffn.down.{1}"),
    ]
