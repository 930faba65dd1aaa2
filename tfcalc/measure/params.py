"""Empirical parameter counts: read off the instantiated module, independent of tfcalc.count.

The module is built on the ``meta`` device (no storage), and its parameters are walked with
``named_parameters()``, which yields a tensor shared by two modules (a tied embedding and LM head) once.
Each tensor's ``numel()`` is attributed to a breakdown component by its module path; the two fused
tensors (``attn.qkv`` rows [Q | K | V], ``ffn.up`` rows [gate | up]) are split by rows, using the
row counts the module itself was built with.
"""

from __future__ import annotations

from torch import nn

from tfcalc.config import ModelConfig
from tfcalc.model import Attention, FeedForward, build_model

# module-path suffix -> component, for the tensors that are not fused
_COMPONENTS = {
    "tok_emb.weight": "token_embedding",
    "pos_emb.weight": "position_embedding",
    "attn_norm.weight": "attn_norm_weight",
    "attn_norm.bias": "attn_norm_bias",
    "attn.out.weight": "attn_o_weight",
    "attn.out.bias": "attn_o_bias",
    "ffn_norm.weight": "ffn_norm_weight",
    "ffn_norm.bias": "ffn_norm_bias",
    "ffn.down.weight": "ffn_down_weight",
    "ffn.down.bias": "ffn_down_bias",
    "final_norm.weight": "final_norm_weight",
    "final_norm.bias": "final_norm_bias",
    "lm_head.weight": "lm_head",
}


def _split_rows(param: nn.Parameter, parts: dict[str, int]) -> dict[str, int]:
    """numel of each named block of rows of a fused weight (rows x cols) or bias (rows,)."""
    if sum(parts.values()) != param.shape[0]:
        raise AssertionError(f"fused tensor of {param.shape[0]} rows does not split as {parts}")
    per_row = param.numel() // param.shape[0]
    return {name: rows * per_row for name, rows in parts.items()}


def _fused_parts(module: nn.Module, kind: str) -> dict[str, int]:
    if isinstance(module, Attention):
        return {f"attn_q_{kind}": module.q_dim, f"attn_k_{kind}": module.kv_dim, f"attn_v_{kind}": module.kv_dim}
    assert isinstance(module, FeedForward)
    rows = module.down.in_features
    return {f"ffn_gate_{kind}": rows, f"ffn_up_{kind}": rows} if module.gated else {f"ffn_up_{kind}": rows}


def _component_of(name: str) -> str:
    for suffix, component in _COMPONENTS.items():
        if name == suffix or name.endswith("." + suffix):
            return component
    raise AssertionError(f"parameter {name} has no component in the breakdown")


def measured_breakdown(model: nn.Module) -> dict[str, int]:
    """{component: parameters} of a tfcalc model; shared tensors counted once."""
    counts: dict[str, int] = {}
    modules = dict(model.named_modules())
    seen: set[int] = set()
    for name, param in model.named_parameters(remove_duplicate=False):
        if id(param) in seen:  # a tied tensor (the LM head sharing the embedding): held once, counted once
            counts.setdefault(_component_of(name), 0)
            continue
        seen.add(id(param))
        owner, _, kind = name.rpartition(".")
        if owner.endswith(("attn.qkv", "ffn.up")):
            parts = _split_rows(param, _fused_parts(modules[owner.rpartition(".")[0]], kind))
        else:
            parts = {_component_of(name): param.numel()}
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
