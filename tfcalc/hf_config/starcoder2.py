"""StarCoder2 config.json files (bigcode/starcoder2-15b; modeling_starcoder2.py): GQA (num_key_value_heads, default
2), sliding_window on every layer, LayerNorms with biases (norm_epsilon), biases everywhere (use_bias), a plain FFN
c_fc, c_proj (gelu_pytorch_tanh), tied head by default.
"""

from __future__ import annotations

from tfcalc.architecture import Architecture
from tfcalc.hf_config.names import Rule, tied_head
from tfcalc.hf_config.reader import Reader


def starcoder2(r: Reader) -> None:
    r.required(("num_hidden_layers", "n_layer"), ("hidden_size", "d_model"), ("num_attention_heads", "n_head"),
               ("intermediate_size", "d_ff"), ("vocab_size", "vocab_size"))
    r.take("num_key_value_heads", "n_kv_head", 2)
    r.take("max_position_embeddings", "max_seq_len", 4096)
    r.take("norm_epsilon", "norm_eps", 1e-5)
    r.activation("hidden_act", "gelu_pytorch_tanh")
    r.rope(10000.0)
    r.take("tie_word_embeddings", "tie_embeddings", True)
    r.dtype()
    bias = r.flag("use_bias", True)
    r.fields.update(norm="layernorm", norm_bias=True, norm_placement="pre", final_norm=True, gated_ffn=False,
                    attn_bias=bias, ffn_bias=bias)
    r.windows()
    r.causal_or_base("Starcoder2")


def checkpoint_names(arch: Architecture, model_type: str) -> list[Rule]:
    """modeling_starcoder2.py: Llama's attention names, LayerNorms with biases, c_fc and c_proj."""
    layer = r"layers\.(\d+)\."
    return [
        (r"embed_tokens\.weight", "tok_emb.weight"), (r"norm\.(weight|bias)", "final_norm.{0}"),
        (r"lm_head\.weight", tied_head(arch)),
        (layer + r"input_layernorm\.(weight|bias)", "blocks.{0}.attn_norm.{1}"),
        (layer + r"post_attention_layernorm\.(weight|bias)", "blocks.{0}.ffn_norm.{1}"),
        (layer + r"self_attn\.([qkv])_proj\.(weight|bias)", "blocks.{0}.attn.qkv.{2}|{1}"),
        (layer + r"self_attn\.o_proj\.(weight|bias)", "blocks.{0}.attn.out.{1}"),
        (layer + r"mlp\.c_fc\.(weight|bias)", "blocks.{0}.ffn.up.{1}"),
        (layer + r"mlp\.c_proj\.(weight|bias)", "blocks.{0}.ffn.down.{1}"),
    ]
