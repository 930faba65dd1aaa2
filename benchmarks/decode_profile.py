"""Where a decode step's time goes on a GPU, kernel by kernel: the diagnostic behind the runtime's speed
(issue 29). A preset's step (default Llama-2-7B, bf16, batch 1, a 512-token prompt) timed captured (mode
"graph") and eager with CUDA events, profiled with torch.profiler (kernels grouped by name: count and time
per step), and the step's parts timed alone, each captured in a CUDA graph of REPS copies so that launch
overhead is out: every matmul of a layer against the bytes it reads, attention over the cache span under
each SDPA backend, RoPE, RMSNorm, the K/V scatter.

    python benchmarks/decode_profile.py [--preset llama2-7b] [--seq 512] [-o profile.json]

Needs CUDA (one line and exit 2 otherwise). Nothing here is a tfcalc command: it is read by a developer
deciding what to fuse next, and its JSON goes in the note that reports the figures.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tfcalc.model import build_model  # noqa: E402
from tfcalc.model.generate import Decoder, next_token  # noqa: E402
from tfcalc.model.positions import rotate  # noqa: E402
from tfcalc.presets import load  # noqa: E402

REPS = 50


def graph_us(fn, reps: int = REPS) -> float:
    """Microseconds per call of fn, REPS calls captured in one CUDA graph and replayed (median of 5)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(reps):
            fn()
    times = []
    for _ in range(5):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b) * 1e3 / reps)
    return statistics.median(times)


def warm_decoder(model, cfg, seq: int, mode: str, steps: int, warmup: int) -> tuple[Decoder, torch.Tensor]:
    """A Decoder in ``mode`` after a prefill of seq random tokens, its graph captured (one bucket: the cache
    holds seq + steps + 8 positions) and ``warmup`` steps run -> (decoder, the next token). Under inference_mode:
    call it inside one."""
    prompt = torch.randint(0, cfg.vocab_size, (1, seq), device="cuda")
    cache = model.new_cache(1, seq + steps + 8)
    token = next_token(model.prefill(prompt, cache))
    dec = Decoder(model, cache, mode)
    dec.prepare([cache.bucket(1)])
    for _ in range(warmup):
        token = next_token(dec.step(token))
    return dec, token


def step_times(model, cfg, seq: int, mode: str, steps: int = 48) -> float:
    """Median seconds of one decode step in ``mode`` after a prefill of seq tokens (events around each)."""
    with torch.inference_mode():
        dec, token = warm_decoder(model, cfg, seq, mode, steps, warmup=3)
        times = []
        for _ in range(steps):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            token = next_token(dec.step(token))
            b.record()
            torch.cuda.synchronize()
            times.append(a.elapsed_time(b) / 1e3)
    return statistics.median(times)


def kernel_table(model, cfg, seq: int, mode: str, steps: int = 8) -> list[dict]:
    """Kernels of ``steps`` decode steps under torch.profiler, grouped by name, per step, slowest first."""
    from torch.profiler import ProfilerActivity, profile

    with torch.inference_mode():
        dec, token = warm_decoder(model, cfg, seq, mode, steps, warmup=1)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(steps):
                token = next_token(dec.step(token))
            torch.cuda.synchronize()
    rows = defaultdict(lambda: [0, 0.0])
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            rows[e.name][0] += 1
            rows[e.name][1] += e.device_time_total if hasattr(e, "device_time_total") else e.cuda_time_total
    table = [{"kernel": name[:140], "per_step": n / steps, "us_per_step": t / steps} for name, (n, t) in rows.items()]
    return sorted(table, key=lambda r: -r["us_per_step"])


def parts(cfg, seq: int) -> dict:
    """Each part of one layer's step alone, captured (graph_us), at the preset's decode shapes."""
    dt, dev = torch.bfloat16, "cuda"
    d, nh, hs, kvh, ff = cfg.d_model, cfg.n_head, cfg.d_model // cfg.n_head, cfg.kv_heads, cfg.d_ff
    x = torch.randn(1, 1, d, device=dev, dtype=dt)
    out = {}
    for name, rows, cols in (("qkv", (nh + 2 * kvh) * hs, d), ("o", d, nh * hs), ("gate_up", 2 * ff, d),
                             ("down", d, ff), ("lm_head", cfg.vocab_size, d)):
        w = torch.randn(rows, cols, device=dev, dtype=dt)
        xi = torch.randn(1, 1, cols, device=dev, dtype=dt)
        us = graph_us(lambda w=w, xi=xi: torch.nn.functional.linear(xi, w))
        out[f"linear {name} ({rows}x{cols})"] = {"us": us, "TB/s": rows * cols * 2 / us / 1e6}
        us = graph_us(lambda w=w, xi=xi: torch.mv(w, xi.view(-1)))  # cuBLAS's gemv rather than a GEMM of M = 1
        out[f"mv {name} ({rows}x{cols})"] = {"us": us, "TB/s": rows * cols * 2 / us / 1e6}
    for S in (seq + 64, 1024):
        q = torch.randn(1, nh, 1, hs, device=dev, dtype=dt)
        k, v = (torch.randn(1, kvh, S, hs, device=dev, dtype=dt) for _ in range(2))
        mask = torch.zeros(1, 1, 1, S, device=dev, dtype=dt)
        mask[..., S - 10:] = float("-inf")
        from torch.nn.attention import SDPBackend, sdpa_kernel

        for backend in ("EFFICIENT_ATTENTION", "MATH", "CUDNN_ATTENTION", "FLASH_ATTENTION"):
            m = None if backend == "FLASH_ATTENTION" else mask
            try:
                with sdpa_kernel([getattr(SDPBackend, backend)]):
                    us = graph_us(lambda m=m, q=q, k=k, v=v: torch.nn.functional.scaled_dot_product_attention(
                        q, k, v, attn_mask=m))
                out[f"sdpa {backend} S={S}{' (no mask)' if m is None else ''}"] = {"us": us}
            except Exception as e:  # noqa: BLE001 - a backend that refuses the shape is recorded, not fatal
                out[f"sdpa {backend} S={S}"] = {"error": str(e).splitlines()[0][:160]}
        # the manual form: two matmuls and a softmax in fp32
        def manual(m=mask, q=q, k=k, v=v):
            s = (q @ k.transpose(-1, -2)).float() * hs ** -0.5 + m
            return (s.softmax(-1).to(dt) @ v)
        out[f"attention by matmuls S={S}"] = {"us": graph_us(manual)}
    qk = torch.randn(1, 1, nh + kvh, hs, device=dev, dtype=dt)
    cos, sin = torch.randn(1, 1, hs, device=dev, dtype=dt), torch.randn(1, 1, hs, device=dev, dtype=dt)
    out["rope q and k together (positions.rotate)"] = {"us": graph_us(lambda: rotate(qk, cos, sin))}
    out["rope q and k in place"] = {"us": graph_us(lambda: rotate(qk, cos, sin, in_place=True))}
    w = torch.ones(d, device=dev, dtype=dt)
    out["rms_norm"] = {"us": graph_us(lambda: torch.nn.functional.rms_norm(x, (d,), w, 1e-5))}
    out["add"] = {"us": graph_us(lambda: x + x)}
    g = torch.randn(1, 1, 2 * ff, device=dev, dtype=dt)
    out["silu * up"] = {"us": graph_us(lambda: torch.nn.functional.silu(g[..., :ff]) * g[..., ff:])}
    wo = torch.randn(d, nh * hs, device=dev, dtype=dt)
    y = torch.randn(1, nh * hs, device=dev, dtype=dt)
    stream = x.view(1, d).clone()
    out["o + residual add"] = {"us": graph_us(lambda: stream + torch.nn.functional.linear(y, wo))}
    out["o into the residual (addmm out=)"] = {"us": graph_us(lambda: torch.addmm(stream, y, wo.t(), out=stream))}
    try:  # Inductor's fused kernels (Triton), each alone: what "compile" mode would make of them
        def add_norm(a, b, w):
            h = a + b
            return h, torch.nn.functional.rms_norm(h, (d,), w, 1e-5)
        fused = torch.compile(add_norm, dynamic=False)
        silu_mul = torch.compile(lambda g: torch.nn.functional.silu(g[..., :ff]) * g[..., ff:], dynamic=False)
        rot = torch.compile(lambda t: rotate(t, cos, sin), dynamic=False)
        out["compiled add + rms_norm"] = {"us": graph_us(lambda: fused(x, x, w))}
        out["compiled silu * up"] = {"us": graph_us(lambda: silu_mul(g))}
        out["compiled rope q and k"] = {"us": graph_us(lambda: rot(qk))}
    except Exception as e:  # noqa: BLE001 - no Triton here: recorded, not fatal
        out["compiled"] = {"error": str(e).splitlines()[0][:160]}
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--preset", default="llama2-7b")
    p.add_argument("--seq", type=int, default=512)
    p.add_argument("-o", "--output", default="decode_profile.json")
    p.add_argument("--compile", action="store_true", help="also time mode 'compile' (Inductor, a minute or more)")
    args = p.parse_args()
    if not torch.cuda.is_available():
        print("decode_profile: error: no CUDA device here", file=sys.stderr)
        return 2
    cfg = load(args.preset)
    torch.manual_seed(0)
    model = build_model(cfg, "cuda", torch.bfloat16)
    report = {"preset": args.preset, "seq": args.seq, "torch": torch.__version__,
              "gpu": torch.cuda.get_device_name(0),
              "weights_bytes": sum(p.numel() * p.element_size() for p in model.parameters())}
    for mode in ("graph", "eager"):
        report[f"step_s_{mode}"] = step_times(model, cfg, args.seq, mode)
        print(f"{mode}: {report[f'step_s_{mode}'] * 1e3:.3f} ms a step", flush=True)
    for mode in ("graph", "eager"):
        table = kernel_table(model, cfg, args.seq, mode)
        report[f"kernels_{mode}"] = table
        total = sum(r["us_per_step"] for r in table)
        print(f"\n{mode}: {sum(r['per_step'] for r in table):.0f} kernels a step, {total:.0f} us of kernel time")
        for r in table[:25]:
            print(f"  {r['per_step']:6.1f} x {r['us_per_step']:8.1f} us  {r['kernel'][:100]}")
    report["parts"] = parts(cfg, args.seq)
    Path(args.output).write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    print()
    for name, r in report["parts"].items():
        print(f"  {name}: {r}")
    if args.compile:
        report["step_s_compile"] = step_times(model, cfg, args.seq, "compile")
        print(f"compile: {report['step_s_compile'] * 1e3:.3f} ms a step", flush=True)
        table = kernel_table(model, cfg, args.seq, "compile")
        report["kernels_compile"] = table
        print(f"\ncompile: {sum(r['per_step'] for r in table):.0f} kernels a step, "
              f"{sum(r['us_per_step'] for r in table):.0f} us of kernel time")
        for r in table[:25]:
            print(f"  {r['per_step']:6.1f} x {r['us_per_step']:8.1f} us  {r['kernel'][:100]}")
    Path(args.output).write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
