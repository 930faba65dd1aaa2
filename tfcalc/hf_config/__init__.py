"""Hugging Face ``config.json`` files, read from a local path and mapped onto ModelConfig (no network).

Pure Python, like tfcalc.config. Each supported ``model_type`` maps the keys that shape the counts; the
rest of the architecture is what that model type's Hugging Face modelling code builds (the modules:
``gpt_bert`` for gpt2 and bert, ``llama_like`` for llama, mistral, mixtral, qwen2, qwen2_moe, qwen3,
phi3, gemma and gemma2, ``others`` for gpt_neox, falcon, opt and t5, ``moe`` for qwen3_moe and gpt_oss,
``deepseek`` for deepseek_v3, kimi_k2 and deepseek_v2, ``more`` for phi, starcoder2, cohere, granite, gpt_bigcode,
bloom and roberta, ``recent`` for smollm3, olmo2 and glm4, ``gemma3`` and ``llama4``; ``reader`` for what they
share, ``layers`` for per-layer attention).

A key left out takes the default of that model type's Hugging Face config class. ``architectures``
picks the head (a causal LM head, BERT's masked-LM head, or the bare model without one); ``torch_dtype``
is kept as the config's ``dtype``. Every problem is one ConfigError line naming the file and the Hugging
Face key; a key that would change a count and that tfcalc cannot build is refused by name.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from tfcalc import reading
from tfcalc.config import ConfigError
from tfcalc.errors import shown
from tfcalc.hf_config import deepseek, gemma3, gpt_bert, llama4, llama_like, moe, more, others, recent
from tfcalc.hf_config.reader import Reader

_MAPPERS: dict[str, Callable[[Reader], None]] = {
    "bert": gpt_bert.bert, "gpt2": gpt_bert.gpt2, **llama_like.MAPPERS, **others.MAPPERS, **moe.MAPPERS,
    **deepseek.MAPPERS,  # deepseek_v3, kimi_k2, deepseek_v2
    **more.MAPPERS,  # issue 22: phi, starcoder2, cohere, granite, gpt_bigcode, bloom, roberta
    **recent.MAPPERS, **gemma3.MAPPERS, **llama4.MAPPERS,  # issue 22: smollm3, olmo2, glm4, gemma3, llama4
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
    if not isinstance(model_type, str) or model_type not in _MAPPERS:
        raise ConfigError(f"{path}: model_type {shown(model_type)} is not supported (supported: {supported})")
    reader = Reader(raw, str(path))
    _MAPPERS[model_type](reader)
    # ~/models/Meta-Llama-3-8B/config.json is named after its folder
    name = path.parent.name if path.stem == "config" and path.parent.name else path.stem
    return {"name": name, "source": f"{path} (Hugging Face config.json, model_type {model_type})", **reader.fields}


def parse_json(text: str, path: Path) -> Any:
    """config.json text -> data; duplicate keys, runaway nesting and unreadable numbers are refused
    (tfcalc.reading.parse_json)."""
    return reading.parse_json(text, str(path))
