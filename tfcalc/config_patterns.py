"""The rules of the per-layer attention fields (sliding_window, attention_chunk_size, full_attention_every,
rope_local_theta, nope_every, layer_pattern; tfcalc.architecture.patterns says what they mean). Each
failure is one ConfigError line naming the field. Pure Python: no torch, typer or rich here."""

from __future__ import annotations

from tfcalc.architecture.patterns import KINDS, kind_of, length, parse
from tfcalc.errors import InputError as ConfigError, shown


def validate_attention_patterns(cfg) -> None:
    window, chunk = cfg.sliding_window, cfg.attention_chunk_size
    for name in ("sliding_window", "attention_chunk_size"):
        if getattr(cfg, name) is not None and cfg.arch == "encoder":
            raise ConfigError(f"{name} applies to causal self-attention (arch decoder or encoder-decoder); "
                              "an encoder attends both ways")
    if window is not None and chunk is not None:
        raise ConfigError("give sliding_window or attention_chunk_size, not both: a local layer attends through "
                          "one of them")
    _validate_linear_mixer(cfg)
    linear = cfg.linear_mixer is not None
    if cfg.full_attention_every is not None:
        if window is None and chunk is None and not linear:
            raise ConfigError("full_attention_every alternates windowed and full layers: give sliding_window "
                              "(or attention_chunk_size) too")
        if cfg.full_attention_every < 2:
            raise ConfigError(f"field 'full_attention_every' must be at least 2 (1: every layer full; set "
                              f"sliding_window to null); got {cfg.full_attention_every}")
    if cfg.rope_local_theta is not None:
        if cfg.pos_encoding != "rope":
            raise ConfigError(f"rope_local_theta applies to pos_encoding rope only (pos_encoding is "
                              f"{cfg.pos_encoding})")
        if window is None and chunk is None:
            raise ConfigError("rope_local_theta is the RoPE base of the local layers: give sliding_window or "
                              "attention_chunk_size too")
    if cfg.nope_every is not None:
        if cfg.pos_encoding != "rope":
            raise ConfigError(f"nope_every takes RoPE out of some layers: it applies to pos_encoding rope only "
                              f"(pos_encoding is {cfg.pos_encoding})")
        if cfg.nope_every < 2:
            raise ConfigError(f"field 'nope_every' must be at least 2 (1: no layer has RoPE; set pos_encoding "
                              f"to none); got {cfg.nope_every}")
        if cfg.nope_every > cfg.n_layer:
            raise ConfigError(f"field 'nope_every' ({cfg.nope_every}) must be at most n_layer ({cfg.n_layer}): "
                              "layers nope_every - 1, 2·nope_every - 1, ... have no RoPE")
    if cfg.layer_pattern is not None:
        _validate_layer_pattern(cfg)


def _validate_layer_pattern(cfg) -> None:
    for name in ("full_attention_every", "nope_every"):
        if getattr(cfg, name) is not None:
            raise ConfigError(f"give layer_pattern or {name}, not both: the pattern says every layer's kind")
    if cfg.arch == "encoder-decoder":
        raise ConfigError("layer_pattern applies to one stack (arch decoder or encoder), not to an "
                          "encoder-decoder's two")
    runs = parse(cfg.layer_pattern)
    n = length(runs)
    if n > cfg.n_layer:
        raise ConfigError(f"layer_pattern describes {n:,} layers, longer than the model (n_layer {cfg.n_layer:,})")
    if n < cfg.n_layer:
        raise ConfigError(f"layer_pattern describes {n:,} layers, fewer than the model's {cfg.n_layer:,}: "
                          "say every layer's kind (repeat a group with '*n')")
    kinds = {k for run in runs for k in run.kinds}
    local = sorted(k for k in kinds if kind_of(k).local)
    if local and cfg.sliding_window is None and cfg.attention_chunk_size is None and cfg.linear_mixer is None:
        raise ConfigError(f"layer_pattern has {shown(local[0])} layers: give sliding_window or "
                          "attention_chunk_size (what they attend through), or linear_mixer")
    nope = sorted(k for k in kinds if not kind_of(k).rope)
    if nope and cfg.pos_encoding != "rope":
        raise ConfigError(f"layer_pattern has {shown(nope[0])} layers (no RoPE): it applies to pos_encoding rope "
                          f"only (pos_encoding is {cfg.pos_encoding})")
    assert kinds <= set(KINDS)


LINEAR_FIELDS = ("linear_key_heads", "linear_value_heads", "linear_key_head_dim", "linear_value_head_dim")


def _validate_linear_mixer(cfg) -> None:
    """linear_mixer makes the local layers (full_attention_every, layer_pattern's local kinds) linear-attention
    layers: it needs its four sizes, a decoder without latent attention, and no window or chunk beside it."""
    if cfg.linear_mixer is None:
        given = [f for f in (*LINEAR_FIELDS, "linear_conv_kernel") if getattr(cfg, f) is not None]
        given += ["linear_split_projections"] if cfg.linear_split_projections else []
        if given:
            raise ConfigError(f"field '{given[0]}' sizes the linear-attention layers: give linear_mixer too")
        return
    missing = [f for f in LINEAR_FIELDS if getattr(cfg, f) is None]
    if missing:
        raise ConfigError(f"linear_mixer {cfg.linear_mixer} needs '{missing[0]}'")
    if cfg.arch != "decoder" or cfg.kv_lora_rank is not None:
        raise ConfigError("linear_mixer applies to a decoder's layers beside softmax attention (not latent "
                          "attention, not an encoder)")
    if cfg.sliding_window is not None or cfg.attention_chunk_size is not None or cfg.rope_local_theta is not None:
        raise ConfigError("give linear_mixer or sliding_window / attention_chunk_size / rope_local_theta, not both: "
                          "the local layers are linear-attention layers, with no window or RoPE")
