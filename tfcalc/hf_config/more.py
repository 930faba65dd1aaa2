"""config.json files of Phi-2, StarCoder2, Command-R, Granite, StarCoder, BLOOM and RoBERTa (issue 22),
each from its modeling file in transformers (models/<type>/modeling_<type>.py).

- ``phi`` (microsoft/phi-2): attention and FFN side by side on one shared LayerNorm (PhiDecoderLayer:
  ``attn + mlp + residual``), partial rotary (partial_rotary_factor, default 0.5), biases on Q/K/V, the
  ``dense`` output, fc1 and fc2, a plain FFN (gelu_new), a final LayerNorm, and an LM head with a bias;
  qk_layernorm: a LayerNorm over each head's channels, shared by the heads. PhiForCausalLM or PhiModel.
- ``starcoder2`` (bigcode/starcoder2-15b): GQA (num_key_value_heads, default 2), sliding_window on every
  layer, LayerNorms with biases (norm_epsilon), biases everywhere (use_bias), a plain FFN c_fc, c_proj
  (gelu_pytorch_tanh), tied head by default.
- ``cohere`` (CohereForAI/c4ai-command-r-v01): one shared bias-free LayerNorm before attention and FFN side
  by side (CohereDecoderLayer), a gated SiLU FFN, logits times logit_scale (default 0.0625), tied head,
  use_qk_norm: bias-free LayerNorms over each head with weights of their own per head. Its RoPE rotates
  interleaved pairs (2i, 2i+1); the checkpoint map permutes Q and K rows into tfcalc's rotate-half layout
  (tfcalc.checkpoint.names_more), which changes no count.
- ``granite`` (ibm-granite/granite-3.1-8b-instruct): Llama's, plus embedding_multiplier (token embeddings),
  residual_multiplier (each sub-layer's output before its residual add), attention_multiplier (the score
  scale, in place of 1/sqrt(d_head)) and logits_scaling (logits divided by it).
- ``gpt_bigcode`` (bigcode/starcoder): GPT-2's layout with nn.Linear weights, multi_query (default true:
  one K/V head), learned positions (n_positions), scale_attn_weights. Its cross-attention (add_cross_attention)
  is refused: transformers' own splits K and V one head wide.
- ``bloom`` (bigscience/bloom-560m): ALiBi (no position table), a LayerNorm after the word embeddings, fused
  QKV interleaved per head, a 4·d FFN (BLOOM's tanh GELU), tied head. ALiBi has no position limit:
  max_seq_len is seq_length where given, else 2048 (its training sequence length: BigScience Workshop
  2022, arXiv:2211.05100, the BLOOM paper).
- ``roberta`` (FacebookAI/roberta-base): BERT's, with positions counted from pad_token_id + 1 (modeling_roberta.py,
  create_position_ids_from_input_ids, for input without padding): a table of max_position_embeddings rows
  of which max_position_embeddings - pad_token_id - 1 are usable, tfcalc's position_offset. RobertaModel
  (pooler), RobertaForMaskedLM, or RobertaForCausalLM (is_decoder).
"""

from __future__ import annotations

from typing import Callable

from tfcalc.hf_config import gpt_bert
from tfcalc.hf_config.llama_like import _common, _finish
from tfcalc.hf_config.reader import Reader


def _base_or_causal(r: Reader, prefix: str) -> str:
    kind = r.head({f"{prefix}ForCausalLM": "causal", f"{prefix}Model": "base"}, f"{prefix}ForCausalLM")
    if kind == "base":
        r.base_model()
    return kind


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
    if _base_or_causal(r, "Phi") == "causal":
        r.fields["lm_head_bias"] = True  # PhiForCausalLM: nn.Linear(hidden_size, vocab_size, bias=True)


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
    _base_or_causal(r, "Starcoder2")


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
    if _base_or_causal(r, "Cohere") == "causal":
        r.fields["logit_scale"] = scale


def granite(r: Reader) -> None:
    r.divisible_heads()
    _common(r, dict(max_position_embeddings=2048, rms_norm_eps=1e-6, rope_theta=10000.0))
    r.take("attention_bias", "attn_bias", False)
    r.take("mlp_bias", "ffn_bias", False)
    multipliers = {key: r.number(key, 1.0) for key in ("embedding_multiplier", "residual_multiplier",
                                                       "attention_multiplier", "logits_scaling")}
    for key, value in multipliers.items():
        if value is not None and value <= 0:
            raise r.fail(f"'{key}' must be positive; got {value}")
    r.fields.update(embedding_multiplier=multipliers["embedding_multiplier"],
                    residual_multiplier=multipliers["residual_multiplier"],
                    attn_scale=multipliers["attention_multiplier"])  # modeling_granite.py: scaling = multiplier
    _finish(r, "Granite")
    if r.fields.get("lm_head", True):
        r.fields["logit_scale"] = 1 / multipliers["logits_scaling"]  # logits / logits_scaling


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
    _base_or_causal(r, "GPTBigCode")


def bloom(r: Reader) -> None:
    r.take("n_layer", "n_layer", required=True, aliases=("num_hidden_layers",))
    r.take("n_head", "n_head", required=True, aliases=("num_attention_heads",))
    r.take("hidden_size", "d_model", required=True, aliases=("n_embed",))
    r.required(("vocab_size", "vocab_size"))
    r.divisible_heads(heads="n_head")
    r.refuse("apply_residual_connection_post_layernorm", True, "the residual would start after the norm")
    r.take("seq_length", "max_seq_len", 2048)
    r.take("layer_norm_epsilon", "norm_eps", 1e-5)
    r.take("tie_word_embeddings", "tie_embeddings", True)
    r.dtype()
    r.fields.update(pos_encoding="alibi", norm="layernorm", norm_bias=True, norm_placement="pre", final_norm=True,
                    embedding_norm=True, gated_ffn=False, activation="gelu_tanh", attn_bias=True, ffn_bias=True)
    _base_or_causal(r, "Bloom")


_ROBERTA_HEADS = {"RobertaModel": "base", "RobertaForMaskedLM": "masked", "RobertaForCausalLM": "masked"}


def roberta(r: Reader) -> None:
    gpt_bert.bert(r, heads=_ROBERTA_HEADS, default="RobertaModel")
    pad = r.number("pad_token_id", 1, integer=True)
    rows = r.fields["max_seq_len"]
    if pad is None or pad < 0 or pad + 1 >= rows:
        raise r.fail(f"'pad_token_id' {pad} must be at least 0 and below max_position_embeddings - 1 ({rows - 1}): "
                     "RoBERTa's positions start after it")
    r.fields.update(position_offset=pad + 1, max_seq_len=rows - pad - 1)


MAPPERS: dict[str, Callable[[Reader], None]] = {
    "phi": phi, "starcoder2": starcoder2, "cohere": cohere, "granite": granite, "gpt_bigcode": gpt_bigcode,
    "bloom": bloom, "roberta": roberta,
}
