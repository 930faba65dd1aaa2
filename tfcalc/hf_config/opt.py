"""OPT config.json files (modeling_opt.py): num_hidden_layers, hidden_size, num_attention_heads, ffn_dim, vocab_size
(required); max_position_embeddings, do_layer_norm_before (false: post-LN, OPT-350m), enable_bias,
activation_function, tie_word_embeddings (default true). Learned positions with 2 extra rows (OPT's offset). A
word_embed_proj_dim other than hidden_size (OPT-350m) is the token table's width, projected in to hidden_size after
the lookup and out again before the LM head (bias-free project_in, project_out).
"""

from __future__ import annotations

from tfcalc.architecture import Architecture
from tfcalc.hf_config.names import Rule, tied_head
from tfcalc.hf_config.reader import Reader


def opt(r: Reader) -> None:
    r.required(("num_hidden_layers", "n_layer"), ("hidden_size", "d_model"), ("num_attention_heads", "n_head"),
               ("ffn_dim", "d_ff"), ("vocab_size", "vocab_size"))
    projected = r.number("word_embed_proj_dim", None, integer=True)  # OPT-350m: 512 beside hidden_size 1024
    if projected is not None and projected < 1:
        raise r.fail(f"'word_embed_proj_dim' must be positive; got {projected}")
    r.take("word_embed_proj_dim", "embedding_dim")
    r.refuse("layer_norm_elementwise_affine", False, "LayerNorms without weights are not built here")
    r.take("max_position_embeddings", "max_seq_len", 2048)
    r.activation("activation_function", "relu")
    r.take("tie_word_embeddings", "tie_embeddings", True)
    r.dtype()
    pre = r.flag("do_layer_norm_before", True)
    bias = r.flag("enable_bias", True)
    final = pre and not r.flag("_remove_final_layer_norm", False)  # OPTDecoder: a final norm only when pre-LN
    r.fields.update(pos_encoding="learned", position_offset=2, norm="layernorm", norm_bias=True, norm_eps=1e-5,
                    norm_placement="pre" if pre else "post", final_norm=final, gated_ffn=False,
                    attn_bias=bias, ffn_bias=bias)
    if r.head({"OPTForCausalLM": "causal", "OPTModel": "base"}, "OPTForCausalLM") == "base":
        r.base_model()


def checkpoint_names(arch: Architecture, model_type: str) -> list[Rule]:
    """modeling_opt.py, and OPT-350m's projections in and out of its word_embed_proj_dim."""
    layer = r"decoder\.layers\.(\d+)\."
    return [
        (r"decoder\.embed_tokens\.weight", "tok_emb.weight"), (r"decoder\.embed_positions\.weight", "pos_emb.weight"),
        (r"lm_head\.weight", tied_head(arch)), (r"decoder\.final_layer_norm\.(weight|bias)", "final_norm.{0}"),
        (layer + r"self_attn_layer_norm\.(weight|bias)", "blocks.{0}.attn_norm.{1}"),
        (layer + r"self_attn\.([qkv])_proj\.(weight|bias)", "blocks.{0}.attn.qkv.{2}|{1}"),
        (layer + r"self_attn\.out_proj\.(weight|bias)", "blocks.{0}.attn.out.{1}"),
        (layer + r"final_layer_norm\.(weight|bias)", "blocks.{0}.ffn_norm.{1}"),
        (layer + r"fc1\.(weight|bias)", "blocks.{0}.ffn.up.{1}"),
        (layer + r"fc2\.(weight|bias)", "blocks.{0}.ffn.down.{1}"),
        (r"decoder\.project_in\.weight", "project_in.weight"),
        (r"decoder\.project_out\.weight", "project_out.weight"),
    ]
