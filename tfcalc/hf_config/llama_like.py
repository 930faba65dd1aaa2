"""The keys every Llama-shaped config.json has (RoPE, RMSNorm, gated FFN, no biases unless said), read once for
the families built on them: llama, mistral, mixtral, qwen2, qwen2_moe, qwen3, qwen3_moe, phi3, gemma (and gemma2,
gemma3), gpt_oss, granite, smollm3, olmo2, glm4, llama4 (each in tfcalc.hf_config.<model_type>).

Required: num_hidden_layers, hidden_size, num_attention_heads, intermediate_size (unless the family reads its
own d_ff: qwen2_moe's moe_intermediate_size), vocab_size. Optional, with the defaults of each transformers config
class (``defaults``): num_key_value_heads, head_dim, max_position_embeddings, rms_norm_eps, rope_theta (or
rope_parameters.rope_theta), hidden_act, tie_word_embeddings, torch_dtype. What each type adds is in its own
module, from its modeling file.

``llama_names``: the checkpoint tensor names they share (modeling_llama.py's, and the MoE names of
modeling_mixtral.py and modeling_qwen2_moe.py), which a family extends with its own rules first.
"""

from __future__ import annotations

from typing import Any

from tfcalc.architecture import Architecture
from tfcalc.hf_config.names import Rule, tied_head
from tfcalc.hf_config.reader import Reader


def base_fields(r: Reader, defaults: dict[str, Any], d_ff_key: str | None = "intermediate_size") -> None:
    """The fields every Llama-shaped file has; d_ff from d_ff_key (None: the caller reads it)."""
    r.required(("num_hidden_layers", "n_layer"), ("hidden_size", "d_model"), ("num_attention_heads", "n_head"),
               *([(d_ff_key, "d_ff")] if d_ff_key else []), ("vocab_size", "vocab_size"))
    # absent (or null, Reader.get): the config class's default, ``n_kv_head`` in defaults (Mistral's 8 whatever the
    # heads); where the class has none (LlamaConfig's None), as many as num_attention_heads
    r.take("num_key_value_heads", "n_kv_head", defaults.get("n_kv_head"))
    r.take("head_dim", "d_head", defaults.get("head_dim"))  # null: hidden_size / num_attention_heads
    r.take("max_position_embeddings", "max_seq_len", defaults["max_position_embeddings"])
    r.take("rms_norm_eps", "norm_eps", defaults["rms_norm_eps"])
    r.rope(defaults["rope_theta"])
    r.activation("hidden_act", defaults.get("hidden_act", "silu"), aliases=("hidden_activation",))
    r.take("tie_word_embeddings", "tie_embeddings", defaults.get("tie", False))
    r.dtype()
    r.fields.update(norm="rmsnorm", norm_bias=False, norm_placement="pre", final_norm=True, gated_ffn=True,
                    attn_bias=False, ffn_bias=False)


def llama_names(arch: Architecture, first: list[Rule] | None = None, unit_offset: bool = False,
                sandwich: bool | None = None) -> list[Rule]:
    """Llama's tensor names, after a family's own ``first`` rules (the first match wins). unit_offset: the
    RMSNorms scale by (1 + w) (modeling_gemma.py, GemmaRMSNorm), a storage convention: tfcalc's weight is w + 1.
    post_attention_layernorm is the attention's output norm where the description places one (Gemma 2's
    sandwich, OLMo 2's output norms), else the FFN's input norm (Llama); ``sandwich`` overrides that reading."""
    norm = "||norm+1" if unit_offset else ""
    if sandwich is None:
        sandwich = any(b.placement in ("sandwich", "output") for b, _ in arch.output.kinds())
    experts = r"layers\.(\d+)\.(?:block_sparse_moe|mlp)\.experts"
    return list(first or []) + [
        (r"embed_tokens\.weight", "tok_emb.weight"),
        (r"norm\.weight", "final_norm.weight" + norm),
        (r"lm_head\.weight", tied_head(arch)),
        (r"layers\.(\d+)\.input_layernorm\.weight", "blocks.{0}.attn_norm.weight" + norm),
        (r"layers\.(\d+)\.post_attention_layernorm\.weight",
         ("blocks.{0}.attn_post_norm.weight" if sandwich else "blocks.{0}.ffn_norm.weight") + norm),
        (r"layers\.(\d+)\.pre_feedforward_layernorm\.weight", "blocks.{0}.ffn_norm.weight" + norm),
        (r"layers\.(\d+)\.post_feedforward_layernorm\.weight", "blocks.{0}.ffn_post_norm.weight" + norm),
        (r"layers\.(\d+)\.self_attn\.([qkv])_proj\.(weight|bias)", "blocks.{0}.attn.qkv.{2}|{1}"),
        (r"layers\.(\d+)\.self_attn\.qkv_proj\.(weight|bias)", "blocks.{0}.attn.qkv.{1}"),
        (r"layers\.(\d+)\.self_attn\.o_proj\.(weight|bias)", "blocks.{0}.attn.out.{1}"),
        (r"layers\.(\d+)\.self_attn\.([qk])_norm\.weight", "blocks.{0}.attn.{1}_norm.weight"),
        (r"layers\.(\d+)\.mlp\.(gate|up)_proj\.(weight|bias)", "blocks.{0}.ffn.up.{2}|{1}"),
        (r"layers\.(\d+)\.mlp\.gate_up_proj\.weight", "blocks.{0}.ffn.up.weight"),
        (r"layers\.(\d+)\.mlp\.down_proj\.(weight|bias)", "blocks.{0}.ffn.down.{1}"),
        (r"layers\.(\d+)\.mlp\.act_fn\.(alpha_p|alpha_n)", "blocks.{0}.ffn.act.{1}"),  # Apertus' xIELU
        (r"layers\.(\d+)\.mlp\.act_fn\.(beta|eps)", "buffer:blocks.{0}.ffn.act.{1}"),
        (r"layers\.(\d+)\.(?:block_sparse_moe|mlp)\.gate\.weight", "blocks.{0}.ffn.router.weight"),
        (experts + r"\.(\d+)\.(?:w1|gate_proj)\.weight", "blocks.{0}.ffn.experts.up.weight@{1}|gate"),
        (experts + r"\.(\d+)\.(?:w3|up_proj)\.weight", "blocks.{0}.ffn.experts.up.weight@{1}|up"),
        (experts + r"\.(\d+)\.(?:w2|down_proj)\.weight", "blocks.{0}.ffn.experts.down.weight@{1}"),
        (experts + r"\.gate_up_proj", "blocks.{0}.ffn.experts.up.weight"),
        (experts + r"\.down_proj", "blocks.{0}.ffn.experts.down.weight"),
        (r"layers\.(\d+)\.mlp\.shared_expert\.(gate|up)_proj\.weight", "blocks.{0}.ffn.shared.up.weight|{1}"),
        (r"layers\.(\d+)\.mlp\.shared_expert\.down_proj\.weight", "blocks.{0}.ffn.shared.down.weight"),
        (r"layers\.(\d+)\.mlp\.shared_expert_gate\.weight", "blocks.{0}.ffn.shared_gate.weight"),
    ]
