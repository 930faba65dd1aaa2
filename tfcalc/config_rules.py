"""The rules a ModelConfig must keep: the type of every field, and the fields against each other.

Split from tfcalc.config so that the dataclass stays readable; imports nothing of tfcalc but the error
type, the registry of mixer kinds (tfcalc.architecture.kinds) and the rules of some field groups
(tfcalc.config_latent, config_moe, config_quant); tfcalc.config imports this module, never the other way.
Every failure is one ConfigError line that names the field(s). Pure Python: no torch, typer or rich here.

A mixer kind's fields (tfcalc.architecture.kinds) are checked here like the others: their types read from the
kind's dataclass of fields, their numbers by the same rules, and the kind's own rules (``check``) run once
with the rest, in the order the kinds were registered.

The rules of one component are the component's own, checked once as tfcalc.config builds the description
(tfcalc.architecture: a norm's bias, GQA's grouping, a parallel block's layout, a mixture's top-k and
shared gate), never restated here; what is here is about the flat fields themselves (their types, and
the fields that only make sense together).
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import re
from collections.abc import Sequence
from typing import Any, Callable, Iterator, Literal, NamedTuple, Optional, Union, get_args, get_origin, get_type_hints

from tfcalc import config_latent as latent
from tfcalc.architecture import kinds as mixer_kinds
from tfcalc.config_gemma import validate_gemma
from tfcalc.config_moe import validate_longcat, validate_moe_extras
from tfcalc.config_quant import validate_stored_quant
from tfcalc.config_rope import validate_rope_scaling
from tfcalc.errors import InputError as ConfigError, shown

PosEncoding = Literal["learned", "sinusoidal", "rope", "alibi", "none", "relative"]
Norm = Literal["layernorm", "rmsnorm"]
NormPlacement = Literal["pre", "post", "sandwich", "output", "normed_residual"]
Activation = Literal["gelu", "gelu_tanh", "relu", "relu2", "silu", "xielu"]
Arch = Literal["decoder", "encoder", "encoder-decoder"]
ParallelBlock = Literal["none", "shared_norm", "two_norms"]

# T5's defaults (Raffel et al. 2020, sec. 2.1; transformers' T5Config): 32 buckets, distances to 128.
REL_POS_BUCKETS, REL_POS_MAX_DISTANCE = 32, 128

# The largest integer a size field may hold (~1.1e12, as tfcalc.workload.MAX_SIZE): far past any real
# model, and small enough that every count built from these fields stays exact and finite as a float
# (a product of six such sizes is 2**240, below float's 2**1024), so no share or rate overflows.
MAX_INT = 2**40

# Integers that may be 0 (every other integer field must be positive): no token types, no position offset,
# no MTP module, a latent head of rotary channels only. A rule on values, not a type: the types are the
# dataclass's annotations (field_types).
ZERO_ALLOWED = ("type_vocab_size", "position_offset", "mtp_layers", "qk_nope_head_dim")


class FieldType(NamedTuple):
    """A field's type, read from ModelConfig's annotation: ``base`` int, float, bool, str or "ints" (a tuple of
    integers), "floats" (of numbers), with ``choices`` for a Literal; ``optional`` where it may be null."""

    base: Any
    optional: bool
    choices: tuple[str, ...] = ()


def field_types(cls) -> dict[str, FieldType]:
    """{field: FieldType} of a dataclass, from its annotations: the one list of the fields' types."""
    hints = get_type_hints(cls)
    out = {}
    for f in dataclasses.fields(cls):
        if not f.metadata.get("front_end", True):  # held for the front end, never written by a user
            continue
        t, optional = hints[f.name], False
        if get_origin(t) is Union:
            args = [a for a in get_args(t) if a is not type(None)]
            optional, t = len(args) < len(get_args(t)), args[0]
        if get_origin(t) is Literal:
            out[f.name] = FieldType(str, optional, get_args(t))
        elif get_origin(t) is tuple:
            out[f.name] = FieldType("floats" if get_args(t)[0] is float else "ints", optional)
        elif t in (int, float, bool, str):
            out[f.name] = FieldType(t, optional)
        else:
            raise TypeError(f"field {f.name}: annotation {t!r} is none of the kinds a config field may have")
    return out


_OWN_TYPES: dict[str, FieldType] = {}  # tfcalc.config registers ModelConfig's (this module imports no config)
_KIND_TYPES: dict[int, dict[str, FieldType]] = {}  # the registry's version -> every field's type


def register(cls) -> None:
    """Read the config class's field types (tfcalc.config calls this once, under the class)."""
    _OWN_TYPES.update(field_types(cls))


def _types() -> dict[str, FieldType]:
    """Every field's type: the config class's, then each registered mixer kind's (read once per registry)."""
    key = mixer_kinds.version()
    if key not in _KIND_TYPES:
        kinds = mixer_kinds.kinds()
        _KIND_TYPES.clear()
        _KIND_TYPES[key] = {**_OWN_TYPES, **{n: t for k in kinds for n, t in field_types(k.fields).items()}}
    return _KIND_TYPES[key]


def list_fields() -> tuple[str, ...]:
    """The fields --set may give a YAML list (tfcalc.presets)."""
    return tuple(n for n, t in _types().items() if t.base in ("ints", "floats"))


def field_choices(name: str) -> tuple[str, ...] | None:
    """The allowed strings of a Literal field, or None for other fields."""
    t = _types().get(name)
    return t.choices if t is not None and t.choices else None


class LiveNames(Sequence):
    """A tuple of field names read anew on each use, so a mixer kind registered later adds its own."""

    def __init__(self, read: Callable[[], tuple[str, ...]]) -> None:
        self._read = read

    def __getitem__(self, i):
        return self._read()[i]

    def __len__(self) -> int:
        return len(self._read())

    def __contains__(self, name: object) -> bool:
        return name in self._read()

    def __iter__(self) -> Iterator[str]:
        return iter(self._read())

    def __repr__(self) -> str:
        return repr(self._read())


def _squash(text: str) -> str:
    return re.sub(r"[-_ .]", "", text.lower())


def close_names(word: str, choices, n: int = 1) -> list[str]:
    """The choices word may have meant: the one equal to it but for case and '-', '_', ' ', '.' ('GPT-2'
    for gpt2); else every one it begins ('H100' for h100-sxm and h100-pcie, as people shorten a name);
    else up to n close by spelling (difflib, which alone weighs 'H100' nearer 'v100' than 'h100-sxm')."""
    choices = [str(c) for c in choices]
    key = _squash(word)
    same = [c for c in choices if _squash(c) == key]
    if same:
        return same[:1]
    begun = [c for c in choices if key and _squash(c).startswith(key)]
    if begun:
        return begun
    lowered = {c.lower(): c for c in choices}
    return [lowered[c] for c in difflib.get_close_matches(word.lower(), list(lowered), n=n, cutoff=0.6)]


def suggest(word: str, choices) -> str:
    """' (did you mean 'x'?)' for the closest choice (or 'x', 'y' for each a prefix names), or '' when none
    is close."""
    close = close_names(word, choices)
    return f" (did you mean {', '.join(repr(c) for c in close)}?)" if close else ""


def _type_name(value: Any) -> str:
    return "null" if value is None else type(value).__name__


MAX_TEXT = 1000  # characters of a name or a source: a label a table can show (a 10 MB name was printed whole)


_EXPECTED = {int: "an integer", float: "a number", bool: "true or false", str: "a string",
             "ints": "a list of integers", "floats": "a list of numbers"}


def check_field_type(name: str, value: Any, t: Optional[FieldType] = None) -> None:
    """Raise ConfigError naming the field when value has the wrong type for it (``t``: its type, where known)."""
    t = t or _types()[name]
    if value is None and t.optional:
        return
    if t.choices:
        if value not in t.choices:
            allowed = ", ".join(t.choices) + (" or null" if t.optional else "")
            hint = suggest(str(value), t.choices) if isinstance(value, str) else ""
            raise ConfigError(f"field '{name}' must be one of {allowed}; got {shown(value)}{hint}")
        return
    if not _has_type(value, t.base):
        expected = _EXPECTED[t.base] if not t.optional else (
            "true, false or null" if t.base is bool else _EXPECTED[t.base] + " or null")
        raise ConfigError(f"field '{name}' must be {expected}; got {shown(value)} ({_type_name(value)})")
    if isinstance(value, str) and len(value) > MAX_TEXT:
        raise ConfigError(f"field '{name}' must be at most {MAX_TEXT:,} characters; got {shown(value)}")


def _has_type(value: Any, base: Any) -> bool:
    is_int = isinstance(value, int) and not isinstance(value, bool)
    if base is int:
        return is_int
    if base is float:
        return is_int or (isinstance(value, float) and math.isfinite(value))
    if base == "ints":
        return isinstance(value, (list, tuple)) and all(isinstance(v, int) and not isinstance(v, bool) for v in value)
    if base == "floats":
        return isinstance(value, (list, tuple)) and all(_has_type(v, float) for v in value)
    return isinstance(value, base)


def validate(cfg) -> None:
    """Raise ConfigError, one line naming the field(s), for any config no transformer can have."""
    types = _types()
    for name, _ in cfg.mixer_fields:
        if name not in types:  # a kind taken out of the registry since the config was read
            raise ConfigError(f"unknown field {shown(name)}: no registered mixer kind declares it")
    values = {name: getattr(cfg, name) for name in types}
    for name, t in types.items():
        check_field_type(name, values[name], t)
    for name, t in types.items():
        value = values[name]
        if value is None or t.base not in (int, float):
            continue
        if t.base is int and name in ZERO_ALLOWED:
            if value < 0 and not t.optional:  # qk_nope_head_dim: tfcalc.architecture.flat_latent says it
                raise ConfigError(f"field '{name}' must be 0 or more; got {shown(value)}")
        elif value <= 0:
            raise ConfigError(f"field '{name}' must be positive; got {shown(value) if t.base is int else value}")
        if t.base is int and value > MAX_INT:
            raise ConfigError(f"field '{name}' must be at most {MAX_INT:,}; got {shown(value)}")
    for kind in mixer_kinds.kinds():  # each mixer kind's rules (softmax attention's head width among them)
        if kind.check is not None:
            kind.check(cfg)
    latent.validate_latent(cfg)
    validate_rope_scaling(cfg)
    validate_gemma(cfg)
    if cfg.d_ff is not None and (cfg.ffn_dim_multiplier is not None or cfg.ffn_multiple_of != 1):
        raise ConfigError(
            "give either d_ff or its derivation (ffn_dim_multiplier, ffn_multiple_of), not both"
        )
    try:
        ffn_dim = cfg.ffn_dim
    except OverflowError:  # ffn_mult * d_model past float's range: int(inf)
        ffn_dim = MAX_INT + 1
    if ffn_dim < 1:
        raise ConfigError(f"the derived d_ff is {ffn_dim}; raise ffn_mult or give d_ff")
    if ffn_dim > MAX_INT:
        raise ConfigError(f"the derived d_ff is more than {MAX_INT:,}; lower ffn_mult or ffn_dim_multiplier")
    if cfg.pos_encoding == "sinusoidal" and cfg.d_model % 2:
        raise ConfigError(f"sinusoidal positions pair sin and cos: d_model must be even, got {cfg.d_model}")
    if cfg.router_sigmoid_input and cfg.n_expert is None:
        raise ConfigError("router_sigmoid_input applies to a mixture of experts only (give n_expert and "
                          "n_expert_active)")
    validate_longcat(cfg)
    _validate_kind(cfg)
    _validate_positions(cfg)
    validate_moe_extras(cfg)
    validate_stored_quant(cfg)
    _validate_scales(cfg)


def _validate_kind(cfg) -> None:
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
    elif cfg.cross_attention:
        raise ConfigError("cross_attention applies to arch decoder or encoder: an encoder-decoder's decoder has it "
                          "already")
    if cfg.pooler and cfg.arch == "encoder-decoder":  # BertModel with is_decoder pools a causal stack's first token
        raise ConfigError("pooler applies to one stack (arch encoder or decoder): it reads that stack's first token")
    if not cfg.lm_head:
        for name in ("tie_embeddings", "lm_head_transform", "lm_head_bias"):
            if getattr(cfg, name):
                raise ConfigError(f"{name} needs an LM head: with lm_head false, set {name} to false")
        if cfg.logit_softcap is not None:
            raise ConfigError("logit_softcap needs an LM head: with lm_head false, set logit_softcap to null")
    if (cfg.n_expert is None) != (cfg.n_expert_active is None):
        raise ConfigError("give n_expert and n_expert_active together (a mixture of experts), or neither (dense FFN)")
    if cfg.n_expert is None:
        for name, default in (("shared_expert_d_ff", None), ("shared_expert_gate", False), ("router_norm_topk", True),
                              ("expert_capacity_factor", None)):
            if getattr(cfg, name) != default:
                raise ConfigError(f"{name} applies to a mixture of experts only (give n_expert and n_expert_active)")
    _validate_layer_patterns(cfg)


def _validate_layer_patterns(cfg) -> None:
    """first_dense_layers, moe_every and dense_d_ff: which layers of a mixture of experts stay dense."""
    for name in ("first_dense_layers", "moe_every", "dense_d_ff"):
        if getattr(cfg, name) is not None and cfg.n_expert is None:
            raise ConfigError(f"{name} applies to a mixture of experts only (give n_expert and n_expert_active)")
    depth = min(cfg.n_layer, cfg.encoder_layers or cfg.n_layer)
    if cfg.first_dense_layers is not None and cfg.first_dense_layers >= depth:
        raise ConfigError(f"field 'first_dense_layers' ({cfg.first_dense_layers}) must be less than the depth "
                          f"({depth}): with every layer dense, leave out n_expert")
    if cfg.moe_every is not None and cfg.moe_every > cfg.n_layer:
        raise ConfigError(f"field 'moe_every' ({cfg.moe_every}) must be at most n_layer ({cfg.n_layer}): "
                          "layers moe_every - 1, 2·moe_every - 1, ... have the experts")
    if cfg.dense_d_ff is not None and cfg.first_dense_layers is None and cfg.moe_every in (None, 1) \
            and not cfg.dense_layers and "-" not in (cfg.hybrid_pattern or "") and not cfg.moe_shortcut:
        # Nemotron-H's - layers are dense, and every LongCat-Flash layer has a dense FFN
        raise ConfigError("dense_d_ff is the width of the dense layers of a mixed model: give first_dense_layers, "
                          "dense_layers or moe_every (at least 2) too")


def _validate_positions(cfg) -> None:
    """Fields of one position scheme given with another."""
    if cfg.pos_encoding != "relative":
        for name in ("rel_pos_buckets", "rel_pos_max_distance"):
            if getattr(cfg, name) is not None:
                raise ConfigError(f"{name} applies to pos_encoding relative only (pos_encoding is {cfg.pos_encoding})")
    elif cfg.rel_buckets < 4 or cfg.rel_buckets % 2:
        # T5's buckets: half for each direction in an encoder, and within one half, exact and log-spaced
        raise ConfigError(f"field 'rel_pos_buckets' must be an even number of at least 4; got {cfg.rel_buckets}")
    elif cfg.rel_max_distance <= cfg.rel_buckets // 2:
        # the log-spaced buckets span distances from buckets/2 (causal) to max_distance: it must be larger
        raise ConfigError(
            f"field 'rel_pos_max_distance' ({cfg.rel_max_distance}) must exceed half of rel_pos_buckets "
            f"({cfg.rel_buckets} // 2), where the log-spaced buckets begin"
        )
    if cfg.position_offset and cfg.pos_encoding != "learned":
        raise ConfigError(f"position_offset applies to pos_encoding learned only (pos_encoding is {cfg.pos_encoding})")


def _validate_scales(cfg) -> None:
    """Issue 22's dense types: the fields each need what they act on."""
    if not cfg.lm_head and cfg.logit_scale is not None:
        raise ConfigError("logit_scale needs an LM head: with lm_head false, set logit_scale to null")
    if cfg.embedding_dim is not None and cfg.embedding_dim != cfg.d_model:
        if not cfg.lm_head or cfg.arch != "decoder":
            raise ConfigError(f"embedding_dim ({cfg.embedding_dim}) other than d_model ({cfg.d_model}) projects a "
                              "decoder's token table in and out of its LM head: it needs arch decoder and lm_head")
