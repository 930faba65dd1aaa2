"""ModelConfig: the one description of a transformer that every count and every module is built from.

Pure Python: no torch, typer or rich here, so counting never pays for importing them.

Fields hold what the user (or the preset) said. Sizes that may be left out and derived -- ``d_head``,
``n_kv_head`` and ``d_ff`` -- stay ``None`` in the field when not given, and the resolved values are
read through properties (``head_dim``, ``kv_heads``, ``ffn_dim``, ``q_dim``, ``kv_dim``). An explicit
value is never overwritten: ``d_head`` given as 128 with ``n_head = 24`` and ``d_model = 2048`` stays 128
(the attention is then 3072 wide, not 2048; GPT-3 XL in Brown et al. 2020, Table 2.1, is such a case).

Kinds of transformer (``arch``), and how the depth fields read for each:

- ``decoder`` (GPT, Llama): one causal stack of ``n_layer`` blocks and an LM head.
- ``encoder`` (BERT): one bidirectional stack of ``n_layer`` blocks; optionally token-type embeddings,
  a norm after the embeddings, a pooler on the first token, and no LM head (BertModel).
- ``encoder-decoder`` (Vaswani et al. 2017): ``n_layer`` is the decoder depth, as for a decoder;
  ``n_encoder_layer`` the encoder depth (default: the same). Every decoder block adds cross-attention
  (queries from the decoder, keys and values from the encoder output). The encoder's token embedding is
  the decoder's unless ``tie_encoder_embedding`` is false.

Any of them may replace each dense FFN by a mixture of experts (``n_expert`` FFNs, each as wide as the
dense one, and a bias-free router d_model -> n_expert; each token runs ``n_expert_active`` of them).
"""

from __future__ import annotations

import dataclasses
import difflib
import math
from dataclasses import dataclass
from typing import Any, Literal, Optional, get_args

from tfcalc.errors import InputError

PosEncoding = Literal["learned", "sinusoidal", "rope", "alibi", "none"]
Norm = Literal["layernorm", "rmsnorm"]
NormPlacement = Literal["pre", "post"]
Activation = Literal["gelu", "gelu_tanh", "relu", "silu"]
Arch = Literal["decoder", "encoder", "encoder-decoder"]


# A config that cannot describe a transformer is bad input like any other: one family, exit 2.
ConfigError = InputError


@dataclass(frozen=True)
class ModelConfig:
    # --- shapes every config must give ---
    n_layer: int
    d_model: int
    n_head: int
    vocab_size: int
    max_seq_len: int

    # --- identity (shown, never counted) ---
    name: str = "custom"
    nominal_params: Optional[str] = None  # the size the source names, e.g. "175B"
    source: Optional[str] = None  # where the shapes come from (paper, table, file)

    # --- sizes that may be derived ---
    n_kv_head: Optional[int] = None  # None: = n_head (MHA); 1: MQA; in between: GQA
    d_head: Optional[int] = None  # None: d_model // n_head (must divide)

    # --- feed-forward width: d_ff, or derived the way Llama does (see ffn_dim) ---
    d_ff: Optional[int] = None
    ffn_mult: float = 4.0
    ffn_dim_multiplier: Optional[float] = None
    ffn_multiple_of: int = 1

    # --- kind of transformer (see the module docstring) ---
    arch: Arch = "decoder"
    n_encoder_layer: Optional[int] = None  # encoder-decoder only; None: = n_layer

    # --- mixture of experts: None for a dense FFN ---
    n_expert: Optional[int] = None  # FFNs per block (Mixtral 8x7B: 8)
    n_expert_active: Optional[int] = None  # top-k experts each token runs (Mixtral: 2)

    # --- architecture choices ---
    pos_encoding: PosEncoding = "learned"
    norm: Norm = "layernorm"
    norm_placement: NormPlacement = "pre"
    final_norm: bool = True
    activation: Activation = "gelu"
    gated_ffn: bool = False  # SwiGLU (silu) / GeGLU (gelu): FFN(x) = down(act(gate(x)) * up(x))
    attn_bias: bool = True
    ffn_bias: bool = True
    norm_bias: bool = True
    tie_embeddings: bool = True
    norm_eps: float = 1e-5
    rope_theta: float = 10000.0

    # --- embeddings and heads beyond GPT's (BERT, Vaswani et al. 2017) ---
    type_vocab_size: int = 0  # token-type (segment) embedding rows; 0: none. BERT: 2
    embedding_norm: bool = False  # a norm right after the embeddings are summed (BERT)
    embedding_scale: bool = False  # token embeddings times sqrt(d_model) (Vaswani et al. 2017, sec. 3.4)
    pooler: bool = False  # BERT's pooler: tanh(Linear(d, d)) of the first token (encoder only)
    lm_head: bool = True  # a vocabulary projection at the end; BertModel has none
    tie_encoder_embedding: bool = True  # encoder-decoder: source and target share one token embedding

    def __post_init__(self) -> None:
        validate(self)

    # --- derived sizes (properties, so a changed field can never leave a stale copy behind) ---
    @property
    def head_dim(self) -> int:
        return self.d_head if self.d_head is not None else self.d_model // self.n_head

    @property
    def kv_heads(self) -> int:
        return self.n_kv_head if self.n_kv_head is not None else self.n_head

    @property
    def q_dim(self) -> int:
        """Attention width: n_head * head_dim (need not equal d_model)."""
        return self.n_head * self.head_dim

    @property
    def kv_dim(self) -> int:
        """Width of K (and of V): kv_heads * head_dim."""
        return self.kv_heads * self.head_dim

    @property
    def ffn_dim(self) -> int:
        """Hidden width of the FFN.

        Explicit ``d_ff`` wins. Otherwise, following Meta's Llama reference code (model.py,
        FeedForward.__init__): hidden = int(ffn_mult * d_model); for a gated FFN hidden =
        int(2 * hidden / 3) (Shazeer 2020 keeps the parameter count of the ungated FFN); then
        hidden = int(ffn_dim_multiplier * hidden) if given; finally round up to a multiple of
        ffn_multiple_of. Llama 2 7B: int(2*16384/3) = 10922 -> 11008 (multiple of 256).
        """
        if self.d_ff is not None:
            return self.d_ff
        hidden = int(self.ffn_mult * self.d_model)
        if self.gated_ffn:
            hidden = int(2 * hidden / 3)
        if self.ffn_dim_multiplier is not None:
            hidden = int(self.ffn_dim_multiplier * hidden)
        m = self.ffn_multiple_of
        return m * math.ceil(hidden / m)

    @property
    def encoder_layers(self) -> int:
        """Depth of the bidirectional stack: 0 for a decoder, n_layer for an encoder."""
        if self.arch == "encoder-decoder":
            return self.n_encoder_layer if self.n_encoder_layer is not None else self.n_layer
        return self.n_layer if self.arch == "encoder" else 0

    @property
    def decoder_layers(self) -> int:
        """Depth of the causal stack: 0 for an encoder."""
        return 0 if self.arch == "encoder" else self.n_layer

    @property
    def cross_attention_layers(self) -> int:
        return self.n_layer if self.arch == "encoder-decoder" else 0

    @property
    def experts(self) -> int:
        """FFNs per block: 1 when dense."""
        return self.n_expert or 1

    @property
    def experts_active(self) -> int:
        """FFNs each token runs per block: 1 when dense."""
        return self.n_expert_active or 1

    def resolved(self) -> dict[str, Any]:
        """All fields with the derived sizes written in: a file that rebuilds the same model."""
        out = dataclasses.asdict(self)
        out.update(d_head=self.head_dim, n_kv_head=self.kv_heads, d_ff=self.ffn_dim)
        if self.arch == "encoder-decoder":
            out.update(n_encoder_layer=self.encoder_layers)
        for derivation_only in ("ffn_mult", "ffn_dim_multiplier", "ffn_multiple_of"):
            out.pop(derivation_only)
        return out


FIELD_NAMES: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(ModelConfig))
REQUIRED_FIELDS: tuple[str, ...] = tuple(
    f.name for f in dataclasses.fields(ModelConfig) if f.default is dataclasses.MISSING
)


_LITERALS = {
    "pos_encoding": get_args(PosEncoding),
    "norm": get_args(Norm),
    "norm_placement": get_args(NormPlacement),
    "activation": get_args(Activation),
    "arch": get_args(Arch),
}
_INT_FIELDS = ("n_layer", "d_model", "n_head", "vocab_size", "max_seq_len", "ffn_multiple_of")
_OPTIONAL_INT_FIELDS = ("n_kv_head", "d_head", "d_ff", "n_encoder_layer", "n_expert", "n_expert_active")
_COUNT_FIELDS = ("type_vocab_size",)  # integers that may be 0
_FLOAT_FIELDS = ("ffn_mult", "norm_eps", "rope_theta")
_OPTIONAL_FLOAT_FIELDS = ("ffn_dim_multiplier",)
_BOOL_FIELDS = (
    "final_norm", "gated_ffn", "attn_bias", "ffn_bias", "norm_bias", "tie_embeddings",
    "embedding_norm", "embedding_scale", "pooler", "lm_head", "tie_encoder_embedding",
)
_STR_FIELDS = ("name",)
_OPTIONAL_STR_FIELDS = ("nominal_params", "source")


def suggest(word: str, choices) -> str:
    """' (did you mean 'x'?)' for the closest choice, or '' when none is close."""
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f" (did you mean '{close[0]}'?)" if close else ""


def _type_name(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def check_field_type(name: str, value: Any) -> None:
    """Raise ConfigError naming the field when value has the wrong type for it."""
    is_int = isinstance(value, int) and not isinstance(value, bool)
    is_float = is_int or (isinstance(value, float) and math.isfinite(value))
    if name in _LITERALS:
        if value not in _LITERALS[name]:
            allowed = ", ".join(_LITERALS[name])
            hint = suggest(str(value), _LITERALS[name]) if isinstance(value, str) else ""
            raise ConfigError(f"field '{name}' must be one of {allowed}; got {value!r}{hint}")
        return
    expected, ok = {
        **{n: ("an integer", is_int) for n in _INT_FIELDS + _COUNT_FIELDS},
        **{n: ("an integer or null", is_int or value is None) for n in _OPTIONAL_INT_FIELDS},
        **{n: ("a number", is_float) for n in _FLOAT_FIELDS},
        **{n: ("a number or null", is_float or value is None) for n in _OPTIONAL_FLOAT_FIELDS},
        **{n: ("true or false", isinstance(value, bool)) for n in _BOOL_FIELDS},
        **{n: ("a string", isinstance(value, str)) for n in _STR_FIELDS},
        **{n: ("a string or null", isinstance(value, str) or value is None) for n in _OPTIONAL_STR_FIELDS},
    }[name]
    if not ok:
        raise ConfigError(f"field '{name}' must be {expected}; got {value!r} ({_type_name(value)})")


def validate(cfg: ModelConfig) -> None:
    """Raise ConfigError, one line naming the field(s), for any config no transformer can have."""
    for name in FIELD_NAMES:
        check_field_type(name, getattr(cfg, name))
    for name in _INT_FIELDS + _OPTIONAL_INT_FIELDS:
        value = getattr(cfg, name)
        if value is not None and value <= 0:
            raise ConfigError(f"field '{name}' must be positive; got {value}")
    for name in _COUNT_FIELDS:
        if getattr(cfg, name) < 0:
            raise ConfigError(f"field '{name}' must be 0 or more; got {getattr(cfg, name)}")
    for name in _FLOAT_FIELDS + _OPTIONAL_FLOAT_FIELDS:
        value = getattr(cfg, name)
        if value is not None and value <= 0:
            raise ConfigError(f"field '{name}' must be positive; got {value}")
    if cfg.d_head is None and cfg.d_model % cfg.n_head:
        raise ConfigError(
            f"d_model ({cfg.d_model}) is not divisible by n_head ({cfg.n_head}); "
            "give d_head explicitly or change one of them"
        )
    if cfg.kv_heads > cfg.n_head or cfg.n_head % cfg.kv_heads:
        raise ConfigError(
            f"n_head ({cfg.n_head}) must be a multiple of n_kv_head ({cfg.kv_heads}): "
            "each key/value head serves a whole group of query heads"
        )
    if cfg.d_ff is not None and (cfg.ffn_dim_multiplier is not None or cfg.ffn_multiple_of != 1):
        raise ConfigError(
            "give either d_ff or its derivation (ffn_dim_multiplier, ffn_multiple_of), not both"
        )
    if cfg.ffn_dim < 1:
        raise ConfigError(f"the derived d_ff is {cfg.ffn_dim}; raise ffn_mult or give d_ff")
    if cfg.pos_encoding == "rope" and cfg.head_dim % 2:
        raise ConfigError(f"rope rotates pairs of channels: d_head must be even, got {cfg.head_dim}")
    if cfg.pos_encoding == "sinusoidal" and cfg.d_model % 2:
        raise ConfigError(f"sinusoidal positions pair sin and cos: d_model must be even, got {cfg.d_model}")
    if cfg.norm == "rmsnorm" and cfg.norm_bias:
        raise ConfigError("rmsnorm has no bias: set norm_bias to false")
    _validate_kind(cfg)


def _validate_kind(cfg: ModelConfig) -> None:
    """The fields of one kind of transformer (arch, experts, BERT's extras) against each other."""
    if cfg.arch != "encoder-decoder":
        if cfg.n_encoder_layer is not None:
            raise ConfigError(
                f"n_encoder_layer applies to arch encoder-decoder only (arch is {cfg.arch}; n_layer is its depth)"
            )
        if not cfg.tie_encoder_embedding:
            raise ConfigError(f"tie_encoder_embedding applies to arch encoder-decoder only (arch is {cfg.arch})")
    elif cfg.type_vocab_size:
        raise ConfigError("type_vocab_size applies to arch encoder or decoder; an encoder-decoder takes no token types")
    if cfg.pooler and cfg.arch != "encoder":
        raise ConfigError(
            f"pooler applies to arch encoder only (arch is {cfg.arch}): it reads the first token, "
            "which in a causal stack has seen no other token"
        )
    if not cfg.lm_head and cfg.tie_embeddings:
        raise ConfigError("tie_embeddings needs an LM head: with lm_head false, set tie_embeddings to false")
    if (cfg.n_expert is None) != (cfg.n_expert_active is None):
        raise ConfigError("give n_expert and n_expert_active together (a mixture of experts), or neither (dense FFN)")
    if cfg.n_expert is not None and cfg.n_expert_active > cfg.n_expert:
        raise ConfigError(
            f"n_expert_active ({cfg.n_expert_active}) must not exceed n_expert ({cfg.n_expert})"
        )


def replace(cfg: ModelConfig, **changes: Any) -> ModelConfig:
    """dataclasses.replace, re-validated (a frozen dataclass validates in __post_init__)."""
    return dataclasses.replace(cfg, **changes)


def from_mapping(data: dict[str, Any]) -> ModelConfig:
    """Build a ModelConfig from a mapping, naming any unknown field and the closest known one."""
    for key in data:
        if not isinstance(key, str):
            raise ConfigError(f"field names must be strings; got {key!r}")
        if key not in FIELD_NAMES:
            raise ConfigError(f"unknown field '{key}'{suggest(key, FIELD_NAMES)}")
    for key in REQUIRED_FIELDS:
        if key not in data:
            raise ConfigError(f"missing required field '{key}'")
    for key, value in data.items():
        check_field_type(key, value)
    return ModelConfig(**data)


__all__ = [
    "ConfigError",
    "InputError",
    "ModelConfig",
    "FIELD_NAMES",
    "from_mapping",
    "replace",
    "suggest",
    "validate",
]
