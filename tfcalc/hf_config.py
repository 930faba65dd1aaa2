"""Hugging Face ``config.json`` files, read from a local path and mapped onto ModelConfig (no network).

Pure Python, like tfcalc.config. Each supported ``model_type`` maps the keys that shape the parameter
count; the rest of the architecture is what that model type's Hugging Face modelling code builds:

- ``gpt2``: n_layer, n_embd, n_head, vocab_size, n_positions (required); n_inner (default 4*n_embd),
  activation_function, layer_norm_epsilon, tie_word_embeddings. Learned positions, pre-LN, biases.
- ``llama``, ``mistral``: num_hidden_layers, hidden_size, num_attention_heads, intermediate_size,
  vocab_size (required); num_key_value_heads, head_dim, max_position_embeddings, rms_norm_eps,
  rope_theta, hidden_act, tie_word_embeddings; for llama also attention_bias and mlp_bias (Mistral's
  code has no biases). RoPE, RMSNorm, SwiGLU. For mistral and mixtral also sliding_window (MistralConfig's
  default 4096, MixtralConfig's none): it changes no parameter, only the KV cache and the causal FLOPs.
- ``mixtral``: as mistral, plus num_local_experts and num_experts_per_tok (required).
- ``bert``: num_hidden_layers, hidden_size, num_attention_heads, intermediate_size, vocab_size,
  max_position_embeddings (required); type_vocab_size, hidden_act, layer_norm_eps. Built as BertModel
  (embeddings, encoder, pooler; no masked-LM head), the model BERT's published sizes count.

A key left out takes the default of that model type's Hugging Face config class. Every problem is one
ConfigError line naming the file and the Hugging Face key.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

from tfcalc.config import ConfigError, check_field_type

# Hugging Face activation names (transformers.activations.ACT2FN) -> ModelConfig.activation
_ACTIVATIONS = {
    "gelu": "gelu",
    "gelu_new": "gelu_tanh",
    "gelu_pytorch_tanh": "gelu_tanh",
    "gelu_fast": "gelu_tanh",  # another tanh approximation: the same count and FLOPs
    "relu": "relu",
    "silu": "silu",
    "swish": "silu",
}


class _Reader:
    """Reads Hugging Face keys into ModelConfig fields, naming the key in every error."""

    def __init__(self, raw: dict[str, Any], where: str):
        self.raw, self.where = raw, where
        self.fields: dict[str, Any] = {}

    def fail(self, message: str) -> ConfigError:
        return ConfigError(f"{self.where}: {message}")

    def take(self, key: str, field: str, default: Any = None, required: bool = False) -> None:
        value = self.raw.get(key)
        if value is None:
            if required:
                raise self.fail(f"missing required field '{key}' (model_type {self.raw['model_type']})")
            value = default
        try:
            check_field_type(field, value)
        except ConfigError as e:
            raise self.fail(f"'{key}': {e}") from None
        self.fields[field] = value

    def required(self, *pairs: tuple[str, str]) -> None:
        for key, field in pairs:
            self.take(key, field, required=True)

    def activation(self, key: str, default: str) -> None:
        value = self.raw.get(key) or default
        if value not in _ACTIVATIONS:
            known = ", ".join(_ACTIVATIONS)
            raise self.fail(f"'{key}' {value!r} is not an activation tfcalc builds (known: {known})")
        self.fields["activation"] = _ACTIVATIONS[value]


def _gpt2(r: _Reader) -> None:
    r.required(("n_layer", "n_layer"), ("n_embd", "d_model"), ("n_head", "n_head"), ("vocab_size", "vocab_size"),
               ("n_positions", "max_seq_len"))
    r.take("n_inner", "d_ff")  # null: 4 * n_embd, which ModelConfig derives (ffn_mult 4)
    r.activation("activation_function", "gelu_new")
    r.take("layer_norm_epsilon", "norm_eps", 1e-5)
    r.take("tie_word_embeddings", "tie_embeddings", True)
    r.fields.update(pos_encoding="learned", norm="layernorm", norm_placement="pre", final_norm=True,
                    gated_ffn=False, attn_bias=True, ffn_bias=True, norm_bias=True)


def _llama_family(defaults: dict[str, Any], biases: bool = False, experts: bool = False) -> Callable[[_Reader], None]:
    def read(r: _Reader) -> None:
        r.required(("num_hidden_layers", "n_layer"), ("hidden_size", "d_model"),
                   ("num_attention_heads", "n_head"), ("intermediate_size", "d_ff"), ("vocab_size", "vocab_size"))
        if experts:
            r.required(("num_local_experts", "n_expert"), ("num_experts_per_tok", "n_expert_active"))
        r.take("num_key_value_heads", "n_kv_head")  # null: = num_attention_heads
        r.take("head_dim", "d_head")  # null: hidden_size / num_attention_heads
        r.take("max_position_embeddings", "max_seq_len", defaults["max_position_embeddings"])
        r.take("rms_norm_eps", "norm_eps", defaults["rms_norm_eps"])
        nested = r.raw.get("rope_parameters")  # where newer transformers releases write rope_theta
        theta = nested.get("rope_theta") if isinstance(nested, dict) else None
        r.take("rope_theta", "rope_theta", defaults["rope_theta"] if theta is None else theta)
        r.activation("hidden_act", "silu")
        r.take("tie_word_embeddings", "tie_embeddings", False)
        if "sliding_window" in defaults:  # Mistral's window: W keys per query, itself included, as tfcalc's
            absent = "sliding_window" not in r.raw  # an explicit null means no window (Mistral 7B v0.2)
            r.take("sliding_window", "sliding_window", defaults["sliding_window"] if absent else None)
        if biases:
            r.take("attention_bias", "attn_bias", False)
            r.take("mlp_bias", "ffn_bias", False)
        else:
            r.fields.update(attn_bias=False, ffn_bias=False)
        r.fields.update(pos_encoding="rope", norm="rmsnorm", norm_bias=False, norm_placement="pre",
                        final_norm=True, gated_ffn=True)

    return read


def _bert(r: _Reader) -> None:
    r.required(("num_hidden_layers", "n_layer"), ("hidden_size", "d_model"), ("num_attention_heads", "n_head"),
               ("intermediate_size", "d_ff"), ("vocab_size", "vocab_size"), ("max_position_embeddings", "max_seq_len"))
    positions = r.raw.get("position_embedding_type") or "absolute"
    if positions != "absolute":
        raise r.fail(f"'position_embedding_type' {positions!r} is not supported (only 'absolute')")
    r.take("type_vocab_size", "type_vocab_size", 2)
    r.activation("hidden_act", "gelu")
    r.take("layer_norm_eps", "norm_eps", 1e-12)
    r.fields.update(arch="encoder", pos_encoding="learned", norm="layernorm", norm_placement="post",
                    final_norm=False, gated_ffn=False, attn_bias=True, ffn_bias=True, norm_bias=True,
                    embedding_norm=True, pooler=True, lm_head=False, tie_embeddings=False)


# Defaults of transformers' LlamaConfig, MistralConfig and MixtralConfig.
_MAPPERS: dict[str, Callable[[_Reader], None]] = {
    "bert": _bert,
    "gpt2": _gpt2,
    "llama": _llama_family(dict(max_position_embeddings=2048, rms_norm_eps=1e-6, rope_theta=10000.0), biases=True),
    "mistral": _llama_family(dict(max_position_embeddings=4096 * 32, rms_norm_eps=1e-6, rope_theta=10000.0,
                                  sliding_window=4096)),
    "mixtral": _llama_family(dict(max_position_embeddings=4096 * 32, rms_norm_eps=1e-5, rope_theta=1e6,
                                  sliding_window=None), experts=True),
}
SUPPORTED_MODEL_TYPES = tuple(sorted(_MAPPERS))


def config_fields(raw: Any, path: Path) -> dict[str, Any]:
    """ModelConfig fields (name and source included) from a parsed config.json."""
    supported = ", ".join(SUPPORTED_MODEL_TYPES)
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: expected a JSON object of config fields, got a {type(raw).__name__}")
    model_type = raw.get("model_type")
    if model_type is None:
        raise ConfigError(f"{path}: no 'model_type' field, so not a Hugging Face config.json (supported: {supported})")
    if model_type not in _MAPPERS:
        raise ConfigError(f"{path}: model_type {model_type!r} is not supported (supported: {supported})")
    reader = _Reader(raw, str(path))
    _MAPPERS[model_type](reader)
    # ~/models/Meta-Llama-3-8B/config.json is named after its folder
    name = path.parent.name if path.stem == "config" and path.parent.name else path.stem
    return {"name": name, "source": f"{path} (Hugging Face config.json, model_type {model_type})", **reader.fields}


def parse_json(text: str, path: Path) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise ConfigError(f"{path}: not valid JSON at line {e.lineno}, column {e.colno}: {e.msg}") from None
