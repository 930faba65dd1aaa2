"""The report of `tfcalc bench`: timed forward passes of the real model, one row per sequence length."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional

from tfcalc.config_copies import with_architecture
from tfcalc.errors import InputError
from tfcalc.measure.bench_run import BENCH_DTYPES, BenchPlan
from tfcalc.report.display import Displayed
from tfcalc.report.model_ref import ModelRef
from tfcalc.workload import check_size


@dataclass(frozen=True, repr=False)
class BenchReport(Displayed):
    model: ModelRef
    plan: BenchPlan
    rows: tuple[dict[str, Any], ...]  # the JSON contract of one (batch, seq) point each

    def headline(self) -> str:
        from tfcalc import units

        r = self.rows[-1]
        return (f"{self.model.label} on {r['device']}, {r['dtype']}, batch {r['batch']}, seq {r['seq']:,}: "
                f"{units.seconds(r['median_s'])} a forward pass, {units.tokens_rate(r['tokens_per_s'])}")

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
        "weights": plan.weights,
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
        "extrapolated": plan.extrapolated,
        # per kind of block of the full model: its layers missing from the run, and one block's median time
        "extrapolation": [{"layers_missing": n, "block_s": t} for n, t in row.kind_block_medians],
        "measured_forward_median_s": row.forward.median,
        "samples": len(row.forward.samples),
        "warmup": row.warmup_calls,
        "rounds": len(row.round_medians),
        "round_medians_s": list(row.round_medians),
        "between_round_spread": row.round_spread,
        "min_time_s": plan.min_time,
        "ceiling_samples": run["ceiling_calls"],
        "compiled": plan.compile,
        "peak_memory_bytes": None if row.peak_memory_bytes is None else run["weights_bytes"] + row.peak_memory_bytes,
        "weights_bytes": run["weights_bytes"],
        "estimated_memory_bytes": run["estimate_bytes"],
        "tf32": run["tf32"],
        "seq_rule": plan.seq_rule or "--seq",  # how the length was chosen
    }


# Without --seq a CPU times the longest length (a power of two, or the context) whose one forward pass
# costs at most CPU_FORWARD_FLOP, about 2 s at CPU_ASSUMED_FLOP_S, a rate a few cores reach in fp32 (the
# matmul ceiling bench measures on a 2-core CI runner is 40-60 GFLOP/s): with the 3 s of timed calls
# per length and the warm-up, the run ends within a minute or so. The whole context can take hours:
# mistral-7b's 32,768-token forward on a CPU did not finish in 150 s with one block. A GPU times the
# context, as before.
CPU_ASSUMED_FLOP_S = 50e9
CPU_FORWARD_SECONDS = 2.0
CPU_FORWARD_FLOP = CPU_ASSUMED_FLOP_S * CPU_FORWARD_SECONDS


def default_seq(cfg, run_cfg, batch: int, device: str) -> tuple[int, str]:
    """The length bench times without --seq, and the rule that chose it (said in the output)."""
    from tfcalc.count.model.flops import forward_flops
    from tfcalc.workload import Workload

    context = cfg.max_seq_len
    if device != "cpu":
        return context, f"the context, {context:,}"
    seq = context
    while seq > 16 and forward_flops(run_cfg, Workload(batch=batch, seq=seq)) > CPU_FORWARD_FLOP:
        seq = 2 ** ((seq - 1).bit_length() - 1)  # the next power of two below
    if seq == context:
        return seq, f"the context, {context:,}"
    return seq, (f"the context ({context:,}) capped on a CPU so that one forward pass is about "
                 f"{CPU_FORWARD_SECONDS:g} s at an assumed {CPU_ASSUMED_FLOP_S / 1e9:g} GFLOP/s; --seq to choose")


def check_seqs(model: ModelRef, seqs: Optional[list[int]]) -> tuple[int, ...]:
    """The lengths to time (default: the context length); refused past what the positions can encode."""
    cfg = model.cfg
    if not seqs:
        return (cfg.max_seq_len,)
    for s in seqs:
        check_size("--seq", s)
    limited = cfg.architecture.bounded_positions
    too_long = [s for s in seqs if limited and s > cfg.max_seq_len]
    if too_long:
        raise InputError(f"{cfg.name} has {cfg.architecture.positions} positions for at most {cfg.max_seq_len} tokens; "
                         f"got --seq {too_long[0]}")
    return tuple(seqs)


def plan_bench(model: ModelRef, batch: int = 1, seqs: Optional[list[int]] = None, device: str = "cpu",
               dtype: str = "fp32", warmup: Optional[int] = None, repeat: int = 3, compile: bool = False,
               n_layer: Optional[int] = None, matmul_size: Optional[int] = None, min_time: float = 3.0,
               rounds: int = 3, weights: Optional[str] = None) -> BenchPlan:
    """Every option checked, nothing run. The budget (tfcalc.measure.autorange): timed forward calls for
    min_time seconds per length and at least repeat of them, in rounds; warm-up until stable, or exactly
    warmup calls. weights: a checkpoint whose weights the timed model holds."""
    cfg = model.cfg
    if cfg.arch == "encoder-decoder":  # its forward takes a source and a target, and --n-layer has two depths
        raise InputError(f"{cfg.name}: tfcalc bench times decoder and encoder models; encoder-decoders are not "
                         "supported yet (tfcalc flops and tfcalc memory count them)")
    if cfg.architecture.has_cross_attention:
        raise InputError(f"{cfg.name}: its blocks attend to an encoder's states, which tfcalc bench does not make; "
                         "tfcalc flops and tfcalc memory count it (--src-seq)")
    if weights is not None:
        _check_weights(cfg, weights, n_layer)
    if dtype not in BENCH_DTYPES:
        raise InputError(f"--dtype: bench runs {', '.join(BENCH_DTYPES)}; got '{dtype}'")
    check_size("--batch", batch)
    from tfcalc.measure import bounds

    bounds.check("--repeat", repeat)
    bounds.check("--rounds", rounds)
    if warmup is not None:
        bounds.check("--warmup", warmup, low=0)
    if isinstance(min_time, bool) or not isinstance(min_time, (int, float)) or not 0 <= min_time <= 3600:
        raise InputError(f"--min-time must be between 0 and 3600 seconds; got {min_time}")
    if n_layer is not None and not 1 <= n_layer <= cfg.n_layer:
        raise InputError(f"--n-layer must be between 1 and {cfg.n_layer} for {cfg.name}; got {n_layer}")
    if matmul_size is not None:
        bounds.check("--matmul-size", matmul_size)
    # fewer blocks, the depth pattern kept (Llama 4's NoPE every fourth layer, DeepSeek's dense then MoE)
    run_cfg = with_architecture(cfg, cfg.architecture.shrunk(n_layer)) if n_layer else cfg
    rule = ""
    if not seqs:
        seq, rule = default_seq(cfg, run_cfg, batch, device)
        seqs = [seq]
    return BenchPlan(
        cfg=cfg, run_cfg=run_cfg, device=device, dtype=dtype,
        batch=batch, seqs=check_seqs(model, seqs), warmup=warmup, repeat=repeat, compile=compile,
        matmul_size=matmul_size or (2048 if device == "cpu" else 8192), min_time=float(min_time), rounds=rounds,
        weights=weights, seq_rule=rule,
    )


def _check_weights(cfg, weights: str, n_layer: Optional[int]) -> None:
    """--weights must hold the model being timed, whole."""
    import dataclasses

    from tfcalc.errors import shown, shown_path
    from tfcalc.presets import checkpoint_source

    if n_layer is not None:
        raise InputError("--weights loads every block: drop --n-layer")
    source = checkpoint_source(weights)
    if source.weights is None:
        raise InputError(f"--weights {shown_path(weights)}: no .safetensors file there")
    identity = ("name", "source", "nominal_params", "dtype")
    for f in dataclasses.fields(cfg):
        if f.name not in identity and getattr(cfg, f.name) != getattr(source.cfg, f.name):
            raise InputError(f"--weights {shown_path(weights)}: its config.json is another model ({f.name} "
                             f"{shown(getattr(source.cfg, f.name))}, not {shown(getattr(cfg, f.name))})")


def build_bench(model: ModelRef, plan: BenchPlan, progress: Callable[[], None] = lambda: None,
                on_note: Callable[[str], None] = lambda line: None) -> BenchReport:
    """Run the plan. progress() after each call; progress.remaining(seconds), if it has one, hears how
    long the rest of the run should take (a progress bar's ETA); on_note(line), a line to read first."""
    from tfcalc.measure.bench_run import run_plan  # imports torch

    run = run_plan(plan, progress, on_note)
    return BenchReport(model, plan, tuple(row_json(model, plan, run, row) for row in run["rows"]))
