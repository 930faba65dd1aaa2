"""Cohere (Command-R) config.json files (CohereForAI/c4ai-command-r-v01; modeling_cohere.py): one shared bias-free
LayerNorm before attention and FFN side by side (CohereDecoderLayer), a gated SiLU FFN, logits times logit_scale
(default 0.0625), tied head, use_qk_norm: bias-free LayerNorms over each head with weights of their own per head. Its
RoPE rotates interleaved pairs (2i, 2i+1); the checkpoint map permutes Q and K rows into tfcalc's rotate-half layout
(checkpoint_names below), which changes no count.
"""

from __future__ import annotations

from tfcalc.architecture import Architecture
from tfcalc.hf_config.llama_like import llama_names
from tfcalc.hf_config.names import Rule
from tfcalc.hf_config.reader import Reader


def cohere(r: Reader) -> None:
    r.divisible_heads()
    r.required(("num_hidden_layers", "n_layer"), ("hidden_size", "d_model"), ("num_attention_heads", "n_head"),
               ("intermediate_size", "d_ff"), ("vocab_size", "vocab_size"))
    r.take("num_key_value_heads", "n_kv_head")
    r.take("max_position_embeddings", "max_seq_len", 8192)
    r.take("layer_norm_eps", "norm_eps", 1e-5)
    r.activation("hidden_act", "silu")
    r.rope(10000.0)
    r.fields["rope_fraction"] = 1.0  # CohereRotaryEmbedding rotates whole heads, whatever partial_rotary_factor says
    r.take("tie_word_embeddings", "tie_embeddings", True)
    r.take("attention_bias", "attn_bias", False)
    r.dtype()
    qk = r.flag("use_qk_norm", False)
    r.fields.update(norm="layernorm", norm_bias=False, norm_placement="pre", final_norm=True, gated_ffn=True,
                    ffn_bias=False, parallel_block="shared_norm", qk_norm=qk, qk_norm_per_head=qk)
    scale = r.number("logit_scale", 0.0625)
    if r.causal_or_base("Cohere") == "causal":
        r.fields["logit_scale"] = scale


def checkpoint_names(arch: Architecture, model_type: str) -> list[Rule]:
    """Llama's names; the final norm a bias-free LayerNorm (not Gemma's (1 + w)); Q and K rows and the per-head
    Q/K norm weights reordered for the interleaved-pair RoPE (``rope_pairs``, ``rope_pairs_heads``:
    modeling_cohere.py, rotate_half; tfcalc rotates halves, and a head's scores are a sum over its channels,
    so their order is free)."""
    layer = r"layers\.(\d+)\."
    return llama_names(arch, [
        (r"norm\.weight", "final_norm.weight"),
        (layer + r"self_attn\.([qk])_proj\.(weight|bias)", "blocks.{0}.attn.qkv.{2}|{1}|rope_pairs"),
        (layer + r"self_attn\.([qk])_norm\.weight", "blocks.{0}.attn.{1}_norm.weight||rope_pairs_heads")])
