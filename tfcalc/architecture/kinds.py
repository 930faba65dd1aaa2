"""The registry of mixer kinds: how the flat front end (YAML fields, --set keys, Hugging Face mappers) reaches a
token mixer (tfcalc.architecture.mixer) without naming it.

A ``MixerKind`` is what one mixer declares about its flat fields, in the mixer's own module:

- ``fields``: a frozen dataclass of its flat fields -- their names, their types (read from its annotations by
  tfcalc.config_rules, the one list of them: int, float, bool, str, a ``Literal`` of strings, a tuple of
  integers, each optionally ``Optional``) and their defaults;
- ``words``: the layer kinds ``layer_pattern`` names its layers by (``"(gdn*3, full)*12"``: the words
  ``gdn`` and ``full``; softmax attention's are full, local, nope, local_nope, tfcalc.architecture.patterns);
- ``build(cfg, i, causal)``: its mixer for layer ``i`` of a stack, read from the flat config by attribute
  (every field of every kind reads as ``cfg.<field>``);
- ``check(cfg)``: its rules across the flat fields (one ConfigError line naming the field), run once with
  the others as the config is made (tfcalc.config_rules.validate); a rule of the component alone stays in
  the component's ``__post_init__``;
- ``claims(cfg, layer)``: true where it fills a self-attention layer that no layer_pattern word gives to
  another kind, ``layer`` being that layer's kind in the pattern (tfcalc.architecture.patterns.LayerKind: local
  or global, RoPE or none) -- latent attention claims every layer where ``kv_lora_rank`` is given; a
  linear-attention mixer might claim the local ones; ``default``: the kind of a layer nothing else claims
  (softmax attention);
- ``group``: the heading ``tfcalc show`` lists its fields under;
- ``local_field``: the flat field that, given, makes it fill the local layers (``full_attention_every``'s other
  layers, ``layer_pattern``'s local words) in place of a window or chunk: gated DeltaNet's ``linear_mixer``
  (``local_filler`` answers which kind, so softmax attention's rules and the layer pattern name none);
- ``layer_plan(cfg)``: where it has a per-layer pattern of its own (Mamba2's ``hybrid_pattern``, Nemotron-H's
  letters), each layer's ``LayerSlots`` -- which kind's mixer, if any, and which FFN -- checked, or None where the
  config does not use it; ``empty(d_model)``: the mixer of a layer that has none (``plan``: a layer of its FFN
  alone), so the front end builds such layers without naming the kind.

Softmax attention (tfcalc.architecture.flat_attention) and latent attention (tfcalc.architecture.flat_latent)
register here as they are imported; a new mixer registers its kind in its own module, and the front end
(tfcalc.config, tfcalc.architecture.flat, tfcalc.presets) reads it from here: its YAML fields, ``--set`` keys,
their types and rules, and its word in ``layer_pattern`` follow with no other file changed
(tests/model/test_mixer_kind.py defines one in the test file alone).

Modelled on torchtitan's per-layer configs (a mixer slot filled by a config of any kind, each kind's config a
dataclass of its own fields) and vLLM's model registry (a name mapped to what builds it, looked up, never
branched on). Pure Python: no torch, typer or rich here.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import Any, Callable, Optional

from tfcalc.architecture.mixer import Mixer


@dataclass(frozen=True)
class MixerKind:
    name: str  # how the kind is named in messages and in `tfcalc show`
    fields: type  # a frozen dataclass of its flat fields (see the module docstring)
    build: Callable[[Any, int, bool], Mixer]  # (cfg, layer i, causal) -> its mixer for that layer
    words: tuple[str, ...] = ()  # the layer_pattern words that pick it
    check: Optional[Callable[[Any], None]] = None
    claims: Optional[Callable[[Any, Any], bool]] = None
    default: bool = False
    group: str = ""
    # (cfg) -> the norm placement of the blocks this kind mixes in, where it is not cfg.norm_placement (OLMo-Hybrid's
    # DeltaNet layers norm inputs while its attention layers norm outputs); None, or returning None: norm_placement
    placement: Optional[Callable[[Any], Optional[str]]] = None
    local_field: str = ""  # given (not None), this kind fills the local layers (see the module docstring)
    layer_plan: Optional[Callable[[Any], Optional[tuple["LayerSlots", ...]]]] = None
    empty: Optional[Callable[[int], Mixer]] = None  # (d_model) -> the mixer of a layer that has none

    def field_names(self) -> tuple[str, ...]:
        return tuple(f.name for f in dataclasses.fields(self.fields))

    def defaults(self) -> dict[str, Any]:
        """{field: default} of its fields (every field of a kind has one: a kind's fields are optional)."""
        return {f.name: f.default for f in dataclasses.fields(self.fields)}


@dataclass(frozen=True)
class LayerSlots:
    """One layer of a kind's own per-layer pattern (``MixerKind.layer_plan``): ``mixer`` the layer_pattern word of
    the kind in its mixer slot, "" for the kind an unnamed layer gets, None for no mixer (its FFN alone); ``ffn``
    "none" (its mixer alone), "dense" or "moe"; ``alike``: every layer of this slot the same block, built once
    (false where a layer's block depends on its index: attention's, Zamba2's uses of a shared block)."""

    mixer: Optional[str]
    ffn: str = "none"
    alike: bool = True


_KINDS: dict[str, MixerKind] = {}
_VERSION = [0]  # counts the changes to the registry: what a reader caches is read anew after one


def register(kind: MixerKind) -> MixerKind:
    """Add a kind (a programming error, not bad input, when it clashes with one already there)."""
    if not dataclasses.is_dataclass(kind.fields):
        raise TypeError(f"mixer kind {kind.name!r}: fields must be a dataclass")
    if kind.name in _KINDS and _KINDS[kind.name] != kind:
        raise ValueError(f"mixer kind {kind.name!r} is registered already")
    for word in kind.words:
        if not re.fullmatch(r"[A-Za-z_]+", word):
            raise ValueError(f"mixer kind {kind.name!r}: a layer_pattern word is letters and '_'; got {word!r}")
    for f in dataclasses.fields(kind.fields):
        if f.default is dataclasses.MISSING:
            raise TypeError(f"mixer kind {kind.name!r}: field {f.name!r} needs a default (a kind's fields are "
                            "optional: a model without the kind leaves them out)")
    for other in _KINDS.values():
        if other.name == kind.name:
            continue
        clash = (set(kind.field_names()) & set(other.field_names())) or (set(kind.words) & set(other.words))
        if clash:
            raise ValueError(f"mixer kind {kind.name!r}: {sorted(clash)[0]!r} belongs to kind {other.name!r}")
        if kind.default and other.default:
            raise ValueError(f"mixer kind {kind.name!r}: {other.name!r} is the default kind already")
    _KINDS[kind.name] = kind
    _VERSION[0] += 1
    return kind


def unregister(name: str) -> None:
    """Take a kind out again (a test's own kind, so it leaves the registry as it found it)."""
    if _KINDS.pop(name, None) is not None:
        _VERSION[0] += 1


def version() -> int:
    """A number that changes whenever a kind is registered or taken out."""
    return _VERSION[0]


def kinds() -> tuple[MixerKind, ...]:
    """Every registered kind, in the order registered."""
    return tuple(_KINDS.values())


def words() -> tuple[str, ...]:
    """Every layer_pattern word of every kind."""
    return tuple(w for k in _KINDS.values() for w in k.words)


def for_layer(cfg: Any, layer: Any = None) -> MixerKind:
    """The kind of a layer whose pattern kind is ``layer`` (a tfcalc.architecture.patterns.LayerKind; None: a
    layer past the pattern, an MTP module's): the kind that owns its word unless it is the default one; else
    the first kind that claims it for this config; else the default kind."""
    word = getattr(layer, "word", "")
    for kind in _KINDS.values():
        if word in kind.words and not kind.default:
            return kind
    for kind in _KINDS.values():
        if kind.claims is not None and kind.claims(cfg, layer):
            return kind
    return next(k for k in _KINDS.values() if k.default)


def local_filler(cfg: Any) -> Optional[MixerKind]:
    """The kind that fills this config's local layers in place of a window or chunk (its ``local_field`` given),
    or None: local layers attend through a window or chunk."""
    return next((k for k in _KINDS.values() if k.local_field and getattr(cfg, k.local_field, None) is not None), None)


def local_fields() -> tuple[str, ...]:
    """Every kind's ``local_field``: what a message offers beside a window or chunk for the local layers."""
    return tuple(k.local_field for k in _KINDS.values() if k.local_field)


def layer_plan(cfg: Any) -> Optional[tuple[LayerSlots, ...]]:
    """The layers a kind's own per-layer pattern gives this config (``MixerKind.layer_plan``), or None."""
    for kind in _KINDS.values():
        plan = kind.layer_plan(cfg) if kind.layer_plan is not None else None
        if plan is not None:
            return plan
    return None


def empty_mixer(d_model: int) -> Mixer:
    """The mixer of a layer that has none (``MixerKind.empty``, declared by the kind whose pattern has such layers)."""
    return next(k.empty for k in _KINDS.values() if k.empty is not None)(d_model)
