"""The rules of the fields gpt-oss and Qwen3-MoE brought (tfcalc.config, their section): each failure one
ConfigError line naming the field. Imports nothing of tfcalc but the error type; tfcalc.config_rules calls
``validate_moe_extras`` after its own rules, so the field types are checked already."""

from __future__ import annotations

from tfcalc.errors import InputError as ConfigError, shown

MAX_LISTED_LAYERS = 4096  # layer numbers dense_layers may name: each is built one by one (tfcalc.architecture.flat)


def validate_moe_extras(cfg) -> None:
    _validate_dense_layers(cfg)
    if cfg.router_bias and cfg.n_expert is None:
        raise ConfigError("router_bias applies to a mixture of experts only (give n_expert and n_expert_active)")
    if cfg.expert_format is not None and cfg.n_expert is None:
        raise ConfigError("expert_format applies to a mixture of experts only (give n_expert and n_expert_active)")
    if cfg.swiglu_alpha is not None and cfg.swiglu_limit is None:
        raise ConfigError("swiglu_alpha needs swiglu_limit (gpt-oss's clamped SwiGLU; a limit alone: DeepSeek-V4's)")
    if cfg.swiglu_limit is not None and (not cfg.gated_ffn or cfg.activation != "silu"):
        raise ConfigError("swiglu_limit and swiglu_alpha clamp a SwiGLU: they need gated_ffn true and activation silu")
    if cfg.attn_sinks and cfg.arch == "encoder-decoder":
        raise ConfigError("attn_sinks applies to a decoder's or encoder's self-attention; not built in an "
                          "encoder-decoder (no model in use has it)")


def _validate_dense_layers(cfg) -> None:
    """dense_layers: distinct layer numbers in order, each below the depth, in a mixture of experts."""
    listed = cfg.dense_layers
    if listed is None:
        return
    if cfg.n_expert is None:
        raise ConfigError("dense_layers applies to a mixture of experts only (give n_expert and n_expert_active)")
    if cfg.arch == "encoder-decoder":
        raise ConfigError("dense_layers applies to a one-stack model; an encoder-decoder's stacks would share it")
    if list(listed) != sorted(set(listed)):
        raise ConfigError(f"field 'dense_layers' must list distinct layers in increasing order; got "
                          f"{shown(list(listed))}")
    if listed and (listed[0] < 0 or listed[-1] >= min(cfg.n_layer, MAX_LISTED_LAYERS)):
        bad = listed[0] if listed[0] < 0 else listed[-1]
        raise ConfigError(f"field 'dense_layers' names layer {bad}: layers are 0 .. n_layer - 1 ({cfg.n_layer - 1})"
                          + (f", and at most {MAX_LISTED_LAYERS - 1:,} is listed" if cfg.n_layer > MAX_LISTED_LAYERS
                             else ""))
    if len(listed) >= cfg.n_layer:
        raise ConfigError("field 'dense_layers' lists every layer: with every layer dense, leave out n_expert")


def validate_longcat(cfg) -> None:
    """zero_experts and moe_shortcut (LongCat-Flash; tfcalc.architecture.ffn step 5, tfcalc.architecture.block);
    tfcalc.config_rules calls it before the layer patterns are read (they build the layers' runs)."""
    for name in ("zero_experts", "moe_latent_dim"):  # positive integers (tfcalc.config_rules)
        if getattr(cfg, name) is not None and cfg.n_expert is None:
            raise ConfigError(f"{name} applies to a mixture of experts only (give n_expert and n_expert_active)")
    if not cfg.moe_shortcut:
        return
    if cfg.n_expert is None or cfg.arch != "decoder" or cfg.hybrid_pattern is not None:
        raise ConfigError("moe_shortcut (LongCat-Flash's layer pairs) needs a decoder with a mixture of experts "
                          "(n_expert) and no hybrid_pattern")
    if cfg.n_layer % 2:
        raise ConfigError(f"moe_shortcut pairs the layers (two sub-layers to a LongCat layer): n_layer must be even; "
                          f"got {cfg.n_layer}")
    for name in ("first_dense_layers", "moe_every", "dense_layers", "shared_expert_d_ff"):
        if getattr(cfg, name) is not None:
            raise ConfigError(f"{name} does not apply with moe_shortcut: the experts sit in every even layer, beside "
                              "its dense FFN (dense_d_ff wide)")
    if cfg.shared_expert_gate or cfg.mtp_layers:
        raise ConfigError("shared_expert_gate and mtp_layers are not built with moe_shortcut (LongCat-Flash has "
                          "neither in transformers)")
