"""Where a batched prefill's time goes on a GPU: the diagnostic for `infer --measure --batch 16`'s time to
first token, 0.73 of measured on the H100 (benchmarks/results/h100-2026-11-27-report.json: Llama-2-7B bf16,
16 prompts of 512 tokens, 211.8 ms measured, 155 ms predicted; the same 219 ms before the runtime's fusions,
h100-2026-11-26-report.json, so the elementwise kernels are not where it goes). Three measurements, each beside
what tfcalc's performance model says of it:

1. the prefill as tfcalc's runtime runs it (model.prefill into a static cache, as `infer --measure`), timed with
   CUDA events (median of REPEAT), and its kernels under torch.profiler grouped by name (count and time);
2. each weight GEMM of a layer alone at the prefill's rows (m = batch × prompt), timed once cold and then over
   a sustained run as long as the prefill (the H100's clock under a long compute-bound burst: a 200 ms prefill
   is not the short kernel a GEMM benchmark times), with its rate beside tfcalc.count.perf.gemm's prediction;
3. the SM clock before and after the sustained run, where torch can read it (torch.cuda.clock_rate, pynvml).

    python benchmarks/prefill_profile.py [--preset llama2-7b] [--batch 16] [--seq 512] [-o prefill_profile.json]

Needs CUDA (one line and exit 2 otherwise). Not a tfcalc command: its JSON goes in the note that reports it.
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

from tfcalc.count.perf import gemm  # noqa: E402
from tfcalc.count.perf.hardware import perf_spec  # noqa: E402
from tfcalc.model import build_model  # noqa: E402
from tfcalc.presets import load  # noqa: E402

REPEAT = 10
PEAK_BF16 = {"H100": 989e12, "H200": 989e12, "A100": 312e12}


def timed(fn, repeat: int = REPEAT) -> list[float]:
    """Seconds of each of ``repeat`` calls of fn, CUDA events around each (after two warm-ups)."""
    for _ in range(2):
        fn()
    out = []
    for _ in range(repeat):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        torch.cuda.synchronize()
        out.append(a.elapsed_time(b) / 1e3)
    return out


def clock_mhz() -> float | None:
    try:
        return float(torch.cuda.clock_rate(0))  # pynvml's SM clock; absent or failing without pynvml
    except Exception:  # noqa: BLE001 -- a diagnostic: no clock is an answer, not an error
        return None


def kernel_table(run) -> list[dict]:
    from torch.profiler import ProfilerActivity, profile

    run()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        run()
        torch.cuda.synchronize()
    rows = defaultdict(lambda: [0, 0.0])
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            rows[e.name][0] += 1
            rows[e.name][1] += e.device_time_total if hasattr(e, "device_time_total") else e.cuda_time_total
    table = [{"kernel": name[:140], "count": n, "us": t} for name, (n, t) in rows.items()]
    return sorted(table, key=lambda r: -r["us"])


def gemms(cfg, m: int, seconds: float, device_key: str, peak: float) -> dict:
    """Each weight GEMM of a layer at m rows: cold (median of REPEAT) and over ``seconds`` of back-to-back calls,
    its FLOP/s, and the shape model's prediction (tfcalc.count.perf.gemm at the device's constants)."""
    perf = perf_spec(device_key)
    d, q, kv, ff = cfg.d_model, cfg.q_dim, cfg.kv_dim, cfg.ffn_dim
    shapes = {"qkv": (d, q + 2 * kv), "o": (q, d), "gate_up": (d, 2 * ff), "down": (ff, d)}  # (k, n)
    out = {}
    for name, (k, n) in shapes.items():
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) / k ** 0.5
        flops = 2 * m * n * k
        cold = statistics.median(timed(lambda x=x, w=w: x @ w.t()))
        calls = max(1, int(seconds / cold))
        sustained = statistics.median(timed(lambda x=x, w=w, c=calls: [x @ w.t() for _ in range(c)], repeat=3)) / calls
        out[name] = {"m": m, "k": k, "n": n, "cold_tflops": flops / cold / 1e12,
                     "sustained_tflops": flops / sustained / 1e12, "calls": calls,
                     "predicted_tflops": peak * gemm.efficiency(m, n, k, perf.sm_count, perf.matmul_ceiling) / 1e12}
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--preset", default="llama2-7b")
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--seq", type=int, default=512)
    p.add_argument("--device-spec", default="h100-sxm", help="the table device whose model constants to compare")
    p.add_argument("-o", "--output", default="prefill_profile.json")
    args = p.parse_args()
    if not torch.cuda.is_available():
        print("prefill_profile: error: no CUDA device here", file=sys.stderr)
        return 2
    cfg = load(args.preset)
    torch.manual_seed(0)
    model = build_model(cfg, "cuda", torch.bfloat16)
    name = torch.cuda.get_device_name(0)
    peak = next((v for key, v in PEAK_BF16.items() if key in name), 989e12)
    idx = torch.randint(0, cfg.vocab_size, (args.batch, args.seq), device="cuda")
    with torch.inference_mode():
        cache = model.new_cache(args.batch, args.seq + 8)

        def run():
            return model.prefill(idx, cache)

        times = timed(run)
        report = {"preset": args.preset, "batch": args.batch, "seq": args.seq, "torch": torch.__version__, "gpu": name,
                  "prefill_s": statistics.median(times), "prefill_s_all": times, "clock_mhz_before": clock_mhz()}
        print(f"prefill {args.batch} × {args.seq}: {report['prefill_s'] * 1e3:.2f} ms (median of {REPEAT})", flush=True)
        report["kernels"] = kernel_table(run)
        for r in report["kernels"][:20]:
            print(f"  {r['count']:5d} x {r['us'] / r['count']:9.1f} us = {r['us'] / 1e3:8.2f} ms  {r['kernel'][:90]}")
        report["gemms"] = gemms(cfg, args.batch * args.seq, report["prefill_s"], args.device_spec, peak)
        report["clock_mhz_after"] = clock_mhz()
    for key, g in report["gemms"].items():
        print(f"  {key}: cold {g['cold_tflops']:.0f}, sustained {g['sustained_tflops']:.0f}, "
              f"model {g['predicted_tflops']:.0f} TFLOP/s")
    print(f"SM clock: {report['clock_mhz_before']} -> {report['clock_mhz_after']} MHz")
    Path(args.output).write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
