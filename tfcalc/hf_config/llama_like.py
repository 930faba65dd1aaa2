"""The keys every Llama-shaped config.json has (RoPE, RMSNorm, gated FFN, no biases unless said), read once for
the families built on them: llama, mistral, mixtral, qwen2, qwen2_moe, qwen3, qwen3_moe, phi3, gemma (and gemma2,
gemma3), gpt_oss, granite, smollm3, olmo2, glm4, llama4 (each in tfcalc.hf_config.<model_type>).

Required: num_hidden_layers, hidden_size, num_attention_heads, intermediate_size (unless the family reads its
own d_ff: qwen2_moe's moe_intermediate_size), vocab_size. Optional, with the defaults of each transformers config
class: num_key_value_heads, head_dim, max_position_embeddings, rms_norm_eps, rope_theta (or
rope_parameters.rope_theta), hidden_act, tie_word_embeddings, torch_dtype. What each type adds is in its own
module, from its modeling file.
"""

from __future__ import annotations

from typing import Any

from tfcalc.hf_config.reader import Reader


def base_fields(r: Reader, defaults: dict[str, Any], d_ff_key: str | None = "intermediate_size") -> None:
    """The fields every Llama-shaped file has; d_ff from d_ff_key (None: the caller reads it)."""
    r.required(("num_hidden_layers", "n_layer"), ("hidden_size", "d_model"), ("num_attention_heads", "n_head"),
               *([(d_ff_key, "d_ff")] if d_ff_key else []), ("vocab_size", "vocab_size"))
    r.take("num_key_value_heads", "n_kv_head")  # null: = num_attention_heads
    r.take("head_dim", "d_head", defaults.get("head_dim"))  # null: hidden_size / num_attention_heads
    r.take("max_position_embeddings", "max_seq_len", defaults["max_position_embeddings"])
    r.take("rms_norm_eps", "norm_eps", defaults["rms_norm_eps"])
    r.rope(defaults["rope_theta"])
    r.activation("hidden_act", defaults.get("hidden_act", "silu"), aliases=("hidden_activation",))
    r.take("tie_word_embeddings", "tie_embeddings", defaults.get("tie", False))
    r.dtype()
    r.fields.update(norm="rmsnorm", norm_bias=False, norm_placement="pre", final_norm=True, gated_ffn=True,
                    attn_bias=False, ffn_bias=False)
