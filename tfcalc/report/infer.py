"""Building the report of `tfcalc infer` (tfcalc.report.infer_report) from its options
(tfcalc.report.infer_options): serving estimates on a roofline -- prefill latency, decode tokens/s per
sequence and in total, KV cache and weight bytes, the largest batch that fits, the batch at which decode
turns compute-bound -- for a device from the datasheet table (or a user's YAML), or, with --measure, for
the device it runs on, with its ceilings measured and the measurement beside the prediction.

The JSON has one object per batch size (a list for several): the context, the top-level figures
(``prefill_s``, ``decode_s_per_token``, ``decode_tokens_per_s``, ``bytes_per_token``, ``bound``, and for
measured runs ``bandwidth_ceiling_bytes_per_s``: the measurement when --measure, else the prediction),
and ``predicted`` (always the prediction, under the same keys). Conventions: tfcalc.count.serving,
tfcalc.count.serving.roofline and docs/serving.md.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Callable, Optional

from tfcalc import devices
from tfcalc.count.model.memory import check_dtype
from tfcalc.count.model.quant import WeightFormat, default_kv_dtype, weight_format
from tfcalc.count.perf.hardware import PerfSpec, check_fraction, device_perf, fp8_ceiling_note, with_launch
from tfcalc.count.serving import expert_parallel as ep, speculative, static as serving
from tfcalc.count.serving.roofline import Ceilings, read_span
from tfcalc.errors import InputError, shown
from tfcalc.report import (
    continuous as continuous_report,
    continuous_measured,
    disaggregated,
    infer_ep,
    speculative_measured,
)
from tfcalc.report.decode import default_copy_bytes, measured_ceilings, measured_json, read_estimate
from tfcalc.report.infer_options import InferOptions
from tfcalc.report.infer_report import InferReport
from tfcalc.report.model_ref import ModelRef
from tfcalc.report.serving_tp import check_tp, measure_tp, tensor_parallel
from tfcalc.workload import Workload, check_size, decoder_source

DEFAULT_SPEC = "h100-sxm"


def weight_formats(o: InferOptions) -> tuple[WeightFormat, str]:
    check_dtype(o.dtype)
    fmt = weight_format(o.dtype, o.group_size)
    kv = o.kv_dtype or default_kv_dtype(fmt)
    check_dtype(kv)
    if kv == "int4":
        raise InputError("--kv-dtype int4 is not a cache format tfcalc models; use fp8 or int8")
    return fmt, kv


def _seq(model: ModelRef, o: InferOptions) -> int:
    cfg = model.cfg
    limited = cfg.architecture.bounded_positions
    # the default prompt leaves room for --gen inside the context (llama3-70b: 7,936 + 256 = 8,192), measured or not
    seq = o.seq if o.seq is not None else max(1, cfg.max_seq_len - o.gen) if limited else cfg.max_seq_len
    check_size("--seq", seq)
    if o.measure and limited and seq + o.gen > cfg.max_seq_len:  # an estimate past the context is arithmetic
        raise InputError(f"{cfg.name} has {cfg.architecture.positions} positions for at most {cfg.max_seq_len:,} "
                         f"tokens; --seq {seq:,} + --gen {o.gen:,} goes past them")
    return seq


def datasheet_ceilings(device_spec: Optional[str], fmt: WeightFormat, matmul_efficiency: Optional[float] = None,
                       bandwidth_efficiency: Optional[float] = None) -> tuple[devices.DeviceSpec, Ceilings]:
    """The device (a table key or a YAML file; default DEFAULT_SPEC), the datasheet peak for the dtype the
    format computes in, the achievable bandwidth, and the performance model's properties
    (tfcalc.count.perf.hardware; overridden by --matmul-efficiency, --bandwidth-efficiency)."""
    spec = devices.resolve(device_spec or DEFAULT_SPEC)
    peak = spec.peak(fmt.compute_dtype)
    if peak is None:
        raise InputError(f"{spec.name} has no {fmt.compute_dtype} rate in its datasheet; "
                         f"rated: {', '.join(spec.peak_flops)}")
    perf = device_perf(spec, matmul_efficiency, bandwidth_efficiency)
    return spec, Ceilings(peak, spec.bandwidth_bytes_per_s * perf.bandwidth_efficiency,
                          f"{spec.key} datasheet, {fmt.compute_dtype}; performance model: {perf.source}"
                          + (f"; FP8 GEMMs under {fp8_ceiling_note(spec.key, perf)}"
                             if fmt.compute_dtype == "fp8" else ""),
                          perf,
                          spec.peak("fp32"),
                          # FP8 weights: attention and the LM head at the 16-bit peak (perf.fp8_time, step 3)
                          spec.peak(fmt.rest_dtype) if fmt.compute_dtype == "fp8" else None)


def check_options(model: ModelRef, o: InferOptions) -> None:
    arch = model.cfg.architecture
    if arch.kind == "encoder" or not arch.head.lm_head:
        raise InputError(f"{model.cfg.name} generates no tokens (an encoder, or no LM head): nothing to serve")
    if not isinstance(o.batches, tuple) or not o.batches:
        raise InputError(f"--batch: give one batch size or more; got {shown(o.batches)}")
    for b in o.batches:
        check_size("--batch", b)
    check_size("--gen", o.gen)
    if o.src_seq is not None:
        check_size("--src-seq", o.src_seq)
        if model.cfg.arch != "encoder-decoder":
            raise InputError(f"{model.cfg.name}: --src-seq applies to encoder-decoder models only")
    from tfcalc.measure import bounds

    # the measured run's counts, checked as the command line reads its flags: given, they are checked
    # whether or not anything is measured (an API call's warmup=-1 is as wrong as the flag's)
    bounds.check("--repeat", o.repeat)
    bounds.check("--warmup", o.warmup, low=0)
    for flag, value in (("--copy-size", o.copy_bytes), ("--matmul-size", o.matmul_size)):
        if value is not None:
            bounds.check(flag, value)
    if o.measure:
        bounds.check("--gen", o.gen)  # each generated token is a timed decode step
    for name, value in (("--matmul-efficiency", o.matmul_efficiency), ("--bandwidth-efficiency",
                                                                      o.bandwidth_efficiency)):
        if value is not None:
            check_fraction(name, value)
            if o.measure and o.tp == 1:
                raise InputError(f"{name} sets the performance model of a listed device; --measure measures its own")
    if o.measure and o.tp == 1 and (o.launch is not None or o.host_op_s is not None):
        raise InputError("--launch and --host-op-us set the performance model of a listed device; --measure runs "
                         "its steps as they run (--eager or captured) and measures its own ceilings")
    if o.host_op_s is not None and (o.launch or "graph") != "eager":
        raise InputError("--host-op-us prices the host of eager steps: give --launch eager too")
    with_launch(PerfSpec(), o.launch, o.host_op_s)  # the values, checked: one line each
    if o.measure and o.device_spec is not None and o.tp == 1:
        raise InputError("--device-spec predicts for a listed device, --measure for the one it runs on: give one")
    check_draft(o)
    disaggregated.check(o)  # before continuous's checks: its own line for a missing --rate
    continuous_report.check(o)
    continuous_measured.check(o)


def check_draft(o: InferOptions) -> None:
    """--accept-rate and --draft-tokens belong to --draft; --draft needs --accept-rate; measured at batch 1."""
    if o.draft is None:
        for name, value in (("--accept-rate", o.accept_rate), ("--draft-tokens", o.draft_tokens)):
            if value is not None:
                raise InputError(f"{name} belongs to speculative decoding: give --draft MODEL too")
        return
    if o.accept_rate is None:
        raise InputError("--draft needs --accept-rate A, the probability that the target accepts a draft token "
                         "(a property of the two models and the text; tfcalc does not guess it)")
    if o.measure:  # run for real: tfcalc.report.speculative_measured
        from tfcalc.report.speculative_measured import check

        check(o)


def estimate_infer(model: ModelRef, o: InferOptions, ceilings: Optional[Ceilings] = None,
                   spec: Optional[devices.DeviceSpec] = None) -> InferReport:
    """Every prediction; ceilings from the spec's datasheet unless given (a measured run's)."""
    check_options(model, o)
    o = continuous_report.static_options(o)
    cfg, (fmt, kv), seq = model.cfg, weight_formats(o), _seq(model, o)
    src = decoder_source(cfg, seq, o.src_seq)
    if ceilings is None:
        spec, ceilings = datasheet_ceilings(o.device_spec, fmt, o.matmul_efficiency, o.bandwidth_efficiency)
    if ceilings.perf is not None:  # --launch, --host-op-us (tfcalc.count.perf.inference, step 6)
        ceilings = replace(ceilings, perf=with_launch(ceilings.perf, o.launch, o.host_op_s))
    if continuous_report.loaded(o):  # --max-batch trtllm-bench: the engine's own settings (count/serving/engine_caps)
        o = continuous_report.engine_options(o, cfg, spec, fmt, kv)
    if infer_ep.active(o):  # expert-parallel serving: its own estimate per GPU (tfcalc.report.infer_ep)
        return _expert_parallel(model, o, seq, src, fmt, kv, spec, ceilings)
    check_tp(model, o, spec)
    tp = tensor_parallel(spec, ceilings, o.tp) if o.tp > 1 else None
    memory = devices.usable_bytes(spec, communicating=o.tp > 1) if spec is not None else None
    state = None
    w = Workload(batch=o.batches[0], seq=seq, src_seq=src, gen=o.gen, dtype=fmt.dtype, kv_dtype=kv)
    hit = continuous_report.cached_tokens(model, o, seq)  # --cached-prefix: the prompt's P tokens hit (serving.prefix)
    if continuous_report.loaded(o):  # the static estimate beside: at the mean decode batch, or the largest that fits
        state = continuous_report.steady_state(o, cfg, fmt, kv, ceilings, memory, tp)
        fitting = None if memory is None else serving.max_batch(cfg, w, fmt, memory, tp)
        o = replace(o, batches=(continuous_report.batch_of(state, fitting),))
    estimates = tuple(serving.estimate(cfg, replace(w, batch=b), fmt, ceilings, memory, tp, cached=hit)
                      for b in o.batches)
    # the same requests as tfcalc's own runtime reads them: each step over a bucket of a cache of seq + gen - 1
    # slots (tfcalc.model.generate), beside the live context's figures above
    read = tuple(serving.estimate(cfg, replace(w, batch=b), fmt, ceilings, memory, tp,
                                  span=lambda n: read_span(n, seq + o.gen - 1), cached=hit) for b in o.batches)
    return with_draft(model, o, InferReport(
        model, o, seq, src, fmt, kv, spec, ceilings, estimates,
        None if memory is None else serving.max_batch(cfg, w, fmt, memory, tp),
        serving.compute_bound_batch(cfg, w, fmt, ceilings, tp),
        serving.weight_matmuls_compute_bound_batch(cfg, w, fmt, ceilings, tp), continuous=state, read_estimates=read,
        disaggregated=disaggregated.solve(o, cfg, fmt, kv, ceilings, spec, memory, tp),
    ))


def _expert_parallel(model: ModelRef, o: InferOptions, seq: int, src: Optional[int], fmt: WeightFormat, kv: str,
                     spec: Optional[devices.DeviceSpec], ceilings: Ceilings) -> InferReport:
    lay = infer_ep.layout(model, o, spec, ceilings)  # --measure's own rule: build_infer
    continuous_report.cached_tokens(model, o, seq)  # checked; under load the groups' servers take it
    w = Workload(batch=o.batches[0], seq=seq, src_seq=src, gen=o.gen, dtype=fmt.dtype, kv_dtype=kv)
    memory, state = devices.usable_bytes(spec, communicating=True), None
    if continuous_report.loaded(o):  # each attention-DP group a server; the static estimate at the mean batch
        state = infer_ep.steady_state(model, o, fmt, kv, ceilings, memory, lay)
        fitting = None if memory is None else ep.max_batch(model.cfg, w, fmt, memory, lay)
        o = replace(o, batches=(continuous_report.batch_of(state, fitting),))
    f = infer_ep.estimates(model, o, w, fmt, ceilings, memory, lay)
    return InferReport(model, o, seq, src, fmt, kv, spec, ceilings, f["estimates"], f["max_batch"],
                       f["compute_bound_batch"], f["weight_matmuls_compute_bound_batch"], ep_layout=lay,
                       ep_terms=f["ep_terms"], continuous=state,
                       disaggregated=disaggregated.solve(o, model.cfg, fmt, kv, ceilings, spec, memory, lay=lay))


def with_draft(model: ModelRef, o: InferOptions, report: "InferReport") -> "InferReport":
    """The speculative round per batch (tfcalc.count.serving.speculative), the draft resolved like MODEL."""
    if o.draft is None:
        return report
    from tfcalc.report.model_ref import resolve

    draft = resolve(o.draft, [])
    k = speculative.DEFAULT_DRAFT_TOKENS if o.draft_tokens is None else o.draft_tokens
    tp = report.tp_link if report.tp > 1 else None
    rows = tuple(speculative.estimate(model.cfg, draft.cfg, Workload(batch=e.batch, seq=report.seq, gen=o.gen,
                                                                     src_seq=report.src_seq, dtype=report.fmt.dtype,
                                                                     kv_dtype=report.kv_dtype),
                                      report.fmt, report.ceilings, k, o.accept_rate, tp)
                 for e in report.estimates)
    return replace(report, draft=draft, speculative=rows)


def measure_infer(model: ModelRef, o: InferOptions, advance: Callable[[], None] = lambda: None) -> InferReport:
    """Run on o.device: measure the ceilings, time each batch, predict with the measured ceilings."""
    from tfcalc.measure.decode import DecodePlan, check_plan, run_decode  # imports torch

    check_options(model, o)
    check_tp(model, o, None)
    static = continuous_report.static_options(o)  # --rate: the decode timed at batch 1, seq = I, gen = O
    fmt, kv = weight_formats(o)
    if fmt.quantized or kv != fmt.dtype:
        raise InputError("--measure runs the model as built, its cache in the weights' dtype: "
                         "drop --kv-dtype and use --dtype fp32, bf16 or fp16")
    if static.gen < 2:
        raise InputError("--measure times the decode steps after the first token: give --gen 2 or more")
    seq = _seq(model, static)
    src = decoder_source(model.cfg, seq, o.src_seq)
    if o.draft is not None:  # every refusal of the speculative or continuous run before anything runs
        speculative_measured.precheck(model, o, seq)
    if continuous_report.loaded(o):
        continuous_measured.precheck(model, o)
    plan = DecodePlan(cfg=model.cfg, device=o.device, dtype=o.dtype, points=tuple((b, seq) for b in static.batches),
                      steps=static.gen - 1, warmup=o.warmup, repeat=o.repeat,
                      matmul_size=o.matmul_size or (2048 if o.device == "cpu" else 8192),
                      copy_bytes=o.copy_bytes or default_copy_bytes(o.device), src_seq=src, eager=o.eager)
    check_plan(plan)
    run = run_decode(plan, advance)
    ceilings = measured_ceilings(run)
    spec = devices.lookup(run.device_name)
    report = estimate_infer(model, o, ceilings, spec)
    if continuous_report.loaded(o) and report.estimates[0].batch != 1:  # the static row as timed: batch 1
        alone = replace(static, rate=None, concurrency=None, mean_input=None, mean_output=None, requests=None,
                        max_time=None, prefill_chunk=None)
        report = replace(report, estimates=estimate_infer(model, alone, ceilings, spec).estimates)
    rows = tuple(measured_json(est, t, run, ceilings, o.dtype, read_estimate(  # priced at the keys its steps read
                     model.cfg, Workload(batch=est.batch, seq=report.seq, src_seq=report.src_seq, gen=o.gen,
                                         dtype=report.fmt.dtype, kv_dtype=report.kv_dtype), report.fmt, ceilings, t))
                 for est, t in zip(report.estimates, run.timings, strict=True))
    report = replace(report, measured=rows, device=run.device, device_name=run.device_name)
    if o.draft is not None:
        report = replace(report, speculative_measured=speculative_measured.measure(model, o, report, advance))
    if continuous_report.loaded(o) and report.continuous is not None:
        report = replace(report, continuous_measured=continuous_measured.measure(
            model, o, report.continuous, run.device, advance, ceilings))
    return report


def build_infer(model: ModelRef, o: InferOptions, advance: Callable[[], None] = lambda: None) -> InferReport:
    if infer_ep.active(o):  # the listed device's prediction; --measure: the experts on E gloo ranks beside it
        report = estimate_infer(model, replace(o, measure=False))
        if not o.measure:
            return report
        infer_ep.layout(model, o, report.spec, report.ceilings)  # what a measured run takes, before any rank starts
        return replace(report, options=o, ep_measured=infer_ep.measure(model, report.ep_layout,
                                                                       report.estimates[0].batch))
    if o.measure and o.tp > 1:  # the prediction for the listed device, the collectives measured on T ranks
        check_options(model, o)
        report = estimate_infer(model, replace(o, measure=False))
        return replace(report, options=o, tp_measured=measure_tp(model, o, report.estimates[0].batch,
                                                                        report.seq))
    return measure_infer(model, o, advance) if o.measure else estimate_infer(model, o)
