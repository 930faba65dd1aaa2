"""GPTBigCode (StarCoder) config.json files (bigcode/starcoder; modeling_gpt_bigcode.py): GPT-2's layout with
nn.Linear weights, multi_query (default true: one K/V head), learned positions (n_positions), scale_attn_weights. Its
cross-attention (add_cross_attention) is refused: transformers' own splits K and V one head wide.
"""

from __future__ import annotations

from tfcalc.architecture import Architecture
from tfcalc.hf_config.names import Rule, tied_head
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


def checkpoint_names(arch: Architecture, model_type: str) -> list[Rule]:
    """modeling_gpt_bigcode.py: GPT-2's names in Linear layout; the multi-query c_attn is [Q | K | V], tfcalc's
    layout; with several K/V heads it interleaves per head, [head][q, k, v][d_head], as GPT-NeoX does."""
    attention = arch.output.layer(0).mixer  # GPT-BigCode: softmax attention
    qkv = "" if attention.n_kv_head == 1 else "||neox_qkv"
    return [
        (r"wte\.weight", "tok_emb.weight"), (r"wpe\.weight", "pos_emb.weight"),
        (r"ln_f\.(weight|bias)", "final_norm.{0}"), (r"lm_head\.weight", tied_head(arch)),
        (r"h\.(\d+)\.ln_1\.(weight|bias)", "blocks.{0}.attn_norm.{1}"),
        (r"h\.(\d+)\.ln_2\.(weight|bias)", "blocks.{0}.ffn_norm.{1}"),
        (r"h\.(\d+)\.attn\.c_attn\.(weight|bias)", "blocks.{0}.attn.qkv.{1}" + qkv),
        (r"h\.(\d+)\.attn\.c_proj\.(weight|bias)", "blocks.{0}.attn.out.{1}"),
        (r"h\.(\d+)\.mlp\.c_fc\.(weight|bias)", "blocks.{0}.ffn.up.{1}"),
        (r"h\.(\d+)\.mlp\.c_proj\.(weight|bias)", "blocks.{0}.ffn.down.{1}"),
    ]
