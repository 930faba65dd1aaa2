"""A whole benchmark run: build the model on the device, measure the matmul ceiling, time the forward
pass and one block's sub-layers at each sequence length, read the peak memory. Refused before anything
is allocated when the estimate does not fit (tfcalc.measure.fit)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from tfcalc.config import ModelConfig
from tfcalc.count import flops as count_flops
from tfcalc.count import memory as count_memory

BENCH_DTYPES = ("fp32", "bf16", "fp16")


@dataclass(frozen=True)
class BenchPlan:
    cfg: ModelConfig  # the full model
    run_cfg: ModelConfig  # what is built (fewer blocks with --n-layer)
    device: str
    dtype: str
    batch: int
    seqs: tuple[int, ...]
    warmup: int
    repeat: int
    compile: bool
    matmul_size: int

    @property
    def calls(self) -> int:
        """Timed and warm-up calls in the whole run: the ceiling, then per length the forward pass and
        four sub-layer timings; what a progress bar counts."""
        return (1 + 5 * len(self.seqs)) * (self.warmup + self.repeat)


def estimate_bytes(plan: BenchPlan) -> int:
    """What the run needs at its largest point: the weights, the forward pass's working set at the
    longest sequence (tfcalc.count.memory.forward_working_set), and the three n×n matmul buffers."""
    seq = max(plan.seqs)
    element = count_memory.activation_element_bytes(plan.dtype)
    return (count_memory.weights_bytes(plan.run_cfg, plan.dtype)
            + count_memory.forward_working_set(plan.run_cfg, plan.batch, seq, plan.dtype)
            + 3 * plan.matmul_size**2 * element)


def _hint(plan: BenchPlan) -> str:
    hint = []
    if plan.run_cfg.n_layer > 1:
        hint.append("--n-layer 1")
    if plan.batch > 1 or max(plan.seqs) > 128:
        hint.append("a smaller --batch/--seq")
    if plan.dtype == "fp32":
        hint.append("--dtype bf16")
    return " or ".join(hint) or "a smaller model"


def run_plan(plan: BenchPlan, advance: Callable[[], None]) -> dict[str, Any]:
    """Build, warm up and time; returns the rows and the run's context. Imports torch."""
    import torch

    from tfcalc import devices
    from tfcalc.measure import bench
    from tfcalc.measure.device import resolve_device, torch_dtype
    from tfcalc.measure.fit import require_fits
    from tfcalc.measure.memory import peak_meter
    from tfcalc.model import build_model

    estimate = estimate_bytes(plan)
    what = (f"{plan.cfg.name} ({plan.run_cfg.n_layer} blocks, batch {plan.batch}, seq {max(plan.seqs)}, "
            f"{plan.dtype})")
    require_fits(estimate, plan.device, what, _hint(plan))
    where = resolve_device(plan.device)
    device, dtype = where.torch(), torch_dtype(plan.dtype)
    model = build_model(plan.run_cfg, device, dtype)
    runner = torch.compile(model) if plan.compile else model
    ceiling = bench.matmul_ceiling(device, dtype, plan.matmul_size, plan.warmup, plan.repeat, advance)
    tf32 = device.type == "cuda" and torch.backends.cuda.matmul.allow_tf32
    peak = devices.peak_flops(where.description, plan.dtype, tf32_enabled=tf32)
    rows = []
    for seq in plan.seqs:
        idx = torch.randint(0, plan.cfg.vocab_size, (plan.batch, seq), device=device)
        meter = peak_meter(where)
        meter.start()
        forward = bench.time_forward(runner, idx, plan.warmup, plan.repeat, advance)
        peak_bytes = meter.peak()
        parts = bench.time_components(model, idx, plan.warmup, plan.repeat, advance)
        seconds = bench.extrapolate(forward.median, parts.block.median, plan.run_cfg.n_layer, plan.cfg.n_layer)
        rows.append(bench.BenchRow(
            seq=seq, forward=forward, forward_flops=count_flops.forward_flops(plan.cfg, plan.batch, seq),
            forward_seconds=seconds, components=parts,
            attention_flops=count_flops.attention_flops(plan.cfg, plan.batch, seq),
            ffn_flops=count_flops.ffn_flops(plan.cfg, plan.batch, seq),
            peak_memory_bytes=peak_bytes,
        ))
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    return {"device": where.name, "device_name": where.description, "ceiling": ceiling, "peak": peak, "rows": rows,
            "weights_bytes": weights, "estimate_bytes": estimate, "tf32": tf32}
