"""Start-up and repeated work that measurements pay for nothing, and the contexts that remove them.

The meta device runs no arithmetic, yet without these a forward pass of GPT-3 175B at T = 2048 on meta
takes several times as long as ``import torch`` (benchmarks/tour.py times ``flops gpt3 --measure``); and
the first optimizer made in a process imports torch._dynamo (``Optimizer.add_param_group``). Where the
time went, and what each context removes:

- ``no_dynamo_import``: PyTorch wraps every TorchDispatchMode's ``__torch_dispatch__`` and its Python
  type-promotion wrappers (torch._prims_common.wrappers), and the optimizers' ``add_param_group`` and
  ``step``, in ``torch._disable_dynamo``, which imports ``torch._dynamo`` on the first call (a large import)
  only to mark the function as one Dynamo must not trace. Nothing we run runs under Dynamo, so while we
  count (or measure memory), a stand-in ``torch._dynamo`` module answers
  ``disable(fn)`` with ``fn`` itself, and ``graph_break()`` (each optimizer step calls it) with nothing,
  as the real one does outside compilation; on exit the stand-in is removed and the wrappers' cached answer
  deleted, so a later real ``import torch._dynamo`` (``bench --compile``) finds PyTorch as it was. Any
  other use of the stand-in imports the real module, so a newer PyTorch that asks more costs time, never
  a wrong count. The stand-in leans on a private wrapper (torch/_compile.py, ``_disable_dynamo``: it
  calls ``torch._dynamo.disable`` lazily and caches the answer on ``fn.__dynamo_disable``); where that
  wrapper is missing or reads otherwise (``lazy_disable_matches``), the context does nothing and the
  real module is imported as PyTorch intends: slower, the same count.
- ``MetaOpCache``: most aten ops have their meta kernels in Python (torch._meta_registrations,
  torch._refs: milliseconds per call for layer_norm or SDPA); a 96-block model runs the same ~50 ops with the
  same shapes 96 times. The cache runs each distinct (op, input shapes/strides/dtypes, arguments) once
  and then answers with an empty meta tensor of the remembered shape, stride and dtype, the idea of
  FakeTensorMode's dispatch cache (torch/_subclasses/fake_tensor.py, ``_DispatchCacheKey``). Every
  module still runs and every op is still dispatched to FlopCounterMode, which counts from shapes;
  only ops that create fresh tensors are cached (no views, no in-place or out= ops, whose outputs
  alias their inputs), and only on meta, where outputs hold no values.
- ``numpy_absent_fast``: see its docstring. It uses no private internal: a ``None`` in ``sys.modules``
  is the import system's documented way to make an import fail (the Python Language Reference, 5.3.1
  "The module cache").
"""

from __future__ import annotations

import contextlib
import importlib.util
import sys
import types
from collections.abc import Iterator
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode


@contextlib.contextmanager
def numpy_absent_fast() -> Iterator[None]:
    """Make a failing ``import numpy`` fail fast while we measure, when numpy is not installed.

    ``torch.sym_max`` (called by the Python meta kernels of every elementwise op) tries ``import numpy``
    on each call (torch/__init__.py, ``sym_max``); without numpy each try searches sys.path again, about
    half the time of a forward pass of GPT-3 175B on meta. A ``None`` in sys.modules makes the import
    raise the same ModuleNotFoundError at once; it is removed on exit (hypothesis, for one, reads
    ``"numpy" in sys.modules``). With numpy installed this does nothing; a PyTorch that stops trying
    the import makes it a no-op, never a different count (tests/measure/test_speedups.py).
    """
    if "numpy" in sys.modules or importlib.util.find_spec("numpy") is not None:
        yield
        return
    sys.modules["numpy"] = None  # type: ignore[assignment]
    try:
        yield
    finally:
        if sys.modules.get("numpy", 0) is None:
            del sys.modules["numpy"]


class _DynamoStandIn(types.ModuleType):
    """``torch._dynamo`` while we count: ``disable(fn)`` is ``fn``; anything else imports the real one."""

    def __init__(self) -> None:
        super().__init__("torch._dynamo")
        self.disabled: list[Any] = []

    @staticmethod
    def graph_break(msg: str = "") -> None:
        """What every optimizer step calls (torch/optim/optimizer.py, _use_grad): outside torch.compile
        the real one is an empty function too (torch/_dynamo/decorators.py)."""

    def disable(self, fn=None, recursive=True, **kwargs):
        if fn is None:  # used as @disable(...): no function to hand back yet; let PyTorch's own decide
            return self._real().disable(fn, recursive, **kwargs)
        self.disabled.append(fn)
        return fn

    def __getattr__(self, name: str):
        if name.startswith("__"):  # __file__, __path__: what module scanners probe; a module may lack them
            raise AttributeError(name)
        return getattr(self._real(), name)

    def _real(self) -> types.ModuleType:
        _remove_stand_in(self)
        import torch._dynamo as real

        return real


def _remove_stand_in(stand_in: _DynamoStandIn) -> None:
    if sys.modules.get("torch._dynamo") is stand_in:
        del sys.modules["torch._dynamo"]
    if torch.__dict__.get("_dynamo") is stand_in:
        delattr(torch, "_dynamo")


def _code_names(code: types.CodeType) -> set[str]:
    """Every name and string constant a function's code and its nested functions' code use."""
    names = set(code.co_names) | {c for c in code.co_consts if isinstance(c, str)}
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _code_names(const)
    return names


def lazy_disable_matches() -> bool:
    """Whether torch's private lazy Dynamo wrapper is the one the stand-in was written against
    (torch/_compile.py, as in PyTorch 2.13): ``_disable_dynamo`` whose wrapper imports torch._dynamo,
    calls its ``disable`` and caches the answer on ``fn.__dynamo_disable`` -- the attribute the stand-in
    deletes on exit. Read from the function's code, not the version, so a release that keeps the wrapper
    keeps the speed-up and one that changes it takes the plain path."""
    import torch._compile

    wrapper = getattr(torch._compile, "_disable_dynamo", None)
    code = getattr(wrapper, "__code__", None)
    if code is None:
        return False
    return {"_dynamo", "disable", "__dynamo_disable"} <= _code_names(code)


@contextlib.contextmanager
def no_dynamo_import() -> Iterator[None]:
    """While inside, ``torch._disable_dynamo`` wrappers call their function directly instead of
    importing torch._dynamo (see the module docstring). Does nothing when Dynamo is already imported,
    or when the private wrapper it leans on is missing or has changed (``lazy_disable_matches``)."""
    if "torch._dynamo" in sys.modules or not lazy_disable_matches():
        yield
        return
    stand_in = _DynamoStandIn()
    sys.modules["torch._dynamo"] = stand_in
    torch._dynamo = stand_in  # `import torch._dynamo` binds the attribute of torch, not sys.modules
    try:
        yield
    finally:
        _remove_stand_in(stand_in)
        for fn in stand_in.disabled:  # torch._compile._disable_dynamo caches its answer on the function
            getattr(fn, "__dict__", {}).pop("__dynamo_disable", None)


# ---------- the op cache ----------

_PLAIN = (int, float, bool, str, type(None), torch.dtype, torch.device, torch.layout, torch.memory_format)


class _Uncacheable(Exception):
    pass


def _key(x: Any) -> Any:
    """A hashable description of an argument: tensors by what meta kernels read (shape, strides, dtype,
    offset, device), lists by their items, plain values as themselves; _Uncacheable otherwise."""
    if isinstance(x, torch.Tensor):
        if x.layout != torch.strided:
            raise _Uncacheable
        return (tuple(x.shape), x.stride(), x.dtype, x.storage_offset(), x.device.type)
    if isinstance(x, (list, tuple)):
        return tuple(_key(item) for item in x)
    if isinstance(x, _PLAIN):
        return x
    raise _Uncacheable


def _creates_fresh_tensors(func) -> bool:
    """True for an op whose every output is a new tensor: no view, no argument or output aliased
    (in-place and out= ops alias their outputs to an input), every return a plain Tensor."""
    schema = func._schema
    return (not func.is_view and bool(schema.returns)
            and all(a.alias_info is None for a in schema.arguments)
            and all(r.alias_info is None and str(r.type) == "Tensor" for r in schema.returns))


class MetaOpCache(TorchDispatchMode):
    """Run each distinct meta op once; answer repeats with empty meta tensors of the same layout. Enter
    it before FlopCounterMode, so that FlopCounterMode (the newer mode) sees and counts every op first."""

    def __init__(self) -> None:
        super().__init__()
        self.outputs: dict[Any, tuple[tuple[tuple[int, ...], tuple[int, ...], torch.dtype], ...]] = {}
        self.fresh: dict[Any, bool] = {}
        self.hits = self.misses = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        fresh = self.fresh.get(func)
        if fresh is None:
            fresh = self.fresh[func] = _creates_fresh_tensors(func)
        if not fresh:
            return func(*args, **kwargs)
        try:
            key = (func, _key(args), _key(tuple(sorted(kwargs.items()))))
        except _Uncacheable:
            return func(*args, **kwargs)
        known = self.outputs.get(key)
        if known is not None:
            self.hits += 1
            outs = tuple(torch.empty_strided(shape, stride, dtype=dtype, device="meta")
                         for shape, stride, dtype in known)
            return outs[0] if len(outs) == 1 else outs
        self.misses += 1
        out = func(*args, **kwargs)
        outs = out if isinstance(out, tuple) else (out,)
        if all(isinstance(o, torch.Tensor) and o.is_meta and o.storage_offset() == 0 for o in outs):
            self.outputs[key] = tuple((tuple(o.shape), o.stride(), o.dtype) for o in outs)
        return out


@contextlib.contextmanager
def fast_meta(device: torch.device | str) -> Iterator[None]:
    """Every speed-up above that applies to a count on device (the op cache on meta only)."""
    with numpy_absent_fast(), no_dynamo_import():
        if torch.device(device).type != "meta":
            yield
            return
        with MetaOpCache():
            yield
