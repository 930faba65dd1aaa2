"""Any ``torch.nn.Module``, counted where it stands: parameters, buffers, FLOPs and the activations a
training step saves, module by module beside the tree (``tfcalc.inspect(module, *inputs)``, ``tfcalc params
pkg.module:factory``).

1. Parameters: numel of each distinct parameter tensor (``Module.parameters()`` yields a shared one once, as
   a tied embedding and LM head are one tensor), per module over its subtree; buffers (RoPE tables, running
   statistics, masks) counted apart, not as parameters.
2. FLOPs: one forward pass of the example inputs under ``FlopCounterMode`` (a multiply-add is 2 FLOPs, a
   matmul 2·m·k·n, SDPA's scores over the full square, the CPU's fused attention through tfcalc's formulas:
   tfcalc.measure.flops), per module path, each module's count holding its children's.
3. Activations: a second forward pass under ``saved_tensors_hooks``, as a training step runs it before the
   backward: every floating-point tensor autograd packs, each storage once, parameters and buffers left out
   (what tfcalc.measure.memory counts for tfcalc's own models), attributed to the innermost module running
   when it is packed, and its ancestors. The step's loss is ``loss(output)`` when given, else the sum of the
   floating-point outputs (which keeps nothing itself). On the meta device there are no storages to tell
   apart: no activation count there.

Nothing here prints; the report is tfcalc.report.inspect.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional

import torch

from tfcalc.errors import InputError, shown


@dataclass(frozen=True)
class ModuleRow:
    path: str  # "" for the root, else the dotted name: "blocks.0.attn"
    kind: str  # the class name
    depth: int
    params: int  # distinct parameters of the subtree
    buffers: int  # elements of the subtree's distinct buffers
    flops: Optional[int]  # the forward pass's, the subtree's (None: no inputs)
    saved_bytes: Optional[int]  # what the training step saves while the subtree runs (None: not measured)


@dataclass(frozen=True)
class Inspection:
    kind: str
    device: str
    rows: tuple[ModuleRow, ...]
    params: int
    buffers: int
    buffer_bytes: int
    param_bytes: int
    flops: Optional[int]
    saved_bytes: Optional[int]
    inputs: tuple[str, ...]  # each example input's shape and dtype, as given


def _flatten(value: Any) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, dict):
        return [t for v in value.values() for t in _flatten(v)]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _flatten(v)]
    if hasattr(value, "to_tuple"):  # transformers' ModelOutput
        return _flatten(value.to_tuple())
    return []


def _describe(x: Any) -> str:
    if isinstance(x, torch.Tensor):
        return f"{tuple(x.shape)} {str(x.dtype).removeprefix('torch.')}"
    return type(x).__name__


def _modules(module: torch.nn.Module) -> list[tuple[str, torch.nn.Module]]:
    return list(module.named_modules())  # a module reached twice is listed once, under its first name


def _sizes(module: torch.nn.Module) -> tuple[int, int]:
    return sum(p.numel() for p in module.parameters()), sum(b.numel() for b in module.buffers())


def _flops(module: torch.nn.Module, args: tuple, kwargs: dict) -> dict[str, int]:
    """FlopCounterMode's per-module counts, by module path ("" the root); paths are named from the root's
    class ("GPT.blocks.0"), which is cut off."""
    from tfcalc.measure.flops import flop_counter

    counter = flop_counter()
    with counter, torch.no_grad():
        module(*args, **kwargs)
    out = {}
    for path, ops in counter.get_flop_counts().items():
        if path == "Global":
            out[""] = sum(ops.values())
            continue
        _, _, inside = path.partition(".")
        out[inside] = sum(ops.values())
    return out


def _saved(module: torch.nn.Module, args: tuple, kwargs: dict,
           loss: Optional[Callable[[Any], torch.Tensor]]) -> dict[str, int]:
    """Bytes packed for the backward pass while each module ran (step 3), by path ("" the whole step)."""
    names = {id(m): path for path, m in _modules(module)}
    exclude = {t.untyped_storage().data_ptr() for t in [*module.parameters(), *module.buffers()]}
    running: list[str] = []
    seen: set[int] = set()
    totals: dict[str, int] = {"": 0}

    def pack(t: torch.Tensor) -> torch.Tensor:
        if t.is_floating_point() and t.dim() > 0:
            try:
                storage = t.untyped_storage()
            except (RuntimeError, NotImplementedError):  # a tensor without one storage (sparse, a subclass)
                return t
            ptr = storage.data_ptr()
            if ptr not in exclude and ptr not in seen:
                seen.add(ptr)
                for path in {"", *running}:
                    totals[path] = totals.get(path, 0) + storage.nbytes()
        return t

    def enter(m, *_):
        running.append(names.get(id(m), ""))
        totals.setdefault(running[-1], 0)  # it ran: its count is its own, not its children's sum

    def leave(m, *_):
        if running:
            running.pop()

    hooks = []
    for _, m in _modules(module):
        hooks += [m.register_forward_pre_hook(enter), m.register_forward_hook(leave)]
    try:
        with torch.enable_grad(), torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            output = module(*args, **kwargs)
            if loss is not None:
                loss(output)
            else:
                floats = [t for t in _flatten(output) if t.is_floating_point()]
                sum(t.float().sum() for t in floats)  # keeps nothing itself: sum's backward needs only a shape
    finally:
        for h in hooks:
            h.remove()
    return totals


def _contained(named: list[tuple[str, torch.nn.Module]], counts: dict[str, int]) -> dict[str, int]:
    """A container that never ran itself (a ModuleList, a ModuleDict: no forward of their own) holds what its
    children counted; the others keep their own count, which holds their children's already."""
    out = dict(counts)
    for path, m in reversed(named):  # children before their parents
        if path and path not in counts:
            prefix = f"{path}."
            out[path] = sum(out.get(f"{prefix}{child}", 0) for child, _ in m.named_children())
    return out


def inspect_module(module: Any, *inputs: Any, loss: Optional[Callable[[Any], torch.Tensor]] = None,
                   kwargs: Optional[dict] = None) -> Inspection:
    """Count ``module`` (steps 1-3) on ``inputs`` (none: parameters and buffers only)."""
    if not isinstance(module, torch.nn.Module):
        raise InputError(f"inspect: expected a torch.nn.Module; got {shown(module)}")
    if loss is not None and not callable(loss):
        raise InputError(f"inspect: loss must be a function of the module's output; got {shown(loss)}")
    kwargs = dict(kwargs or {})
    first = next(iter([*module.parameters(), *module.buffers()]), None)
    device = first.device if first is not None else torch.device("cpu")
    flops: dict[str, int] = {}
    saved: dict[str, int] = {}
    ran = bool(inputs or kwargs)
    if ran:
        try:
            flops = _flops(module, inputs, kwargs)
            if device.type != "meta":
                saved = _saved(module, inputs, kwargs, loss)
        except InputError:
            raise
        except Exception as e:  # the user's module on the user's inputs: its own error, in one line
            message = " ".join(str(e).split())[:200]
            raise InputError(f"inspect: {type(module).__name__}'s forward on the example inputs raised "
                             f"{type(e).__name__}: {message}") from None
    named = _modules(module)
    flops, saved = _contained(named, flops), _contained(named, saved) if saved else saved
    rows = []
    for path, m in named:
        params, buffers = _sizes(m)
        rows.append(ModuleRow(path, type(m).__name__, 0 if not path else path.count(".") + 1, params, buffers,
                              flops.get(path, 0) if ran else None,
                              saved.get(path, 0) if saved else None))
    params, buffers = _sizes(module)
    return Inspection(
        kind=type(module).__name__, device=str(device), rows=tuple(rows), params=params, buffers=buffers,
        buffer_bytes=sum(b.numel() * b.element_size() for b in module.buffers()),
        param_bytes=sum(p.numel() * p.element_size() for p in module.parameters()),
        flops=flops.get("", 0) if ran else None, saved_bytes=saved.get("") if saved else None,
        inputs=tuple(_describe(x) for x in inputs) + tuple(f"{k}={_describe(v)}" for k, v in kwargs.items()))
