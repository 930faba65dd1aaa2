"""GPTBigCode (StarCoder) config.json files (bigcode/starcoder; modeling_gpt_bigcode.py): GPT-2's layout with
nn.Linear weights, multi_query (default true: one K/V head), learned positions (n_positions), scale_attn_weights. Its
cross-attention (add_cross_attention) is refused: transformers' own splits K and V one head wide.
"""

from __future__ import annotations

from tfcalc.hf_config.reader import Reader


def gpt_bigcode(r: Reader) -> None:
    r.take("n_layer", "n_layer", required=True, aliases=("num_hidden_layers",))
    r.take("n_embd", "d_model", required=True, aliases=("hidden_size",))
    r.take("n_head", "n_head", required=True, aliases=("num_attention_heads",))
    r.take("n_positions", "max_seq_len", required=True, aliases=("max_position_embeddings",))
    r.required(("vocab_size", "vocab_size"))
    r.divisible_heads("n_embd", "n_head")
    r.refuse("add_cross_attention", True, "GPTBigCode's cross-attention splits K and V one head wide")
    r.take("n_inner", "d_ff")  # null: 4 * n_embd
    r.activation("activation_function", "gelu_pytorch_tanh")
    r.take("layer_norm_epsilon", "norm_eps", 1e-5)
    r.take("tie_word_embeddings", "tie_embeddings", True)
    r.dtype()
    mqa = r.flag("multi_query", True)
    r.fields.update(pos_encoding="learned", norm="layernorm", norm_bias=True, norm_placement="pre", final_norm=True,
                    gated_ffn=False, attn_bias=True, ffn_bias=True, n_kv_head=1 if mqa else None)
    if not r.flag("scale_attn_weights", True):
        r.fields["attn_scale"] = 1.0
    r.causal_or_base("GPTBigCode")
