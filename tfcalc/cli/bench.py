"""`tfcalc bench`: time forward passes of the real model on the CPU or a GPU, with honest statistics."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from tfcalc.cli import render
from tfcalc.cli.options import (FSDP, TP, Batch, Device, DType, Exact, Format, FormatOption, Json, Model, Nproc,
                                Overrides, SequenceParallel, Seqs, Verbose, Zero, _flag, output, parse_lengths,
                                zero_stage)
from tfcalc.cli.render import bench as view
from tfcalc.cli.render import bench_dist as dist_view
from tfcalc.report import resolve
from tfcalc.report.bench import build_bench, plan_bench
from tfcalc.report.bench_dist import build_dist_bench, plan_dist_bench
from tfcalc.errors import InputError
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
    nproc: Nproc = None,
    tp: TP = None,
    zero: Zero = None,
    fsdp: FSDP = False,
    sequence_parallel: SequenceParallel = False,
    format: FormatOption = Format.table,
    json_out: Json = False,
    exact: Exact = False,
    verbose: Verbose = False,
) -> None:
    """Time forward passes: median/p10/p90, tokens/s, achieved FLOP/s, MFU and the matmul ceiling.

    Achieved FLOP/s counts the analytic forward FLOPs (full T×T attention square, see `tfcalc flops`). MFU divides by the device's datasheet peak for the dtype (none for CPUs or unknown devices); the measured matmul ceiling of the same device and dtype, timed the same way, is always shown beside it. One block's attention and FFN sub-layers are timed in isolation: where attention's share of the time exceeds its share of the FLOPs, memory-bound work is showing. GPUs are timed with CUDA events after warm-up; peak memory is read from the device's own counters.

    With --nproc N: forward + backward on N local torch.distributed ranks (gloo on the CPU; --device cuda: NCCL, one GPU each), data parallel (DDP; --fsdp: FSDP2) with --tp ranks of tensor parallelism, each rank timed by the same loop; the step is the slowest rank's median, MFU counts the training FLOPs (3 × forward).
    """
    out = output(format, json_out, exact, verbose)
    run_on = device or "cpu"
    ref = resolve(model, overrides or [])
    if nproc is not None:
        if compile_ or n_layer is not None or matmul_size is not None:
            raise InputError("--compile, --n-layer and --matmul-size time one device; leave them out with --nproc")
        lengths = parse_lengths(seq) if seq is not None else []
        if len(lengths) > 1:
            raise InputError("--nproc times one --seq at a time")
        layout = plan_dist_bench(ref, nproc, batch, lengths[0] if lengths else None,
                                 dtype.value if dtype else default_dtype(run_on), tp, zero_stage(zero, fsdp) or 0,
                                 sequence_parallel)
        with render.progress(f"bench {ref.label} on {nproc} ranks", 1, enabled=not out.quiet) as advance:
            report = build_dist_bench(ref, layout, warmup, repeat, run_on)
            advance()
        render.emit([report], out, dist_view.document)
        return
    if tp is not None or zero is not None or fsdp or sequence_parallel:
        raise InputError("--tp, --zero, --fsdp and --sequence-parallel lay out --nproc ranks; add --nproc")
    plan = plan_bench(ref, batch, parse_lengths(seq) if seq is not None else None, run_on,
                      dtype.value if dtype else default_dtype(run_on), warmup, repeat, compile_, n_layer, matmul_size)
    with render.progress(f"bench {ref.label}", plan.calls, enabled=not out.quiet) as advance:
        report = build_bench(ref, plan, advance)
    render.emit([report], out, view.document)
