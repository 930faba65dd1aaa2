"""Fused elementwise kernels for the runtime's step on CUDA: a norm, a gated activation and RoPE each as ONE
kernel (Inductor's Triton, through torch.compile), where eager PyTorch launches two to four.

Why: a batch-1 decode step's matmuls stream the weights at ~89 % of the copy rate, and what keeps the step
from the bandwidth is its small elementwise kernels, latency-bound at 2-6 us each whatever their width
(benchmarks/decode_profile.py on an H100, Llama-2-7B, 2026-11-27: an RMSNorm of one row 6.2 us in the step,
4.9 us alone, Inductor's 2.2 us; RoPE on Q and K in three kernels 7.2 us, Inductor's one 1.9 us; SiLU·up 3.1
us against 1.8 us). gpt-fast gets its speed the same way (torch.compile over the whole model); compiling the
whole step here made Inductor copy the state into another layout for cuDNN attention every layer (6.80 ms a
step against 6.63 ms captured eager), so only these functions are compiled, and the step around them is
tfcalc's own, captured in its CUDA graph (tfcalc.model.generate).

Where: ``enabled(x)``: x on a CUDA device, Triton importable, TFCALC_FUSED not "0". A CPU step runs the same
functions uncompiled (the same arithmetic: tests/model/test_fused.py compiles them on the CPU and compares).

Each function is compiled the first time a warm-up calls it, with dynamic shapes (dynamic=True), so that a
process meeting many shapes (tests, continuous batching's rows) stays within torch._dynamo's recompile limit
(with a graph per shape it did not, H100 2026-11-27); not fullgraph: should anything stop the trace, the
function runs as written rather than failing. A dimension of size 1 is still specialised (PyTorch's 0/1
specialisation), so a one-token step and a verify step of k + 1 tokens run kernels compiled apart, which
may round apart: with the draft equal to the target, 92.5-95 % of the draft's bf16 proposals were accepted
on the H100 (100 % with TFCALC_FUSED=0). What speculative decoding claims stays exact -- its tokens are the
target's greedy tokens through the verify step's kernels (tfcalc.measure.speculative) -- and the accept rate
is reported as measured.
"""

from __future__ import annotations

import functools
import os

import torch
import torch.nn.functional as F

from tfcalc.model.positions import rotate


@functools.cache
def _triton() -> bool:
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return True


def enabled(x: torch.Tensor) -> bool:
    """Whether a step on x runs the compiled kernels (module docstring)."""
    return x.is_cuda and os.environ.get("TFCALC_FUSED", "1") != "0" and _triton()


def _compiled(fn):
    """fn, and fn compiled on first use: ``fn.fused(*args)`` runs the compiled one."""
    cache = []

    def fused(*args):
        if not cache:
            cache.append(torch.compile(fn, dynamic=True))
        return cache[0](*args)

    fn.fused = fused
    return fn


@_compiled
def rms_norm(x: torch.Tensor, weight: torch.Tensor | None, eps: float | None) -> torch.Tensor:
    """torch.nn.RMSNorm's forward (F.rms_norm over the last dim)."""
    return F.rms_norm(x, (x.shape[-1],), weight, eps)


@_compiled
def silu_mul(h: torch.Tensor) -> torch.Tensor:
    """SwiGLU's hidden from the fused [gate | up] rows: silu(gate) · up (tfcalc.model.ffn.ffn_hidden)."""
    gate, up = h.chunk(2, dim=-1)
    return F.silu(gate) * up


@_compiled
def rotate_heads(x: torch.Tensor, cos: torch.Tensor, sin_signed: torch.Tensor, n: int) -> torch.Tensor:
    """x (B, T, H, hs): its first n heads rotated (positions.rotate), the others copied -> a new (B, T, H, hs):
    attention's [Q | K | V] heads in one kernel, Q and K rotated, K still next to V for the state's one write."""
    return torch.cat([rotate(x[:, :, :n], cos, sin_signed), x[:, :, n:]], dim=2)
