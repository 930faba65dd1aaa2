"""The fields of DeepSeek-V2/V3 and Kimi K2 in ModelConfig -- latent attention, DeepSeek's routing and the
multi-token prediction module -- their types and their rules (tfcalc.config_rules runs them with the
others). Imports nothing of tfcalc but the error type; every failure is one ConfigError line naming the field.

- ``kv_lora_rank`` set: every self-attention layer is multi-head latent attention (tfcalc.architecture.latent),
  with ``qk_nope_head_dim``, ``qk_rope_head_dim`` and ``v_head_dim`` (required) and ``q_lora_rank`` (optional);
- ``router_scoring``, ``router_groups``, ``router_topk_groups``, ``routed_scaling``, ``router_score_bias``:
  tfcalc.architecture.routing;
- YaRN (``rope_scaling: yarn``, the one scaling latent attention builds): tfcalc.config_rope;
- ``mtp_layers``: DeepSeek-V3's multi-token prediction modules (num_nextn_predict_layers), counted beside the
  model (tfcalc.architecture.mtp).
"""

from __future__ import annotations

from tfcalc.errors import InputError as ConfigError

_LATENT = ("q_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim", "rope_interleave")


def validate_latent(cfg) -> None:
    """Latent attention, DeepSeek's routing and MTP against the rest of the config."""
    if cfg.qk_nope_head_dim is not None and cfg.qk_nope_head_dim < 0:
        raise ConfigError(f"field 'qk_nope_head_dim' must be 0 or more; got {cfg.qk_nope_head_dim}")
    if cfg.kv_lora_rank is None:
        for name in _LATENT:
            if getattr(cfg, name) is not None:
                raise ConfigError(f"{name} applies to latent attention only (give kv_lora_rank)")
    else:
        _validate_attention(cfg)
    _validate_routing(cfg)
    if cfg.mtp_layers and (cfg.arch != "decoder" or not cfg.lm_head):
        raise ConfigError("mtp_layers (multi-token prediction) applies to a decoder with an LM head")


def _validate_attention(cfg) -> None:
    for name in ("qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"):
        if getattr(cfg, name) is None:
            raise ConfigError(f"latent attention (kv_lora_rank) needs {name}")
    if cfg.pos_encoding != "rope":
        raise ConfigError(f"latent attention rotates qk_rope_head_dim channels: pos_encoding must be rope "
                          f"(is {cfg.pos_encoding})")
    if cfg.arch != "decoder" or cfg.cross_attention:
        raise ConfigError("latent attention is built for a decoder's self-attention only (arch decoder, "
                          "no cross_attention)")
    if cfg.qk_rope_head_dim % 2:
        raise ConfigError(f"rope rotates pairs of channels: qk_rope_head_dim must be even, got {cfg.qk_rope_head_dim}")
    for name in ("kv_lora_rank", "q_lora_rank"):
        value = getattr(cfg, name)
        if value is not None and value > cfg.d_model:
            raise ConfigError(f"field '{name}' ({value}) must be at most d_model ({cfg.d_model}): it compresses "
                              "the hidden state")
    for name in ("n_kv_head", "d_head", "sliding_window", "attn_scale", "attn_softcap"):
        if getattr(cfg, name) is not None:
            raise ConfigError(f"{name} does not apply to latent attention (kv_lora_rank): its heads are "
                              "qk_nope_head_dim + qk_rope_head_dim wide, one K/V head per query head")
    if cfg.qk_norm or cfg.rope_fraction != 1.0:
        raise ConfigError("qk_norm and rope_fraction do not apply to latent attention (kv_lora_rank)")


def _validate_routing(cfg) -> None:
    deepseek = (cfg.router_scoring != "softmax" or cfg.router_groups is not None or cfg.router_topk_groups is not None
                or cfg.routed_scaling is not None or cfg.router_score_bias)
    if not deepseek:
        return
    if cfg.n_expert is None:
        raise ConfigError("router_scoring, router_groups, router_topk_groups, routed_scaling and router_score_bias "
                          "apply to a mixture of experts only (give n_expert and n_expert_active)")
    groups, kept = cfg.router_groups or 1, cfg.router_topk_groups or 1
    if (cfg.router_groups is None) != (cfg.router_topk_groups is None):
        raise ConfigError("give router_groups and router_topk_groups together (grouped routing), or neither")
    if kept > groups:
        raise ConfigError(f"field 'router_topk_groups' ({kept}) must be at most router_groups ({groups})")
    if cfg.n_expert % groups:
        raise ConfigError(f"field 'router_groups' ({groups}) must divide n_expert ({cfg.n_expert}) into equal groups")
    if kept * (cfg.n_expert // groups) < cfg.n_expert_active:
        raise ConfigError(f"the router_topk_groups ({kept}) groups kept hold {kept * (cfg.n_expert // groups)} "
                          f"experts, fewer than n_expert_active ({cfg.n_expert_active})")
    if cfg.router_score_bias and groups > 1 and cfg.n_expert // groups < 2:
        raise ConfigError("router_score_bias scores a group by its two best experts: each of the router_groups "
                          "needs at least 2 experts")
    if cfg.expert_capacity_factor is not None:
        raise ConfigError("expert_capacity_factor with DeepSeek's routing is not built")
