"""The report of `tfcalc bench decode`: measured generation (time to first token, per-token decode
latency, tokens/s, bandwidth and MBU) beside the roofline's prediction with the ceilings measured in the
same run. The JSON of a measured point is shared with `tfcalc infer --measure` (``measured_json``).

Conventions (docs/serving.md):
- time to first token = the prefill of the prompt (the first new token's logits included);
- per-token figures are over the timed decode steps: step j attends to seq + j positions;
- bytes per token = weights + KV cache read per decode step, divided by the batch (the mean over the
  steps); achieved bandwidth = those bytes × batch / the median step time; MBU = achieved bandwidth /
  the measured bandwidth ceiling, the slowest of a device copy, a read-only reduction and a
  matrix-vector product (tfcalc.measure.bench.Bandwidth), and / the datasheet bandwidth where the
  device is in the table;
- ratios are predicted ÷ measured time: below 1 the device ran slower than the roofline says it can.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional

from tfcalc import devices
from tfcalc.count.model import quant
from tfcalc.count.serving import static as serving
from tfcalc.count.serving.roofline import Ceilings, Row, Step
from tfcalc.errors import InputError
from tfcalc.report.display import Displayed
from tfcalc.report.model_ref import ModelRef
from tfcalc.workload import Workload, check_size

DEFAULT_COPY_BYTES = {"cpu": 256 * 2**20, "gpu": 2**30}  # far past any last-level cache


def rows_json(step: Step, c: Ceilings) -> list[dict[str, Any]]:
    """The roofline of one step, matmul by matmul."""
    def row(r: Row) -> dict[str, Any]:
        return {"component": r.component, "label": r.label, "flops": r.flops, "weight_bytes": r.weight_bytes,
                "kv_bytes": r.kv_bytes, "activation_bytes": r.activation_bytes, "intensity": r.intensity,
                "time_s": r.time_s(c), "bound": r.bound(c), "matmul_efficiency": c.efficiency(r)}

    return [row(r) for r in step.rows]


def _overhead_json(o) -> Optional[dict[str, Any]]:
    """The performance model's per-step costs beside the roofline rows (tfcalc.count.perf.inference)."""
    return None if o is None else {"kernels": o.kernels, "kernel_s": o.kernel_s, "dequant_s": o.dequant_s,
                                   "traffic_s": o.traffic_s, "comm_s": o.comm_s, "request_s": o.request_s,
                                   "total_s": o.total_s, "host_s": o.host_s, "launch": o.launch,
                                   "moe_dispatch_s": o.moe_s,  # count.perf.moe_dispatch (perf.inference, 3b)
                                   "moe_permute_s": o.moe_permute_s}  # count.perf.moe_serving (perf.inference, 3c)


def _host_bound(o, step_s: Optional[float]) -> bool:
    """Whether a step's predicted time is its host's (launch "eager", the host slower than the device)."""
    return o is not None and step_s is not None and o.host_s > 0 and o.host_s >= step_s


def predicted_json(est: serving.Estimate, c: Ceilings, read: Optional[serving.Estimate] = None) -> dict[str, Any]:
    """The prediction's figures under the keys of the measured ones: with ``read`` (the same request priced at
    the keys tfcalc's steps read, their bucket; ``read_estimate``) its decode figures, else ``est``'s at the
    live context; both named (``keys``; ``*_live``, ``*_read``)."""
    live, est = est, read or est
    return {
        "keys": est.keys,
        "decode_s_per_token_live": live.decode_s_per_token, "bytes_per_token_live": live.bytes_per_token,
        "decode_s_per_token_read": read.decode_s_per_token if read else None,
        "bytes_per_token_read": read.bytes_per_token if read else None,
        "prefill_s": est.prefill_s,
        "decode_s_per_token": est.decode_s_per_token,
        "decode_tokens_per_s": est.decode_tokens_per_s,
        "decode_tokens_per_s_total": est.decode_tokens_per_s_total,
        "bytes_per_token": est.bytes_per_token,
        "bound": est.bound,
        "prefill_bound": est.prefill.bound(c),
        # how the steps' kernels reach the GPU ("graph": captured, no host term; "eager": tfcalc.count.perf.inference,
        # step 6); None: the roofline alone (measured ceilings carry no performance model)
        "launch": c.perf.launch if c.perf is not None else None,
        # eager steps whose host's time exceeds the device's: the step is the host's (perf.inference, step 6)
        "host_bound": {"prefill": _host_bound(est.prefill_overhead, est.prefill_s - (
                           est.prefill_overhead.request_s if est.prefill_overhead else 0.0)),
                       "decode": _host_bound(est.decode_overhead, est.decode_s_per_token)},
        "overhead": {"prefill": _overhead_json(est.prefill_overhead),
                     "decode_step": _overhead_json(est.decode_overhead)},
        "bandwidth_ceiling_bytes_per_s": c.bytes_per_s,
        "flops_ceiling_flops_per_s": c.flops_per_s,
        "ridge_flops_per_byte": c.ridge,
        "ceilings": c.source,
    }


def _ratio(predicted: Optional[float], measured: Optional[float]) -> Optional[float]:
    return None if predicted is None or not measured else predicted / measured


def read_span(timing, seq: int) -> Optional[Callable[[int], int]]:
    """The keys each timed step read, as serving.estimate's ``span``: timed step j, at the live context
    seq + j + 1, read timing.spans[j] slots (its bucket, recorded by the run); None where none are recorded."""
    spans = tuple(getattr(timing, "spans", ()))
    if not spans:
        return None
    return lambda live: spans[min(max(live - seq - 1, 0), len(spans) - 1)]


def read_estimate(cfg, w: Workload, fmt, c: Ceilings, timing, **kwargs) -> Optional[serving.Estimate]:
    """The request ``w`` priced at the keys the timed steps read (``read_span``): the roofline of the run."""
    span = read_span(timing, w.seq)
    return None if span is None else serving.estimate(cfg, w, fmt, c, span=span, **kwargs)


def measured_json(est: serving.Estimate, timing, run, c: Ceilings, dtype: str,
                  read: Optional[serving.Estimate] = None) -> dict[str, Any]:
    """One measured point (a tfcalc.measure.decode.DecodeTiming of a DecodeRun, in dtype) beside its
    prediction: at the keys its steps read (``read``, from ``read_estimate``) where given, the live context's
    beside it (``predicted.*_live``, ``ratio.decode_live``)."""
    spec = devices.lookup(run.device_name)
    step, prefill = timing.step, timing.prefill
    moved = est.bytes_per_token * est.batch  # weights + KV per step
    achieved = moved / step.median
    prefill_rate = est.prefill.flops / prefill.median
    peak = spec.peak(dtype, tf32_enabled=getattr(run, "tf32", False)) if spec else None  # as bench reads it
    return {
        "prefill_s": prefill.median, "prefill_p10_s": prefill.p10, "prefill_p90_s": prefill.p90,
        "decode_s_per_token": step.median, "decode_p10_s": step.p10, "decode_p90_s": step.p90,
        "decode_tokens_per_s": 1 / step.median, "decode_tokens_per_s_total": est.batch / step.median,
        "bytes_per_token": est.bytes_per_token,
        "bound": est.bound,
        "achieved_bandwidth_bytes_per_s": achieved,
        "bandwidth_ceiling_bytes_per_s": run.bandwidth_ceiling_bytes_per_s,
        "copy_bandwidth_bytes_per_s": run.bandwidth.copy_bytes_per_s,
        "read_bandwidth_bytes_per_s": run.bandwidth.read_bytes_per_s,
        "matvec_bandwidth_bytes_per_s": run.bandwidth.matvec_bytes_per_s,
        "mbu": achieved / run.bandwidth_ceiling_bytes_per_s,
        "peak_bandwidth_bytes_per_s": spec.bandwidth_bytes_per_s if spec else None,
        "mbu_datasheet": achieved / spec.bandwidth_bytes_per_s if spec else None,
        "prefill_flops": est.prefill.flops,
        "prefill_achieved_flops_per_s": prefill_rate,
        "matmul_ceiling_flops_per_s": run.matmul_ceiling_flops_per_s,
        "prefill_ceiling_fraction": prefill_rate / run.matmul_ceiling_flops_per_s,
        "peak_flops_per_s": peak,
        "prefill_mfu": prefill_rate / peak if peak else None,
        "cache_bytes": timing.cache_bytes,
        "load_average": run.load_average, "cpus": run.cpus, "busy": run.busy,
        "samples": {"prefill": len(prefill.samples), "decode": len(step.samples)},
        **_read_json(est, timing, run, dtype),
        "predicted": predicted_json(est, c, read),
        "ratio": {"prefill": _ratio(est.prefill_s, prefill.median),
                  "decode": _ratio((read or est).decode_s_per_token, step.median),
                  "decode_live": _ratio(est.decode_s_per_token, step.median)},
    }


def _read_json(est: serving.Estimate, timing, run, dtype: str) -> dict[str, Any]:
    """How the steps ran (``mode``: "graph", "eager" or "compile"; tfcalc.model.generate) and what they read:
    each step attends over a bucket of its cache (tfcalc.model.cache), so its KV bytes are the roofline's
    at that span (min(span, W) keys in a windowed layer), not at the live context. ``bytes_per_token_read``:
    weights + KV those steps read, per token, averaged over the timed steps; ``mbu_read``: the bandwidth
    achieved on those bytes ÷ the measured ceiling."""
    spans = tuple(getattr(timing, "spans", ()))
    out: dict[str, Any] = {"mode": getattr(timing, "mode", "eager"), "kv_span_min": min(spans, default=None),
                           "kv_span_max": max(spans, default=None)}
    read = getattr(timing, "read_bytes_per_step", None)
    if read is not None:
        out["bytes_per_token_read"] = read / est.batch
        out["mbu_read"] = read / timing.step.median / run.bandwidth_ceiling_bytes_per_s
    return out


def measured_ceilings(run) -> Ceilings:
    return Ceilings(run.matmul_ceiling_flops_per_s, run.bandwidth_ceiling_bytes_per_s, f"measured on {run.device}")


def default_copy_bytes(device: str) -> int:
    return DEFAULT_COPY_BYTES["cpu" if device.strip().lower() == "cpu" else "gpu"]


@dataclass(frozen=True, repr=False)
class DecodeBenchReport(Displayed):
    model: ModelRef
    plan: Any  # tfcalc.measure.decode.DecodePlan
    rows: tuple[dict[str, Any], ...]  # one JSON object per (batch, seq) point

    def headline(self) -> str:
        from tfcalc import units

        r = self.rows[-1]
        return (f"{self.model.label} on {r['device']}, batch {r['batch']}, prompt {r['seq']:,}: "
                f"{units.seconds(r['decode_s_per_token'])} a token, {units.tokens_rate(r['decode_tokens_per_s'])}")

    def to_json(self) -> Any:
        """One object for one sequence length, a list for several (as `tfcalc bench`)."""
        return dict(self.rows[0]) if len(self.rows) == 1 else [dict(r) for r in self.rows]


def plan_decode_bench(model: ModelRef, batch: int, seqs: Optional[list[int]], steps: int, device: str = "cpu",
                      dtype: str = "fp32", warmup: int = 3, repeat: int = 10, matmul_size: Optional[int] = None,
                      copy_bytes: Optional[int] = None, eager: bool = False, compile: bool = False):
    """Every option checked, nothing run."""
    from tfcalc.measure.decode import DecodePlan, check_plan

    cfg = model.cfg
    check_size("--batch", batch)
    from tfcalc.measure import bounds

    bounds.check("--steps", steps)
    bounds.check("--repeat", repeat)
    bounds.check("--warmup", warmup, low=0)
    for size, name in ((matmul_size, "--matmul-size"), (copy_bytes, "--copy-size")):
        if size is not None:
            bounds.check(name, size)
    if not seqs:
        bounded = cfg.architecture.bounded_positions
        seqs = [max(1, cfg.max_seq_len - max(steps, warmup))] if bounded else [cfg.max_seq_len]
    for s in seqs:
        check_size("--seq", s)
    if cfg.arch == "encoder":
        raise InputError(f"{cfg.name} is an encoder: it generates no tokens, so there is no decoding to time")
    plan = DecodePlan(cfg=cfg, device=device, dtype=dtype, points=tuple((batch, s) for s in seqs), steps=steps,
                      warmup=warmup, repeat=repeat, matmul_size=matmul_size or (2048 if device == "cpu" else 8192),
                      copy_bytes=copy_bytes or default_copy_bytes(device), eager=eager, compile=compile)
    check_plan(plan)
    return plan


def point_json(model: ModelRef, plan, run, timing, batch: int, seq: int) -> dict[str, Any]:
    """The context of a point, then its measured and predicted figures."""
    c = measured_ceilings(run)
    w = Workload(batch=batch, seq=seq, gen=plan.steps + 1, dtype=plan.dtype)  # the source: as many as the prompt
    est = serving.estimate(plan.cfg, w, quant.plain(plan.dtype), c)
    read = read_estimate(plan.cfg, w, quant.plain(plan.dtype), c, timing)
    return {
        "preset": plan.cfg.name, "label": model.label, "device": run.device, "device_name": run.device_name,
        "dtype": plan.dtype, "batch": batch, "seq": seq, "decode_steps": plan.steps, "warmup": plan.warmup,
        "weights_bytes": run.weights_bytes, "estimated_memory_bytes": run.estimate_bytes,
        **measured_json(est, timing, run, c, plan.dtype, read),
        # the first step as it ran (over its bucket of keys), and at its live context
        "roofline": {"prefill": rows_json(est.prefill, c),
                     "first_decode_step": rows_json((read or est).first_decode_step, c),
                     "first_decode_step_live": rows_json(est.first_decode_step, c)},
    }


def build_decode_bench(model: ModelRef, plan, advance: Callable[[], None] = lambda: None) -> DecodeBenchReport:
    from tfcalc.measure.decode import run_decode  # imports torch

    run = run_decode(plan, advance)
    return DecodeBenchReport(model, plan, tuple(point_json(model, plan, run, t, b, s)
                                                for (b, s), t in zip(plan.points, run.timings, strict=True)))
