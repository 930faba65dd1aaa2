"""Empirical parameter counts: read off the instantiated module, independent of tfcalc.count.

The module is built on the ``meta`` device (no storage), and its parameters are walked with
``named_parameters()``, which yields a tensor shared by two modules (a tied embedding and LM head) once.
Each tensor's ``numel()`` is attributed to a breakdown component by its module path (``encoder.`` paths
get the ``encoder_`` prefix; a layer's grouped experts, ``ffn.experts.``, are ``expert_ffn_*``); the fused
tensors (``attn.qkv`` rows [Q | K | V], ``cross_attn.kv`` rows [K | V], ``ffn.up`` rows [gate | up], and
each expert's rows of the grouped (E, rows, d) ``ffn.experts.up``) are split by rows, using the row
counts the module itself was built with (its ``fused_rows()``, tfcalc.model.mixers). A mixer's tensor the table
of paths does not name, ``attn.<name>.<kind>``, is the component's Weight ``<name>_<kind>``.

A model deeper than FULL_BUILD_BLOCKS is counted from one real block of each kind in each stack, each times
the layers that are it (see empirical_count): the count stays the module's own, in bounded time and memory.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from torch import nn

from tfcalc.config import ModelConfig
from tfcalc.count.model.components import FUSED, component, local_path
from tfcalc.model import Experts, build_model

_FUSED = tuple(FUSED)  # module paths split by rows


def _split_rows(param: nn.Parameter, parts: dict[str, int], dim: int = 0) -> dict[str, int]:
    """numel of each named block of rows of a fused weight (rows x cols) or bias (rows,); dim 1 for grouped
    experts' (E, rows, cols) and (E, rows), every expert's rows split alike."""
    if sum(parts.values()) != param.shape[dim]:
        raise AssertionError(f"fused tensor of {param.shape[dim]} rows does not split as {parts}")
    per_row = param.numel() // param.shape[dim]
    return {name: rows * per_row for name, rows in parts.items()}


def _fused_parts(module: nn.Module, prefix: str, kind: str) -> dict[str, int]:
    """Rows of each part of a fused tensor of module (a mixer or an FFN: its ``fused_rows()``, see
    tfcalc.model.mixers), as components named prefix_*."""
    rows = module.fused_rows()
    return {f"{prefix}_{part}_{kind}": n for part, n in rows.items()}


def _components(name: str, param: nn.Parameter, modules: dict[str, nn.Module]) -> dict[str, int]:
    """{component: numel} for one parameter tensor, fused tensors split into their parts."""
    prefix, path = local_path(name)
    owner_path, _, kind = path.rpartition(".")
    if owner_path in _FUSED:
        owner = modules[name.rpartition(".")[0].rpartition(".")[0]]  # the Attention or FeedForward
        dim = 1 if isinstance(owner, Experts) else 0  # (E, rows, cols): rows are dim 1
        return _split_rows(param, _fused_parts(owner, prefix + FUSED[owner_path], kind), dim)
    try:  # a mixer's attn.<name>.<kind> the table does not name is its Weight <name>_<kind> (components.component)
        return {prefix + component(path): param.numel()}
    except KeyError:
        raise AssertionError(f"parameter {name} has no component in the breakdown") from None


def _once(name: str) -> int:
    return 1


def measured_breakdown(model: nn.Module, copies: Callable[[str], int] = _once) -> dict[str, int]:
    """{component: parameters} of a tfcalc model; shared tensors counted once (where first met). Each
    tensor counts copies(its name) times (1: the model holds every block itself)."""
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
            counts[key] = counts.get(key, 0) + n * copies(name)
    return counts


def measured_total(model: nn.Module, copies: Callable[[str], int] = _once) -> int:
    """Sum of numel over unique parameters: the number PyTorch itself holds (times copies(name))."""
    return sum(p.numel() * copies(name) for name, p in model.named_parameters())


# Past this many blocks the empirical count builds one block of each kind in each stack and multiplies each by
# the layers that are it: building every block costs ~10 ms each on meta (Python objects), so 10^5 layers took
# two minutes and 3 GB. Every preset (96 layers at most) is built whole.
FULL_BUILD_BLOCKS = 128
METHODS = {"full": "every block built on meta",
           "per_block": "one block of each kind in each stack built on meta, its parameters times the layers that "
                        "are it"}


@dataclass(frozen=True)
class EmpiricalCount:
    total: int
    breakdown: dict[str, int]
    method: str  # a key of METHODS
    blocks_built: int


def blocks_of(cfg: ModelConfig) -> int:
    """Blocks in the whole model: both stacks of an encoder-decoder."""
    return cfg.n_layer + (cfg.encoder_layers if cfg.arch == "encoder-decoder" else 0)


def empirical_count(cfg: ModelConfig) -> EmpiricalCount:
    """The parameters of the real module built on meta. Deep models build each distinct block of each stack
    once (Architecture.one_of_each: real Blocks, as built at full depth, in the model's own order) and
    count block j's tensors as many times as its stack has layers that are it; the embeddings, head and
    final norms are counted as built."""
    from tfcalc.measure.fit import require_buildable

    hint = "--no-measure (the analytic count builds nothing)"
    if blocks_of(cfg) <= FULL_BUILD_BLOCKS:
        require_buildable(cfg, blocks_of(cfg), f"{cfg.name} on meta", hint)
        model = build_model(cfg, "meta")
        return EmpiricalCount(measured_total(model), measured_breakdown(model), "full", blocks_of(cfg))
    arch = cfg.architecture
    small = arch.one_of_each()
    layers = {("encoder." if s.name == "encoder" else "") + "blocks.": [n for _, n in s.kinds()] for s in arch.stacks}
    built = sum(s.n_layer for s in small.stacks)
    require_buildable(cfg, built, f"{cfg.name} on meta", hint)
    model = build_model(cfg, "meta", arch=small)

    def copies(name: str) -> int:  # blocks.j.* -> the layers of the stack that are its j-th kind
        for prefix, counts in layers.items():
            if name.startswith(prefix):
                return counts[int(name[len(prefix):].partition(".")[0])]
        return 1

    return EmpiricalCount(measured_total(model, copies), measured_breakdown(model, copies), "per_block", built)


def measure_params(cfg: ModelConfig) -> tuple[int, dict[str, int]]:
    """(total, breakdown) of the model built on meta from cfg (see empirical_count)."""
    count = empirical_count(cfg)
    return count.total, count.breakdown
