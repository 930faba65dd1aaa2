"""`tfcalc bench`: time forward passes of the real model on the CPU or a GPU, with honest statistics."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from tfcalc.cli import render
from tfcalc.cli.options import (Batch, Device, DType, Exact, Format, FormatOption, Json, Model, Overrides, Seqs,
                                Verbose, _flag, output, parse_lengths)
from tfcalc.cli.render import bench as view
from tfcalc.report import resolve
from tfcalc.report.bench import build_bench, plan_bench
from tfcalc.workload import default_dtype


def bench(
    model: Model,
    overrides: Overrides = None,
    batch: Batch = 1,
    seq: Seqs = None,
    dtype: DType = None,
    device: Device = None,
    warmup: Annotated[int, typer.Option("--warmup", help="Untimed calls before timing.", metavar="N")] = 3,
    repeat: Annotated[int, typer.Option("--repeat", help="Timed calls; median, p10 and p90 over them.",
                                        metavar="N")] = 10,
    compile_: Annotated[bool, _flag("--compile", help="torch.compile the model first.")] = False,
    n_layer: Annotated[Optional[int], typer.Option(
        "--n-layer", help="Build only K blocks and extrapolate to full depth.", show_default=False, metavar="K")] = None,
    matmul_size: Annotated[Optional[int], typer.Option(
        "--matmul-size", help="n of the n×n matmul that measures the ceiling [default: 2048 on CPU, 8192 on GPUs].",
        show_default=False, metavar="N")] = None,
    format: FormatOption = Format.table,
    json_out: Json = False,
    exact: Exact = False,
    verbose: Verbose = False,
) -> None:
    """Time forward passes: median/p10/p90, tokens/s, achieved FLOP/s, MFU and the matmul ceiling.

    Achieved FLOP/s counts the analytic forward FLOPs (full T×T attention square, see `tfcalc flops`). MFU divides by the device's datasheet peak for the dtype (none for CPUs or unknown devices); the measured matmul ceiling of the same device and dtype, timed the same way, is always shown beside it. One block's attention and FFN sub-layers are timed in isolation: where attention's share of the time exceeds its share of the FLOPs, memory-bound work is showing. GPUs are timed with CUDA events after warm-up; peak memory is read from the device's own counters.
    """
    out = output(format, json_out, exact, verbose)
    run_on = device or "cpu"
    ref = resolve(model, overrides or [])
    plan = plan_bench(ref, batch, parse_lengths(seq) if seq is not None else None, run_on,
                      dtype.value if dtype else default_dtype(run_on), warmup, repeat, compile_, n_layer, matmul_size)
    with render.progress(f"bench {ref.label}", plan.calls, enabled=not out.quiet) as advance:
        report = build_bench(ref, plan, advance)
    render.emit([report], out, view.document)
