"""The flat front end's part for DeepSeek-V4 (tfcalc.architecture.compressed_attention has the attention): its mixer
kind's fields (registered in tfcalc.architecture.kinds as this module is imported), their rules, and how layer i's
attention is built from its layer_pattern word (swa, csa, hca); beside them the fields of DeepSeek-V4's blocks that
tfcalc.architecture.flat reads (hyper_connections, hc_sinkhorn_iters, hc_eps: tfcalc.architecture.block.Hyper;
hash_moe_layers: MoE.hash_vocab). Reads the config by attribute, never imports it. Pure Python."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Optional

from tfcalc.architecture.compressed_attention import CompressedAttention
from tfcalc.architecture.flat_latent import yarn
from tfcalc.architecture.kinds import MixerKind, register
from tfcalc.architecture.patterns import layer_kind
from tfcalc.errors import InputError


@dataclass(frozen=True, kw_only=True)
class CompressedFields:
    """DeepSeek-V4's attention in the layers layer_pattern calls swa (window only), csa and hca."""

    csa_ratio: int = 4  # m of the compressed sparse layers (compress_rates)
    hca_ratio: int = 128  # m' of the heavily compressed layers
    attn_q_lora_rank: int = 1024  # c_q (q_lora_rank)
    o_groups: int = 8  # g: the grouped output projection's groups
    o_lora_rank: int = 1024  # d_g: each group's output width
    csa_index_topk: int = 512  # k (index_topk)
    csa_index_heads: int = 64  # H_i (index_n_heads)
    csa_index_head_dim: int = 128  # D_i (index_head_dim)
    compress_rope_theta: float = 160000.0  # the compressed layers' RoPE base
    # DeepSeek-V4's blocks beside its attention (tfcalc.architecture.block): hyper-connection streams n (hc_mult;
    # None: none), the Sinkhorn iterations and epsilon of their mixing matrices
    hyper_connections: Optional[int] = None
    hc_sinkhorn_iters: int = 20
    hc_eps: float = 1e-6
    # the layers whose experts are chosen by token id (hash-routed, transformers' mlp_layer_types "hash_moe"):
    # the first this many (None: none)
    hash_moe_layers: Optional[int] = None


_FIELDS = ("csa_ratio", "hca_ratio", "attn_q_lora_rank", "o_groups", "o_lora_rank", "csa_index_topk",
           "csa_index_heads", "csa_index_head_dim")


def from_flat(cfg: Any, i: int, causal: bool) -> CompressedAttention:
    """Layer i's (its word in layer_pattern: swa, csa or hca)."""
    word = layer_kind(cfg, i).word
    compression = {"swa": "none", "csa": "csa", "hca": "hca"}[word]
    ratio = {"none": 1, "csa": cfg.csa_ratio, "hca": cfg.hca_ratio}[compression]
    d_head = cfg.d_head or cfg.d_model // cfg.n_head
    rope_dim = int(d_head * cfg.rope_fraction)
    return CompressedAttention(cfg.d_model, cfg.n_head, d_head, rope_dim, cfg.attn_q_lora_rank, cfg.o_groups,
                               cfg.o_lora_rank, cfg.sliding_window or 0, compression, ratio, cfg.csa_index_heads,
                               cfg.csa_index_head_dim, cfg.csa_index_topk, cfg.rope_theta, cfg.compress_rope_theta,
                               yarn(cfg), cfg.norm_eps, causal)


def _used(cfg: Any) -> bool:
    """Whether a layer of the config is this kind's (its words in layer_pattern)."""
    return cfg.layer_pattern is not None and bool(re.search(r"\b(swa|csa|hca)\b", cfg.layer_pattern))


def check(cfg: Any) -> None:
    """One line per bad field (tfcalc.config_rules runs it with the other kinds' checks)."""
    for name in _FIELDS:
        value = getattr(cfg, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise InputError(f"field '{name}' must be a positive integer; got {value!r}")
    for name in ("csa_ratio", "hca_ratio"):
        if getattr(cfg, name) < 2:
            raise InputError(f"field '{name}' must be at least 2 (tokens pooled per compressed entry); "
                             f"got {getattr(cfg, name)}")
    if not cfg.compress_rope_theta > 0:
        raise InputError(f"field 'compress_rope_theta' must be positive; got {cfg.compress_rope_theta}")
    if not cfg.hc_eps >= 0:
        raise InputError(f"field 'hc_eps' must be 0 or more; got {cfg.hc_eps}")
    if _used(cfg):
        if cfg.pos_encoding != "rope" or cfg.arch != "decoder" or cfg.cross_attention:
            raise InputError("layer_pattern's swa, csa and hca layers (DeepSeek-V4's attention) rotate their keys: "
                             "they need pos_encoding rope in a decoder without cross_attention")
        if cfg.n_kv_head not in (None, 1) or cfg.sliding_window is None:
            raise InputError("layer_pattern's swa, csa and hca layers (DeepSeek-V4's attention) have one shared K=V "
                             "head and a window: n_kv_head 1 (or unset) and a sliding_window")
    if cfg.hash_moe_layers and (cfg.n_expert is None or cfg.hash_moe_layers > cfg.n_layer):
        raise InputError(f"field 'hash_moe_layers' ({cfg.hash_moe_layers}) names layers of experts: it needs "
                         f"n_expert and at most n_layer ({cfg.n_layer})")


KIND = register(MixerKind("compressed attention", CompressedFields, from_flat, words=("swa", "csa", "hca"),
                          check=check, group="DeepSeek-V4 compressed attention in swa, csa, hca layers"))
