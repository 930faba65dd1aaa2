"""Timing generation of the real model: a prefill (time to first token), then decode steps, one token
per sequence each, with the static KV cache (tfcalc.model.cache) -- through the one timing loop of
tfcalc.measure.bench, so CUDA events on GPUs and a synchronized perf_counter elsewhere.

What is timed, and why this way:
- prefill: ``warmup`` untimed calls, then ``repeat`` timed ones; each call resets the cache and runs the
  whole prompt, and computes the logits of the last position (what generation needs).
- decode: after a prefill, ``warmup`` untimed steps; then the cache is reset by a fresh prefill (so every
  timed run covers the same contexts), and ``steps`` steps are timed one call each: step j attends to
  seq + j positions. Each step's greedy token stays on the device and feeds the next (no host sync
  inside the loop), as a serving loop runs. The per-token figures are over those ``steps`` samples.
- ceilings, timed the same way: the matmul ceiling (FLOP/s) and the bandwidth ceiling (a device copy,
  bytes/s); the roofline's prediction with those ceilings is set beside the measurement.
The run refuses, before allocating, one that the estimate says will not fit the free memory.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

import torch

from tfcalc.config import ModelConfig
from tfcalc.count import memory as count_memory
from tfcalc.errors import InputError
from tfcalc.measure import bench
from tfcalc.measure.device import free_memory, resolve_device, torch_dtype
from tfcalc.model import Transformer, build_model, next_token
from tfcalc.model.cache import check_decodable

RUNNABLE = ("fp32", "bf16", "fp16")


@dataclass(frozen=True)
class DecodeTiming:
    prefill: bench.Timing  # seconds per prefill of the prompt (time to first token)
    step: bench.Timing  # seconds per decode step (one token per sequence)
    cache_bytes: int  # of the static cache as allocated (and an encoder-decoder's cross K and V)


def time_decode(model: Transformer, prompt: torch.Tensor, steps: int, warmup: int, repeat: int,
                on_call: Optional[Callable[[], None]] = None, src_idx: Optional[torch.Tensor] = None) -> DecodeTiming:
    """Time the prefill of ``prompt`` (B, T) and ``steps`` decode steps after it (see the module docstring)."""
    device = prompt.device
    cache = model.new_cache(prompt.shape[0], prompt.shape[1] + max(steps, warmup))
    with torch.inference_mode():
        prefill = bench.time_calls(lambda: model.prefill(prompt, cache, src_idx), device, warmup, repeat, on_call)
        state = {"token": next_token(model.prefill(prompt, cache, src_idx))}

        def step() -> None:
            state["token"] = next_token(model.decode(state["token"], cache))

        for _ in range(warmup):
            step()
            if on_call:
                on_call()
        state["token"] = next_token(model.prefill(prompt, cache, src_idx))
        decoded = bench.time_calls(step, device, 0, steps, on_call)
    return DecodeTiming(prefill, decoded, cache.nbytes)


@dataclass(frozen=True)
class DecodeRun:
    """One measured generation run and the ceilings measured beside it."""

    device: str  # as torch writes it
    device_name: str  # e.g. 'NVIDIA H100 80GB HBM3' or 'cpu (2 threads)'
    dtype: str
    batch: int
    seq: int
    steps: int
    timing: DecodeTiming
    matmul_ceiling_flops_per_s: float
    bandwidth_ceiling_bytes_per_s: float
    weights_bytes: int  # of the module as built
    estimate_bytes: int  # what the fit check expected the run to need


def estimate_bytes(cfg: ModelConfig, batch: int, seq: int, steps: int, dtype: str, copy_bytes: int,
                   matmul_size: int) -> int:
    """Weights, the cache, the prefill's working set, the two copy buffers and the three matmul ones."""
    element = count_memory.activation_element_bytes(dtype)
    return (count_memory.weights_bytes(cfg, dtype) + count_memory.kv_cache_bytes(cfg, batch, seq + steps, dtype)
            + count_memory.forward_working_set(cfg, batch, seq, dtype) + 2 * copy_bytes + 3 * matmul_size**2 * element)


def run_decode(cfg: ModelConfig, device: str, dtype: str, batch: int, seq: int, steps: int, warmup: int,
               repeat: int, matmul_size: int, copy_bytes: int,
               on_call: Optional[Callable[[], None]] = None) -> DecodeRun:
    """Build the model on the device, measure both ceilings, then time prefill and decode."""
    if dtype not in RUNNABLE:
        raise InputError(f"decoding runs in {', '.join(RUNNABLE)}; got {dtype}")
    check_decodable(cfg, seq + max(steps, warmup))
    where = resolve_device(device)
    need = estimate_bytes(cfg, batch, seq, steps, dtype, copy_bytes, matmul_size)
    free = free_memory(where)
    if free is not None and need > free:
        raise InputError(f"{cfg.name} decoding needs about {need / 1e9:.2f} GB on {where.description} "
                         f"(batch {batch}, {seq} + {steps} tokens, {dtype}) but {free / 1e9:.2f} GB is free; "
                         "try a smaller --batch/--seq, or --dtype bf16")
    torch.manual_seed(0)
    dev, tdtype = where.torch(), torch_dtype(dtype)
    model = build_model(cfg, dev, tdtype)
    prompt = torch.randint(0, cfg.vocab_size, (batch, seq), device=dev)
    src = torch.randint(0, cfg.vocab_size, (batch, seq), device=dev) if cfg.arch == "encoder-decoder" else None
    flops_ceiling = bench.matmul_ceiling(dev, tdtype, matmul_size, warmup, repeat, on_call)
    bytes_ceiling = bench.bandwidth_ceiling(dev, copy_bytes, warmup, repeat, on_call)
    timing = time_decode(model, prompt, steps, warmup, repeat, on_call, src)
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    return DecodeRun(where.name, where.description, dtype, batch, seq, steps, timing, flops_ceiling, bytes_ceiling,
                     weights, need)
