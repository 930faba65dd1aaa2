"""For the eager-ops tests (tests/model/test_*_eager.py), which hold a mixer's declared EagerOps
(tfcalc.architecture.*_eager) op for op to what its module runs forward and backward on the CPU, and a training
step's non-matmul seconds to what eager prices them at.

The aten kernels a module dispatches (``Kernels``): views move no bytes and are never recorded; each test says
which other kernels it leaves out (the matmuls, a loop's) and how it counts a kernel's bytes (``Kernels.record``)."""

from __future__ import annotations

import torch
from torch.utils._python_dispatch import TorchDispatchMode

VIEWS = {"view", "_unsafe_view", "unflatten", "slice", "select", "expand", "unsqueeze", "squeeze", "split",
         "split_with_sizes", "chunk", "t", "transpose", "permute", "detach", "alias", "as_strided", "lift_fresh",
         "_reshape_alias", "unbind"}


def tensors(values) -> list[torch.Tensor]:
    """The tensors among ``values``, a list's or tuple's too."""
    return [u for t in values for u in (t if isinstance(t, (list, tuple)) else [t]) if isinstance(u, torch.Tensor)]


def operands(name: str, args, kwargs, out) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """A kernel's tensors read (its inputs, not copy_'s destination nor an out= tensor) and written (its outputs)."""
    read = tensors([*args[name == "copy_":], *(v for k, v in (kwargs or {}).items() if k != "out")])
    return read, tensors(out if isinstance(out, (list, tuple)) else [out])


class Kernels(TorchDispatchMode):
    """Every kernel but the views and those named in ``skip``, handed to ``record`` (name, args, kwargs, out),
    which appends what the test measures to ``ops``."""

    def __init__(self, skip: set[str]):
        super().__init__()
        self.skip, self.ops = skip, []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        name = func.__name__.split(".")[0]
        if name not in VIEWS and name not in self.skip:
            self.record(name, args, kwargs, out)
        return out

    def record(self, name: str, args, kwargs, out) -> None:
        raise NotImplementedError


def seeded(build, dtype) -> torch.nn.Module:
    """``build()``'s module, built under seed 0, every parameter then drawn from N(0, 0.1²), in ``dtype``."""
    torch.manual_seed(0)
    module = build()
    for p in module.parameters():
        torch.nn.init.normal_(p, std=0.1)
    return module.to(dtype)


def forward_backward(module: torch.nn.Module, x: torch.Tensor, recorder) -> tuple[list, list]:
    """The ops ``recorder()`` (a fresh Kernels) records over the module's forward, then over its backward."""
    with recorder() as fwd:
        y = module(x)
    grad = torch.randn_like(y)
    with recorder() as bwd:
        y.backward(grad)
    return fwd.ops, bwd.ops


def block_other_s(cfg, layout, silenced: dict, bw: float, perf) -> tuple[float, float]:
    """micro_batch_time's non-matmul seconds a block (``block_other_s``) of ``cfg`` under ``layout``, then again with
    the class attributes of ``silenced`` ({(class, name): replacement}) replaced, eager's cache cleared around
    both: (as declared, silenced)."""
    from tfcalc.count.perf import eager
    from tfcalc.count.training import micro_batch_time as mbt

    eager.terms.cache_clear()
    declared = mbt.micro_batch_time.__wrapped__(cfg, layout, 1e15, bw, perf).block_other_s
    real = {key: getattr(*key) for key in silenced}
    try:
        for (cls, name), fake in silenced.items():
            setattr(cls, name, fake)
        eager.terms.cache_clear()
        without = mbt.micro_batch_time.__wrapped__(cfg, layout, 1e15, bw, perf).block_other_s
    finally:
        for (cls, name), value in real.items():
            setattr(cls, name, value)
        eager.terms.cache_clear()
    return declared, without


def priced_s(ops: list, a: int, recompute: str, bw: float, kernel_s: float) -> float:
    """The seconds eager prices ``ops`` at (activation bytes ``a``): their bytes at ``bw`` and their kernels at
    ``kernel_s``, forward and backward, and the forward again under full recompute."""
    from tfcalc.count.perf import eager

    terms = eager.mixer_terms(ops, a)
    again = recompute == "full"
    f, b = sum(t.forward for t in terms), sum(t.backward for t in terms)
    kf, kb = sum(t.forward_kernels for t in terms), sum(t.backward_kernels for t in terms)
    return (f * (1 + again) + b) / bw + (kf * (1 + again) + kb) * kernel_s
