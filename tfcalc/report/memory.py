"""The report of `tfcalc memory`: weights, KV cache, activations, training state, a fit against a budget,
and the peak measured on a device."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable, Optional

from tfcalc.architecture.mixer import ATTENTION, MixerRole, role_of
from tfcalc.count.model import budget, lora as lora_count, memory as mem, quant, training_memory as training
from tfcalc.count.model.activations import commonest_block
from tfcalc.count.model.params import total as param_total
from tfcalc.count.training.rank_activations import korthikanti_bytes, training_activations
from tfcalc.report.display import Displayed
from tfcalc.report.model_ref import ModelRef, WorkloadFields
from tfcalc.workload import Layout, Workload


@dataclass(frozen=True, kw_only=True)
class MemoryOptions:
    """How the memory is asked about: a training step or inference, and its choices."""

    training: bool = False
    optimizer: str = "adam-mixed"
    attention: Optional[str] = None  # None: flash (what training stacks run); measured: what the real module runs
    recompute: str = "none"
    budget: Optional[int] = None  # bytes to fit, or None
    kv_dtype: Optional[str] = None  # the KV cache's dtype; None: tfcalc.count.model.quant.default_kv_dtype
    group_size: Optional[int] = None  # int8/int4/fp8 weights: weights per scale (tfcalc.count.model.quant)
    lora: Optional[lora_count.LoraSpec] = None  # --lora-rank/--lora-targets: a frozen base, adapters trained


@dataclass(frozen=True, repr=False)
class MemoryReport(WorkloadFields, Displayed):
    model: ModelRef
    workload: Workload  # resolved
    options: MemoryOptions
    params: int
    weights: int
    kv_cache: int
    working_set: int  # no-grad forward pass, beyond the weights
    activations: Optional[mem.Activations]  # None when the dtype is not a training dtype
    state: Optional[training.TrainingState]
    korthikanti: int
    fit: Optional[budget.Fit] = None
    measured: Any = None  # tfcalc.measure.memory.MeasuredPeak
    cross_kv_cache: int = 0  # the part of kv_cache that is an encoder-decoder's cross-attention cache
    weight_format: quant.WeightFormat = quant.plain("bf16")
    weight_parts: Optional[dict[str, int]] = None  # quantized formats: quantized, scales, zero_points, unquantized
    kv_dtype: str = "bf16"
    kv_cache_expanded: Optional[int] = None  # latent attention: the K and V heads its cache expands to
    # the decoder's state split: what grows with the tokens and what each sequence holds whatever its length
    split: Optional[mem.StateSplit] = None
    lora: Optional[lora_count.LoraTraining] = None  # --lora-rank: the adapters, the frozen base, the delta

    def headline(self) -> str:
        from tfcalc import units

        fit = "" if self.fits is None else "; fits the budget" if self.fits else "; does not fit the budget"
        return (f"{self.model.label}, {self.dtype}, batch {self.batch}, seq {self.seq:,}: weights "
                f"{units.nbytes(self.weights)}, KV cache {units.nbytes(self.kv_cache)}{fit}")

    @property
    def weight_label(self) -> str:
        """The weights' format, with the routed experts' stored format where it applies (MXFP4)."""
        return quant.format_label(self.cfg, self.weight_format)

    @property
    def fits(self) -> Optional[bool]:
        """Whether this batch and seq fit the --budget (None without one): the state or weights, and then
        the batch at this seq (the largest batch that fits is at least this one)."""
        return None if self.fit is None else self.fit.weights_fit and self.fit.max_batch >= self.batch

    @property
    def training(self) -> bool:
        return self.options.training

    @property
    def training_bytes(self) -> Optional[int]:
        """State + the larger of the activation peak and the optimizer step's temporaries."""
        if self.state is None:
            return None
        return self.state.total + max(self.activations.total, self.state.step_temporaries)

    @property
    def inference_bytes(self) -> int:
        return self.weights + self.kv_cache

    @property
    def run_estimate(self) -> int:
        """The estimate of what the measured run holds at its peak: training, the training total; a
        forward pass, the weights and the working set (it keeps no KV cache)."""
        return self.training_bytes if self.training else self.weights + self.working_set

    @property
    def ratio(self) -> Optional[float]:
        return None if self.measured is None else self.measured.peak_bytes / self.run_estimate

    @property
    def layer_role(self) -> Optional[MixerRole]:
        """The role of the mixer of the block "per layer" shows (the output stack's commonest), where it is not
        attention (a Mamba2 layer's: its activation terms are the SSM's, tfcalc.architecture.mixer.MixerRole);
        None for attention's."""
        role = role_of(commonest_block(self.cfg.architecture.output).mixer)
        return None if role == ATTENTION else role

    def to_json(self) -> dict[str, Any]:
        a, s, m, fit, o = self.activations, self.state, self.measured, self.fit, self.options
        return {
            "preset": self.cfg.name,
            "label": self.model.label,
            "overrides": list(self.model.overrides),
            "dtype": self.dtype,
            "kv_dtype": self.kv_dtype,
            "weight_format": {"dtype": self.weight_format.dtype, "group_size": self.weight_format.group_size,
                              "zero_point": self.weight_format.zero_point,
                              "label": self.weight_label,
                              "experts": "mxfp4" if quant.stored_mxfp4(self.cfg, self.weight_format) else None,
                              "parts_bytes": self.weight_parts},
            "batch": self.batch,
            "seq": self.seq,
            "src_seq": self.src_seq,
            "weights_bytes": self.weights,
            "kv_cache_bytes": self.kv_cache,
            "cross_kv_cache_bytes": self.cross_kv_cache,
            # latent attention (DeepSeek): kv_cache_bytes is the latent an MLA-aware server caches; this, what
            # K and V heads expanded from it would take (tfcalc.architecture.latent); else equal to kv_cache_bytes
            "kv_cache_expanded_bytes": self.kv_cache if self.kv_cache_expanded is None else self.kv_cache_expanded,
            # kv_cache_bytes split (a hybrid's): K/V (or latent) bytes that grow with the tokens, in the
            # kv_layers layers that cache positions, and the fixed state each sequence holds whatever its length
            # (a convolution's ring, a recurrent state), tensor by tensor with its dtype (StateSplit)
            "kv_growing_bytes": None if self.split is None else self.split.growing,
            "fixed_state_bytes": None if self.split is None else self.split.fixed,
            "fixed_state": None if self.split is None else {
                name: {"dtype": dtype, "bytes": nbytes} for name, (dtype, nbytes) in self.split.fixed_parts.items()},
            "kv_layers": None if self.split is None else self.split.growing_layers,
            "activation_bytes": None if a is None else a.total,
            "attention": self.options.attention, "recompute": self.options.recompute,
            "training_bytes": self.training_bytes,
            "measured_peak_bytes": None if m is None else m.peak_bytes,
            "params": self.params,
            "inference_bytes": self.inference_bytes,
            "forward_working_set_bytes": self.working_set,
            "activations": None if a is None else {
                "attention": a.attention, "recompute": a.recompute, "stored_bytes": a.stored,
                "per_layer_bytes": a.layer, "per_layer": a.per_layer, "head": a.head,
                "recompute_extra_bytes": a.recompute_extra, "loss_gradient_bytes": a.loss_gradients,
                "encoder_per_layer_bytes": a.encoder_layer, "encoder_per_layer": a.encoder_per_layer,
                # where per_layer is a layer of another mixer: its role's parameter group ("ssm"), and its terms
                **({"per_layer_mixer": self.layer_role.params, "per_layer_labels": dict(self.layer_role.terms)}
                   if self.layer_role is not None else {}),
            },
            "korthikanti_bytes": self.korthikanti,
            "training_state": None if s is None else {
                "optimizer": s.optimizer, "weights_bytes": s.weights, "gradient_bytes": s.gradients,
                "master_weight_bytes": s.master_weights, "optimizer_state_bytes": s.optimizer_state,
                "bytes_per_param": s.bytes_per_param, "step_temporary_bytes": s.step_temporaries,
            },
            "training": self.training,
            "lora": None if self.lora is None else {
                "rank": o.lora.rank, "targets": list(o.lora.targets), "base_dtype": o.lora.base_dtype or self.dtype,
                "trainable_params": self.lora.params, "frozen_params": self.params,
                "base_weight_bytes": self.lora.base_bytes, "adapter_weight_bytes": self.lora.adapter_bytes,
                "checkpoint_bytes": self.lora.adapter_bytes, "activation_delta_bytes": self.lora.delta},
            "estimated_peak_bytes": self.run_estimate if m is not None else None,
            "measured_ratio": self.ratio,
            "measured_saved_activation_bytes": None if m is None else m.saved_activation_bytes,
            "measure_method": None if m is None else m.method,
            "measured_with_stand_in_matmuls": None if m is None else m.stand_in,
            "device": None if m is None else m.device,
            "fit": None if fit is None else {
                "budget_bytes": fit.budget, "target": "training" if self.training else "inference",
                "fixed_bytes": fit.fixed_bytes, "weights_fit": fit.weights_fit,
                "max_seq": fit.max_seq, "max_batch": fit.max_batch,
                # what the search adds (inference): the fixed state once per sequence, the K/V per token and sequence
                "state_bytes_per_sequence": None if self.training or self.split is None
                else self.split.fixed // self.batch,
                # true: the search stopped at its cap, so the figure is a lower bound, not the largest
                "max_seq_capped": fit.seq_capped, "max_batch_capped": fit.batch_capped,
                "fits": self.fits,  # this batch at this seq
            },
        }


def estimate_memory(model: ModelRef, workload: Workload, options: MemoryOptions = MemoryOptions()) -> MemoryReport:
    """Every figure, nothing measured."""
    cfg, o = model.cfg, options
    w = workload.for_model(cfg)
    mem.check_dtype(w.dtype)
    trainable = w.dtype in mem.TRAINING_DTYPES
    if o.training:
        training.check_training_dtype(w.dtype)
    fmt = quant.weight_format(w.dtype, o.group_size)
    kv = o.kv_dtype or quant.default_kv_dtype(fmt)
    mem.check_dtype(kv)
    weights = quant.weights_bytes(cfg, fmt)
    # the kernel the activations assume: as asked, else flash (every current training stack); a measured run
    # arrives here with its module's own kernel (build_memory)
    o = replace(o, attention=o.attention or mem.TRAINING_ATTENTION, lora=lora_count.for_model(cfg, o.lora))
    acts = None
    if trainable:
        single = Layout.single(w, o.recompute, o.attention)  # the one activation model, on one GPU
        acts = training_activations(cfg, single, w)
    state = training.training_state(cfg, w.dtype, o.optimizer) if trainable else None
    lora = _lora(cfg, w, o, acts, state) if o.lora is not None else None
    if lora is not None:
        acts, state = lora.activations, lora.state
    fit = None
    if o.budget is not None:
        if o.training:
            fit = budget.fit_training(cfg, w, o.budget, o.optimizer, o.attention, o.recompute)
        else:
            fit = budget.fit_inference(cfg, w, o.budget, weights, kv)
    return MemoryReport(
        model, w, o, param_total(cfg), weights,
        mem.kv_cache_bytes(cfg, replace(w, kv_dtype=kv)),
        mem.forward_working_set(cfg, w, o.attention),
        acts, state, korthikanti_bytes(cfg, w.batch, w.seq), fit,
        cross_kv_cache=mem.cross_kv_cache_bytes(cfg, replace(w, kv_dtype=kv)),
        weight_format=fmt, kv_dtype=kv,
        weight_parts=quant.breakdown(cfg, fmt) if fmt.quantized or quant.stored_format(cfg, fmt) else None,
        split=mem.state_split(cfg, replace(w, kv_dtype=kv)) if cfg.architecture.decoder is not None else None,
        kv_cache_expanded=mem.kv_cache_expanded_bytes(cfg, replace(w, kv_dtype=kv))
        if any(b.mixer.expanded_state() != b.mixer.state() for _, b, _ in cfg.architecture.kinds()) else None,
        lora=lora,
    )


def _lora(cfg, w: Workload, o: MemoryOptions, acts, state):
    """(activations, state, adapter parameters, activation delta) of LoRA fine-tuning (tfcalc.count.model.lora)."""
    from tfcalc.errors import InputError

    if not o.training or o.budget is not None:
        raise InputError("--lora-rank prices a training step: add --training (and drop --budget, not modelled "
                         "with LoRA)")
    return lora_count.lora_training(cfg, acts, state, o.lora, w.batch * w.seq, mem.activation_element_bytes(w.dtype))


def measure_steps(training: bool) -> tuple[str, ...]:
    """The steps of a measured run, as measure_memory's on_step names them."""
    from tfcalc.measure.memory import run_steps

    return run_steps(training)


def measure_memory(report: MemoryReport, device: str, on_step: Callable[[str], None] = lambda name: None,
                   on_note: Callable[[str], None] = lambda line: None) -> MemoryReport:
    """The report with its run measured on device, refused first when the estimate cannot fit. on_step
    hears each step of the run as it begins (tfcalc.measure.memory.run_steps), on_note a line the user
    should read before it (a dtype slow on this device, and what the run does about it)."""
    from tfcalc.measure.child import stop
    from tfcalc.measure.device import device_kind, torch_dtype
    from tfcalc.measure.fit import refusal, require_buildable, require_fits, smaller_run
    from tfcalc.measure.memory import measure_peak, start_child
    from tfcalc.measure.params import blocks_of

    if report.options.recompute != "none":
        from tfcalc.errors import InputError

        raise InputError("--measure runs without recompute; drop --measure or --recompute")
    w = report.workload

    def need(batch: int, seq: int) -> int:  # the estimate of this run at another size
        options = replace(report.options, budget=None)
        return estimate_memory(report.model, replace(w, batch=batch, seq=seq), options).run_estimate

    on_step("import torch")
    child = start_child()  # imports torch while the checks below run
    try:
        torch_dtype(report.dtype)  # fp8/int8/int4: refused here, with the reason
        what = f"{report.cfg.name} ({'training step' if report.training else 'forward pass'})"
        hint = "a smaller --batch or --seq" + (", or --dtype bf16" if report.dtype in ("fp32", "tf32") else "")
        require_buildable(report.cfg, blocks_of(report.cfg), what, "a smaller --set n_layer, or drop --measure")
        on_gpu = device_kind(device) == "cuda"  # the child checks the fit there: this process starts no CUDA
        if not on_gpu:
            require_fits(report.run_estimate, device, what, hint, smaller_run(need, w.batch, w.seq))
    except BaseException:
        stop(child, close=True)
        raise

    def refused(limit) -> None:
        raise refusal(report.run_estimate, limit, what, hint, smaller_run(need, w.batch, w.seq))

    peak = measure_peak(report.cfg, w, device, report.training, report.options.optimizer, child=child,
                        on_step=on_step, on_note=on_note, require_bytes=report.run_estimate if on_gpu else None,
                        on_refused=refused)
    return replace(report, measured=peak)


def build_memory(model: ModelRef, workload: Workload, options: MemoryOptions = MemoryOptions(),
                 measure: bool = False, device: str = "cpu", on_step: Callable[[str], None] = lambda name: None,
                 on_note: Callable[[str], None] = lambda line: None) -> MemoryReport:
    if measure and options.lora is not None:
        from tfcalc.errors import InputError

        raise InputError("--measure runs the model without LoRA adapters; drop --measure or --lora-rank")
    if measure:  # the estimate of what the module runs here: its own kernel
        kernel = mem.default_attention(model.cfg)
        if options.attention not in (None, kernel):
            from tfcalc.errors import InputError

            raise InputError(f"--measure runs {model.cfg.name}'s own {kernel} attention; drop --attention "
                             f"{options.attention} or --measure")
        options = replace(options, attention=kernel)
    report = estimate_memory(model, workload, options)
    return measure_memory(report, device, on_step, on_note) if measure else report
