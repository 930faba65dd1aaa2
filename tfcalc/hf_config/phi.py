"""Phi (Phi-1, Phi-2) config.json files (microsoft/phi-2; modeling_phi.py): attention and FFN side by side on one
shared LayerNorm (PhiDecoderLayer: ``attn + mlp + residual``), partial rotary (partial_rotary_factor, default 0.5),
biases on Q/K/V, the ``dense`` output, fc1 and fc2, a plain FFN (gelu_new), a final LayerNorm, and an LM head with a
bias; qk_layernorm: a LayerNorm over each head's channels, shared by the heads. PhiForCausalLM or PhiModel.
"""

from __future__ import annotations

from tfcalc.architecture import Architecture
from tfcalc.hf_config.names import Rule, tied_head
from tfcalc.hf_config.reader import Reader


def phi(r: Reader) -> None:
    r.divisible_heads()
    r.required(("num_hidden_layers", "n_layer"), ("hidden_size", "d_model"), ("num_attention_heads", "n_head"),
               ("intermediate_size", "d_ff"), ("vocab_size", "vocab_size"))
    r.take("num_key_value_heads", "n_kv_head")
    r.take("max_position_embeddings", "max_seq_len", 2048)
    r.take("layer_norm_eps", "norm_eps", 1e-5)
    r.activation("hidden_act", "gelu_new")
    r.rope(10000.0, fraction=0.5)  # configuration_phi.py: partial_rotary_factor defaults to 0.5
    r.take("tie_word_embeddings", "tie_embeddings", False)
    r.dtype()
    r.fields.update(norm="layernorm", norm_bias=True, norm_placement="pre", final_norm=True, gated_ffn=False,
                    attn_bias=True, ffn_bias=True, parallel_block="shared_norm", qk_norm=r.flag("qk_layernorm", False))
    if r.causal_or_base("Phi") == "causal":
        r.fields["lm_head_bias"] = True  # PhiForCausalLM: nn.Linear(hidden_size, vocab_size, bias=True)


def checkpoint_names(arch: Architecture, model_type: str) -> list[Rule]:
    """modeling_phi.py: its dense, fc1, fc2 and final_layernorm names, Q/K LayerNorms, an LM head bias."""
    layer = r"layers\.(\d+)\."
    return [
        (r"embed_tokens\.weight", "tok_emb.weight"), (r"final_layernorm\.(weight|bias)", "final_norm.{0}"),
        (r"lm_head\.weight", tied_head(arch)), (r"lm_head\.bias", "lm_head.bias"),
        (layer + r"input_layernorm\.(weight|bias)", "blocks.{0}.attn_norm.{1}"),
        (layer + r"self_attn\.([qkv])_proj\.(weight|bias)", "blocks.{0}.attn.qkv.{2}|{1}"),
        (layer + r"self_attn\.dense\.(weight|bias)", "blocks.{0}.attn.out.{1}"),
        (layer + r"self_attn\.([qk])_layernorm\.(weight|bias)", "blocks.{0}.attn.{1}_norm.{2}"),
        (layer + r"mlp\.fc1\.(weight|bias)", "blocks.{0}.ffn.up.{1}"),
        (layer + r"mlp\.fc2\.(weight|bias)", "blocks.{0}.ffn.down.{1}"),
    ]
