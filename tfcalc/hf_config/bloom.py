"""BLOOM config.json files (bigscience/bloom-560m; modeling_bloom.py): ALiBi (no position table), a LayerNorm after
the word embeddings, fused QKV interleaved per head, a 4·d FFN (BLOOM's tanh GELU), tied head. ALiBi has no position
limit: max_seq_len is seq_length where given, else 2048 (its training sequence length: BigScience Workshop 2022,
arXiv:2211.05100, the BLOOM paper).
"""

from __future__ import annotations

from tfcalc.architecture import Architecture
from tfcalc.hf_config.names import Rule, tied_head
from tfcalc.hf_config.reader import Reader


def bloom(r: Reader) -> None:
    r.take("n_layer", "n_layer", required=True, aliases=("num_hidden_layers",))
    r.take("n_head", "n_head", required=True, aliases=("num_attention_heads",))
    r.take("hidden_size", "d_model", required=True, aliases=("n_embed",))
    r.required(("vocab_size", "vocab_size"))
    r.divisible_heads(heads="n_head")
    r.refuse("apply_residual_connection_post_layernorm", True, "the residual would start after the norm")
    r.take("seq_length", "max_seq_len", 2048)
    r.take("layer_norm_epsilon", "norm_eps", 1e-5)
    r.take("tie_word_embeddings", "tie_embeddings", True)
    r.dtype()
    r.fields.update(pos_encoding="alibi", norm="layernorm", norm_bias=True, norm_placement="pre", final_norm=True,
                    embedding_norm=True, gated_ffn=False, activation="gelu_tanh", attn_bias=True, ffn_bias=True)
    r.causal_or_base("Bloom")


def checkpoint_names(arch: Architecture, model_type: str) -> list[Rule]:
    """modeling_bloom.py: query_key_value interleaved per head, [head][q, k, v][d_head], as GPT-NeoX's
    (``neox_qkv``); a LayerNorm after the word embeddings."""
    layer = r"h\.(\d+)\."
    return [
        (r"word_embeddings\.weight", "tok_emb.weight"),
        (r"word_embeddings_layernorm\.(weight|bias)", "emb_norm.{0}"),
        (r"ln_f\.(weight|bias)", "final_norm.{0}"), (r"lm_head\.weight", tied_head(arch)),
        (layer + r"input_layernorm\.(weight|bias)", "blocks.{0}.attn_norm.{1}"),
        (layer + r"self_attention\.query_key_value\.(weight|bias)", "blocks.{0}.attn.qkv.{1}||neox_qkv"),
        (layer + r"self_attention\.dense\.(weight|bias)", "blocks.{0}.attn.out.{1}"),
        (layer + r"post_attention_layernorm\.(weight|bias)", "blocks.{0}.ffn_norm.{1}"),
        (layer + r"mlp\.dense_h_to_4h\.(weight|bias)", "blocks.{0}.ffn.up.{1}"),
        (layer + r"mlp\.dense_4h_to_h\.(weight|bias)", "blocks.{0}.ffn.down.{1}"),
    ]
