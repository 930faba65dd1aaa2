"""Empirical parameter counts: read off the instantiated module, independent of tfcalc.count.

The module is built on the ``meta`` device (no storage), and its parameters are walked with
``named_parameters()``, which yields a tensor shared by two modules (a tied embedding and LM head) once.
Each tensor's ``numel()`` is attributed to a breakdown component by its module path (``encoder.`` paths
get the ``encoder_`` prefix; ``ffn.experts.<i>.`` tensors are ``expert_ffn_*``); the fused tensors
(``attn.qkv`` rows [Q | K | V], ``cross_attn.kv`` rows [K | V], ``ffn.up`` rows [gate | up]) are split by
rows, using the row counts the module itself was built with.
"""

from __future__ import annotations

from torch import nn

from tfcalc.config import ModelConfig
from tfcalc.count.components import COMPONENTS, FUSED, local_path
from tfcalc.model import Attention, CrossAttention, FeedForward, build_model

_FUSED = tuple(FUSED)  # module paths split by rows


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


def _components(name: str, param: nn.Parameter, modules: dict[str, nn.Module]) -> dict[str, int]:
    """{component: numel} for one parameter tensor, fused tensors split into their parts."""
    prefix, path = local_path(name)
    owner_path, _, kind = path.rpartition(".")
    if owner_path in _FUSED:
        owner = modules[name.rpartition(".")[0].rpartition(".")[0]]  # the Attention or FeedForward
        return _split_rows(param, _fused_parts(owner, prefix + FUSED[owner_path], kind))
    if path not in COMPONENTS:
        raise AssertionError(f"parameter {name} has no component in the breakdown")
    return {prefix + COMPONENTS[path]: param.numel()}


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
