"""`tfcalc memory`: weights, KV cache, activations and training state -- estimated, and measured on a device."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Annotated, Any, Optional

import typer

from tfcalc.cli import render
from tfcalc.cli.options import Batch, Device, DType, DTypeName, Json, Models, Overrides, Seq, SrcSeq
from tfcalc.config import ConfigError, ModelConfig
from tfcalc.count import memory as mem
from tfcalc.count.params import total as param_total
from tfcalc.presets import load

Optimizer = enum.Enum("Optimizer", {name: name for name in mem.OPTIMIZERS}, type=str)
Attention = enum.Enum("Attention", {name: name for name in mem.ATTENTION_KERNELS}, type=str)
Recompute = enum.Enum("Recompute", {name: name for name in mem.RECOMPUTE}, type=str)


def _budget(text: Optional[str]) -> Optional[int]:
    if text is None:
        return None
    try:
        return mem.parse_bytes(text)
    except ConfigError as e:
        raise typer.BadParameter(str(e), param_hint="'--budget'") from None


@dataclass(frozen=True)
class MemoryReport:
    cfg: ModelConfig
    dtype: str
    batch: int
    seq: int
    training: bool
    optimizer: str
    params: int
    weights: int
    kv_cache: int
    working_set: int  # no-grad forward pass, beyond the weights
    activations: Optional[mem.Activations]  # None when the dtype is not a training dtype
    state: Optional[mem.TrainingState]
    korthikanti: int
    fit: Optional[mem.Fit] = None
    measured: Any = None  # tfcalc.measure.memory.MeasuredPeak
    src_seq: Optional[int] = None  # an encoder-decoder's source length; None for the other kinds
    cross_kv_cache: int = 0  # the part of kv_cache that is an encoder-decoder's cross-attention cache

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

    def to_json(self) -> dict[str, Any]:
        a, s, m, fit = self.activations, self.state, self.measured, self.fit
        return {
            "preset": self.cfg.name,
            "dtype": self.dtype,
            "batch": self.batch,
            "seq": self.seq,
            "src_seq": self.src_seq,
            "weights_bytes": self.weights,
            "kv_cache_bytes": self.kv_cache,
            "cross_kv_cache_bytes": self.cross_kv_cache,
            "activation_bytes": None if a is None else a.total,
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
            },
            "korthikanti_bytes": self.korthikanti,
            "training_state": None if s is None else {
                "optimizer": s.optimizer, "weights_bytes": s.weights, "gradient_bytes": s.gradients,
                "master_weight_bytes": s.master_weights, "optimizer_state_bytes": s.optimizer_state,
                "bytes_per_param": s.bytes_per_param, "step_temporary_bytes": s.step_temporaries,
            },
            "training": self.training,
            "estimated_peak_bytes": self.run_estimate if m is not None else None,
            "measured_ratio": self.ratio,
            "measured_saved_activation_bytes": None if m is None else m.saved_activation_bytes,
            "measure_method": None if m is None else m.method,
            "device": None if m is None else m.device,
            "fit": None if fit is None else {
                "budget_bytes": fit.budget, "target": "training" if self.training else "inference",
                "fixed_bytes": fit.fixed_bytes, "weights_fit": fit.weights_fit,
                "max_seq": fit.max_seq, "max_batch": fit.max_batch,
            },
        }


def memory_report(cfg: ModelConfig, batch: int, seq: int, dtype: str, training: bool = False,
                  optimizer: str = "adam-mixed", attention: Optional[str] = None, recompute: str = "none",
                  budget: Optional[int] = None, src_seq: Optional[int] = None) -> MemoryReport:
    """The analytic report: every figure, nothing measured. src_seq: an encoder-decoder's source length
    (default: seq); refused for the other kinds."""
    if src_seq is not None and cfg.arch != "encoder-decoder":
        raise ConfigError(f"{cfg.name}: --src-seq applies to encoder-decoder models only ({cfg.name} is {cfg.arch})")
    if cfg.arch == "encoder-decoder" and src_seq is None:
        src_seq = seq
    trainable = dtype in mem.TRAINING_DTYPES
    if training:
        mem.check_training_dtype(dtype)
    acts = mem.activations(cfg, batch, seq, dtype, attention, recompute, src_seq=src_seq) if trainable else None
    state = mem.training_state(cfg, dtype, optimizer) if trainable else None
    fit = None
    if budget is not None:
        fit = (mem.fit_training(cfg, batch, seq, dtype, budget, optimizer, attention, recompute, src_seq) if training
               else mem.fit_inference(cfg, batch, seq, dtype, budget, src_seq))
    return MemoryReport(
        cfg, dtype, batch, seq, training, optimizer, param_total(cfg), mem.weights_bytes(cfg, dtype),
        mem.kv_cache_bytes(cfg, batch, seq, dtype, src_seq),
        mem.forward_working_set(cfg, batch, seq, dtype, attention, src_seq),
        acts, state, mem.korthikanti_bytes(cfg, batch, seq), fit, src_seq=src_seq,
        cross_kv_cache=mem.cross_kv_cache_bytes(cfg, batch, src_seq or seq, dtype),
    )


def refuse_unless_fits(needed: int, device: str, what: str, dtype: str) -> None:
    """Exit 2, before anything is allocated, when the estimate exceeds the device's free memory."""
    from tfcalc.measure.device import free_memory, resolve_device

    free = free_memory(resolve_device(device))
    if free is not None and needed > free:
        narrower = ", or --dtype bf16" if dtype in ("fp32", "tf32") else ""
        raise ConfigError(
            f"not measuring {what}: it needs an estimated {render.nbytes(needed)} but {device} has "
            f"{render.nbytes(free)} free; try a smaller --batch or --seq{narrower}, or a smaller model"
        )


def measured(report: MemoryReport, device: str) -> MemoryReport:
    """The report with the run measured on device (refused first if it cannot fit)."""
    from dataclasses import replace

    from tfcalc.measure.device import torch_dtype
    from tfcalc.measure.memory import measure_peak

    torch_dtype(report.dtype)  # fp8/int8/int4: refused here, with the reason
    what = f"{report.cfg.name} ({'training step' if report.training else 'forward pass'})"
    refuse_unless_fits(report.run_estimate, device, what, report.dtype)
    peak = measure_peak(report.cfg, report.batch, report.seq, report.dtype, device, report.training,
                        report.optimizer, src_seq=report.src_seq)
    return replace(report, measured=peak)


def memory(
    models: Models,
    overrides: Overrides = None,
    batch: Batch = 1,
    seq: Seq = None,
    src_seq: SrcSeq = None,
    dtype: DType = DTypeName.bf16,
    training: Annotated[bool, typer.Option("--training", help="Measure (and fit) a training step, not inference.")] = False,
    optimizer: Annotated[
        Optimizer, typer.Option("--optimizer", help="adam-mixed: fp32 master weights and moments (16 B/param in "
                                "bf16); adam: all in the dtype; sgd: no state.")
    ] = Optimizer["adam-mixed"],
    attention: Annotated[
        Optional[Attention], typer.Option("--attention", help="Attention kernel: flash (no s² scores kept) or "
                                          "math (scores kept) [default: what the real module runs].",
                                          show_default=False)
    ] = None,
    recompute: Annotated[
        Recompute, typer.Option("--recompute", help="full: keep only each block's input (activation checkpointing).")
    ] = Recompute.none,
    measure: Annotated[bool, typer.Option("--measure", help="Build the real model on --device, run it, read the peak.")] = False,
    device: Device = "cpu",
    budget: Annotated[
        Optional[str], typer.Option("--budget", help="Memory to fit, e.g. 80GB (10^9) or 80GiB (2^30): the largest "
                                    "context and batch that fit.", show_default=False)
    ] = None,
    json_out: Json = False,
) -> None:
    """How much memory: weights, KV cache, activations, training state -- and, with --measure, the peak.

    Weights: params x bytes per element (int4 packs two per byte). KV cache: 2*B*T*n_layer*n_kv_head*d_head
    elements. Activations: what autograd keeps for the backward pass (Korthikanti et al. 2022, generalized
    to the config; the paper's figure is shown beside). Training: weights + gradients + optimizer state +
    activations. Sizes in GB (10^9 bytes) and GiB (2^30 bytes). --measure runs the real model in a child
    process (CPU: its peak RSS; CUDA: the allocator's peak) and refuses, before allocating, a run that the
    estimate says will not fit in the device's free memory.

    An encoder-decoder keeps, beside its decoder's KV cache, the cross-attention K and V of the --src-seq
    source tokens; a mixture of experts keeps activations for the top-k experts each token runs; an
    encoder keeps no KV cache.
    """
    budget_bytes = _budget(budget)
    if measure and recompute.value != "none":
        raise typer.BadParameter("--measure runs without recompute; drop one of the two", param_hint="'--recompute'")
    reports = []
    for name in models:
        cfg = load(name, overrides or [])
        report = memory_report(cfg, batch, seq or cfg.max_seq_len, dtype.value, training, optimizer.value,
                               attention.value if attention else None, recompute.value, budget_bytes, src_seq)
        reports.append(measured(report, device) if measure else report)
    render.memory_reports(reports, json_out)
