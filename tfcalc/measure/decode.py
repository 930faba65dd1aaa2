"""Timing generation of the real model: a prefill (time to first token), then decode steps, one token
per sequence each, with the static KV cache (tfcalc.model.cache) -- through the one timing loop of
tfcalc.measure.bench, so CUDA events on GPUs and a synchronized perf_counter elsewhere.

What is timed, and why this way:
- prefill: ``warmup`` untimed calls, then ``repeat`` timed ones; each call resets the cache and runs the
  whole prompt, and computes the logits of the last position (what generation needs).
- decode: after a prefill, ``warmup`` untimed steps; then the cache is reset by a fresh prefill (so every
  timed run covers the same contexts), and ``steps`` steps are timed one call each: step j attends to
  seq + j positions (over its bucket of slots, tfcalc.model.cache). Each step's greedy token stays on the
  device and feeds the next (no host sync inside the loop), as a serving loop runs. The per-token figures
  are over those ``steps`` samples. The steps run in the plan's ``mode`` (tfcalc.model.generate.Decoder:
  "graph" on CUDA unless ``eager``, "eager" elsewhere); in "graph" mode every bucket the timed steps reach
  is captured before the timing starts, so no sample includes a capture. The mode that ran is reported
  (a step that cannot be captured runs eagerly, and says so).
- ceilings, timed the same way: the matmul ceiling (FLOP/s) and the bandwidth ceiling (a device copy,
  bytes/s); the roofline's prediction with those ceilings is set beside the measurement.
The run refuses, before allocating, one that the estimate says will not fit (tfcalc.measure.fit).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from typing import Callable, Optional

import torch

from tfcalc.config import ModelConfig
from tfcalc.count.model import memory as count_memory, quant
from tfcalc.count.serving import roofline
from tfcalc.errors import InputError
from tfcalc.measure import bench
from tfcalc.measure.device import resolve_device, tf32_matmuls, torch_dtype
from tfcalc.measure.fit import require_fits, smaller_run
from tfcalc.model import Decoder, Transformer, build_model, next_token
from tfcalc.model.cache import bucket, check_decodable
from tfcalc.workload import Workload

RUNNABLE = ("fp32", "bf16", "fp16")


@dataclass(frozen=True)
class DecodeTiming:
    prefill: bench.Timing  # seconds per prefill of the prompt (time to first token)
    step: bench.Timing  # seconds per decode step (one token per sequence)
    cache_bytes: int  # of the static cache as allocated (and an encoder-decoder's cross K and V)
    mode: str = "eager"  # how the decode steps ran: "graph" (CUDA graphs), "eager" or "compile"
    spans: tuple[int, ...] = ()  # the slots each timed step read (its bucket), in order
    read_bytes_per_step: Optional[float] = None  # weights + KV the timed steps read, mean (read_bytes)


def time_decode(model: Transformer, prompt: torch.Tensor, steps: int, warmup: int, repeat: int,
                on_call: Optional[Callable[[], None]] = None, src_idx: Optional[torch.Tensor] = None,
                mode: Optional[str] = None) -> DecodeTiming:
    """Time the prefill of ``prompt`` (B, T) and ``steps`` decode steps after it (see the module docstring);
    ``mode``: the Decoder's (default: the device's)."""
    device = prompt.device
    T = prompt.shape[1]
    cache = model.new_cache(prompt.shape[0], T + max(steps, warmup))
    spans = tuple(bucket(T + j + 1, cache.max_tokens) for j in range(steps))
    with torch.inference_mode():
        prefill = bench.time_calls(lambda: model.prefill(prompt, cache, src_idx), device, warmup, repeat, on_call)
        state = {"token": next_token(model.prefill(prompt, cache, src_idx))}
        decoder = Decoder(model, cache, mode)

        def step() -> None:
            state["token"] = next_token(decoder.step(state["token"]))

        for _ in range(warmup):
            step()
            if on_call:
                on_call()
        state["token"] = next_token(model.prefill(prompt, cache, src_idx))
        decoder.prepare(spans)
        decoded = bench.time_calls(step, device, 0, steps, on_call)
    return DecodeTiming(prefill, decoded, cache.nbytes, decoder.mode, spans)


@dataclass(frozen=True, kw_only=True)
class DecodePlan:
    """A measured generation run: every (batch, seq) point is a prompt of seq tokens for batch sequences,
    timed in its prefill and then ``steps`` decode steps, on one model built once."""

    cfg: ModelConfig
    device: str
    dtype: str
    points: tuple[tuple[int, int], ...]  # (batch, seq)
    steps: int
    warmup: int
    repeat: int
    matmul_size: int
    copy_bytes: int
    src_seq: Optional[int] = None  # an encoder-decoder's source length (default: each point's seq)
    eager: bool = False  # --eager: the plain uncaptured step loop on CUDA too (tfcalc.model.generate)
    compile: bool = False  # --compile: the step's kernels from torch.compile, in tfcalc's CUDA graph (CUDA only)

    @property
    def mode(self) -> Optional[str]:
        """The Decoder's mode asked for; None: the device's default (tfcalc.model.generate.default_mode)."""
        return "eager" if self.eager else "compile" if self.compile else None

    @property
    def calls(self) -> int:
        """Calls a progress bar counts: the four ceilings, then per point the prefills and the decode steps."""
        per_point = (self.warmup + self.repeat) + self.warmup + self.steps
        return 4 * (self.warmup + self.repeat) + len(self.points) * per_point


@dataclass(frozen=True)
class DecodeRun:
    """A measured run: one DecodeTiming per point, and the ceilings measured beside them."""

    device: str  # as torch writes it
    device_name: str  # e.g. 'NVIDIA H100 80GB HBM3' or 'cpu (2 threads)'
    timings: tuple[DecodeTiming, ...]  # one per plan point
    matmul_ceiling_flops_per_s: float
    bandwidth: bench.Bandwidth
    weights_bytes: int  # of the module as built
    estimate_bytes: int  # what the fit check expected the run to need at its largest point
    load_average: Optional[float] = None  # the host's 1-minute load average, the higher of before and after
    cpus: Optional[int] = None  # the host's CPU count, to read the load average against
    tf32: bool = False  # fp32 matmuls ran as TF32 (CUDA, tfcalc.measure.device.tf32_matmuls): their peak is tf32's

    @property
    def bandwidth_ceiling_bytes_per_s(self) -> float:
        return self.bandwidth.ceiling

    @property
    def busy(self) -> bool:
        """More runnable work than CPUs on the host while timing: other processes' too."""
        return self.load_average is not None and self.cpus is not None and self.load_average > self.cpus


def estimate_bytes(plan: DecodePlan) -> int:
    """At the largest point: weights, the cache of seq + steps positions, the prefill's working set; and the
    two copy buffers and three matmul buffers of the ceilings."""
    cfg, dtype, extra = plan.cfg, plan.dtype, max(plan.steps, plan.warmup)
    element = count_memory.activation_element_bytes(dtype)
    point = max(count_memory.kv_cache_bytes(cfg, Workload(batch=b, seq=s, gen=extra, dtype=dtype))
                + count_memory.forward_working_set(cfg, Workload(batch=b, seq=s, dtype=dtype)) for b, s in plan.points)
    ceilings = max(2 * plan.copy_bytes, 3 * plan.matmul_size**2 * element)
    return count_memory.weights_bytes(cfg, dtype) + point + ceilings


def check_plan(plan: DecodePlan) -> None:
    """Every refusal before the run: the dtype, positions for prompt and steps, and the fit check (the one
    guard, tfcalc.measure.fit.require_fits)."""
    if plan.dtype not in RUNNABLE:
        raise InputError(f"decoding runs in {', '.join(RUNNABLE)}; got {plan.dtype}")
    if plan.eager and plan.compile:
        raise InputError("--eager runs the steps uncaptured, --compile through torch.compile: one of them")
    if plan.compile and not plan.device.strip().lower().startswith("cuda"):
        raise InputError("--compile captures the compiled step in a CUDA graph: --device cuda")
    cfg = plan.cfg
    for _, seq in plan.points:
        longer = max(plan.steps, plan.warmup)
        if cfg.pos_encoding in ("learned", "rope", "sinusoidal") and seq + longer > cfg.max_seq_len:
            flag = "--steps" if plan.steps >= plan.warmup else "--warmup"  # the cache holds the longer of the two
            raise InputError(f"--seq {seq:,} + {flag} {longer:,} = {seq + longer:,} tokens is past {cfg.name}'s "
                             f"{cfg.max_seq_len:,} {cfg.pos_encoding} positions; give a smaller {flag} or --seq")
        check_decodable(cfg, seq + longer)
    largest = max(plan.points)

    def need(batch: int, seq: int) -> int:  # the same run at one other point
        return estimate_bytes(replace(plan, points=((batch, seq),)))

    require_fits(estimate_bytes(plan), plan.device,
                 f"{cfg.name} decoding (batch {largest[0]}, {largest[1]} + {plan.steps} tokens, {plan.dtype})",
                 "a smaller --batch or --seq" + (", or --dtype bf16" if plan.dtype == "fp32" else ""),
                 smaller_run(need, *largest))


def run_decode(plan: DecodePlan, on_call: Optional[Callable[[], None]] = None) -> DecodeRun:
    """Refuse what cannot fit, build the model on the device, measure both ceilings, then time each point."""
    check_plan(plan)  # the fit check too: the device's free memory may have moved since the plan was made
    cfg = plan.cfg
    where = resolve_device(plan.device)
    load = _load_average()
    torch.manual_seed(0)
    dev, tdtype = where.torch(), torch_dtype(plan.dtype)
    model = build_model(cfg, dev, tdtype)
    flops_ceiling = bench.matmul_ceiling(dev, tdtype, plan.matmul_size, plan.warmup, plan.repeat, on_call)
    bandwidth = bench.bandwidth_ceiling(dev, plan.copy_bytes, plan.warmup, plan.repeat, on_call)
    timings = []
    for batch, seq in plan.points:
        prompt = torch.randint(0, cfg.vocab_size, (batch, seq), device=dev)
        src = (torch.randint(0, cfg.vocab_size, (batch, plan.src_seq or seq), device=dev)
               if cfg.arch == "encoder-decoder" else None)
        timing = time_decode(model, prompt, plan.steps, plan.warmup, plan.repeat, on_call, src,
                             plan.mode)
        timings.append(replace(timing, read_bytes_per_step=read_bytes(cfg, batch, timing.spans, plan.dtype)))
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    loads = [x for x in (load, _load_average()) if x is not None]
    return DecodeRun(where.name, where.description, tuple(timings), flops_ceiling, bandwidth, weights,
                     estimate_bytes(plan), max(loads) if loads else None, os.cpu_count(),
                     where.kind == "cuda" and tf32_matmuls())


def read_bytes(cfg: ModelConfig, batch: int, spans: tuple[int, ...], dtype: str) -> Optional[float]:
    """Weights + KV that steps over these spans read, mean per step: the roofline's decode step with the span
    as its context (a full layer reads every slot of its bucket, a windowed one min(span, W):
    tfcalc.count.serving.roofline), not the live context it would read with a cache exactly as long."""
    if not spans or cfg.arch == "encoder-decoder":
        return None
    fmt = quant.plain(dtype)
    steps = {s: roofline.decode_step(cfg, batch, s, fmt, dtype) for s in set(spans)}
    per_span = {s: step.weight_bytes + step.kv_bytes for s, step in steps.items()}  # as bytes_per_token: no activations
    return sum(per_span[s] for s in spans) / len(spans)


def _load_average() -> Optional[float]:
    """The 1-minute load average (runnable processes), or None where the OS does not keep one. A CPU run on
    a host busier than its CPU count shares them: its timings include waiting."""
    try:
        return os.getloadavg()[0]
    except (OSError, AttributeError):
        return None
