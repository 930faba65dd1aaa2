"""Reading one Hugging Face ``config.json``: the keys, their types and defaults, and the refusals.

``Reader`` wraps the parsed JSON object. Every problem is one ConfigError line naming the file and the
Hugging Face key. A key that would change a count and that tfcalc cannot express is refused by name,
never ignored. Pure Python: no torch, no transformers.
"""

from __future__ import annotations

import math
from typing import Any

from tfcalc.config import ConfigError, check_field_type
from tfcalc.errors import shown
from tfcalc.hf_config.layer_pattern import compact

MAX_LISTED_LAYERS = 1_000_000  # a per-layer list built for a config.json: ~10 s of Python at most

# Hugging Face activation names (transformers.activations.ACT2FN) -> ModelConfig.activation
ACTIVATIONS = {
    "gelu": "gelu",
    "gelu_new": "gelu_tanh",
    "gelu_pytorch_tanh": "gelu_tanh",
    "gelu_fast": "gelu_tanh",  # another tanh approximation: the same count and FLOPs
    "relu": "relu",
    "relu2": "relu2",  # Nemotron-H's MLP and experts: relu(x)² (ReLUSquaredActivation)
    "silu": "silu",
    "swish": "silu",
    "xielu": "xielu",  # Apertus: learned α_p, α_n per layer (tfcalc.architecture.ffn)
}
# torch_dtype (dtype in transformers 5) -> ModelConfig.dtype
DTYPES = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}
_MISSING = object()


class Reader:
    """Reads Hugging Face keys into ModelConfig fields (``fields``), naming the key in every error."""

    def __init__(self, raw: dict[str, Any], where: str):
        self.raw, self.where = raw, where
        self.model_type = raw["model_type"]
        self.fields: dict[str, Any] = {}

    def fail(self, message: str) -> ConfigError:
        return ConfigError(f"{self.where}: {message}")

    def size(self, key: str, default: int) -> int:
        """A positive integer size (a vision config's [n, n] pair as n: image_size, patch_size), one line
        naming the key otherwise."""
        value = self.get(key, default)
        if isinstance(value, list) and len(value) == 2 and value[0] == value[1]:
            value = value[0]
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise self.fail(f"'{key}' must be a positive integer; got {shown(value)}")
        return value

    def get(self, key: str, default: Any = None, aliases: tuple[str, ...] = ()) -> Any:
        """The value of key (or of the first alias present, as older files spell it), null as absent."""
        for name in (key, *aliases):
            if self.raw.get(name) is not None:
                return self.raw[name]
        return default

    def take(self, key: str, field: str, default: Any = None, required: bool = False,
             aliases: tuple[str, ...] = ()) -> Any:
        value = self.get(key, _MISSING, aliases)
        if value is _MISSING:
            if required:
                raise self.fail(f"missing required field '{key}' (model_type {self.model_type})")
            value = default
        try:
            check_field_type(field, value)
        except ConfigError as e:
            raise self.fail(f"'{key}': {e}") from None
        self.fields[field] = value
        return value

    def required(self, *pairs: tuple[str, str]) -> None:
        for key, field in pairs:
            self.take(key, field, required=True)

    def objects(self, *keys: str) -> list[dict[str, Any]]:
        """Each key's object of config fields, {} where absent or null (a vision-language model's text_config
        and vision_config); one line naming the key where it is not an object."""
        out = []
        for key in keys:
            value = self.raw.get(key) or {}
            if not isinstance(value, dict):
                raise self.fail(f"'{key}' must be an object of config fields; got {shown(value)}")
            out.append(value)
        return out

    def flag(self, key: str, default: bool, aliases: tuple[str, ...] = ()) -> bool:
        """A true/false key that selects a layout (not a field itself)."""
        value = self.get(key, default, aliases)
        if not isinstance(value, bool):
            raise self.fail(f"'{key}' must be true or false; got {shown(value)} ({type(value).__name__})")
        return value

    def number(self, key: str, default: Any, integer: bool = False) -> Any:
        value = self.get(key, default)
        ok = isinstance(value, int) if integer else isinstance(value, (int, float))
        if value is not None and (not ok or isinstance(value, bool)):
            kind = "an integer" if integer else "a number"
            raise self.fail(f"'{key}' must be {kind}; got {shown(value)} ({type(value).__name__})")
        return value

    def positive(self, key: str, default: Any) -> Any:
        """A number that must be finite and above 0 (a scale whose inverse or root is taken): one line."""
        value = self.number(key, default)
        if value is not None and not (math.isfinite(value) and value > 0):
            raise self.fail(f"'{key}' must be a positive number; got {shown(value)}")
        return value

    def refuse(self, key: str, value: Any, why: str) -> None:
        """Refuse key when it holds value: a layout tfcalc does not build (why says what it changes)."""
        if self.raw.get(key) == value:
            raise self.fail(f"'{key}': {shown(value)} is not supported: {why}")

    def activation(self, key: str, default: str, aliases: tuple[str, ...] = ()) -> None:
        value = self.get(key, default, aliases)
        if not isinstance(value, str) or value not in ACTIVATIONS:  # a list or dict is no activation name
            known = ", ".join(ACTIVATIONS)
            raise self.fail(f"'{key}' {shown(value)} is not an activation tfcalc builds (known: {known})")
        self.fields["activation"] = ACTIVATIONS[value]

    def rope_parameters(self) -> dict[str, Any]:
        """transformers 5 nests rope_theta and partial_rotary_factor in rope_parameters."""
        nested = self.raw.get("rope_parameters")
        return nested if isinstance(nested, dict) else {}

    def rope(self, theta: float, fraction: float = 1.0, fraction_keys: tuple[str, ...] = ("partial_rotary_factor",),
             theta_keys: tuple[str, ...] = ()) -> None:
        """rope_theta (top level, nested, or an older name) and partial rotary (rotary_pct, ...)."""
        nested = self.rope_parameters()
        self.take("rope_theta", "rope_theta", nested.get("rope_theta", theta), aliases=theta_keys)
        self.fields["rope_fraction"] = self.number(fraction_keys[0], nested.get("partial_rotary_factor", fraction))
        for key in fraction_keys[1:]:
            if self.raw.get(key) is not None:
                self.fields["rope_fraction"] = self.number(key, fraction)
        self.fields["pos_encoding"] = "rope"

    def divisible_heads(self, hidden: str = "hidden_size", heads: str = "num_attention_heads") -> None:
        """transformers' own check for this type (validate_architecture): refused there, refused here."""
        h, n = self.raw.get(hidden), self.raw.get(heads)
        if isinstance(h, int) and isinstance(n, int) and n > 0 and h % n:
            raise self.fail(f"'{hidden}' ({h}) is not a multiple of '{heads}' ({n}): transformers refuses "
                            f"this {self.model_type} config, even with an explicit head_dim")

    def windows(self, window_key: str = "sliding_window", used: bool = True) -> None:
        """Sliding windows: layer_types (transformers 5) says which layers use the window: every layer
        windowed, every k-th layer full (full_attention_every), or any other list (layer_pattern). Without
        layer_types, every layer when ``used``."""
        window = self.number(window_key, None, integer=True)
        kinds = self.raw.get("layer_types")
        if kinds is None:
            self.fields["sliding_window"] = window if used and window else None
            return
        if not isinstance(kinds, list) or not all(k in ("sliding_attention", "full_attention") for k in kinds):
            raise self.fail("'layer_types' must be a list of 'sliding_attention' and 'full_attention'")
        n = self.fields.get("n_layer")
        if n is not None and n != len(kinds):  # as transformers' PreTrainedConfig.validate_layer_type refuses it
            raise self.fail(f"'layer_types' lists {len(kinds)} layers; 'num_hidden_layers' is {n}")
        full = [i for i, kind in enumerate(kinds) if kind == "full_attention"]
        if len(full) == len(kinds):
            self.fields["sliding_window"] = None
            return
        if not window:
            raise self.fail(f"'layer_types' names sliding layers but '{window_key}' is {shown(window)}")
        self.fields["sliding_window"] = window
        if full:
            every = full[0] + 1
            if every >= 2 and full == list(range(every - 1, len(kinds), every)):
                self.fields["full_attention_every"] = every
            else:  # no period says it: each layer's kind, as runs (tfcalc.architecture.patterns)
                self.fields["layer_pattern"] = compact(["full" if k == "full_attention" else "local" for k in kinds])

    def every_kth_full(self, every: int, window_key: str = "sliding_window") -> None:
        """``windows`` of the default list "layer i full when (i + 1) % every == 0, else sliding"
        (Gemma2Config's and GptOssConfig's, every 2) without building it: a depth of 2**40 is allowed."""
        window = self.number(window_key, None, integer=True)
        if not window:
            raise self.fail(f"'layer_types' names sliding layers but '{window_key}' is {shown(window)}")
        self.fields["sliding_window"] = window
        if every >= 2 and self.fields["n_layer"] >= every:
            self.fields["full_attention_every"] = every

    def full_below(self, below: int, window_key: str = "sliding_window") -> None:
        """``windows`` of the default list "full below layer ``below``, sliding from it" (Qwen2Config's
        max_window_layers) without building it: the pattern compact() writes for it."""
        n = self.fields["n_layer"]
        if below >= n:  # every layer full
            self.fields["sliding_window"] = None
            return
        window = self.number(window_key, None, integer=True)
        if not window:
            raise self.fail(f"'layer_types' names sliding layers but '{window_key}' is {shown(window)}")
        self.fields["sliding_window"] = window
        if below >= 1:
            def run(kind: str, count: int) -> str:
                return kind if count == 1 else f"{kind}*{count}"

            self.fields["layer_pattern"] = f"{run('full', below)}, {run('local', n - below)}"

    def per_layer_list(self, what: str) -> None:
        """A default per-layer list of the depth is built (its kinds go through compact): refuse a depth past
        MAX_LISTED_LAYERS in one line rather than build a list of 2**40 entries."""
        n = self.fields["n_layer"]
        if n > MAX_LISTED_LAYERS:
            raise self.fail(f"'num_hidden_layers' {n:,} is past the {MAX_LISTED_LAYERS:,} layers tfcalc lists {what} "
                            "for; write the model as YAML with a layer_pattern")

    def dtype(self) -> None:
        value = self.get("torch_dtype", aliases=("dtype",))
        if value is not None and value not in DTYPES:
            raise self.fail(f"'torch_dtype' {shown(value)} is not one of {', '.join(DTYPES)}")
        self.fields["dtype"] = DTYPES.get(value)

    def head(self, classes: dict[str, str], default: str) -> str:
        """The head ``architectures`` names, as one of the kinds in ``classes`` (class name -> kind):
        'causal' (an LM head), 'base' (the bare model: no head), ... Without ``architectures``, default."""
        names = self.raw.get("architectures")
        if names is None:
            return classes[default]
        if not isinstance(names, list) or len(names) != 1 or not isinstance(names[0], str):
            raise self.fail(f"'architectures' must be a list of one class name; got {shown(names)}")
        if names[0] not in classes:
            raise self.fail(f"'architectures' {shown(names[0])} is not supported (supported: {', '.join(classes)})")
        return classes[names[0]]

    def causal_or_base(self, prefix: str) -> str:
        """The head of a type whose classes are ``{prefix}ForCausalLM`` (the default: an LM head) and
        ``{prefix}Model`` (the bare model: base_model()); which of the two, 'causal' or 'base'."""
        kind = self.head({f"{prefix}ForCausalLM": "causal", f"{prefix}Model": "base"}, f"{prefix}ForCausalLM")
        if kind == "base":
            self.base_model()
        return kind

    def base_model(self) -> None:
        """The bare model (LlamaModel, GPT2Model, ...): hidden states after the final norm, no LM head."""
        self.fields.update(lm_head=False, tie_embeddings=False, logit_softcap=None)
