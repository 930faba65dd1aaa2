"""Empirical parameter counts: read off the instantiated module, independent of tfcalc.count.

The module is built on the ``meta`` device (no storage), and its parameters are walked with
``named_parameters()``, which yields a tensor shared by two modules (a tied embedding and LM head) once.
Each tensor's ``numel()`` is attributed to a breakdown component by its module path (``encoder.`` paths
get the ``encoder_`` prefix; ``ffn.experts.<i>.`` tensors are ``expert_ffn_*``); the fused tensors
(``attn.qkv`` rows [Q | K | V], ``cross_attn.kv`` rows [K | V], ``ffn.up`` rows [gate | up]) are split by
rows, using the row counts the module itself was built with.
"""

from __future__ import annotations

import re

from torch import nn

from tfcalc.config import ModelConfig
from tfcalc.model import Attention, CrossAttention, FeedForward, build_model

# module path, with "encoder." and "blocks.<i>." taken off and "ffn.experts.<i>." read as "expert_ffn.",
# -> component, for the tensors that are not fused
_COMPONENTS = {
    "tok_emb.weight": "token_embedding",
    "pos_emb.weight": "position_embedding",
    "rel_bias.weight": "relative_position_bias",
    "type_emb.weight": "token_type_embedding",
    "emb_norm.weight": "embedding_norm_weight",
    "emb_norm.bias": "embedding_norm_bias",
    "attn_norm.weight": "attn_norm_weight",
    "attn_norm.bias": "attn_norm_bias",
    "attn.out.weight": "attn_o_weight",
    "attn.out.bias": "attn_o_bias",
    "attn.q_norm.weight": "attn_q_norm_weight",
    "attn.q_norm.bias": "attn_q_norm_bias",
    "attn.k_norm.weight": "attn_k_norm_weight",
    "attn.k_norm.bias": "attn_k_norm_bias",
    "attn_post_norm.weight": "attn_post_norm_weight",
    "attn_post_norm.bias": "attn_post_norm_bias",
    "cross_attn_post_norm.weight": "cross_attn_post_norm_weight",
    "cross_attn_post_norm.bias": "cross_attn_post_norm_bias",
    "ffn_post_norm.weight": "ffn_post_norm_weight",
    "ffn_post_norm.bias": "ffn_post_norm_bias",
    "ffn.shared.down.weight": "shared_expert_ffn_down_weight",
    "ffn.shared.down.bias": "shared_expert_ffn_down_bias",
    "ffn.shared_gate.weight": "shared_expert_gate_weight",
    "head_dense.weight": "lm_head_transform_weight",
    "head_dense.bias": "lm_head_transform_bias",
    "head_norm.weight": "lm_head_norm_weight",
    "head_norm.bias": "lm_head_norm_bias",
    "lm_head.bias": "lm_head_bias",
    "cross_attn_norm.weight": "cross_attn_norm_weight",
    "cross_attn_norm.bias": "cross_attn_norm_bias",
    "cross_attn.q.weight": "cross_attn_q_weight",
    "cross_attn.q.bias": "cross_attn_q_bias",
    "cross_attn.out.weight": "cross_attn_o_weight",
    "cross_attn.out.bias": "cross_attn_o_bias",
    "ffn_norm.weight": "ffn_norm_weight",
    "ffn_norm.bias": "ffn_norm_bias",
    "ffn.down.weight": "ffn_down_weight",
    "ffn.down.bias": "ffn_down_bias",
    "ffn.router.weight": "router_weight",
    "expert_ffn.down.weight": "expert_ffn_down_weight",
    "expert_ffn.down.bias": "expert_ffn_down_bias",
    "final_norm.weight": "final_norm_weight",
    "final_norm.bias": "final_norm_bias",
    "pooler.weight": "pooler_weight",
    "pooler.bias": "pooler_bias",
    "lm_head.weight": "lm_head",
}
_FUSED = ("attn.qkv", "cross_attn.kv", "ffn.up", "expert_ffn.up", "ffn.shared.up")  # module paths split by rows


def _split_rows(param: nn.Parameter, parts: dict[str, int]) -> dict[str, int]:
    """numel of each named block of rows of a fused weight (rows x cols) or bias (rows,)."""
    if sum(parts.values()) != param.shape[0]:
        raise AssertionError(f"fused tensor of {param.shape[0]} rows does not split as {parts}")
    per_row = param.numel() // param.shape[0]
    return {name: rows * per_row for name, rows in parts.items()}


def _fused_parts(module: nn.Module, prefix: str, kind: str) -> dict[str, int]:
    """Rows of each part of a fused tensor of module (an attention or FFN), as components named prefix_*."""
    if isinstance(module, Attention):
        rows = {"q": module.q_dim, "k": module.kv_dim, "v": module.kv_dim}
    elif isinstance(module, CrossAttention):
        rows = {"k": module.kv_dim, "v": module.kv_dim}
    else:
        assert isinstance(module, FeedForward)
        width = module.down.in_features
        rows = {"gate": width, "up": width} if module.gated else {"up": width}
    return {f"{prefix}_{part}_{kind}": n for part, n in rows.items()}


def local_path(name: str) -> tuple[str, str]:
    """'encoder.blocks.3.ffn.experts.5.up.weight' -> ('encoder_', 'expert_ffn.up.weight')."""
    prefix = "encoder_" if name.startswith("encoder.") else ""
    path = re.sub(r"^(encoder\.)?(blocks\.\d+\.)?", "", name)
    return prefix, re.sub(r"^ffn\.experts\.\d+\.", "expert_ffn.", path)


def _components(name: str, param: nn.Parameter, modules: dict[str, nn.Module]) -> dict[str, int]:
    """{component: numel} for one parameter tensor, fused tensors split into their parts."""
    prefix, path = local_path(name)
    owner_path, _, kind = path.rpartition(".")
    if owner_path in _FUSED:
        owner = modules[name.rpartition(".")[0].rpartition(".")[0]]  # the Attention or FeedForward
        base = "shared_expert_ffn" if owner_path == "ffn.shared.up" else owner_path.rpartition(".")[0]
        return _split_rows(param, _fused_parts(owner, prefix + base, kind))
    if path not in _COMPONENTS:
        raise AssertionError(f"parameter {name} has no component in the breakdown")
    return {prefix + _COMPONENTS[path]: param.numel()}


def measured_breakdown(model: nn.Module) -> dict[str, int]:
    """{component: parameters} of a tfcalc model; shared tensors counted once (where first met)."""
    counts: dict[str, int] = {}
    modules = dict(model.named_modules(remove_duplicate=False))
    seen: set[int] = set()
    for name, param in model.named_parameters(remove_duplicate=False):
        parts = _components(name, param, modules)
        if id(param) in seen:  # a tied tensor (the LM head sharing the embedding): held once, counted once
            for key in parts:
                counts.setdefault(key, 0)
            continue
        seen.add(id(param))
        for key, n in parts.items():
            counts[key] = counts.get(key, 0) + n
    return counts


def measured_total(model: nn.Module) -> int:
    """Sum of numel over unique parameters: the number PyTorch itself holds."""
    return sum(p.numel() for p in model.parameters())


def measure_params(cfg: ModelConfig) -> tuple[int, dict[str, int]]:
    """(total, breakdown) of the model built on meta from cfg."""
    model = build_model(cfg, "meta")
    return measured_total(model), measured_breakdown(model)
