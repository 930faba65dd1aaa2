"""Flat fields written back from a smaller copy of the description: the measured paths shrink the model on
its description (tfcalc.architecture.copies: ``Architecture.shrunk``, ``one_of_each``), never by editing
a depth field by hand, and then need a ``ModelConfig`` whose ``architecture`` is that copy -- one the
counts read, the model is built from, and a rank rebuilds from the config's fields.

``with_architecture(cfg, arch)`` is that config: cfg's fields, the depths read from arch, and the per-layer
pattern fields kept where they still say arch's layers (``bench llama2-7b --n-layer 2``: n_layer 2 and
nothing else), or else written from arch's layers: ``layer_pattern`` from each layer's attention kind
(full, local, nope, local_nope: the kind the original layer of that block had), ``first_dense_layers``
or ``dense_layers`` from which layers have the mixture of experts. The result is checked block for block
against arch; the user's own fields are never blamed, as no field the user wrote is refused here (what an
encoder-decoder's two stacks, sharing one pattern, cannot say is refused as a limit of the copy).
"""

from __future__ import annotations

import itertools
from typing import Any, Iterator, Optional

from tfcalc.architecture import Architecture, Block, Stack
from tfcalc.architecture.patterns import KINDS, layer_kind
from tfcalc.config import ModelConfig, replace
from tfcalc.config_moe import MAX_LISTED_LAYERS
from tfcalc.errors import InputError

_ATTENTION_PERIODS = ("full_attention_every", "nope_every", "layer_pattern")
_MOE_PATTERN = ("first_dense_layers", "moe_every", "dense_layers")
_SEARCHED = 4096  # period fields tried at most (each a config built: ~0.5 ms)


def with_architecture(cfg: ModelConfig, arch: Architecture, name: Optional[str] = None) -> ModelConfig:
    """A config equal to cfg but for its depths and per-layer patterns, whose architecture is arch: a smaller
    copy of cfg.architecture (see the module docstring). ``name``: the copy's name (default cfg's)."""
    depths = dict(n_layer=arch.output.n_layer, name=name or cfg.name)
    if cfg.arch == "encoder-decoder":
        depths["n_encoder_layer"] = arch.stacks[0].n_layer
    written = {**depths, **_attention_fields(cfg, arch.output), **_moe_fields(cfg, arch.output)}
    if cfg.hybrid_pattern is not None:  # one letter per layer (Nemotron-H): the copy's layers are its first ones
        written["hybrid_pattern"] = depths["hybrid_pattern"] = _letters(cfg, arch.output)
    tries = itertools.chain([depths, written], itertools.islice(_periods(cfg, written), _SEARCHED))
    for changes in tries:
        try:
            copy = replace(cfg, **changes)
        except InputError:
            continue
        if _same(copy.architecture, arch):
            copy.__dict__["architecture"] = arch  # the cached description: the one just checked equal
            return copy
    # an encoder-decoder whose stacks, shrunk, no longer share one pattern (every preset's copy is said:
    # tests/test_architecture_copies.py); a limit of the flat fields, said as such
    raise InputError(f"{cfg.name}: its {arch.output.n_layer}-layer copy has layers the flat fields cannot say (an "
                     "encoder-decoder's stacks share one layer pattern); run it at its full depth")


def _letters(cfg: ModelConfig, stack: Stack) -> str:
    """hybrid_pattern of a copy: each of its layers' letter, as the first layer of cfg with that block has it."""
    first = {}
    for block, letter in zip(cfg.architecture.output.layers(), cfg.hybrid_pattern, strict=True):
        first.setdefault(block, letter)
    return "".join(first[block] for block in stack.layers())


def _periods(cfg: ModelConfig, written: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Last, the period fields cfg gives, at every value a copy this short may need: an encoder-decoder
    (whose stacks share the fields, and which no layer_pattern or dense_layers describes) cut short of a
    period -- (local, local, global) at 2 layers is full_attention_every 2."""
    n = written["n_layer"]
    given = [f for f in ("full_attention_every", "nope_every", "moe_every", "first_dense_layers")
             if getattr(cfg, f) is not None]
    if not given:
        return
    values = [[None] + list(range(1 if f == "first_dense_layers" else 2, n + (f != "first_dense_layers")))
              for f in given]
    for chosen in itertools.product(*values):
        yield {**written, **dict(zip(given, chosen, strict=True))}


def _attention_fields(cfg: ModelConfig, stack: Stack) -> dict[str, Any]:
    """layer_pattern written from the stack's runs (each block's kind as its first layer in cfg has it; one
    stack only, as layer_pattern is), and no window or chunk where no local layer is left; nothing where cfg
    gives no attention pattern."""
    # latent attention reads no period field, only a layer_pattern's words (Kimi Linear's kda and nope layers)
    if all(getattr(cfg, f) is None for f in _ATTENTION_PERIODS) or (
            cfg.kv_lora_rank is not None and cfg.layer_pattern is None):
        return {}
    names = _kind_names(cfg)
    out: dict[str, Any] = {}
    if not any(names[b].startswith("local") for run in stack.runs for b in run.pattern):
        out.update(sliding_window=None, attention_chunk_size=None, rope_local_theta=None, full_attention_every=None)
    if cfg.arch == "encoder-decoder":
        return out
    items = []
    for run in stack.runs:
        kinds = [names[b] for b in run.pattern]
        if run.repeat == 1:
            items += kinds
        else:
            items.append(f"{kinds[0] if len(kinds) == 1 else '(' + ', '.join(kinds) + ')'}*{run.repeat}")
    return {**out, **dict(layer_pattern=", ".join(items), full_attention_every=None, nope_every=None)}


def _kind_names(cfg: ModelConfig) -> dict[Block, str]:
    """Each distinct block of cfg's output stack -> the layer kind (tfcalc.architecture.patterns) of the first
    layer that is it."""
    out: dict[Block, str] = {}
    start = 0
    for run in cfg.architecture.output.runs:
        for j, block in enumerate(run.pattern):
            if block not in out:
                kind = layer_kind(cfg, start + j)
                out[block] = kind.word if kind.word not in ("", *KINDS) else (  # another mixer kind's word
                    ("local" if kind.local else "full" if kind.rope else "nope") + (
                        "_nope" if kind.local and not kind.rope else ""))
        start += len(run.pattern) * run.repeat
    return out


def _moe_fields(cfg: ModelConfig, stack: Stack) -> dict[str, Any]:
    """first_dense_layers (the dense layers a prefix) or dense_layers (listed), from the stack's blocks."""
    if cfg.n_expert is None or all(getattr(cfg, f) is None for f in _MOE_PATTERN):
        return {}
    dense, prefix, i = [], True, 0
    for run in stack.runs:
        for _ in range(run.repeat):
            for block in run.pattern:
                if not block.is_moe:
                    dense.append(i)
                    prefix = prefix and i == len(dense) - 1
                i += 1
                if len(dense) > MAX_LISTED_LAYERS:
                    return {}
    out: dict[str, Any] = dict(first_dense_layers=None, moe_every=None, dense_layers=None)
    if dense and prefix:
        out["first_dense_layers"] = len(dense)
    elif dense and cfg.arch == "encoder-decoder":  # dense_layers says one stack's layers: left to _periods
        return {}
    elif dense:
        out["dense_layers"] = tuple(dense)
    else:
        out["dense_d_ff"] = None  # no dense layer left to be that wide
    return out


def _same(a: Architecture, b: Architecture) -> bool:
    """The same model, block for block (runs may be grouped differently)."""
    if (a.kind, a.head, a.mtp, len(a.stacks)) != (b.kind, b.head, b.mtp, len(b.stacks)):
        return False
    for s, t in zip(a.stacks, b.stacks, strict=True):
        if (s.embeddings, s.final_norm, s.name, s.n_layer) != (t.embeddings, t.final_norm, t.name, t.n_layer):
            return False
        if any(x != y for x, y in zip(s.layers(), t.layers(), strict=True)):
            return False
    return True
