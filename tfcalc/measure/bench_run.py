"""A whole benchmark run: build the model on the device, measure the matmul ceiling, time the forward
pass and one block's sub-layers at each sequence length, read the peak memory. Refused before anything
is allocated when the estimate does not fit (tfcalc.measure.fit).

Everything timed is an Autorange item (tfcalc.measure.autorange): the forward pass at each length gets
the whole budget, the ceiling and each sub-layer a sixteenth of it, and all of them are timed in
interleaved rounds, so the spread between rounds shows the machine's run-to-run noise."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, replace
from typing import Any, Callable, Optional

from tfcalc.config import ModelConfig
from tfcalc.count.model import flops as count_flops, memory as count_memory
from tfcalc.measure.autorange import SECONDARY_SHARE, Budget
from tfcalc.workload import Workload

BENCH_DTYPES = ("fp32", "bf16", "fp16")


@dataclass(frozen=True, kw_only=True)
class BenchPlan:
    cfg: ModelConfig  # the full model
    run_cfg: ModelConfig  # what is built (fewer blocks with --n-layer)
    device: str
    dtype: str
    batch: int
    seqs: tuple[int, ...]
    warmup: Optional[int]  # warm-up calls of each item; None: until stable (tfcalc.measure.autorange)
    repeat: int  # at least this many timed forward calls per length
    compile: bool
    matmul_size: int
    min_time: float = 3.0  # seconds of timed forward calls per length
    rounds: int = 3
    weights: Optional[str] = None  # a checkpoint whose weights the timed model holds (random weights when None)
    seq_rule: str = ""  # how the length was chosen when --seq was not given (tfcalc.report.bench.default_seq)

    @property
    def budget(self) -> Budget:
        """The forward pass's budget; the ceiling and the sub-layers get budget.secondary()."""
        return Budget(self.min_time, self.repeat, self.rounds, self.warmup)

    @property
    def extrapolated(self) -> bool:
        """Whether a smaller copy is timed (--n-layer) and the full depth's time extrapolated from it."""
        return self.run_cfg.n_layer != self.cfg.n_layer

    @property
    def expected_seconds(self) -> float:
        """A first guess of the run's timed seconds, before any call says how long calls take: the
        budgets (each length's forward pass, its 4 sub-layers and the ceiling at SECONDARY_SHARE each)."""
        return (len(self.seqs) * (1 + 4 * SECONDARY_SHARE) + SECONDARY_SHARE) * self.min_time


def estimate_bytes(plan: BenchPlan) -> int:
    """What the run needs at its largest point: the weights, the forward pass's working set at the
    longest sequence (tfcalc.count.model.memory.forward_working_set), and the three n×n matmul buffers."""
    seq = max(plan.seqs)
    element = count_memory.activation_element_bytes(plan.dtype)
    return (count_memory.weights_bytes(plan.run_cfg, plan.dtype)
            + count_memory.forward_working_set(plan.run_cfg, Workload(batch=plan.batch, seq=seq, dtype=plan.dtype))
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


def require_plan_fits(plan: BenchPlan) -> None:
    """The plan's refusals of size, before anything is built: too many modules to build, or more memory
    than the tightest limit (tfcalc.measure.fit, the one guard). Called by run_plan, and by the command
    line before it says anything else, so that a refusal is its one line."""
    from tfcalc.measure.fit import require_buildable, require_fits, smaller_run

    what = (f"{plan.cfg.name} ({plan.run_cfg.n_layer} blocks, batch {plan.batch}, seq {max(plan.seqs)}, "
            f"{plan.dtype})")
    require_buildable(plan.run_cfg, plan.run_cfg.n_layer, what, _hint(plan))

    def need(batch: int, seq: int) -> int:  # this run's estimate at another size
        return estimate_bytes(replace(plan, batch=batch, seqs=(seq,)))

    require_fits(estimate_bytes(plan), plan.device, what, _hint(plan), smaller_run(need, plan.batch, max(plan.seqs)))


def run_plan(plan: BenchPlan, progress: Callable[[], None],
             on_note: Callable[[str], None] = lambda line: None) -> dict[str, Any]:
    """Build, warm up and time; returns the rows and the run's context. Imports torch. progress() is
    called after each call; progress.remaining(seconds), where it has one, hears how long the rest of
    the run should take; on_note(line) hears, before anything is timed, that the dtype's matmuls are
    slow on this CPU (tfcalc.measure.stand_in.probe; they are timed as asked)."""
    import torch

    from tfcalc import devices
    from tfcalc.measure import autorange, bench
    from tfcalc.measure.device import resolve_device, tf32_matmuls, torch_dtype
    from tfcalc.measure.peak_meter import peak_meter
    from tfcalc.measure.stand_in import probe
    from tfcalc.model import build_model

    require_plan_fits(plan)
    estimate = estimate_bytes(plan)
    where = resolve_device(plan.device)
    device, dtype = where.torch(), torch_dtype(plan.dtype)
    speed = probe(plan.dtype, where.kind)
    if speed is not None and speed.slow:
        on_note(speed.note(f"timing {plan.dtype} as asked, which takes longer"))
    if plan.weights:  # the checkpoint's own weights (tfcalc.model.load): the same FLOPs, real values
        from tfcalc.model.load import load_model

        model = load_model(plan.weights, device, dtype)
    else:
        model = build_model(plan.run_cfg, device, dtype)
    runner = torch.compile(model) if plan.compile else model
    budget, small = plan.budget, plan.budget.secondary()
    ceiling = autorange.Autorange(bench.ceiling_call(device, dtype, plan.matmul_size), small,
                                  label=f"the {plan.matmul_size}² matmul ceiling")
    items, points = [ceiling], []
    # a smaller copy (--n-layer): each other kind of block it holds timed too, for its missing layers
    kinds = bench.kind_blocks(plan.run_cfg.architecture, plan.cfg.architecture) if plan.extrapolated else []
    others = tuple(sorted({i for i, _ in kinds} - {0}))
    for seq in plan.seqs:
        idx = torch.randint(0, plan.cfg.vocab_size, (plan.batch, seq), device=device)
        forward = autorange.Autorange(lambda idx=idx: runner(idx), budget, meter=peak_meter(where),
                                      label=f"seq {seq:,}: forward")
        # a sub-layer runs the kernels, at the shapes, that the forward pass before it warmed up: no untimed call
        # (its first call is one of three, and the median holds)
        parts = {name: autorange.Autorange(fn, small if plan.warmup is not None else replace(small, warmup=0),
                                           label=f"seq {seq:,}: {name}")
                 for name, fn in bench.component_calls(model, idx, others).items()}
        items += [forward, *parts.values()]
        points.append((seq, forward, parts))

    def time_one(fn) -> float:
        return bench.time_calls(fn, device, 0, 1, progress).samples[0]

    def time_block(fn, n: int) -> tuple[float, ...]:
        return bench.time_calls(fn, device, 0, n, progress).samples

    with torch.inference_mode():
        autorange.run_interleaved(items, time_one, time_block, getattr(progress, "remaining", lambda s: None),
                                  getattr(progress, "phase", lambda text: None))
    tf32 = device.type == "cuda" and tf32_matmuls()
    peak = devices.peak_flops(where.description, plan.dtype, tf32_enabled=tf32)
    rows = [_row(plan, seq, forward, parts, kinds) for seq, forward, parts in points]
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    return {"device": where.name, "device_name": where.description, "peak": peak, "rows": rows,
            "ceiling": 2 * plan.matmul_size**3 / _timing(ceiling).median,
            "ceiling_calls": len(_timing(ceiling).samples),
            "weights_bytes": weights, "estimate_bytes": estimate, "tf32": tf32}


def _timing(item):
    from tfcalc.measure.autorange import samples
    from tfcalc.measure.bench import Timing

    return Timing(samples(item))


def _row(plan: BenchPlan, seq: int, forward, parts: dict, kinds: list[tuple[int, int]]):
    from tfcalc.measure import autorange, bench

    timing = _timing(forward)
    components = bench.ComponentTimes(**{name: _timing(parts[name]) for name in bench.COMPONENTS})
    w = Workload(batch=plan.batch, seq=seq)
    block = {i: _timing(parts["block" if i == 0 else f"block {i}"]).median for i, _ in kinds}
    return bench.BenchRow(
        seq=seq, forward=timing, forward_flops=count_flops.forward_flops(plan.cfg, w),
        forward_seconds=bench.extrapolate_kinds(timing.median, [(n, block[i]) for i, n in kinds]),
        kind_block_medians=tuple((n, block[i]) for i, n in kinds),
        components=components,
        attention_flops=count_flops.attention_flops(plan.cfg, w),
        ffn_flops=count_flops.ffn_flops(plan.cfg, w),
        peak_memory_bytes=forward.peak, warmup_calls=len(forward.warmup),
        round_medians=tuple(statistics.median(block) for block in forward.rounds),
        round_spread=autorange.round_spread(forward),
    )
