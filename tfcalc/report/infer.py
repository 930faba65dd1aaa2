"""The report of `tfcalc infer`: serving estimates on a roofline -- prefill latency, decode tokens/s per
sequence and in total, KV cache and weight bytes, the largest batch that fits, the batch at which decode
turns compute-bound -- for a device from the datasheet table (or a user's YAML), or, with --measure, for
the device it runs on, with its ceilings measured and the measurement beside the prediction.

The JSON has one object per batch size (a list for several): the context, the top-level figures
(``prefill_s``, ``decode_s_per_token``, ``decode_tokens_per_s``, ``bytes_per_token``, ``bound``, and for
measured runs ``bandwidth_ceiling_bytes_per_s``: the measurement when --measure, else the prediction),
and ``predicted`` (always the prediction, under the same keys). Conventions: tfcalc.count.serving,
tfcalc.count.roofline and README, "Serving estimates".
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable, Optional

from tfcalc import devices
from tfcalc.count import continuous, serving, serving_tp, speculative
from tfcalc.count.memory import check_dtype, kv_cache_expanded_bytes
from tfcalc.count.perf.hardware import check_fraction, fp8_ceiling_note, perf_spec
from tfcalc.count.quant import WeightFormat, default_kv_dtype, format_label, stored_mxfp4, weight_format
from tfcalc.count.roofline import Ceilings, experts_touched
from tfcalc.errors import InputError, shown
from tfcalc.report import (
    continuous as continuous_report,
    continuous_measured,
    infer_modes,
    speculative_measured,
)
from tfcalc.report.decode import default_copy_bytes, measured_ceilings, measured_json, predicted_json, rows_json
from tfcalc.report.display import Displayed
from tfcalc.report.infer_modes import check_draft, check_tp, reserved_bytes, tensor_parallel, with_draft
from tfcalc.report.model_ref import ModelRef
from tfcalc.workload import Workload, check_size, decoder_source

DEFAULT_SPEC = "h100-sxm"


@dataclass(frozen=True, kw_only=True)
class InferOptions:
    batches: tuple[int, ...]
    seq: Optional[int]  # None: the context length (measured: less gen, so the positions reach seq + gen)
    gen: int
    dtype: str = "bf16"  # the weights' format: fp32, bf16, fp16, or fp8, int8, int4 (quantized)
    group_size: Optional[int] = None  # quantized formats: weights per scale (int4 default 128)
    kv_dtype: Optional[str] = None  # None: the weights' dtype when plain, else bf16
    src_seq: Optional[int] = None  # encoder-decoders: source length (default: seq)
    device_spec: Optional[str] = None  # a table key or a YAML path; None: DEFAULT_SPEC (or the measured device)
    measure: bool = False
    device: str = "cpu"  # where --measure runs
    warmup: int = 3
    repeat: int = 10
    matmul_size: Optional[int] = None
    copy_bytes: Optional[int] = None
    matmul_efficiency: Optional[float] = None  # every matmul at this share of the peak, not the shape model
    bandwidth_efficiency: Optional[float] = None  # share of the datasheet bandwidth; None: the device's
    # issue 20, serving (helper I): tensor-parallel serving over tp GPUs of one node (tfcalc.count.serving_tp)
    tp: int = 1
    draft: Optional[str] = None  # speculative decoding's draft model (tfcalc.count.speculative)
    accept_rate: Optional[float] = None
    draft_tokens: Optional[int] = None  # None: speculative.DEFAULT_DRAFT_TOKENS
    rate: Optional[float] = None  # continuous batching: requests per second (tfcalc.count.continuous)
    mean_input: Optional[int] = None
    mean_output: Optional[int] = None
    requests: Optional[int] = None  # --rate --measure: requests served (None: continuous_measured's default)
    max_time: Optional[float] = None  # --rate --measure: seconds of serving at most


@dataclass(frozen=True, repr=False)
class InferReport(Displayed):
    model: ModelRef
    options: InferOptions
    seq: int
    src_seq: Optional[int]
    fmt: WeightFormat
    kv_dtype: str
    spec: Optional[devices.DeviceSpec]  # the datasheet device (None for a measured device tfcalc does not know)
    ceilings: Ceilings
    estimates: tuple[serving.Estimate, ...]  # one per batch
    max_batch: Optional[int]  # None: no memory size known (a measured CPU)
    compute_bound_batch: Optional[int]
    weight_matmuls_compute_bound_batch: Optional[int]
    measured: Optional[tuple[dict[str, Any], ...]] = None  # measured_json per batch
    device: Optional[str] = None  # the measured device, as torch writes it
    device_name: Optional[str] = None
    draft: Optional[ModelRef] = None  # --draft: the draft model and, per batch, the speculative round
    speculative: Optional[tuple[speculative.Speculative, ...]] = None
    continuous: Optional[continuous.SteadyState] = None  # --rate: the steady state (report.continuous)
    tp_measured: Optional[dict[str, Any]] = None  # --measure --tp: the collectives on T ranks (infer_modes)
    speculative_measured: Optional[dict[str, Any]] = None  # --measure --draft: the rounds run (speculative_measured)
    continuous_measured: Optional[dict[str, Any]] = None  # --measure --rate: the server run (continuous_measured)

    def headline(self) -> str:
        from tfcalc import units

        data = self.to_json()
        rows = data if isinstance(data, list) else [data]
        each = ", ".join(f"batch {r['batch']:,} {units.tokens_rate(r['decode_tokens_per_s_total'])}"
                         + ("" if r["fits"] is not False else " (does not fit)") for r in rows)
        where = rows[0]["device"] if self.tp == 1 else f"{self.tp} × {rows[0]['device']}"
        line = f"{self.model.label} on {where}, prompt {self.seq:,}: decode {each}"
        steady = rows[0]["continuous"]
        if steady is not None:
            line += (f"; at {steady['rate_per_s']:g} requests/s over capacity ({steady['limit']})"
                     if steady["over_capacity"] else f"; at {steady['rate_per_s']:g} requests/s TTFT "
                     f"{units.seconds(steady['ttft_s'])}, {units.seconds(steady['itl_s'] or 0)} between tokens")
        spec = rows[0]["speculative"]
        if spec is not None:
            line += f"; with draft {spec['draft_label']}: speedup {spec['speedup']:.2f}×"
        return line

    def row_json(self, i: int) -> dict[str, Any]:
        est, c = self.estimates[i], self.ceilings
        predicted = predicted_json(est, c)
        top = self.measured[i] if self.measured else {k: predicted[k] for k in (
            "prefill_s", "decode_s_per_token", "decode_tokens_per_s", "decode_tokens_per_s_total",
            "bytes_per_token", "bound")} | {"bandwidth_ceiling_bytes_per_s": None, "predicted": predicted}
        return {
            "preset": self.model.cfg.name, "label": self.model.label, "batch": est.batch, "seq": self.seq,
            "gen": self.options.gen, "src_seq": self.src_seq,
            "dtype": self.fmt.dtype, "weight_format": {"dtype": self.fmt.dtype, "group_size": self.fmt.group_size,
                                                       "zero_point": self.fmt.zero_point, "label": self.weight_label,
                                                       "experts": "mxfp4" if stored_mxfp4(self.model.cfg, self.fmt)
                                                       else None},
            "experts_read": self.experts_read(est.batch),
            "kv_dtype": self.kv_dtype, "compute_dtype": self.fmt.compute_dtype,
            "device_spec": None if self.spec is None else self.spec.key,
            "device": self.device or (self.spec.key if self.spec else None),
            "device_name": self.device_name or (self.spec.name if self.spec else None),
            "measured": self.measured is not None,
            "ceilings": {"flops_per_s": c.flops_per_s, "bytes_per_s": c.bytes_per_s, "ridge_flops_per_byte": c.ridge,
                         "source": c.source,
                         # FP8 weights: the 16-bit peak attention and the LM head run at (count.perf.fp8_time)
                         "high_precision_flops_per_s": c.high_flops_per_s},
            "weights_bytes": est.weight_bytes, "kv_cache_bytes": est.kv_cache_bytes, "fits": est.fits,
            # latent attention: the cache of expanded K and V heads beside the latent one (memory's key too)
            "kv_cache_expanded_bytes": kv_cache_expanded_bytes(self.model.cfg, Workload(
                batch=est.batch, seq=self.seq, gen=self.options.gen, kv_dtype=self.kv_dtype, src_seq=self.src_seq)),
            # the form a decode step is counted (and tfcalc's module run) in: latent attention's absorbed one
            "decode_attention_form": "absorbed" if self.model.cfg.kv_lora_rank is not None else "standard",
            "memory_bytes": None if self.spec is None else devices.usable_bytes(self.spec, communicating=self.tp > 1),
            "datasheet_memory_bytes": None if self.spec is None else self.spec.memory_bytes,
            "driver_memory_bytes": None if self.spec is None else devices.driver_bytes(self.spec),
            "runtime_reserved_bytes": None if self.spec is None else reserved_bytes(self.spec, self.tp),
            "tp": self.tp, "tensor_parallel": self.tp_json(est), "speculative": self.speculative_json(i),
            "continuous": continuous_report.to_json(self.continuous, self.continuous_measured),
            "max_batch": self.max_batch, "compute_bound_batch": self.compute_bound_batch,
            "weight_matmuls_compute_bound_batch": self.weight_matmuls_compute_bound_batch,
            "total_s": est.total_s, "beyond_context": self.beyond_context,
            **top,
            "roofline": {"prefill": rows_json(est.prefill, c),
                         "first_decode_step": rows_json(est.first_decode_step, c) if est.first_decode_step else None},
        }

    @property
    def tp(self) -> int:
        return self.options.tp

    def tp_json(self, est: serving.Estimate) -> Optional[dict[str, Any]]:
        """Tensor-parallel serving (tfcalc.report.infer_modes.tp_json); None at T = 1."""
        return infer_modes.tp_json(self, est)

    def speculative_json(self, i: int) -> Optional[dict[str, Any]]:
        """--draft: the round at this batch (tfcalc.report.infer_modes.speculative_json); None without."""
        return infer_modes.speculative_json(self, i)
    @property
    def tp_link(self) -> serving_tp.TensorParallel:
        return infer_modes.tensor_parallel(self.spec, self.ceilings, self.tp)

    @property
    def weight_label(self) -> str:
        """The weights' format, with the routed experts' stored format where it applies (MXFP4)."""
        return format_label(self.model.cfg, self.fmt)

    def experts_read(self, batch: int) -> Optional[dict[str, Any]]:
        """A mixture of experts: the experts per layer whose weights a decode step and the prefill read at
        this batch, the expected distinct experts B (or B·T) tokens routed uniformly to k of E touch,
        E·(1 − (1 − k/E)^tokens) (tfcalc.count.roofline.experts_touched); None for a dense model."""
        moe = next((b.ffn for _, b, _ in self.model.cfg.architecture.kinds() if b.is_moe), None)
        if moe is None:
            return None
        E, k = moe.n_expert, moe.top_k
        return {"n_expert": E, "top_k": k, "decode_per_layer": experts_touched(E, k, batch),
                "prefill_per_layer": experts_touched(E, k, batch * self.seq),
                "assumption": "uniform routing: E·(1 − (1 − k/E)^tokens) distinct experts per layer"}

    @property
    def beyond_context(self) -> bool:
        """The generation runs past the positions the model can encode: arithmetic only."""
        cfg = self.model.cfg
        return cfg.pos_encoding in ("learned", "rope", "sinusoidal") and self.seq + self.options.gen > cfg.max_seq_len

    def to_json(self) -> Any:
        rows = [self.row_json(i) for i in range(len(self.estimates))]
        return rows[0] if len(rows) == 1 else rows


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
    limited = cfg.pos_encoding in ("learned", "rope", "sinusoidal")
    seq = o.seq if o.seq is not None else max(1, cfg.max_seq_len - o.gen) if limited and o.measure else cfg.max_seq_len
    check_size("--seq", seq)
    if o.measure and limited and seq + o.gen > cfg.max_seq_len:  # an estimate past the context is arithmetic
        raise InputError(f"{cfg.name} has {cfg.pos_encoding} positions for at most {cfg.max_seq_len:,} tokens; "
                         f"--seq {seq:,} + --gen {o.gen:,} goes past them")
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
    perf = perf_spec(spec.key, matmul_efficiency, bandwidth_efficiency)
    return spec, Ceilings(peak, spec.bandwidth_bytes_per_s * perf.bandwidth_efficiency,
                          f"{spec.key} datasheet, {fmt.compute_dtype}; performance model: {perf.source}"
                          + (f"; FP8 GEMMs under {fp8_ceiling_note(spec.key)}" if fmt.compute_dtype == "fp8" else ""),
                          perf,
                          spec.peak("fp32"),
                          # FP8 weights: attention and the LM head at the 16-bit peak (perf.fp8_time, step 3)
                          spec.peak(fmt.rest_dtype) if fmt.compute_dtype == "fp8" else None)


def check_options(model: ModelRef, o: InferOptions) -> None:
    if model.cfg.arch == "encoder" or not model.cfg.lm_head:
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
    if o.measure:
        check_size("--repeat", o.repeat)
        check_size("--warmup", o.warmup, low=0)
    for name, value in (("--matmul-efficiency", o.matmul_efficiency), ("--bandwidth-efficiency",
                                                                      o.bandwidth_efficiency)):
        if value is not None:
            check_fraction(name, value)
            if o.measure and o.tp == 1:
                raise InputError(f"{name} sets the performance model of a listed device; --measure measures its own")
    if o.measure and o.device_spec is not None and o.tp == 1:
        raise InputError("--device-spec predicts for a listed device, --measure for the one it runs on: give one")
    check_draft(o)
    continuous_report.check(o)
    continuous_measured.check(o)


def estimate_infer(model: ModelRef, o: InferOptions, ceilings: Optional[Ceilings] = None,
                   spec: Optional[devices.DeviceSpec] = None) -> InferReport:
    """Every prediction; ceilings from the spec's datasheet unless given (a measured run's)."""
    check_options(model, o)
    o = continuous_report.static_options(o)
    cfg, (fmt, kv), seq = model.cfg, weight_formats(o), _seq(model, o)
    src = decoder_source(cfg, seq, o.src_seq)
    if ceilings is None:
        spec, ceilings = datasheet_ceilings(o.device_spec, fmt, o.matmul_efficiency, o.bandwidth_efficiency)
    check_tp(model, o, spec)
    tp = tensor_parallel(spec, ceilings, o.tp) if o.tp > 1 else None
    memory = devices.usable_bytes(spec, communicating=o.tp > 1) if spec is not None else None
    state = None
    w = Workload(batch=o.batches[0], seq=seq, src_seq=src, gen=o.gen, dtype=fmt.dtype, kv_dtype=kv)
    if o.rate is not None:  # the static estimate beside: at the mean decode batch, or the largest that fits
        state = continuous.steady_state(cfg, fmt, kv, ceilings, continuous.Traffic(o.rate, o.mean_input, o.mean_output),
                                        memory, tp)
        fitting = None if memory is None else serving.max_batch(cfg, w, fmt, memory, tp)
        o = replace(o, batches=(continuous_report.batch_of(state, fitting),))
    estimates = tuple(serving.estimate(cfg, replace(w, batch=b), fmt, ceilings, memory, tp) for b in o.batches)
    return with_draft(model, o, InferReport(
        model, o, seq, src, fmt, kv, spec, ceilings, estimates,
        None if memory is None else serving.max_batch(cfg, w, fmt, memory, tp),
        serving.compute_bound_batch(cfg, w, fmt, ceilings, tp),
        serving.weight_matmuls_compute_bound_batch(cfg, w, fmt, ceilings, tp), continuous=state,
    ))


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
    if o.rate is not None:
        continuous_measured.precheck(model, o)
    plan = DecodePlan(cfg=model.cfg, device=o.device, dtype=o.dtype, points=tuple((b, seq) for b in static.batches),
                      steps=static.gen - 1, warmup=o.warmup, repeat=o.repeat,
                      matmul_size=o.matmul_size or (2048 if o.device == "cpu" else 8192),
                      copy_bytes=o.copy_bytes or default_copy_bytes(o.device), src_seq=src)
    check_plan(plan)
    run = run_decode(plan, advance)
    ceilings = measured_ceilings(run)
    spec = devices.lookup(run.device_name)
    report = estimate_infer(model, o, ceilings, spec)
    if o.rate is not None and report.estimates[0].batch != 1:  # the static row as timed: batch 1
        alone = replace(static, rate=None, mean_input=None, mean_output=None, requests=None, max_time=None)
        report = replace(report, estimates=estimate_infer(model, alone, ceilings, spec).estimates)
    rows = tuple(measured_json(est, t, run, ceilings, o.dtype)
                 for est, t in zip(report.estimates, run.timings, strict=True))
    report = replace(report, measured=rows, device=run.device, device_name=run.device_name)
    if o.draft is not None:
        report = replace(report, speculative_measured=speculative_measured.measure(model, o, report, advance))
    if o.rate is not None and report.continuous is not None:
        report = replace(report, continuous_measured=continuous_measured.measure(
            model, o, report.continuous, run.device, advance))
    return report


def build_infer(model: ModelRef, o: InferOptions, advance: Callable[[], None] = lambda: None) -> InferReport:
    if o.measure and o.tp > 1:  # the prediction for the listed device, the collectives measured on T ranks
        check_options(model, o)
        report = estimate_infer(model, replace(o, measure=False))
        return replace(report, options=o, tp_measured=infer_modes.measure_tp(model, o, report))
    return measure_infer(model, o, advance) if o.measure else estimate_infer(model, o)
