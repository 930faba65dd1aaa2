"""`tfcalc bench`: time forward passes of the real model on the CPU or a GPU, with honest statistics."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Optional

import typer

from tfcalc.cli import render
from tfcalc.cli.options import Json, Model, Overrides, parse_lengths
from tfcalc.config import ConfigError, ModelConfig, replace
from tfcalc.count import flops as count_flops
from tfcalc.count import memory as count_memory
from tfcalc.count.params import total as param_total
from tfcalc.presets import load

BENCH_DTYPES = ("fp32", "bf16", "fp16")


def parse_seqs(text: str | None, cfg: ModelConfig) -> list[int]:
    """'256,1024' or '256..4096' -> those lengths; None -> [the model's context length]."""
    if text is None:
        return [cfg.max_seq_len]
    seqs = parse_lengths(text)
    limited = cfg.pos_encoding in ("learned", "rope", "sinusoidal")
    too_long = [s for s in seqs if limited and s > cfg.max_seq_len]
    if too_long:
        raise typer.BadParameter(
            f"{cfg.name} has {cfg.pos_encoding} positions for at most {cfg.max_seq_len} tokens; got {too_long[0]}",
            param_hint="--seq",
        )
    return seqs


@dataclass(frozen=True)
class BenchPlan:
    cfg: ModelConfig  # the full model
    run_cfg: ModelConfig  # what is built (fewer blocks with --n-layer)
    device: str
    dtype: str
    batch: int
    seqs: list[int]
    warmup: int
    repeat: int
    compile: bool
    matmul_size: int


def estimate_bytes(plan: BenchPlan) -> int:
    """What the run needs at its largest point: the weights, the forward pass's working set at the
    longest sequence (tfcalc.count.memory.forward_working_set), and the three n×n matmul buffers."""
    seq = max(plan.seqs)
    element = count_memory.activation_element_bytes(plan.dtype)
    return (count_memory.weights_bytes(plan.run_cfg, plan.dtype)
            + count_memory.forward_working_set(plan.run_cfg, plan.batch, seq, plan.dtype)
            + 3 * plan.matmul_size**2 * element)


def _check_fits(plan: BenchPlan, free_bytes: int | None, where: str) -> int:
    """Refuse, before allocating anything, a run the estimate says will not fit; return the estimate."""
    estimate = estimate_bytes(plan)
    if free_bytes is not None and estimate > free_bytes:
        hint = []
        if plan.run_cfg.n_layer > 1:
            hint.append("--n-layer 1")
        if plan.batch > 1 or max(plan.seqs) > 128:
            hint.append("a smaller --batch/--seq")
        if plan.dtype == "fp32":
            hint.append("--dtype bf16")
        raise ConfigError(
            f"{plan.cfg.name} needs about {render.nbytes(estimate)} on {where} "
            f"({plan.run_cfg.n_layer} blocks, batch {plan.batch}, seq {max(plan.seqs)}, {plan.dtype}) but "
            f"{render.nbytes(free_bytes)} is free; try {' or '.join(hint) or 'a smaller model'}"
        )
    return estimate


def run_plan(plan: BenchPlan, advance) -> dict[str, Any]:
    """Build, warm up and time; returns the rows and the run's context. Imports torch."""
    import torch

    from tfcalc import devices
    from tfcalc.measure import bench
    from tfcalc.measure.device import free_memory, resolve_device, torch_dtype
    from tfcalc.measure.memory import peak_meter
    from tfcalc.model import build_model

    where = resolve_device(plan.device)
    estimate = _check_fits(plan, free_memory(where), where.description)
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


def row_json(plan: BenchPlan, run: dict[str, Any], row) -> dict[str, Any]:
    """The JSON contract of DESIGN.md for one (batch, seq) point, plus the context to read it."""
    tokens = plan.batch * row.seq
    seconds = row.forward_seconds
    achieved = row.forward_flops / seconds
    c = row.components
    sublayers = c.attention.median + c.ffn.median
    return {
        "preset": plan.cfg.name,
        "device": str(run["device"]),
        "device_name": run["device_name"],
        "dtype": plan.dtype,
        "batch": plan.batch,
        "seq": row.seq,
        "median_s": seconds,
        "p10_s": row.forward.p10 + (seconds - row.forward.median),
        "p90_s": row.forward.p90 + (seconds - row.forward.median),
        "tokens_per_s": tokens / seconds,
        "achieved_flops_per_s": achieved,
        "peak_flops_per_s": run["peak"],
        "mfu": achieved / run["peak"] if run["peak"] else None,
        "matmul_ceiling_flops_per_s": run["ceiling"],
        "ceiling_fraction": achieved / run["ceiling"],
        "forward_flops": row.forward_flops,
        "components": {
            "attention_s": c.attention.median,
            "ffn_s": c.ffn.median,
            "block_s": c.block.median,
            "head_s": c.head.median,
            "attention_time_share": c.attention.median / sublayers,
            "attention_flop_share": row.attention_flops / (row.attention_flops + row.ffn_flops),
            "attention_flops": row.attention_flops,
            "ffn_flops": row.ffn_flops,
        },
        "n_layer": plan.cfg.n_layer,
        "n_layer_run": plan.run_cfg.n_layer,
        "extrapolated": plan.run_cfg.n_layer != plan.cfg.n_layer,
        "measured_forward_median_s": row.forward.median,
        "samples": plan.repeat,
        "warmup": plan.warmup,
        "compiled": plan.compile,
        "peak_memory_bytes": None if row.peak_memory_bytes is None else run["weights_bytes"] + row.peak_memory_bytes,
        "weights_bytes": run["weights_bytes"],
        "estimated_memory_bytes": run["estimate_bytes"],
        "tf32": run["tf32"],
    }


def bench(
    model: Model,
    overrides: Overrides = None,
    device: Annotated[str, typer.Option(help="cpu, cuda, cuda:N or mps.")] = "cpu",
    dtype: Annotated[str, typer.Option(help="fp32, bf16 or fp16.")] = "fp32",
    batch: Annotated[int, typer.Option(help="Batch size.")] = 1,
    seq: Annotated[Optional[str], typer.Option(help="Sequence length, or several: 256,1024,4096 or 256..4096 (default: the context length).", show_default=False)] = None,
    warmup: Annotated[int, typer.Option(help="Untimed calls before timing.")] = 3,
    repeat: Annotated[int, typer.Option(help="Timed calls; median, p10 and p90 over them.")] = 10,
    compile_: Annotated[bool, typer.Option("--compile", help="torch.compile the model first.")] = False,
    n_layer: Annotated[Optional[int], typer.Option("--n-layer", help="Build only K blocks and extrapolate to full depth.", show_default=False)] = None,
    matmul_size: Annotated[Optional[int], typer.Option(help="n of the n×n matmul that measures the ceiling (default 2048 on CPU, 8192 on GPUs).", show_default=False)] = None,
    json_out: Json = False,
) -> None:
    """Time forward passes: median/p10/p90, tokens/s, achieved FLOP/s, MFU and the matmul ceiling.

    Achieved FLOP/s counts the analytic forward FLOPs (full T×T attention square, see `tfcalc flops`).
    MFU divides by the device's datasheet peak for the dtype (none for CPUs or unknown devices); the
    measured matmul ceiling of the same device and dtype, timed the same way, is always shown beside it.
    One block's attention and FFN sub-layers are timed in isolation: where attention's share of the time
    exceeds its share of the FLOPs, memory-bound work is showing.
    """
    cfg = load(model, overrides or [])
    if cfg.arch == "encoder-decoder":  # its forward takes a source and a target, and --n-layer has two depths
        raise ConfigError(f"{cfg.name}: tfcalc bench times decoder and encoder models; encoder-decoders are not "
                          "supported yet (tfcalc flops and tfcalc memory count them)")
    if dtype not in BENCH_DTYPES:
        raise typer.BadParameter(f"expected one of {', '.join(BENCH_DTYPES)}, got '{dtype}'", param_hint="--dtype")
    for name, value, low in (("--batch", batch, 1), ("--repeat", repeat, 1), ("--warmup", warmup, 0)):
        if value < low:
            raise typer.BadParameter(f"must be at least {low}, got {value}", param_hint=name)
    if n_layer is not None and not 1 <= n_layer <= cfg.n_layer:
        raise typer.BadParameter(f"must be between 1 and {cfg.n_layer} for {cfg.name}, got {n_layer}", param_hint="--n-layer")
    if matmul_size is not None and matmul_size < 1:
        raise typer.BadParameter(f"must be positive, got {matmul_size}", param_hint="--matmul-size")
    plan = BenchPlan(
        cfg=cfg, run_cfg=replace(cfg, n_layer=n_layer) if n_layer else cfg, device=device, dtype=dtype,
        batch=batch, seqs=parse_seqs(seq, cfg), warmup=warmup, repeat=repeat, compile=compile_,
        matmul_size=matmul_size or (2048 if device == "cpu" else 8192),
    )
    calls = (1 + 4 * len(plan.seqs) + len(plan.seqs)) * (warmup + repeat)
    with render.progress(f"bench {cfg.name}", calls, enabled=not json_out) as advance:
        run = run_plan(plan, advance)
    rows = [row_json(plan, run, row) for row in run["rows"]]
    render.bench_rows(rows, json_out)
