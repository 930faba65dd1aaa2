"""The report of `tfcalc bench`: timed forward passes of the real model, one row per sequence length."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional

from tfcalc.config import replace
from tfcalc.errors import InputError
from tfcalc.measure.bench_run import BENCH_DTYPES, BenchPlan
from tfcalc.report.model_ref import ModelRef
from tfcalc.workload import check_size


@dataclass(frozen=True)
class BenchReport:
    model: ModelRef
    plan: BenchPlan
    rows: tuple[dict[str, Any], ...]  # the JSON contract of one (batch, seq) point each

    def to_json(self) -> Any:
        """One object for one sequence length, a list for several (as for several presets)."""
        return dict(self.rows[0]) if len(self.rows) == 1 else [dict(r) for r in self.rows]


def row_json(model: ModelRef, plan: BenchPlan, run: dict[str, Any], row) -> dict[str, Any]:
    """The JSON contract of DESIGN.md for one (batch, seq) point, plus the context to read it."""
    seconds = row.forward_seconds
    achieved = row.forward_flops / seconds
    c = row.components
    sublayers = c.attention.median + c.ffn.median
    return {
        "preset": plan.cfg.name,
        "label": model.label,
        "device": str(run["device"]),
        "device_name": run["device_name"],
        "dtype": plan.dtype,
        "batch": plan.batch,
        "seq": row.seq,
        "median_s": seconds,
        "p10_s": row.forward.p10 + (seconds - row.forward.median),
        "p90_s": row.forward.p90 + (seconds - row.forward.median),
        "tokens_per_s": plan.batch * row.seq / seconds,
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


def check_seqs(model: ModelRef, seqs: Optional[list[int]]) -> tuple[int, ...]:
    """The lengths to time (default: the context length); refused past what the positions can encode."""
    cfg = model.cfg
    if not seqs:
        return (cfg.max_seq_len,)
    for s in seqs:
        check_size("--seq", s)
    limited = cfg.pos_encoding in ("learned", "rope", "sinusoidal")
    too_long = [s for s in seqs if limited and s > cfg.max_seq_len]
    if too_long:
        raise InputError(f"{cfg.name} has {cfg.pos_encoding} positions for at most {cfg.max_seq_len} tokens; "
                         f"got --seq {too_long[0]}")
    return tuple(seqs)


def plan_bench(model: ModelRef, batch: int = 1, seqs: Optional[list[int]] = None, device: str = "cpu",
               dtype: str = "fp32", warmup: int = 3, repeat: int = 10, compile: bool = False,
               n_layer: Optional[int] = None, matmul_size: Optional[int] = None) -> BenchPlan:
    """Every option checked, nothing run."""
    cfg = model.cfg
    if cfg.arch == "encoder-decoder":  # its forward takes a source and a target, and --n-layer has two depths
        raise InputError(f"{cfg.name}: tfcalc bench times decoder and encoder models; encoder-decoders are not "
                         "supported yet (tfcalc flops and tfcalc memory count them)")
    if dtype not in BENCH_DTYPES:
        raise InputError(f"--dtype: bench runs {', '.join(BENCH_DTYPES)}; got '{dtype}'")
    check_size("--batch", batch)
    check_size("--repeat", repeat)
    check_size("--warmup", warmup, low=0)
    if n_layer is not None and not 1 <= n_layer <= cfg.n_layer:
        raise InputError(f"--n-layer must be between 1 and {cfg.n_layer} for {cfg.name}; got {n_layer}")
    if matmul_size is not None:
        check_size("--matmul-size", matmul_size)
    return BenchPlan(
        cfg=cfg, run_cfg=replace(cfg, n_layer=n_layer) if n_layer else cfg, device=device, dtype=dtype,
        batch=batch, seqs=check_seqs(model, seqs), warmup=warmup, repeat=repeat, compile=compile,
        matmul_size=matmul_size or (2048 if device == "cpu" else 8192),
    )


def build_bench(model: ModelRef, plan: BenchPlan, advance: Callable[[], None] = lambda: None) -> BenchReport:
    from tfcalc.measure.bench_run import run_plan  # imports torch

    run = run_plan(plan, advance)
    return BenchReport(model, plan, tuple(row_json(model, plan, run, row) for row in run["rows"]))
