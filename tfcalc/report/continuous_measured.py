"""`tfcalc infer MODEL --rate R --mean-input I --mean-output O --measure`: continuous batching served on the
device (tfcalc.measure.continuous) beside the steady state predicted with the ceilings measured in the
same run (tfcalc.count.serving.continuous) -- the JSON object ``continuous.measured``.

Measured: throughput (output and prompt tokens per second over the run's span), TTFT, inter-token latency
and end-to-end latency (mean, median, p90 over the requests served), the decode batch (mean sequences per
decode step), the decode step's and the prefill's seconds, and the prefills' share of the time. Predicted
beside, the steady state's means; ratios: predicted ÷ measured, as everywhere in infer (for throughput,
predicted ÷ measured tokens/s). A run starts empty: its first requests see fewer sequences in flight than
the steady state, so a short run's latencies sit below it.

What a decode step read: the measured server runs every slot each step (``decode_rows``), each reading the
same span of its cache, the bucket of the longest row in flight (tfcalc.model.slots: the smallest span that
covers every row, as a contiguous cache without paged attention must), reported as ``kv_span`` (min, mean,
max over the steps) beside ``kv_live_mean``, the positions the rows in flight attend to (what a paged
server's rows would read). The steady state predicts the paged server (N sequences at I + O/2 positions);
``decode_step_as_run_s`` prices the step the run took instead, each step on the roofline at its rows and
span with the measured ceilings (tfcalc.count.serving.continuous.rows_step_s), and ``decode_step_read_bytes``
what those steps read (weights and KV, the mean per step); its ratio to the measured step is
``ratio.decode_step_as_run``.
"""

from __future__ import annotations

import statistics
from typing import TYPE_CHECKING, Any, Callable, Optional

from tfcalc.errors import InputError

if TYPE_CHECKING:
    from tfcalc.count.serving.continuous import SteadyState
    from tfcalc.report.infer_options import InferOptions
    from tfcalc.report.model_ref import ModelRef

DEFAULT_REQUESTS = 64
DEFAULT_MAX_TIME = 60.0  # seconds of serving at most


def check(o: "InferOptions") -> None:
    """--requests and --max-time belong to --rate --measure; each a positive number."""
    loaded = o.rate is not None or o.concurrency is not None
    flag = "--rate" if o.rate is not None else "--concurrency"
    if o.requests is not None or o.max_time is not None:
        if not loaded or not o.measure:
            name = "--requests" if o.requests is not None else "--max-time"
            raise InputError(f"{name} belongs to a measured continuous-batching run: give --rate R (or --concurrency "
                             "C) --measure too")
    from tfcalc.measure import bounds  # the largest a run of a day could use

    if o.requests is not None:
        bounds.check("--requests", o.requests)
    if o.max_time is not None:
        bounds.check_seconds("--max-time", o.max_time)
    if loaded and o.measure:
        if o.tp != 1:
            raise InputError(f"{flag} with --measure --tp is not measured (--measure --tp measures tensor "
                             f"parallelism's collectives alone): drop {flag} or --tp")
        if o.mean_output is not None and o.mean_output < 2:
            raise InputError(f"{flag} --measure times decode steps: give --mean-output 2 or more")


def plan_of(model: "ModelRef", o: "InferOptions"):
    from tfcalc.measure.continuous import ContinuousPlan

    return ContinuousPlan(cfg=model.cfg, device=o.device, dtype=o.dtype, rate=float(o.rate or 0.0),
                          mean_input=o.mean_input, mean_output=o.mean_output, requests=o.requests or DEFAULT_REQUESTS,
                          max_time=float(o.max_time or DEFAULT_MAX_TIME), users=o.concurrency)


def precheck(model: "ModelRef", o: "InferOptions") -> None:
    """Every refusal of the run that needs no device."""
    from tfcalc.measure.continuous import check_plan, require_fit

    plan = plan_of(model, o)
    check_plan(plan)
    require_fit(plan)  # before the plain decoding is timed, not after


def _stats(xs: list[float]) -> Optional[dict[str, float]]:
    if not xs:
        return None
    s = sorted(xs)
    pos = (len(s) - 1) * 0.9
    lo = int(pos)
    p90 = s[lo] + (s[min(lo + 1, len(s) - 1)] - s[lo]) * (pos - lo)
    return {"mean": statistics.fmean(s), "median": statistics.median(s), "p90": p90}


def _ratio(predicted: Optional[float], measured: Optional[dict[str, float]]) -> Optional[float]:
    return None if predicted is None or measured is None or not measured["mean"] else predicted / measured["mean"]


def _as_run(run, plan, ceilings) -> tuple[Optional[float], Optional[float]]:
    """The mean predicted seconds and bytes read of the decode steps as the run took them (module docstring)."""
    from tfcalc.count.model.quant import plain
    from tfcalc.count.serving.continuous import rows_step, rows_step_s

    spans = [span for span, _ in run.decode_reads]
    if not spans or ceilings is None or plan.cfg.arch != "decoder":
        return None, None
    fmt = plain(plan.dtype)
    seconds = {s: rows_step_s(plan.cfg, fmt, plan.dtype, ceilings, run.rows, s) for s in set(spans)}
    read = {s: rows_step(plan.cfg, fmt, plan.dtype, run.rows, s).bytes for s in set(spans)}
    return statistics.fmean(seconds[s] for s in spans), statistics.fmean(read[s] for s in spans)


def to_json(run, state: "SteadyState", plan, device: str, ceilings=None) -> dict[str, Any]:
    """A tfcalc.measure.continuous.ContinuousRun beside the predicted steady state, and its decode steps priced
    as run with ``ceilings`` (the measured ones; None: not priced)."""
    served = run.served
    ttft = [run.token_times[i][0] - run.arrivals[i] for i in served]
    itl = [b - a for i in served for a, b in zip(run.token_times[i][:-1], run.token_times[i][1:], strict=True)]
    done = [i for i in served if len(run.token_times[i]) >= plan.mean_output]
    e2e = [run.token_times[i][-1] - run.arrivals[i] for i in done]
    tokens = sum(len(t) for t in run.token_times)
    prefill = list(run.prefill_s)
    steps = [s for _, s in run.decode_steps]
    batch = [n for n, _ in run.decode_steps]
    out_rate = tokens / run.span_s
    t = state.traffic
    over = state.over_capacity
    predicted = {"ttft_s": state.ttft_s, "itl_s": state.itl_s if t.mean_output > 1 else None, "e2e_s": state.e2e_s,
                 "output_tokens_per_s": None if over else t.rate * t.mean_output,
                 "decode_batch": state.concurrency, "decode_step_s": state.decode_step_s,
                 "prefill_s": state.prefill_s, "prefill_share": state.prefill_share, "over_capacity": over}
    measured_batch = statistics.fmean(batch) if batch else None
    spans = [span for span, _ in run.decode_reads]
    as_run_s, as_run_bytes = _as_run(run, plan, ceilings)
    predicted["decode_step_as_run_s"] = as_run_s
    return {
        "device": device, "dtype": plan.dtype, "requests": plan.requests, "completed": run.completed,
        "served": len(served), "stopped_at_budget": run.stopped, "time_budget_s": plan.max_time,
        "span_s": run.span_s, "slots": run.rows, "cache_bytes": run.cache_bytes, "exact": run.exact,
        "checked_requests": run.checked,
        "arrivals": f"Poisson, {plan.rate:g} requests/s, random.Random({plan.seed})" if plan.users is None else
                    f"closed loop of {plan.users:,} users, each next request when its last token came",
        "lengths": f"every request {plan.mean_input} tokens in, {plan.mean_output} out",
        "output_tokens_per_s": out_rate, "input_tokens_per_s": len(served) * plan.mean_input / run.span_s,
        "requests_per_s": run.completed / run.span_s,
        "ttft_s": _stats(ttft), "itl_s": _stats(itl), "e2e_s": _stats(e2e),
        "decode_steps": len(steps), "decode_batch_mean": measured_batch, "decode_step_s": _stats(steps),
        "decode_rows": run.rows,
        "kv_span": None if not spans else {"min": min(spans), "mean": statistics.fmean(spans), "max": max(spans)},
        "kv_live_mean": statistics.fmean(live for _, live in run.decode_reads) if spans else None,
        "decode_step_read_bytes": as_run_bytes,
        "prefills": len(prefill), "prefill_s": _stats(prefill), "prefill_share": sum(prefill) / run.span_s,
        "predicted": predicted,
        "ratio": {"ttft": _ratio(state.ttft_s, _stats(ttft)), "itl": _ratio(predicted["itl_s"], _stats(itl)),
                  "e2e": _ratio(state.e2e_s, _stats(e2e)),
                  "output_tokens_per_s": None if over or not out_rate else predicted["output_tokens_per_s"] / out_rate,
                  "decode_batch": None if state.concurrency is None or not measured_batch
                  else state.concurrency / measured_batch,
                  "decode_step": _ratio(state.decode_step_s, _stats(steps)),
                  "decode_step_as_run": _ratio(as_run_s, _stats(steps)),
                  "prefill": _ratio(state.prefill_s, _stats(prefill))},
    }


def measure(model: "ModelRef", o: "InferOptions", state: "SteadyState", device: str,
            advance: Callable[[], None] = lambda: None, ceilings=None) -> dict[str, Any]:
    from tfcalc.measure.continuous import run_continuous  # imports torch

    plan = plan_of(model, o)
    return to_json(run_continuous(plan, advance), state, plan, device, ceilings)


def calls(o: "InferOptions") -> int:
    """Progress calls of the measured run: one per request served."""
    return 0 if (o.rate is None and o.concurrency is None) or not o.measure else (o.requests or DEFAULT_REQUESTS)
