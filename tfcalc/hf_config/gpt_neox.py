"""GPT-NeoX (Pythia) config.json files (modeling_gpt_neox.py): num_hidden_layers, hidden_size, num_attention_heads,
intermediate_size, vocab_size (required); max_position_embeddings, layer_norm_eps, hidden_act, rotary_pct (or
partial_rotary_factor, default 0.25), rotary_emb_base (or rope_theta), use_parallel_residual (default true: attention
and FFN side by side, each with its own LayerNorm), attention_bias, tie_word_embeddings (default false). Biases on
every Linear and norm. GPTNeoXForCausalLM or GPTNeoXModel.
"""

from __future__ import annotations

from tfcalc.architecture import Architecture
from tfcalc.hf_config.names import Rule, tied_head
from tfcalc.hf_config.reader import Reader


def gpt_neox(r: Reader) -> None:
    r.divisible_heads()
    r.required(("num_hidden_layers", "n_layer"), ("hidden_size", "d_model"), ("num_attention_heads", "n_head"),
               ("intermediate_size", "d_ff"), ("vocab_size", "vocab_size"))
    r.take("max_position_embeddings", "max_seq_len", 2048)
    r.take("layer_norm_eps", "norm_eps", 1e-5)
    r.activation("hidden_act", "gelu")
    r.rope(10000.0, fraction=0.25, fraction_keys=("partial_rotary_factor", "rotary_pct"),
           theta_keys=("rotary_emb_base",))
    r.take("tie_word_embeddings", "tie_embeddings", False)
    r.take("attention_bias", "attn_bias", True)
    r.dtype()
    parallel = r.flag("use_parallel_residual", True)
    r.fields.update(norm="layernorm", norm_bias=True, norm_placement="pre", final_norm=True, gated_ffn=False,
                    ffn_bias=True, parallel_block="two_norms" if parallel else "none")
    if r.head({"GPTNeoXForCausalLM": "causal", "GPTNeoXModel": "base"}, "GPTNeoXForCausalLM") == "base":
        r.base_model()


def checkpoint_names(arch: Architecture, model_type: str) -> list[Rule]:
    """modeling_gpt_neox.py: query_key_value interleaves per head, rows [head][q, k, v][d_head] (``neox_qkv``)."""
    return [
        (r"embed_in\.weight", "tok_emb.weight"), (r"embed_out\.weight", tied_head(arch)),
        (r"final_layer_norm\.(weight|bias)", "final_norm.{0}"),
        (r"layers\.(\d+)\.input_layernorm\.(weight|bias)", "blocks.{0}.attn_norm.{1}"),
        (r"layers\.(\d+)\.post_attention_layernorm\.(weight|bias)", "blocks.{0}.ffn_norm.{1}"),
        (r"layers\.(\d+)\.attention\.query_key_value\.(weight|bias)", "blocks.{0}.attn.qkv.{1}||neox_qkv"),
        (r"layers\.(\d+)\.attention\.dense\.(weight|bias)", "blocks.{0}.attn.out.{1}"),
        (r"layers\.(\d+)\.mlp\.dense_h_to_4h\.(weight|bias)", "blocks.{0}.ffn.up.{1}"),
        (r"layers\.(\d+)\.mlp\.dense_4h_to_h\.(weight|bias)", "blocks.{0}.ffn.down.{1}"),
    ]
