"""The rules of DeepSeek-V2/V3's and Kimi K2's fields in ModelConfig beside latent attention's -- DeepSeek's routing
and the multi-token prediction module (tfcalc.config_rules runs them with the others; latent attention's fields
and rules are its mixer kind's, tfcalc.architecture.flat_latent; YaRN's, tfcalc.config_rope). Imports nothing of
tfcalc but the error type; every failure is one ConfigError line naming the field.

- ``router_scoring``, ``router_groups``, ``router_topk_groups``, ``routed_scaling``, ``router_score_bias``:
  tfcalc.architecture.routing;
- YaRN (``rope_scaling: yarn``, the one scaling latent attention builds): tfcalc.config_rope;
- ``mtp_layers``: DeepSeek-V3's multi-token prediction modules (num_nextn_predict_layers), counted beside the
  model (tfcalc.architecture.mtp).
"""

from __future__ import annotations

from tfcalc.errors import InputError as ConfigError


def validate_latent(cfg) -> None:
    """DeepSeek's routing and MTP against the rest of the config (latent attention's own rules are its mixer
    kind's, tfcalc.architecture.flat_latent)."""
    _validate_routing(cfg)
    if cfg.mtp_layers and (cfg.arch != "decoder" or not cfg.lm_head):
        raise ConfigError("mtp_layers (multi-token prediction) applies to a decoder with an LM head")


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
