"""On a GPU: the kernels issue 31's recipes and ring merges price, timed against tfcalc's own figures for them.

- FP8 GEMMs (torch._scaled_mm) per-tensor and per-row scaled against bf16 at Llama 3 8B's FFN shape (tfcalc prices
  both at the FP8 ceiling: tfcalc.count.perf.fp8_recipes);
- torchao-style tensorwise casts (amax, then a scaled cast row-major and transposed) against the bytes
  fp8_recipes.casts counts for them at the achievable bandwidth;
- one whole ring-attention merge step (torch's _SDPAMerger) against context_parallel's 38 bytes an element.

    python benchmarks/fp8_ring_gpu.py out.json

On the lent H100 (torch 2.11; benchmarks/results/h100-2026-11-27-fp8-ring.json): bf16 756 TFLOP/s, FP8 per-tensor
1,302 (0.658 of the FP8 peak), per-row 1,112 (0.854 of per-tensor: fp8_recipes.ROWWISE_GEMM); a compiled
tensorwise cast of 8192 × 4096 in 127 µs (tfcalc: 82 µs for torchao's fused kernels; this script's transpose is
a kernel of its own); a merge step of 33.5M elements in 522 µs (tfcalc: 482 µs at the 2.86 TB/s copy rate
measured beside it).
"""

from __future__ import annotations

import json
import sys

import torch


def timed(fn, reps: int = 20) -> float:
    """Median seconds of fn() on the current device, CUDA events (synchronized)."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) / 1e3)
    return sorted(times)[len(times) // 2]


def gemms(M: int = 8192, K: int = 4096, N: int = 14336) -> dict:
    x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(N, K, device="cuda", dtype=torch.bfloat16)
    out = {"shape": [M, K, N], "bf16_s": timed(lambda: x @ w.t())}
    xf, wf = x.to(torch.float8_e4m3fn), w.to(torch.float8_e4m3fn)
    one = torch.ones((), device="cuda")
    out["fp8_tensorwise_s"] = timed(lambda: torch._scaled_mm(xf, wf.t(), one, one, out_dtype=torch.bfloat16))
    try:
        rows, cols = torch.ones(M, 1, device="cuda"), torch.ones(1, N, device="cuda")
        out["fp8_rowwise_s"] = timed(lambda: torch._scaled_mm(xf, wf.t(), rows, cols, out_dtype=torch.bfloat16))
    except RuntimeError as e:  # an older torch without rowwise scales
        out["fp8_rowwise_error"] = str(e)[:200]
    out["flops"] = 2 * M * K * N
    return out


def casts(M: int = 8192, K: int = 4096) -> dict:
    x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)

    def tensorwise():
        scale = 448.0 / x.abs().max().float()
        y = (x.float() * scale).to(torch.float8_e4m3fn)
        return y, y.t().contiguous()

    compiled = torch.compile(tensorwise)
    return {"numel": M * K, "tensorwise_eager_s": timed(tensorwise), "tensorwise_compiled_s": timed(compiled)}


def merge(B: int = 1, H: int = 32, S: int = 8192, D: int = 128) -> dict:
    try:  # its home since torch 2.9; before, _attention
        from torch.distributed.tensor.experimental._context_parallel._attention import _SDPAMerger
    except ImportError:
        from torch.distributed.tensor.experimental._attention import _SDPAMerger

    out, lse = torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16), torch.randn(B, H, S, device="cuda")

    def step():
        m = _SDPAMerger(True, seq_dim=2)
        m.step(out, lse, False)
        m.step(out, lse, False)

    def first():
        _SDPAMerger(True, seq_dim=2).step(out, lse, False)

    return {"numel": B * H * S * D, "merge_step_s": timed(step) - timed(first)}


def copy_bandwidth() -> float:
    a = torch.empty(2**28, device="cuda", dtype=torch.bfloat16)
    b = torch.empty_like(a)
    return 2 * a.numel() * 2 / timed(lambda: b.copy_(a))


def main(path: str) -> None:
    result = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__,
              "copy_bytes_per_s": copy_bandwidth(), "gemm": gemms(), "casts": casts(), "merge": merge()}
    print(json.dumps(result, indent=1))
    with open(path, "w") as f:
        json.dump(result, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "fp8_ring_gpu.json")
