"""Slow matmuls, found and stood in for, where a memory measurement does not need their values.

Some CPUs have no fast kernels for a half-precision dtype: without the instructions for it (AVX512_BF16
or AMX for bf16, AVX512_FP16 for fp16) a matmul can run orders of magnitude slower than in fp32, and a
GPT-2 LM-head product then takes seconds where fp32 takes a fraction of one. CPU flags do not say which
dtype is slow for which kernel, so ``probe`` times one 256×256×256 product in the dtype and in fp32 (one
thread, best of three calls each, tens of milliseconds at most) and calls the dtype slow below
SLOW_RATIO of fp32's rate.

A memory measurement needs the bytes, not the values: which tensors exist, of which shapes and dtypes,
and when they die. A matmul's only effect on those is its output, a new tensor of a shape and dtype its
inputs fix (contiguous on the CPU). ``MatmulStandIn`` answers mm, addmm, bmm and baddbmm with such a
tensor filled with uniform noise in [-1, 1) (written, so its pages are resident and the peak RSS counts
them; noise, not zeros, so a mixture of experts still routes tokens to varied experts), at the cost of
a memory fill instead of a slow product. Every other op runs for real, attention included (its kernel
allocates scratch that a stand-in would hide). What changes: the values, hence the loss, and the
matmul kernels' own scratch space (oneDNN's, a few MiB), which is no longer in the peak. What does not:
every tensor's shape, dtype and lifetime, which tests/measure/test_stand_in.py checks op by op against
the real kernels. A mixture of experts routes by values, so its per-expert sizes follow the noise, as
they follow the random weights in a real run.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Optional

import torch
from torch.utils._python_dispatch import TorchDispatchMode

aten = torch.ops.aten

SLOW_RATIO = 0.5  # a dtype whose matmuls run below half of fp32's rate is slow
PROBE_N = 256


def _output_shape(func, args) -> Optional[tuple[int, ...]]:
    """The output shape of a matmul op from its operands' shapes; None for any other op."""
    if func is aten.mm.default:
        return (args[0].shape[0], args[1].shape[1])
    if func is aten.addmm.default:  # addmm(bias, a, b)
        return (args[1].shape[0], args[2].shape[1])
    if func is aten.bmm.default:
        return (args[0].shape[0], args[0].shape[1], args[1].shape[2])
    if func is aten.baddbmm.default:  # baddbmm(bias, a, b)
        return (args[1].shape[0], args[1].shape[1], args[2].shape[2])
    return None


class MatmulStandIn(TorchDispatchMode):
    """Answers matmul ops with a written tensor of the output's shape and dtype (module docstring)."""

    def __init__(self) -> None:
        super().__init__()
        self.stood_in = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        shape = _output_shape(func, args)
        if shape is None or kwargs.get("out_dtype") is not None:
            return func(*args, **kwargs)
        self.stood_in += 1
        operand = args[-1]
        return torch.empty(shape, dtype=operand.dtype, device=operand.device).uniform_(-1.0, 1.0)


@dataclass(frozen=True)
class Probe:
    dtype: str
    rate: float  # FLOP/s of the probe product in dtype
    fp32_rate: float

    @property
    def slow(self) -> bool:
        return self.rate < SLOW_RATIO * self.fp32_rate

    def note(self, then: Optional[str] = None) -> str:
        """One line for the user: how slow, the faster choice, and what the run does (default: a memory
        measurement with stand-in matmuls)."""
        then = then or (f"measuring {self.dtype} with stand-in matmul results (same shapes and dtype, values not "
                        "computed: the bytes are the same)")
        return (f"{self.dtype} matmuls are slow on this CPU ({self.rate / 1e9:.1f} GFLOP/s against "
                f"{self.fp32_rate / 1e9:.1f} in fp32, a timed {PROBE_N}³ product on one thread), so --dtype fp32 "
                f"is the faster choice; {then}")


def _rate(dtype: torch.dtype, n: int = PROBE_N, calls: int = 3) -> float:
    """FLOP/s of an n×n×n product on one thread, best of calls: the kernel's speed, not the machine's
    load (with several threads on a busy machine, each product waits for its slowest thread, which may
    not be running)."""
    a, b = torch.randn(n, n).to(dtype), torch.randn(n, n).to(dtype)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        a @ b  # first call: kernel selection, packing buffers
        best = float("inf")
        for _ in range(calls):
            start = time.perf_counter()
            a @ b
            best = min(best, time.perf_counter() - start)
    finally:
        torch.set_num_threads(threads)
    return 2 * n**3 / max(best, 1e-9)


def probe(dtype: str, device_kind: str) -> Optional[Probe]:
    """Time dtype's matmul against fp32's on the CPU; None where there is nothing to compare (fp32, GPUs:
    a GPU's half-precision matmuls are its fast ones)."""
    from tfcalc.measure.device import torch_dtype

    if device_kind != "cpu" or dtype in ("fp32", "tf32"):
        return None
    return Probe(dtype, _rate(torch_dtype(dtype)), _rate(torch.float32))
