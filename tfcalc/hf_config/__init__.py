"""Hugging Face ``config.json`` files, read from a local path and mapped onto ModelConfig (no network).

Pure Python, like tfcalc.config. Each supported ``model_type`` maps the keys that shape the counts; the
rest of the architecture is what that model type's Hugging Face modelling code builds. One module per
family, named after its model_type (``llama``, ``qwen2_moe``, ``gemma3`` for gemma3 and gemma3_text,
``deepseek`` for deepseek_v3, kimi_k2 and deepseek_v2, ...), each listed once in ``REGISTRY`` below and
imported when a file of its type is read. What the families share: ``reader`` (the Reader: keys, types,
defaults, refusals), ``llama_like`` (the keys of every Llama-shaped file), ``layers`` (per-layer attention:
layer_types, no_rope_layers), ``layer_pattern`` (a list of layer kinds written as a pattern), and two read
for every family once its own module is done: ``rope_scaling`` (yarn, linear, llama3) and ``quantization``.

A key left out takes the default of that model type's Hugging Face config class. ``architectures``
picks the head (a causal LM head, BERT's masked-LM head, or the bare model without one); ``torch_dtype``
is kept as the config's ``dtype``. Every problem is one ConfigError line naming the file and the Hugging
Face key; a key that would change a count and that tfcalc cannot build is refused by name.

Adding a type: its module here (a function ``f(r: Reader) -> None`` filling ``r.fields``, and
``checkpoint_names(arch, model_type)``, the rules that map its checkpoint's tensor names onto tfcalc's
parameters: tfcalc.hf_config.names), one row in ``REGISTRY``, its row in the README's "Supported model types",
and a test against transformers' own model. tfcalc.checkpoint reads the names through ``checkpoint_names`` below
and names no family.
"""

from __future__ import annotations

import importlib
import importlib.util
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from tfcalc import reading
from tfcalc.config import ConfigError
from tfcalc.errors import shown
from tfcalc.hf_config.reader import Reader

if TYPE_CHECKING:  # importing the package loads no module beyond the reader (tests/test_hf_config.py)
    from tfcalc.architecture import Architecture
    from tfcalc.hf_config.names import Rule

# model_type -> (module of tfcalc.hf_config, its function that reads the file into ModelConfig fields): the one
# table of the types tfcalc reads, each module imported when a file of its type is read (vLLM's model registry,
# vllm/model_executor/models/registry.py: an architecture name -> module and class, loaded lazily). A family is
# one module: the types that share its mapping name the same module (kimi_k2 is DeepSeek-V3's model). A module
# name that is no module of this package is imported by its own name (a family kept elsewhere: a test's own).
REGISTRY: dict[str, tuple[str, str]] = {
    "apertus": ("apertus", "apertus"),
    "bailing_hybrid": ("bailing_hybrid", "bailing_hybrid"),
    "bert": ("bert", "bert"),
    "bloom": ("bloom", "bloom"),
    "cohere": ("cohere", "cohere"),
    "deepseek_v2": ("deepseek", "deepseek_v2"),
    "deepseek_v3": ("deepseek", "deepseek_v3"),
    "deepseek_v32": ("deepseek", "deepseek_v32"),
    "deepseek_v4": ("deepseek_v4", "deepseek_v4"),
    "ernie4_5_moe": ("ernie4_5_moe", "ernie4_5_moe"),
    "exaone4": ("exaone4", "exaone4"),
    "falcon": ("falcon", "falcon"),
    "falcon_mamba": ("mamba", "falcon_mamba"),
    "falcon_h1": ("falcon_h1", "falcon_h1"),
    "gemma": ("gemma", "gemma"),
    "gemma2": ("gemma2", "gemma2"),
    "gemma3": ("gemma3", "gemma3"),
    "gemma3_text": ("gemma3", "gemma3_text"),
    "gemma3n": ("gemma3n", "gemma3n"),
    "gemma3n_text": ("gemma3n", "gemma3n_text"),
    "gemma4": ("gemma4", "gemma4"),
    "gemma4_text": ("gemma4", "gemma4_text"),
    "glm4": ("glm4", "glm4"),
    "glm4_moe": ("glm4_moe", "glm4_moe"),
    "glm4_moe_lite": ("glm4_moe_lite", "glm4_moe_lite"),
    "glm_moe_dsa": ("deepseek", "glm_moe_dsa"),
    "gpt2": ("gpt2", "gpt2"),
    "gpt_bigcode": ("gpt_bigcode", "gpt_bigcode"),
    "gpt_neox": ("gpt_neox", "gpt_neox"),
    "gpt_oss": ("gpt_oss", "gpt_oss"),
    "granite": ("granite", "granite"),
    "granitemoehybrid": ("granitemoehybrid", "granitemoehybrid"),
    "jamba": ("jamba", "jamba"),
    "kimi_k2": ("deepseek", "deepseek_v3"),
    "kimi_k25": ("kimi_k25", "kimi_k25"),
    "kimi_linear": ("kimi_linear", "kimi_linear"),
    "lfm2": ("lfm2", "lfm2"),
    "lfm2_moe": ("lfm2", "lfm2_moe"),
    "llama": ("llama", "llama"),
    "llama4": ("llama4", "llama4"),
    "llama4_text": ("llama4", "llama4_text"),
    "mamba": ("mamba", "mamba"),
    "longcat_flash": ("longcat_flash", "longcat_flash"),
    "mamba2": ("mamba2", "mamba2"),
    "mimo_v2_flash": ("mimo_v2_flash", "mimo_v2_flash"),
    "minimax": ("minimax", "minimax"),
    "minimax_m2": ("minimax_m2", "minimax_m2"),
    "mistral": ("mistral", "mistral"),
    "mixtral": ("mixtral", "mixtral"),
    "nemotron_h": ("nemotron_h", "nemotron_h"),
    "olmo2": ("olmo2", "olmo2"),
    "olmo3": ("olmo3", "olmo3"),
    "olmo_hybrid": ("olmo_hybrid", "olmo_hybrid"),
    "opt": ("opt", "opt"),
    "phi": ("phi", "phi"),
    "phi3": ("phi3", "phi3"),
    "qwen2": ("qwen2", "qwen2"),
    "qwen2_moe": ("qwen2_moe", "qwen2_moe"),
    "qwen3": ("qwen3", "qwen3"),
    "qwen3_moe": ("qwen3_moe", "qwen3_moe"),
    "qwen3_5": ("qwen3_5", "qwen3_5"),
    "qwen3_5_moe": ("qwen3_5", "qwen3_5_moe"),
    "qwen3_5_moe_text": ("qwen3_5", "qwen3_5_moe_text"),
    "qwen3_5_text": ("qwen3_5", "qwen3_5_text"),
    "qwen3_next": ("qwen3_next", "qwen3_next"),
    "roberta": ("roberta", "roberta"),
    "seed_oss": ("seed_oss", "seed_oss"),
    "smollm3": ("smollm3", "smollm3"),
    "starcoder2": ("starcoder2", "starcoder2"),
    "t5": ("t5", "t5"),
    "zamba2": ("zamba2", "zamba2"),
}
SUPPORTED_MODEL_TYPES = tuple(sorted(REGISTRY))


def _family(model_type: str) -> Any:
    module = REGISTRY[model_type][0]
    own = f"{__name__}.{module}"
    return importlib.import_module(own if "." not in module and importlib.util.find_spec(own) else module)


def mapper(model_type: str) -> Callable[[Reader], None]:
    """The function that reads a file of this (registered) model_type, its module imported on first use."""
    return getattr(_family(model_type), REGISTRY[model_type][1])


def checkpoint_names(arch: Architecture, model_type: str) -> list[Rule]:
    """The checkpoint-name rules of a registered model_type (its family module's ``checkpoint_names``), for the
    model arch describes; ConfigError, one line, for a type tfcalc does not read."""
    if model_type not in REGISTRY:
        raise ConfigError(f"model_type {shown(model_type)} is not supported, so its checkpoint names are unknown "
                          f"(supported: {', '.join(SUPPORTED_MODEL_TYPES)})")
    return _family(model_type).checkpoint_names(arch, model_type)


def config_fields(raw: Any, path: Path) -> dict[str, Any]:
    """ModelConfig fields (name and source included) from a parsed config.json."""
    supported = ", ".join(SUPPORTED_MODEL_TYPES)
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: expected a JSON object of config fields, got a {type(raw).__name__}")
    model_type = raw.get("model_type")
    if model_type is None:
        raise ConfigError(f"{path}: no 'model_type' field, so not a Hugging Face config.json (supported: {supported})")
    if not isinstance(model_type, str) or model_type not in REGISTRY:
        raise ConfigError(f"{path}: model_type {shown(model_type)} is not supported (supported: {supported})")
    reader = Reader(raw, str(path))
    mapper(model_type)(reader)
    from tfcalc.hf_config.quantization import quantization  # imported when a file is read, as a family is
    from tfcalc.hf_config.rope_scaling import rope_scaling

    rope_scaling(reader)  # every family with RoPE (DeepSeek's reads its own): how its frequencies are scaled
    quantization(reader)  # every family: how a quantized checkpoint stores its matrices
    # ~/models/Meta-Llama-3-8B/config.json is named after its folder
    name = path.parent.name if path.stem == "config" and path.parent.name else path.stem
    return {"name": name, "source": f"{path} (Hugging Face config.json, model_type {model_type})", **reader.fields}


def parse_json(text: str, path: Path) -> Any:
    """config.json text -> data; duplicate keys, runaway nesting and unreadable numbers are refused
    (tfcalc.reading.parse_json)."""
    return reading.parse_json(text, str(path))
