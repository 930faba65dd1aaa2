"""The RoPE-scaling fields of ModelConfig and their rules (tfcalc.config_rules runs them with the others); what
each kind computes is tfcalc.architecture.rope. Imports nothing of tfcalc but the error type; every failure is
one ConfigError line naming the field.

- ``rope_scaling``: yarn, linear, llama3 or longrope (transformers' rope_type), with ``rope_scaling_factor``
  (every kind), ``rope_original_max_seq_len`` (yarn and llama3: the context trained on), ``rope_low_freq_factor`` and
  ``rope_high_freq_factor`` (llama3), and YaRN's optional ``yarn_beta_fast``, ``yarn_beta_slow``,
  ``yarn_mscale``, ``yarn_mscale_all_dim``, ``yarn_attention_factor``, ``yarn_truncate``;
- longrope (Phi-3's; transformers' _compute_longrope_parameters): ``rope_scaling_factor`` (the file's factor,
  else max_position_embeddings / original), ``rope_original_max_seq_len``, and ``rope_short_factor`` and
  ``rope_long_factor``: one positive number per rotated frequency (rotated channels / 2) each;
- proportional (Gemma 4's global layers; _compute_proportional_rope_parameters): ``rope_proportion`` in (0, 1],
  the share of the whole head's rotate-half frequencies that turn (the rest stand still), and the factor;
- ``rope_scaling_layers``: ``all`` (default) or ``full``, the global layers only (Gemma 3's linear ×8 and
  OLMo 3's YaRN: rope_parameters nested by layer type, full_attention's); the local layers rotate unscaled.
"""

from __future__ import annotations

from tfcalc.errors import InputError as ConfigError

# the fields each kind reads beside rope_scaling_factor; any other scaling field with it is refused
_OWN = {
    "yarn": ("rope_original_max_seq_len", "yarn_beta_fast", "yarn_beta_slow", "yarn_mscale", "yarn_mscale_all_dim",
             "yarn_attention_factor", "yarn_truncate"),
    "linear": (),
    "llama3": ("rope_original_max_seq_len", "rope_low_freq_factor", "rope_high_freq_factor"),
    "longrope": ("rope_original_max_seq_len", "rope_short_factor", "rope_long_factor"),
    "proportional": ("rope_proportion",),
}
_REQUIRED = {"yarn": ("rope_original_max_seq_len",), "linear": (),
             "llama3": ("rope_original_max_seq_len", "rope_low_freq_factor", "rope_high_freq_factor"),
             "longrope": _OWN["longrope"], "proportional": _OWN["proportional"]}
SCALING_FIELDS = ("rope_scaling_factor", "rope_scaling_layers",
                  *dict.fromkeys(_OWN["yarn"] + _OWN["llama3"] + _OWN["longrope"] + _OWN["proportional"]))


def validate_rope_scaling(cfg) -> None:
    """The scaling fields against rope_scaling and the rest of the config."""
    kind = cfg.rope_scaling
    if kind is None:
        for name in SCALING_FIELDS:
            if getattr(cfg, name) is not None:
                raise ConfigError(f"{name} applies with rope_scaling only (yarn, linear, llama3, longrope or "
                                  "proportional)")
        return
    if cfg.pos_encoding != "rope":
        raise ConfigError(f"rope_scaling applies to pos_encoding rope only (pos_encoding is {cfg.pos_encoding})")
    for name in ("rope_scaling_factor", *_REQUIRED[kind]):
        if getattr(cfg, name) is None:
            raise ConfigError(f"rope_scaling {kind} needs {name}")
    for name in SCALING_FIELDS[2:]:
        if name not in _OWN[kind] and getattr(cfg, name) is not None:
            raise ConfigError(f"{name} does not apply to rope_scaling {kind}")
    if kind == "llama3" and cfg.rope_low_freq_factor > cfg.rope_high_freq_factor:
        raise ConfigError(f"rope_low_freq_factor ({cfg.rope_low_freq_factor}) must be at most rope_high_freq_factor "
                          f"({cfg.rope_high_freq_factor})")
    if kind == "longrope":
        _check_longrope(cfg)
    if kind == "proportional" and not (0 < cfg.rope_proportion <= 1 and cfg.rope_scaling_factor > 0):
        raise ConfigError(f"rope_scaling proportional needs rope_proportion in (0, 1] and a positive "
                          f"rope_scaling_factor; got {cfg.rope_proportion} and {cfg.rope_scaling_factor}")
    if kind == "proportional" and cfg.rope_fraction != 1.0:
        raise ConfigError("rope_scaling proportional turns part of a whole head: give rope_fraction 1 with it")
    if cfg.kv_lora_rank is not None and (kind != "yarn" or cfg.rope_scaling_layers not in (None, "all")):
        raise ConfigError(f"latent attention (kv_lora_rank) builds rope_scaling yarn on every layer only; got "
                          f"{kind}{'' if cfg.rope_scaling_layers is None else ' on ' + cfg.rope_scaling_layers}")


def _check_longrope(cfg) -> None:
    """One positive factor per frequency in each list: rotated channels / 2 (transformers only warns on a wrong
    length, then fails to broadcast, _validate_longrope_rope_parameters)."""
    rotated = cfg.rope_dim
    for name in ("rope_short_factor", "rope_long_factor"):
        values = getattr(cfg, name)
        if not all(v > 0 for v in values):
            raise ConfigError(f"{name} must hold positive numbers only")
        if len(values) != rotated // 2:
            raise ConfigError(f"{name} must hold one factor per rotated frequency ({rotated // 2}: rotated "
                              f"channels / 2); got {len(values)}")
    if cfg.rope_scaling_factor <= 0 or cfg.rope_original_max_seq_len < 1:
        raise ConfigError("rope_scaling longrope needs a positive rope_scaling_factor and rope_original_max_seq_len")
