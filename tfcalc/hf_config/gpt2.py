"""GPT-2 config.json files (modeling_gpt2.py), with their cross-attention: n_layer, n_embd, n_head, vocab_size,
n_positions (required); n_inner (default 4·n_embd), activation_function, layer_norm_epsilon, tie_word_embeddings,
add_cross_attention (a cross-attention sub-layer with its own norm in every block: q_attn, c_attn for K and V,
ln_cross_attn). Learned positions, pre-LN, biases. GPT2LMHeadModel (tied head) or GPT2Model (no head).
"""

from __future__ import annotations

from tfcalc.architecture import Architecture
from tfcalc.hf_config.names import Rule, tied_head
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


def checkpoint_names(arch: Architecture, model_type: str) -> list[Rule]:
    """modeling_gpt2.py: Conv1D stores (in, out), the transpose of a Linear's weight (``T``)."""
    return [
        (r"wte\.weight", "tok_emb.weight"), (r"wpe\.weight", "pos_emb.weight"),
        (r"ln_f\.(weight|bias)", "final_norm.{0}"),
        (r"lm_head\.weight", tied_head(arch)),
        (r"h\.(\d+)\.ln_1\.(weight|bias)", "blocks.{0}.attn_norm.{1}"),
        (r"h\.(\d+)\.ln_2\.(weight|bias)", "blocks.{0}.ffn_norm.{1}"),
        (r"h\.(\d+)\.ln_cross_attn\.(weight|bias)", "blocks.{0}.cross_attn_norm.{1}"),
        (r"h\.(\d+)\.attn\.c_attn\.weight", "blocks.{0}.attn.qkv.weight||T"),
        (r"h\.(\d+)\.attn\.c_attn\.bias", "blocks.{0}.attn.qkv.bias"),
        (r"h\.(\d+)\.attn\.c_proj\.weight", "blocks.{0}.attn.out.weight||T"),
        (r"h\.(\d+)\.attn\.c_proj\.bias", "blocks.{0}.attn.out.bias"),
        (r"h\.(\d+)\.crossattention\.q_attn\.weight", "blocks.{0}.cross_attn.q.weight||T"),
        (r"h\.(\d+)\.crossattention\.q_attn\.bias", "blocks.{0}.cross_attn.q.bias"),
        (r"h\.(\d+)\.crossattention\.c_attn\.weight", "blocks.{0}.cross_attn.kv.weight||T"),
        (r"h\.(\d+)\.crossattention\.c_attn\.bias", "blocks.{0}.cross_attn.kv.bias"),
        (r"h\.(\d+)\.crossattention\.c_proj\.weight", "blocks.{0}.cross_attn.out.weight||T"),
        (r"h\.(\d+)\.crossattention\.c_proj\.bias", "blocks.{0}.cross_attn.out.bias"),
        (r"h\.(\d+)\.mlp\.c_fc\.weight", "blocks.{0}.ffn.up.weight||T"),
        (r"h\.(\d+)\.mlp\.c_fc\.bias", "blocks.{0}.ffn.up.bias"),
        (r"h\.(\d+)\.mlp\.c_proj\.weight", "blocks.{0}.ffn.down.weight||T"),
        (r"h\.(\d+)\.mlp\.c_proj\.bias", "blocks.{0}.ffn.down.bias"),
    ]
