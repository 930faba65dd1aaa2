"""Per-layer attention patterns of the flat front end: which layers attend locally (a sliding window or a
chunk), which globally, and which carry no rotary positions (NoPE).

Two ways to say it (tfcalc.config documents the fields):

- periods: ``full_attention_every: k`` makes layers k-1, 2k-1, ... global and the others local (Gemma 2:
  k = 2; Gemma 3: k = 6, modeling_gemma3.py ``layer_types``; Llama 4: k = 4, its chunked layers);
  ``nope_every: n`` takes RoPE out of layers n-1, 2n-1, ... (Llama 4's ``no_rope_layers``,
  configuration_llama4.py, and SmolLM3's ``no_rope_layer_interval``, configuration_smollm3.py: n = 4);
- an explicit list, ``layer_pattern``, for what no period says (as Hugging Face's ``layer_types``),
  written compactly: items separated by commas, each a kind or a parenthesised group, optionally
  ``*n`` repeated: ``(local*5, full)*10, local*2`` is Gemma 3 27B's 62 layers.

Kinds: ``full`` (the whole causal context, RoPE), ``local`` (through the window or the chunk, RoPE at
``rope_local_theta`` where given), ``nope`` (the whole context, no RoPE), ``local_nope`` -- softmax attention's
words -- and the words of every other registered mixer kind (tfcalc.architecture.kinds), whose layers that
mixer fills: ``(gdn*3, full)*12``. Where a kind fills the local layers in place of a window (its ``local_field``
given: gated DeltaNet's ``linear_mixer``, tfcalc.architecture.kinds.local_filler), the ``local`` layers are its.

A pattern is kept as runs -- a tuple of kinds repeated -- never one entry per layer, so a pattern of a
2**40-layer model costs what a 2-layer one does. Pure Python: no torch, typer or rich here.
"""

from __future__ import annotations

import functools
import math
import re
from typing import NamedTuple

from tfcalc.architecture import kinds as mixer_kinds
from tfcalc.errors import InputError

KINDS = ("full", "local", "nope", "local_nope")
MAX_PERIOD = 4096  # kinds in one group of a pattern (expanded): far past any model's (Gemma 3: 6)
_TOKEN = re.compile(r"\s*(?:(\()|(\))|(\*)\s*(\d+)|(,)|([A-Za-z_]+))")


class LayerKind(NamedTuple):
    local: bool  # through the window or chunk
    rope: bool  # RoPE in this layer (where the model has RoPE at all)
    word: str = ""  # its word in layer_pattern ("" where the config gives none): the mixer kind it picks


class PatternRun(NamedTuple):
    kinds: tuple[str, ...]
    repeat: int


def kind_of(name: str) -> LayerKind:
    if name not in KINDS:  # another mixer kind's layer: no window, no NoPE of softmax attention's
        return LayerKind(False, True, name)
    return LayerKind(name.startswith("local"), not name.endswith("nope"), name)


def known_words() -> tuple[str, ...]:
    """Softmax attention's kinds, then the other registered mixer kinds' words."""
    return _known_words(mixer_kinds.version())


@functools.lru_cache(maxsize=4)
def _known_words(version: int) -> tuple[str, ...]:
    return KINDS + tuple(w for w in mixer_kinds.words() if w not in KINDS)


def parse(text: str) -> tuple[PatternRun, ...]:
    """The runs of a layer pattern (see the module docstring); InputError, one line, when it is not one."""
    return _parse(text, known_words())


@functools.lru_cache(maxsize=64)
def _parse(text: str, words: tuple[str, ...]) -> tuple[PatternRun, ...]:
    """``parse`` with the words known now (a key of the cache: a kind registered or taken out reads anew)."""
    tokens, pos = [], 0
    text = text.strip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None or m.end() == pos:
            raise InputError(f"layer_pattern: cannot read {text[pos:pos + 20]!r} (write kinds "
                             f"{', '.join(words)}, "
                             "commas, groups in parentheses and '*n' repeats: '(local*5, full)*10, local*2')")
        tokens.append(m.groups())
        pos = m.end()
    runs, rest = _items(tokens, 0, 0, words)
    if not runs:
        raise InputError("layer_pattern is empty: give at least one layer kind")
    return _merge(runs)


MAX_DEPTH = 8  # groups within groups: one level says every model's pattern
MAX_REPEAT = 2**40  # a size field's limit (tfcalc.workload.MAX_SIZE): no repeat makes more layers than a model has


def _shown_count(digits: str) -> str:
    return f"{int(digits):,}" if len(digits) <= 20 else f"a {len(digits):,}-digit number"


def _items(tokens: list, i: int, depth: int, words: tuple[str, ...]) -> tuple[list[PatternRun], int]:
    """Comma-separated items from tokens[i] to the closing parenthesis (or the end, at depth 0)."""
    if depth > MAX_DEPTH:
        raise InputError(f"layer_pattern: groups nest more than {MAX_DEPTH} deep")
    top = depth == 0
    runs: list[PatternRun] = []
    expect_item = True
    while i < len(tokens):
        lpar, rpar, star, count, comma, word = tokens[i]
        if rpar:
            if top:
                raise InputError("layer_pattern: a ')' closes no '('")
            return runs, i + 1
        if comma:
            if expect_item:
                raise InputError("layer_pattern: an empty item between commas")
            expect_item, i = True, i + 1
            continue
        if not expect_item:
            raise InputError("layer_pattern: items must be separated by commas")
        if word:
            if word not in words:
                raise InputError(f"layer_pattern: unknown layer kind {word!r} (known: {', '.join(words)})")
            group, i = [PatternRun((word,), 1)], i + 1
        elif lpar:
            group, i = _items(tokens, i + 1, depth + 1, words)
            if not group:
                raise InputError("layer_pattern: an empty group '()'")
        else:
            raise InputError("layer_pattern: '*n' repeats a kind or a group; it follows one")
        repeat = 1
        if i < len(tokens) and tokens[i][2]:
            digits = tokens[i][3]  # read whole, so a long repeat is named as one, not as its last digits
            if len(digits) > 13 or int(digits) > MAX_REPEAT:
                raise InputError(f"layer_pattern: a repeat '*n' must be at most {MAX_REPEAT:,} (the most layers a "
                                 f"model has); got {_shown_count(digits)}")
            repeat, i = int(digits), i + 1
            if repeat < 1:
                raise InputError("layer_pattern: a repeat '*n' must be at least 1")
        runs += _repeat(group, repeat)
        expect_item = False
    if not top:
        raise InputError("layer_pattern: a '(' is never closed")
    if expect_item and runs:
        raise InputError("layer_pattern: it ends with a comma")
    return runs, i


def _repeat(group: list[PatternRun], repeat: int) -> list[PatternRun]:
    """A group repeated: one run of its kinds spelled out once (at most MAX_PERIOD of them)."""
    if len(group) == 1:
        return [PatternRun(group[0].kinds, group[0].repeat * repeat)]
    length = sum(len(r.kinds) * r.repeat for r in group)
    if length > MAX_PERIOD:
        raise InputError(f"layer_pattern: a repeated group spans {length:,} layers; at most {MAX_PERIOD:,} are "
                         "described (repeat a shorter group)")
    kinds = tuple(k for r in group for _ in range(r.repeat) for k in r.kinds)
    return [PatternRun(kinds, repeat)]


def _merge(runs: list[PatternRun]) -> tuple[PatternRun, ...]:
    out: list[PatternRun] = []
    for run in runs:
        if out and out[-1].kinds == run.kinds:
            run = PatternRun(run.kinds, out[-1].repeat + run.repeat)
            out.pop()
        out.append(run)
    return tuple(out)


def length(runs: tuple[PatternRun, ...]) -> int:
    return sum(len(r.kinds) * r.repeat for r in runs)


def at(runs: tuple[PatternRun, ...], i: int) -> str:
    """The kind of layer i (0-based), in closed form."""
    pos = 0
    for run in runs:
        end = pos + len(run.kinds) * run.repeat
        if i < end:
            return run.kinds[(i - pos) % len(run.kinds)]
        pos = end
    raise IndexError(f"layer {i} past a pattern of {pos} layers")


def segments(runs: tuple[PatternRun, ...]) -> list[tuple[int, int, int]]:
    """(start, stop, period) of each run: within it, the kind of layer i repeats every period layers."""
    out, pos = [], 0
    for run in runs:
        end = pos + len(run.kinds) * run.repeat
        out.append((pos, end, len(run.kinds)))
        pos = end
    return out


def layer_kind(cfg, i: int) -> LayerKind:
    """Layer i's kind from the flat fields (read by attribute): layer_pattern where given, else the
    periods full_attention_every (with a window or a chunk) and nope_every."""
    if cfg.layer_pattern is not None:
        return kind_of(at(parse(cfg.layer_pattern), i))
    # a layer another kind fills in place of a window (a linear-attention layer) is local: its state stops growing
    spans = cfg.sliding_window is not None or cfg.attention_chunk_size is not None or mixer_kinds.local_filler(
        cfg) is not None
    every, nope = cfg.full_attention_every, cfg.nope_every
    local = spans and not (every is not None and (i + 1) % every == 0)
    return LayerKind(local, not (nope is not None and (i + 1) % nope == 0))


def period_segments(cfg, n_layer: int) -> list[tuple[int, int, int]]:
    """(start, stop, period) covering layers 0..n_layer-1, within each of which layer_kind repeats with the
    period given (the pattern's runs, or the lcm of full_attention_every and nope_every)."""
    if cfg.layer_pattern is not None:
        return segments(parse(cfg.layer_pattern))
    period = math.lcm(cfg.full_attention_every or 1, cfg.nope_every or 1)
    return [(0, n_layer, period)]
