"""The flat front end's part for DeepSeek-V2/V3 and Kimi K2: latent attention's mixer kind (its fields, their
rules and how its mixer is built, registered in tfcalc.architecture.kinds as this module is imported), and the
router, YaRN and the MTP modules a config's fields describe (tfcalc.architecture.flat calls them; their fields
are tfcalc.config's, their rules tfcalc.config_latent's).

- ``kv_lora_rank`` set: every self-attention layer is multi-head latent attention (tfcalc.architecture.latent),
  with ``qk_nope_head_dim``, ``qk_rope_head_dim`` and ``v_head_dim`` (required) and ``q_lora_rank`` (optional);
- ``index_topk`` set as well: DeepSeek Sparse Attention (tfcalc.architecture.sparse_latent), latent attention with
  a lightning indexer of ``index_n_heads`` heads of ``index_head_dim`` channels picking ``index_topk`` keys.

Reads the config by attribute, never imports it. Pure Python."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from tfcalc.architecture import rope
from tfcalc.architecture.block import Block
from tfcalc.architecture.kinds import MixerKind, register
from tfcalc.architecture.latent import LatentAttention, Yarn
from tfcalc.architecture.mtp import MTP
from tfcalc.architecture.norm import Norm
from tfcalc.architecture.patterns import layer_kind
from tfcalc.architecture.routing import Routing
from tfcalc.architecture.sparse_latent import SparseLatentAttention
from tfcalc.errors import InputError as ConfigError


@dataclass(frozen=True, kw_only=True)
class LatentFields:
    """Latent attention in every self-attention layer when kv_lora_rank is set."""

    kv_lora_rank: Optional[int] = None
    q_lora_rank: Optional[int] = None  # None: a plain Q projection (DeepSeek-V2-Lite)
    qk_nope_head_dim: Optional[int] = None
    qk_rope_head_dim: Optional[int] = None
    v_head_dim: Optional[int] = None
    rope_interleave: Optional[bool] = None  # None: true (DeepSeek's rotary pairs (2i, 2i+1))
    index_topk: Optional[int] = None  # DeepSeek Sparse Attention (DeepSeek-V3.2): keys each query attends to
    index_n_heads: Optional[int] = None  # None with index_topk: 64 (DeepseekV32Config's default)
    index_head_dim: Optional[int] = None  # None with index_topk: 128
    index_rope_interleave: Optional[bool] = None  # None with index_topk: false (V3.2's rotate-half; GLM-5: true)
    # one letter per layer, F: the layer runs its indexer, S: it reuses the previous F layer's top-k and has no
    # indexer (GLM-5's indexer_types / index_topk_pattern, configuration_glm_moe_dsa.py); None: every layer F
    index_topk_pattern: Optional[str] = None
    # each head's output times sigmoid(Linear(d, n_head)(x)) before O (Ling 3's MLA, BailingHybridAttention)
    attn_head_gate: Optional[bool] = None
    mla_lora_scale: bool = False  # LongCat-Flash's sqrt(d / c) on the query and the latent (architecture.latent)


# latent attention's own fields (mla_lora_scale, a bool, is checked apart: check)
_LATENT = ("q_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim", "rope_interleave", "index_topk",
           "index_n_heads", "index_head_dim", "index_rope_interleave", "index_topk_pattern", "attn_head_gate")
_INDEX = ("index_n_heads", "index_head_dim", "index_rope_interleave", "index_topk_pattern")


def yarn(cfg: Any) -> Optional[Yarn]:
    """A latent attention's YaRN (the one scaling tfcalc.config_rope lets latent attention have), or None."""
    return rope.from_fields(cfg) if cfg.rope_scaling == "yarn" else None


def latent_attention(cfg: Any, i: int = 0, causal: bool = True) -> LatentAttention:
    """Every self-attention layer's, when kv_lora_rank is set: biases as attn_bias (attention_bias); its
    compressions' norms of the model's kind; with index_topk, DeepSeek Sparse Attention's."""
    norm = Norm(cfg.norm, cfg.d_model, cfg.norm_has_bias, cfg.norm_eps)
    # a layer_pattern's nope layer rotates nothing: its qk_rope_head_dim channels are one key shared by the heads
    # without a position (Kimi Linear's MLA, modeling_kimi_linear.py KimiLinearAttention)
    nope = cfg.layer_pattern is not None and i < cfg.n_layer and not layer_kind(cfg, i).rope
    args = (cfg.d_model, cfg.n_head, cfg.kv_lora_rank, cfg.qk_nope_head_dim, cfg.qk_rope_head_dim, cfg.v_head_dim,
            cfg.q_lora_rank, norm, cfg.attn_bias, None if nope else cfg.rope_theta, yarn(cfg),
            cfg.rope_interleave is not False)
    gate = cfg.attn_head_gate is True
    if cfg.index_topk is None:
        return LatentAttention(*args, head_gate=gate, lora_scale=cfg.mla_lora_scale)
    return SparseLatentAttention(*args, head_gate=gate, index_topk=cfg.index_topk,
                                 index_n_heads=cfg.index_n_heads or 64,
                                 index_head_dim=cfg.index_head_dim or 128,
                                 index_interleave=cfg.index_rope_interleave is True,
                                 index_shared=shared_indexer(cfg, i))


def shared_indexer(cfg: Any, i: int) -> bool:
    """Whether layer i reuses the previous full layer's top-k (index_topk_pattern's S); the layer after the stack
    (an MTP module's) runs its own."""
    pattern = cfg.index_topk_pattern
    return pattern is not None and i < len(pattern) and pattern[i] == "S"


def check(cfg: Any) -> None:
    """Latent attention's fields against the rest of the config (one ConfigError line each)."""
    if cfg.mla_lora_scale and (cfg.kv_lora_rank is None or cfg.q_lora_rank is None or cfg.index_topk is not None):
        raise ConfigError("mla_lora_scale scales the compressed query and latent (LongCat-Flash's MLA): it needs "
                          "kv_lora_rank and q_lora_rank, and no index_topk")
    if cfg.qk_nope_head_dim is not None and cfg.qk_nope_head_dim < 0:
        raise ConfigError(f"field 'qk_nope_head_dim' must be 0 or more; got {cfg.qk_nope_head_dim}")
    if cfg.kv_lora_rank is None:
        for name in _LATENT:
            if getattr(cfg, name) is not None:
                raise ConfigError(f"{name} applies to latent attention only (give kv_lora_rank)")
    else:
        _check_attention(cfg)
        _check_index(cfg)


def _check_index(cfg: Any) -> None:
    """DeepSeek Sparse Attention's fields (its indexer reads the compressed query and rotates qk_rope_head_dim of
    its channels)."""
    if cfg.index_topk is None:
        for name in _INDEX:
            if getattr(cfg, name) is not None:
                raise ConfigError(f"{name} applies to sparse attention only (give index_topk)")
        return
    for name in ("index_topk", "index_n_heads", "index_head_dim"):
        value = getattr(cfg, name)
        if value is not None and value < 1:
            raise ConfigError(f"field '{name}' must be positive; got {value}")
    if cfg.q_lora_rank is None:
        raise ConfigError("index_topk (sparse attention): the indexer reads the compressed query; give q_lora_rank")
    width = cfg.index_head_dim or 128
    if width < cfg.qk_rope_head_dim:
        raise ConfigError(f"field 'index_head_dim' ({width}) must be at least qk_rope_head_dim "
                          f"({cfg.qk_rope_head_dim}): the indexer rotates that many of its channels")
    pattern = cfg.index_topk_pattern
    if pattern is not None and (not isinstance(pattern, str) or len(pattern) != cfg.n_layer
                                or set(pattern) - {"F", "S"} or pattern[:1] != "F"):
        raise ConfigError(f"field 'index_topk_pattern' must be one letter per layer ({cfg.n_layer}), F (runs its "
                          f"indexer) or S (reuses the previous F layer's top-k), starting with F; got {pattern!r}")


def _check_attention(cfg: Any) -> None:
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


def routing(cfg: Any) -> Routing:
    return Routing(cfg.router_scoring, cfg.router_groups or 1, cfg.router_topk_groups or 1,
                   1.0 if cfg.routed_scaling is None else cfg.routed_scaling, cfg.router_score_bias)


def mtp(cfg: Any, norm: Norm, block: Block) -> Optional[MTP]:
    """``block``: the layer after the main stack's last (layer n_layer), each module's decoder layer."""
    return MTP(block, cfg.mtp_layers, norm, cfg.vocab_size) if cfg.mtp_layers else None


KIND = register(MixerKind("latent attention", LatentFields, latent_attention, check=check,
                          claims=lambda cfg, layer: cfg.kv_lora_rank is not None,
                          group="latent attention (LatentAttention)"))
