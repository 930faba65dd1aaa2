"""tfcalc on the GPUs this machine has: every measured command run for real, each prediction beside its
measurement, in one JSON file.

    python benchmarks/gpu_report.py                        # CUDA, full sizes: within 10 minutes on one H100
    python benchmarks/gpu_report.py -o h100.json --budget 300
    python benchmarks/gpu_report.py --device cpu --quick   # tiny models on the CPU: the script's own test

What it runs (through tfcalc's Python API, the code of the command line; sizes in gpu_report_steps.py):
bench (fp32 and bf16: forward time and MFU, the matmul ceiling), bench decode (time to first token, decode
step, MBU, the bandwidth ceiling), memory --measure (the allocator's peak against the estimate; forward and a
training step), infer --measure (two batch sizes), a training step on one GPU (bench ranks --nproc 1 against
the plan's compute), the device's memory (driver total, CUDA context), and over NCCL (one rank per GPU;
recorded as skipped, saying why, on fewer GPUs): plan --measure on 2 ranks for TP, ZeRO-1/2/3, expert
parallelism, ZeRO-3 on a MoE and the 1F1B and zero-bubble pipelines (one launch), HSDP and a pipeline with
data parallelism on 4 ranks, and infer --tp 2 --measure (benchmarks/gpu_report_ranks.py).

Predictions use the device-table entry matched by the name torch gives GPU 0 (tfcalc.devices.lookup), or
--device-spec KEY; without one they are null and say so. The ratio is predicted ÷ measured.

Time: each step has an expected duration; a step that would end past --budget seconds (default 540, leaving
a minute of the 10 for start-up and writing) is skipped and recorded with the reason, and one still running
when the budget is spent is stopped (an alarm) and recorded as such. The JSON is rewritten after every step,
so a run cut short keeps what it finished. Refuses, in one line and exit 2, to run on cuda without CUDA.

The JSON: {"report": "tfcalc gpu report", "version": 1, "device", "quick", "budget_s", "wall_s",
"environment": {python, torch, cuda, cudnn, driver, tfcalc commit, gpus: [{index, name, memory_bytes, sm_count,
capability, table_key}]}, "device_spec", "results": [{name, status: ok|skipped|refused|failed|stopped, reason,
seconds, expected_s, comparisons: [{quantity, unit, predicted, measured, ratio, how}], measured: {...}}]}.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import gpu_report_ranks as ranks  # noqa: E402
import gpu_report_steps as steps  # noqa: E402
import moe_vs_hf  # noqa: E402

from tfcalc import devices  # noqa: E402
from tfcalc.errors import InputError  # noqa: E402

DEFAULT_BUDGET_S = 540.0
VERSION = 1


class OutOfTime(Exception):
    """The alarm: the budget ran out while a step was running."""


@dataclass(frozen=True)
class Step:
    name: str
    expected_s: float  # on one H100 at full sizes (seconds of this process's wall time); quick: a second or two
    run: Callable[[], dict]
    skip: Optional[str] = None  # why it is not run on this machine (None: run)


def _driver_version() -> Optional[str]:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return out.splitlines()[0].strip() if out.strip() else None


def _commit() -> Optional[str]:
    try:
        return subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True,
                              timeout=10, check=True).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def environment(device: str) -> dict[str, Any]:
    import torch

    from tfcalc.measure.device import tf32_matmuls

    gpus = []
    if device != "cpu":
        for i in range(torch.cuda.device_count()):
            p = torch.cuda.get_device_properties(i)
            entry = devices.lookup(p.name)
            gpus.append({"index": i, "name": p.name, "memory_bytes": p.total_memory,
                         "sm_count": p.multi_processor_count, "capability": f"{p.major}.{p.minor}",
                         "table_key": entry.key if entry else None})
    cudnn = torch.backends.cudnn.version() if device != "cpu" else None
    return {"python": platform.python_version(), "platform": platform.platform(), "torch": torch.__version__,
            "cuda": torch.version.cuda, "cudnn": cudnn, "driver": _driver_version() if device != "cpu" else None,
            "tfcalc_commit": _commit(), "cpu_count": os.cpu_count(), "gpus": gpus,
            "tf32_matmul": tf32_matmuls()}


def plan_steps(device: str, quick: bool, spec: Optional[devices.DeviceSpec], gpus: int) -> list[Step]:
    sizes = steps.quick_sizes() if quick else steps.full_sizes()
    cuda = device != "cpu"
    def nccl(n: int) -> Optional[str]:  # why a step of n ranks is not run here (None: it runs)
        if not cuda:
            return ("4 gloo ranks: tests/measure/test_hsdp_run.py and test_pipeline_dp.py run them on the CPU"
                    if n > 2 else None)
        if gpus < n:
            return f"NCCL runs one rank per GPU: {n} ranks need {n} GPUs; {gpus} here"
        return None
    q = 1.0 if quick else None  # every step's expected seconds in quick mode
    over = " over NCCL" if cuda else " (gloo)"

    def s(seconds: float) -> float:
        return q if q is not None else seconds

    return [
        Step("bench fp32", s(45), lambda: steps.bench_step(sizes, device, "fp32", spec)),
        Step("bench bf16", s(30), lambda: steps.bench_step(sizes, device, "bf16", spec)),
        Step("bench decode", s(45), lambda: steps.decode_step(sizes, device, spec)),
        Step("memory --measure (forward)", s(40), lambda: steps.memory_step(sizes, device, training=False)),
        Step("memory --measure --training", s(40), lambda: steps.memory_step(sizes, device, training=True)),
        *[Step(f"infer --measure --batch {b}", s(45), lambda b=b: steps.infer_step(sizes, device, b, spec))
          for b in sizes.infer_batches],
        Step("MoE forward against transformers (gpt-oss-20b, qwen3-30b-a3b shapes, 2 layers, bf16)", s(40),
             lambda: moe_step(device, quick)),
        Step("training step on one GPU (bench ranks --nproc 1)", s(45), lambda: steps.train_step(sizes, device, spec)),
        Step("device memory (driver total, CUDA context)", s(20), lambda: steps.device_memory_step(spec),
             None if cuda else "no CUDA device: the driver's and the CUDA context's memory exist only there"),
        # one launch of 2 ranks for every layout (benchmarks/gpu_report_ranks.py)
        Step(f"plan --measure on 2 ranks, {'; '.join(ranks.TWO_RANKS)}" + over, s(60),
             lambda: ranks.plan_layouts_step(sizes, ranks.TWO_RANKS, 2), nccl(2)),
        Step(f"plan --measure on 4 ranks, {'; '.join(ranks.FOUR_RANKS)}" + over, s(45),
             lambda: ranks.plan_layouts_step(sizes, ranks.FOUR_RANKS, 4), nccl(4)),
        Step("infer --measure --tp 2" + over, s(40), lambda: ranks.infer_tp_step(sizes, device), nccl(2)),
    ]


def moe_step(device: str, quick: bool) -> dict:
    """tfcalc's MoE layer and 2-layer model forward beside transformers' on this device (moe_vs_hf.py)."""
    runs = [moe_vs_hf.compare(name, device, 16 if quick else 1024, quick, 3 if quick else 20)
            for name in moe_vs_hf.SHAPES]
    how = "median of synchronized calls, bf16, the two sides interleaved (benchmarks/moe_vs_hf.py)"
    comparisons = [{"quantity": f"{r['shape']} {what} forward, T = {r['seq']}, {who}", "unit": "s",
                    "predicted": None, "measured": r[f"{prefix}{key}_ms"] / 1e3, "ratio": None,
                    "how": how + ("" if who == "tfcalc" else f"; {r['hf_experts_implementation']} experts")}
                   for r in runs for key, what in (("moe", "MoE layer"), ("model", "2-layer model"))
                   for who, prefix in (("tfcalc", ""), ("transformers", "hf_"))]
    return {"comparisons": comparisons, "measured": {r["shape"]: r for r in runs}}


def _alarm(signum, frame):
    raise OutOfTime()


def run_step(step: Step, left: float) -> dict[str, Any]:
    """Run one step within `left` seconds (an alarm stops it); its result with status and seconds."""
    result: dict[str, Any] = {"name": step.name, "expected_s": step.expected_s, "status": "skipped",
                              "reason": step.skip, "seconds": 0.0, "comparisons": [], "measured": None}
    if step.skip:
        return result
    if step.expected_s > left:
        result["reason"] = f"would overrun the budget: expected {step.expected_s:g} s, {left:.0f} s left"
        return result
    start = time.monotonic()
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(max(1, int(left)))
    try:
        result.update(step.run(), status="ok", reason=None)
    except OutOfTime:
        result.update(status="stopped", reason=f"the budget ran out after {time.monotonic() - start:.0f} s")
    except InputError as e:  # tfcalc refused the run (it does not fit, no such device): its one line
        result.update(status="refused", reason=str(e))
    except Exception as e:  # noqa: BLE001 - a report records what failed and goes on with the next step
        result.update(status="failed", reason=f"{type(e).__name__}: {' '.join(str(e).split())[:300]}")
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    result["seconds"] = time.monotonic() - start
    _free(step)
    return result


def _free(step: Step) -> None:
    gc.collect()
    try:
        import torch

        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    except ImportError:  # pragma: no cover - torch is a dependency of tfcalc's measured commands
        pass


def _write(path: Path, report: dict) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(report, indent=1, default=str) + "\n", encoding="utf-8")
    tmp.replace(path)


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("-o", "--output", default="gpu_report.json", help="the JSON file to write")
    p.add_argument("--device", default="cuda", help="cuda (GPU 0; plan uses 2 GPUs) or cpu")
    p.add_argument("--quick", action="store_true", help="tiny models: the script end to end in seconds")
    p.add_argument("--budget", type=float, default=DEFAULT_BUDGET_S, help="seconds for all the steps")
    p.add_argument("--device-spec", default=None, help="the device-table key to predict with (default: the "
                   "entry matched by GPU 0's name)")
    p.add_argument("--only", default=None, help="run only the steps whose name contains one of these words "
                   "(comma-separated)")
    args = p.parse_args(argv)
    try:
        device, spec = _resolve(args.device, args.device_spec, args.budget)
    except InputError as e:
        print(f"gpu_report: error: {e}", file=sys.stderr)
        return 2
    import torch

    start = time.monotonic()
    gpus = torch.cuda.device_count() if device != "cpu" else 0
    report = {"report": "tfcalc gpu report", "version": VERSION, "device": device, "quick": args.quick,
              "budget_s": args.budget, "wall_s": 0.0, "environment": environment(device),
              "device_spec": devices.as_dict(spec) if spec else None, "results": []}
    out = Path(args.output)
    only = [w.strip() for w in args.only.split(",")] if args.only else None
    for step in plan_steps(device, args.quick, spec, gpus):
        if only and not step.skip and not any(w in step.name for w in only):
            step = Step(step.name, step.expected_s, step.run, f"not asked for (--only {args.only})")
        left = args.budget - (time.monotonic() - start)
        result = run_step(step, left)
        report["results"].append(result)
        report["wall_s"] = time.monotonic() - start
        _write(out, report)
        print(steps.summary(result), file=sys.stderr, flush=True)
    _write(out, report)
    print(f"wrote {out} ({report['wall_s']:.0f} s)", file=sys.stderr)
    return 0


def _resolve(device: str, spec_key: Optional[str], budget: float) -> tuple[str, Optional[devices.DeviceSpec]]:
    """('cuda:0' or 'cpu', the device-table entry predictions use); InputError, one line, otherwise."""
    import torch

    if not budget > 0:
        raise InputError(f"--budget must be a positive number of seconds; got {budget:g}")
    if device not in ("cuda", "cpu"):
        raise InputError(f"--device must be cuda or cpu; got {device!r}")
    if device == "cuda" and not torch.cuda.is_available():
        raise InputError(f"no CUDA device here (torch {torch.__version__}, CUDA build {torch.version.cuda or 'none'}):"
                         " this report measures GPUs; --device cpu --quick runs it on the CPU")
    if spec_key is not None:
        return ("cuda:0" if device == "cuda" else "cpu"), devices.resolve(spec_key)
    if device == "cpu":
        return "cpu", None
    return "cuda:0", devices.lookup(torch.cuda.get_device_name(0))


if __name__ == "__main__":
    sys.exit(main())
