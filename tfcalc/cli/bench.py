"""`tfcalc bench`: time forward passes of the real model on the CPU or a GPU, with honest statistics."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from tfcalc.cli import render
from tfcalc.cli.options import (Batch, CopySize, Device, DType, Exact, Format, FormatOption, Json, Model, Overrides,
                                Seqs, Verbose, _flag, output, parse_lengths)
from tfcalc.cli.render import bench as view
from tfcalc.cli.render import decode as decode_view
from tfcalc.count.budget import parse_bytes
from tfcalc.errors import InputError
from tfcalc.report import resolve
from tfcalc.report.bench import build_bench, plan_bench
from tfcalc.report.decode import build_decode_bench, plan_decode_bench
from tfcalc.workload import default_dtype


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
        "--n-layer", help="Build only K blocks and extrapolate to full depth.", show_default=False, metavar="K")] = None,
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
    format: FormatOption = Format.table,
    json_out: Json = False,
    exact: Exact = False,
    verbose: Verbose = False,
) -> None:
    """Time forward passes: median/p10/p90, tokens/s, achieved FLOP/s, MFU and the matmul ceiling.

    How long: every item (the forward pass at each length, one block's sub-layers, the matmul ceiling) is warmed up until stable, then timed until --min-time seconds (an eighth of it for the sub-layers and the ceiling) and at least --repeat calls, in --rounds interleaved rounds, as torch.utils.benchmark's blocked_autorange and pytest-benchmark do; `--min-time 0 --repeat N --warmup W` times exactly N calls after W.

    Achieved FLOP/s counts the analytic forward FLOPs (full T×T attention square, see `tfcalc flops`). MFU divides by the device's datasheet peak for the dtype (none for CPUs or unknown devices); the measured matmul ceiling of the same device and dtype, timed the same way, is always shown beside it. One block's attention and FFN sub-layers are timed in isolation: where attention's share of the time exceeds its share of the FLOPs, memory-bound work is showing. GPUs are timed with CUDA events after warm-up; peak memory is read from the device's own counters.

    --decode N times generation instead: time to first token (the prefill of a --seq prompt), then N decode steps with a static KV cache, per-token median/p10/p90, tokens/s, bytes read per token (weights + KV cache), the bandwidth achieved and MBU against a measured bandwidth ceiling (the slowest of a large device copy, a read-only reduction and a matrix-vector product, timed the same way), and the roofline's prediction with the measured ceilings beside each figure.
    """
    out = output(format, json_out, exact, verbose)
    run_on = device or "cpu"
    ref = resolve(model, overrides or [])
    if decode is not None:
        if compile_ or n_layer is not None or weights is not None:
            raise InputError("--decode times the whole model, eagerly, with random weights: drop --compile, "
                             "--n-layer and --weights")
        if min_time != 3.0 or rounds != 3:
            raise InputError("--min-time and --rounds budget forward passes; --decode times its steps --repeat times")
        plan = plan_decode_bench(ref, batch, parse_lengths(seq) if seq is not None else None, decode, run_on,
                                 dtype.value if dtype else default_dtype(run_on), 3 if warmup is None else warmup,
                                 repeat, matmul_size,
                                 parse_bytes(copy_size) if copy_size else None)
        with render.progress(f"bench --decode {ref.label}", plan.calls, enabled=not out.quiet) as advance:
            report = build_decode_bench(ref, plan, advance)
        render.emit([report], out, decode_view.document)
        return
    if copy_size is not None:
        raise InputError("--copy-size sets the bandwidth ceiling of --decode; without --decode no copy is timed")
    plan = plan_bench(ref, batch, parse_lengths(seq) if seq is not None else None, run_on,
                      dtype.value if dtype else default_dtype(run_on), warmup, repeat, compile_, n_layer, matmul_size,
                      min_time, rounds, weights)
    with render.progress(f"bench {ref.label}", plan.expected_seconds, enabled=not out.quiet, unit="s") as progress:
        report = build_bench(ref, plan, progress, render.note)
    render.emit([report], out, view.document)
