"""`tfcalc bench`: time forward passes of the real model on the CPU or a GPU, with honest statistics."""

from __future__ import annotations

import inspect
from typing import Annotated, Optional

import typer

from tfcalc.cli import render
from tfcalc.cli.bench_modes import run_decode, run_ranks
from tfcalc.cli.options import (
    Batch,
    BenchModel,
    Device,
    DType,
    Exact,
    Format,
    FormatOption,
    Json,
    MatmulSize,
    Overrides,
    Seqs,
    Verbose,
    bench_model,
    bound_help,
    bounded_count,
    bounded_size,
    output,
    parse_lengths,
    switch,
    table_option,
)
from tfcalc.cli.render import bench as view
from tfcalc.cli.render.host import busy_host
from tfcalc.errors import InputError
from tfcalc.report import resolve
from tfcalc.report.bench import build_bench, plan_bench
from tfcalc.workload import default_dtype

TableOption = table_option("timing", "components")


def bench(
    model: BenchModel = None,
    overrides: Overrides = None,
    batch: Batch = 1,
    seq: Seqs = None,
    dtype: DType = None,
    device: Device = None,
    min_time: Annotated[float, typer.Option(
        "--min-time", help="Seconds of timed forward calls per sequence length; the ceiling and each sub-layer "
        "get a sixteenth of it.", metavar="S")] = 3.0,
    repeat: Annotated[int, typer.Option(
        "--repeat", help="At least this many timed forward calls per length (sub-layers and ceiling: at least "
        "min(N, 3)); median, p10 and p90 over them all; " + bound_help("--repeat") + ". 3 by default: one a "
        "round, so that a forward pass of seconds is not timed longer than the answer needs.", metavar="N",
        parser=bounded_count("--repeat"))] = 3,
    rounds: Annotated[int, typer.Option(
        "--rounds", help="Interleaved rounds the timed calls are split into; the spread between the rounds' "
        f"medians is reported; {bound_help('--rounds')}.", metavar="R", parser=bounded_count("--rounds"))] = 3,
    warmup: Annotated[Optional[int], typer.Option(
        "--warmup", help="Exactly N untimed calls before timing each item, " + bound_help("--warmup") + " "
        "[default: until a call is no more than 10% faster than the one before, or a quarter of the budget is "
        "spent].", show_default=False, metavar="N", parser=bounded_count("--warmup", 0))] = None,
    compile_: Annotated[bool, switch("--compile", help="torch.compile the model first.")] = False,
    n_layer: Annotated[Optional[int], typer.Option(
        "--n-layer", help="Build only K blocks and extrapolate to full depth. The K blocks keep the model's depth "
        "pattern with fewer repeats (Llama 4's NoPE every fourth layer, DeepSeek-V3's dense layers before its MoE "
        "ones); under one period of each, the first block of each kind.", show_default=False,
        metavar="K")] = None,
    matmul_size: MatmulSize = None,
    weights: Annotated[Optional[str], typer.Option(
        "--weights", help="Time the model holding this checkpoint's weights (a model folder, a .safetensors file "
        "or a Hugging Face id in the local cache) instead of random ones.", show_default=False, metavar="PATH")] = None,
    decode: Annotated[Optional[int], typer.Option("--decode", hidden=True)] = None,  # old: `bench decode --steps`
    copy_size: Annotated[Optional[str], typer.Option("--copy-size", hidden=True,
                                                     parser=bounded_size("--copy-size"))] = None,
    nproc: Annotated[Optional[int], typer.Option("--nproc", hidden=True)] = None,  # old: `bench ranks --nproc`
    tp: Annotated[Optional[int], typer.Option("--tp", hidden=True)] = None,
    zero: Annotated[Optional[int], typer.Option("--zero", hidden=True)] = None,
    fsdp: Annotated[bool, typer.Option("--fsdp", hidden=True)] = False,
    sequence_parallel: Annotated[bool, typer.Option("--sequence-parallel", hidden=True)] = False,
    format: FormatOption = Format.table,
    table: TableOption = None,
    json_out: Json = False,
    exact: Exact = False,
    verbose: Verbose = False,
) -> None:
    """Time forward passes: median/p10/p90, tokens/s, achieved FLOP/s, MFU and the matmul ceiling.

    How long: every item (the forward pass at each length, one block's sub-layers, the matmul ceiling) is warmed up
    until stable, then timed until --min-time seconds (a sixteenth of it for the sub-layers and the ceiling) and at
    least --repeat calls, in --rounds interleaved rounds, as torch.utils.benchmark's blocked_autorange and
    pytest-benchmark do; `--min-time 0 --repeat N --warmup W` times exactly N calls after W.

    Achieved FLOP/s counts the analytic forward FLOPs (full T×T attention square, see `tfcalc flops`). MFU divides
    by the device's datasheet peak for the dtype (none for CPUs or unknown devices); the measured matmul ceiling of
    the same device and dtype, timed the same way, is always shown beside it. One block's attention and FFN
    sub-layers are timed in isolation: where attention's share of the time exceeds its share of the FLOPs,
    memory-bound work is showing. GPUs are timed with CUDA events after warm-up; peak memory is read from the
    device's own counters.

    On a CPU without --seq: the longest power of two up to the context whose forward pass takes about 2 s at an
    assumed 50 GFLOP/s (the output says which); on a GPU, the context.

    Without a model: gpt2 (said in one line), on the --device given.

    Generation: `tfcalc bench decode`. A training step on local ranks: `tfcalc bench ranks`.
    """
    out = output(format, json_out, exact, verbose, table)
    model, say = bench_model(model, "bench decode" if decode is not None else "bench", device)
    run_on = device or "cpu"
    if decode is not None and nproc is not None:
        raise InputError("--decode times one device and --nproc a training step on ranks: one of them")
    single = dict(compile_=compile_, n_layer=n_layer, weights=weights, min_time=min_time, rounds=rounds)
    if decode is not None:  # the old spelling, kept a while; the note after the answer (an error stays one line)
        _refuse(single, "--decode times the whole model, eagerly, with random weights, its steps --repeat times")
        run_decode(model, overrides, batch, seq, decode, dtype, device, 3 if warmup is None else warmup, repeat,
                   matmul_size, copy_size, out, say=say)
        return render.note(f"`bench --decode {decode}` is now `tfcalc bench decode --steps {decode}`")
    if copy_size is not None:
        raise InputError("--copy-size sets the bandwidth ceiling of `bench decode`; without --decode no copy is timed")
    if nproc is not None:  # the old spelling, kept a while
        _refuse({**single, "matmul_size": matmul_size}, "--nproc times a training step on every rank the same way")
        run_ranks(model, overrides, nproc, batch, seq, dtype, device, tp, zero, fsdp, sequence_parallel,
                  3 if warmup is None else warmup, repeat, out, say=say)
        return render.note(f"`bench --nproc {nproc}` is now `tfcalc bench ranks --nproc {nproc}`")
    ref = resolve(model, overrides or [])
    if tp is not None or zero is not None or fsdp or sequence_parallel:
        raise InputError("--tp, --zero, --fsdp and --sequence-parallel lay out ranks: `tfcalc bench ranks` (or, "
                         "as before, add --nproc)")
    plan = plan_bench(ref, batch, parse_lengths(seq) if seq is not None else None, run_on,
                      dtype.value if dtype else default_dtype(run_on), warmup, repeat, compile_, n_layer, matmul_size,
                      min_time, rounds, weights)
    from tfcalc.measure.bench_run import require_plan_fits

    require_plan_fits(plan)  # a refusal of size is the one line: before the default model is named
    say()
    with busy_host(f"bench {ref.label}"), \
            render.progress(f"bench {ref.label}", plan.expected_seconds, enabled=not out.quiet, unit="s") as progress:
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
