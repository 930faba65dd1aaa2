"""`tfcalc bench`: time forward passes of the real model on the CPU or a GPU, with honest statistics."""

from __future__ import annotations

import inspect
from typing import Annotated, Optional

import typer

from tfcalc.cli import render
from tfcalc.cli.options import (
    FSDP,
    TP,
    Batch,
    CopySize,
    Device,
    DType,
    Exact,
    Format,
    FormatOption,
    Json,
    Model,
    Nproc,
    Overrides,
    Seqs,
    SequenceParallel,
    Verbose,
    Zero,
    _flag,
    output,
    parse_lengths,
    table_option,
    zero_stage,
)
from tfcalc.cli.render import bench as view, bench_dist as dist_view, decode as decode_view
from tfcalc.count.budget import parse_bytes
from tfcalc.errors import InputError
from tfcalc.report import resolve
from tfcalc.report.bench import build_bench, plan_bench
from tfcalc.report.bench_dist import build_dist_bench, plan_dist_bench
from tfcalc.report.decode import build_decode_bench, plan_decode_bench
from tfcalc.workload import default_dtype

TableOption = table_option("timing", "components", "step", "ranks", "decode", "predicted")


def bench(
    model: Model,
    overrides: Overrides = None,
    batch: Batch = 1,
    seq: Seqs = None,
    dtype: DType = None,
    device: Device = None,
    min_time: Annotated[float, typer.Option(
        "--min-time", help="Seconds of timed forward calls per sequence length; the ceiling and each sub-layer "
        "get an eighth of it.", metavar="S")] = 3.0,
    repeat: Annotated[int, typer.Option(
        "--repeat", help="At least this many timed forward calls per length (sub-layers and ceiling: at least "
        "min(N, 3)); median, p10 and p90 over them all.", metavar="N")] = 5,
    rounds: Annotated[int, typer.Option(
        "--rounds", help="Interleaved rounds the timed calls are split into; the spread between the rounds' "
        "medians is reported.", metavar="R")] = 3,
    warmup: Annotated[Optional[int], typer.Option(
        "--warmup", help="Exactly N untimed calls before timing each item [default: until a call is no more "
        "than 10% faster than the one before, or a quarter of the budget is spent].", show_default=False,
        metavar="N")] = None,
    compile_: Annotated[bool, _flag("--compile", help="torch.compile the model first.")] = False,
    n_layer: Annotated[Optional[int], typer.Option(
        "--n-layer", help="Build only K blocks and extrapolate to full depth.", show_default=False,
        metavar="K")] = None,
    matmul_size: Annotated[Optional[int], typer.Option(
        "--matmul-size", help="n of the n×n matmul that measures the ceiling [default: 2048 on CPU, 8192 on GPUs].",
        show_default=False, metavar="N")] = None,
    weights: Annotated[Optional[str], typer.Option(
        "--weights", help="Time the model holding this checkpoint's weights (a model folder, a .safetensors file "
        "or a Hugging Face id in the local cache) instead of random ones.", show_default=False, metavar="PATH")] = None,
    decode: Annotated[Optional[int], typer.Option(
        "--decode", help="Time generation instead: the prefill of a --seq prompt, then N decode steps with a static "
        "KV cache (TTFT, per-token latency, tokens/s, bandwidth, MBU, the roofline's prediction beside); "
        "--warmup (default 3) and --repeat apply to it.",
        show_default=False, metavar="N")] = None,
    copy_size: CopySize = None,
    nproc: Nproc = None,
    tp: TP = None,
    zero: Zero = None,
    fsdp: FSDP = False,
    sequence_parallel: SequenceParallel = False,
    format: FormatOption = Format.table,
    table: TableOption = None,
    json_out: Json = False,
    exact: Exact = False,
    verbose: Verbose = False,
) -> None:
    """Time forward passes: median/p10/p90, tokens/s, achieved FLOP/s, MFU and the matmul ceiling.

    How long: every item (the forward pass at each length, one block's sub-layers, the matmul ceiling) is warmed up
    until stable, then timed until --min-time seconds (an eighth of it for the sub-layers and the ceiling) and at
    least --repeat calls, in --rounds interleaved rounds, as torch.utils.benchmark's blocked_autorange and
    pytest-benchmark do; `--min-time 0 --repeat N --warmup W` times exactly N calls after W.

    Achieved FLOP/s counts the analytic forward FLOPs (full T×T attention square, see `tfcalc flops`). MFU divides
    by the device's datasheet peak for the dtype (none for CPUs or unknown devices); the measured matmul ceiling of
    the same device and dtype, timed the same way, is always shown beside it. One block's attention and FFN
    sub-layers are timed in isolation: where attention's share of the time exceeds its share of the FLOPs,
    memory-bound work is showing. GPUs are timed with CUDA events after warm-up; peak memory is read from the
    device's own counters.

    --decode N times generation instead: time to first token (the prefill of a --seq prompt), then N decode steps
    with a static KV cache, per-token median/p10/p90, tokens/s, bytes read per token (weights + KV cache), the
    bandwidth achieved and MBU against a measured bandwidth ceiling (the slowest of a large device copy, a read-only
    reduction and a matrix-vector product, timed the same way), and the roofline's prediction with the measured
    ceilings beside each figure.

    With --nproc N: forward + backward on N local torch.distributed ranks (gloo on the CPU; --device cuda: NCCL, one
    GPU each), data parallel (DDP; --fsdp: FSDP2) with --tp ranks of tensor parallelism, each rank timed by the same
    loop; the step is the slowest rank's median, MFU counts the training FLOPs (3 × forward).
    """
    out = output(format, json_out, exact, verbose, table)
    run_on = device or "cpu"
    ref = resolve(model, overrides or [])
    if decode is not None and nproc is not None:
        raise InputError("--decode times one device and --nproc a training step on ranks: one of them")
    single = dict(compile_=compile_, n_layer=n_layer, weights=weights, min_time=min_time, rounds=rounds)
    if decode is not None:
        _refuse(single, "--decode times the whole model, eagerly, with random weights, its steps --repeat times")
        plan = plan_decode_bench(ref, batch, parse_lengths(seq) if seq is not None else None, decode, run_on,
                                 dtype.value if dtype else default_dtype(run_on), 3 if warmup is None else warmup,
                                 repeat, matmul_size, parse_bytes(copy_size, "--copy-size") if copy_size else None)
        with render.progress(f"bench --decode {ref.label}", plan.calls, enabled=not out.quiet) as advance:
            report = build_decode_bench(ref, plan, advance)
        render.emit([report], out, decode_view.document)
        return
    if copy_size is not None:
        raise InputError("--copy-size sets the bandwidth ceiling of --decode; without --decode no copy is timed")
    if nproc is not None:
        _refuse({**single, "matmul_size": matmul_size}, "--nproc times a training step on every rank the same way")
        lengths = parse_lengths(seq) if seq is not None else []
        if len(lengths) > 1:
            raise InputError("--nproc times one --seq at a time")
        layout = plan_dist_bench(ref, nproc, batch, lengths[0] if lengths else None,
                                 dtype.value if dtype else default_dtype(run_on), tp, zero_stage(zero, fsdp) or 0,
                                 sequence_parallel)
        with render.progress(f"bench {ref.label} on {nproc} ranks", 1, enabled=not out.quiet) as advance:
            report = build_dist_bench(ref, layout, 3 if warmup is None else warmup, repeat, run_on)
            advance()
        render.emit([report], out, dist_view.document)
        return
    if tp is not None or zero is not None or fsdp or sequence_parallel:
        raise InputError("--tp, --zero, --fsdp and --sequence-parallel lay out --nproc ranks; add --nproc")
    plan = plan_bench(ref, batch, parse_lengths(seq) if seq is not None else None, run_on,
                      dtype.value if dtype else default_dtype(run_on), warmup, repeat, compile_, n_layer, matmul_size,
                      min_time, rounds, weights)
    with render.progress(f"bench {ref.label}", plan.expected_seconds, enabled=not out.quiet, unit="s") as progress:
        report = build_bench(ref, plan, progress, render.note)
    render.emit([report], out, view.document)


def _refuse(given: dict, why: str) -> None:
    """One line naming every option given (not left at bench's own default) that this mode does not use;
    an option's flag is its parameter's name ("compile_" -> --compile, "n_layer" -> --n-layer)."""
    parameters = inspect.signature(bench).parameters
    extra = ["--" + name.rstrip("_").replace("_", "-") for name, value in given.items()
             if value != parameters[name].default]
    if extra:
        raise InputError(f"{why}: drop {', '.join(extra)}")
