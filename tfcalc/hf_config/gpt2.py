"""GPT-2 config.json files (modeling_gpt2.py), with their cross-attention: n_layer, n_embd, n_head, vocab_size,
n_positions (required); n_inner (default 4·n_embd), activation_function, layer_norm_epsilon, tie_word_embeddings,
add_cross_attention (a cross-attention sub-layer with its own norm in every block: q_attn, c_attn for K and V,
ln_cross_attn). Learned positions, pre-LN, biases. GPT2LMHeadModel (tied head) or GPT2Model (no head).
"""

from __future__ import annotations

from tfcalc.hf_config.reader import Reader

_GPT2_HEADS = {"GPT2LMHeadModel": "causal", "GPT2Model": "base"}


def gpt2(r: Reader) -> None:
    r.required(("n_layer", "n_layer"), ("n_embd", "d_model"), ("n_head", "n_head"), ("vocab_size", "vocab_size"),
               ("n_positions", "max_seq_len"))
    r.take("n_inner", "d_ff")  # null: 4 * n_embd, which ModelConfig derives (ffn_mult 4)
    r.activation("activation_function", "gelu_new")
    r.take("layer_norm_epsilon", "norm_eps", 1e-5)
    r.take("tie_word_embeddings", "tie_embeddings", True)
    r.fields.update(pos_encoding="learned", norm="layernorm", norm_placement="pre", final_norm=True,
                    gated_ffn=False, attn_bias=True, ffn_bias=True, norm_bias=True,
                    cross_attention=r.flag("add_cross_attention", False))
    if r.head(_GPT2_HEADS, "GPT2LMHeadModel") == "base":
        r.base_model()
