"""The flat front end's part for DeepSeek-V2/V3 and Kimi K2 (tfcalc.architecture.flat calls it): the latent
attention, the router and the MTP modules a config's fields describe (tfcalc.config_latent lists them).
Reads the config by attribute, never imports it. Pure Python."""

from __future__ import annotations

from typing import Any, Optional

from tfcalc.architecture import rope
from tfcalc.architecture.block import Block
from tfcalc.architecture.latent import LatentAttention, Yarn
from tfcalc.architecture.mtp import MTP
from tfcalc.architecture.norm import Norm
from tfcalc.architecture.routing import Routing


def yarn(cfg: Any) -> Optional[Yarn]:
    """A latent attention's YaRN (the one scaling tfcalc.config_rope lets latent attention have), or None."""
    return rope.from_fields(cfg) if cfg.rope_scaling == "yarn" else None


def latent_attention(cfg: Any, norm: Norm) -> LatentAttention:
    """Every self-attention layer's, when kv_lora_rank is set: biases as attn_bias (attention_bias)."""
    return LatentAttention(
        cfg.d_model, cfg.n_head, cfg.kv_lora_rank, cfg.qk_nope_head_dim, cfg.qk_rope_head_dim, cfg.v_head_dim,
        cfg.q_lora_rank, norm, cfg.attn_bias, cfg.rope_theta, yarn(cfg), cfg.rope_interleave is not False,
    )


def routing(cfg: Any) -> Routing:
    return Routing(cfg.router_scoring, cfg.router_groups or 1, cfg.router_topk_groups or 1,
                   1.0 if cfg.routed_scaling is None else cfg.routed_scaling, cfg.router_score_bias)


def mtp(cfg: Any, norm: Norm, block: Block) -> Optional[MTP]:
    """``block``: the layer after the main stack's last (layer n_layer), each module's decoder layer."""
    return MTP(block, cfg.mtp_layers, norm, cfg.vocab_size) if cfg.mtp_layers else None
