"""Per-layer attention of a config.json (``layer_types``, ``no_rope_layers``) as tfcalc's flat fields: the
periods ``full_attention_every`` and ``nope_every`` where the layers follow them, else an explicit
``layer_pattern`` written as runs (tfcalc.architecture.patterns). Pure Python."""

from __future__ import annotations

from tfcalc.errors import shown
from tfcalc.hf_config.layer_pattern import compact
from tfcalc.hf_config.reader import Reader

LOCAL_TYPES = {"sliding_attention": "sliding_window", "chunked_attention": "attention_chunk_size"}


def attention_layers(r: Reader, n_layer: int, local: list[bool], rope: list[bool]) -> None:
    """Fields for layers that are local (through the window or chunk the caller set) or not, and have RoPE
    or not: periods where they fit, else layer_pattern."""
    if not any(local):
        r.fields.update(sliding_window=None, attention_chunk_size=None)
    full_every = _period(local, want=False)
    nope_every = _period(rope, want=False)
    if full_every is not False and nope_every is not False:
        if any(local) and full_every:
            r.fields["full_attention_every"] = full_every
        if nope_every:
            r.fields["nope_every"] = nope_every
        return
    names = {(True, True): "local", (True, False): "local_nope", (False, True): "full", (False, False): "nope"}
    kinds = [names[loc, rp] for loc, rp in zip(local, rope, strict=True)]
    r.fields["layer_pattern"] = compact(kinds)


def _period(flags: list[bool], want: bool):
    """k when exactly layers k-1, 2k-1, ... have ``want`` (k >= 2), None when none has it, False when
    no such k describes them."""
    hits = [i for i, f in enumerate(flags) if f == want]
    if not hits:
        return None
    k = hits[0] + 1
    if k < 2 or hits != list(range(k - 1, len(flags), k)):
        return False
    return k


def layer_types(r: Reader, n_layer: int, default: list[str], rope: list[bool] | None = None) -> None:
    """``layer_types`` (or ``default`` where the file has none): full_attention, sliding_attention,
    chunked_attention, one per layer; the window (sliding_window) or chunk (attention_chunk_size) read
    for the local ones. ``rope``: which layers rotate (default: every one)."""
    kinds = r.raw.get("layer_types")
    kinds = default if kinds is None else kinds
    allowed = ("full_attention", *LOCAL_TYPES)
    if not isinstance(kinds, list) or not all(isinstance(k, str) and k in allowed for k in kinds):
        raise r.fail(f"'layer_types' must be a list of {', '.join(allowed)}; got {shown(kinds)}")
    if len(kinds) != n_layer:
        raise r.fail(f"'layer_types' lists {len(kinds)} layers; 'num_hidden_layers' is {n_layer}")
    used = {LOCAL_TYPES[k] for k in kinds if k in LOCAL_TYPES}
    if len(used) > 1:
        raise r.fail("'layer_types' mixes sliding and chunked layers, which tfcalc does not build")
    for field in used:
        key = field
        value = r.number(key, None, integer=True)
        if not value:
            raise r.fail(f"'layer_types' names {key.replace('_', ' ')} layers but '{key}' is {shown(value)}")
        r.take(key, field)
    attention_layers(r, n_layer, [k != "full_attention" for k in kinds], rope or [True] * n_layer)


def rope_flags(r: Reader, n_layer: int, key: str = "no_rope_layers", interval_key: str = "no_rope_layer_interval",
               interval: int = 4) -> list[bool]:
    """Which layers rotate: ``no_rope_layers`` (1: RoPE, 0: none -- the name reads backwards in
    configuration_llama4.py and configuration_smollm3.py alike), else every ``interval``-th layer without."""
    flags = r.raw.get(key)
    if flags is None or flags == []:
        every = r.number(interval_key, interval, integer=True)
        if every is None or every < 1:
            raise r.fail(f"'{interval_key}' must be a positive integer; got {shown(every)}")
        return [(i + 1) % every != 0 for i in range(n_layer)]
    if not isinstance(flags, list) or len(flags) != n_layer or not all(f in (0, 1) and not isinstance(f, float)
                                                                        for f in flags):
        raise r.fail(f"'{key}' must list 0 or 1 for each of the {n_layer} layers; got {shown(flags)}")
    return [bool(f) for f in flags]
