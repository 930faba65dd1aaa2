"""`tfcalc bench decode` (generation on one device) and `tfcalc bench ranks` (a training step on local
torch.distributed ranks): bench's other two modes, each a command with only its own options. The old
spellings, `bench --decode N` and `bench --nproc N`, run these with a one-line note (tfcalc.cli.bench)."""

from __future__ import annotations

from typing import Annotated

import typer

from tfcalc.cli import render
from tfcalc.cli.options import (
    FSDP,
    TP,
    Batch,
    BenchModel,
    CopySize,
    Device,
    DType,
    Eager,
    Exact,
    Format,
    FormatOption,
    Json,
    MatmulSize,
    Model,
    Overrides,
    Seqs,
    SequenceParallel,
    Verbose,
    Zero,
    bench_model,
    bound_help,
    bounded_count,
    output,
    parse_lengths,
    table_option,
    zero_stage,
)
from tfcalc.cli.render.host import busy_host
from tfcalc.count.model.budget import parse_bytes
from tfcalc.errors import InputError
from tfcalc.report import resolve
from tfcalc.workload import default_dtype

Warmup = Annotated[int, typer.Option("--warmup", help=f"Untimed calls before timing; {bound_help('--warmup')}.",
                                     metavar="N", parser=bounded_count("--warmup", 0))]
Repeat = Annotated[int, typer.Option("--repeat", help="Timed calls: median, p10 and p90 over them (decode: every "
                                     f"step is one); {bound_help('--repeat')}.", metavar="N",
                                     parser=bounded_count("--repeat"))]
Steps = Annotated[int, typer.Option("--steps", help=f"Decode steps after the prefill; {bound_help('--steps')} "
                                    "(and the prompt and the steps within the model's context).", metavar="N",
                                    parser=bounded_count("--steps"))]
DecodeTable = table_option("decode", "predicted")
RanksTable = table_option("step", "ranks")


def run_decode(model, overrides, batch, seq, steps, dtype, device, warmup, repeat, matmul_size, copy_size,
               out: render.Output, eager: bool = False, compile: bool = False, say=lambda: None) -> None:
    """say(): the line naming the default model, once every option is checked."""
    from tfcalc.cli.render import decode as view
    from tfcalc.report.decode import build_decode_bench, plan_decode_bench

    run_on = device or "cpu"
    ref = resolve(model, overrides or [])
    plan = plan_decode_bench(ref, batch, parse_lengths(seq) if seq is not None else None, steps, run_on,
                             dtype.value if dtype else default_dtype(run_on), warmup, repeat, matmul_size,
                             parse_bytes(copy_size, "--copy-size") if copy_size else None, eager, compile)
    say()
    # the table says it itself (render.infer.busy_note); the other formats hear it on stderr
    with busy_host(f"bench decode {ref.label}", out.format in ("json", "csv")), \
            render.progress(f"bench decode {ref.label}", plan.calls, enabled=not out.quiet) as advance:
        report = build_decode_bench(ref, plan, advance)
    render.emit([report], out, view.document)


def run_ranks(model, overrides, nproc, batch, seq, dtype, device, tp, zero, fsdp, sequence_parallel, warmup, repeat,
              out: render.Output, say=None) -> None:
    """``say``: the default model's note, said once every check has passed (a refusal stays one line)."""
    from tfcalc.cli.render import bench_dist as view
    from tfcalc.report.bench_dist import build_dist_bench, check_dist_bench, plan_dist_bench

    run_on = device or "cpu"
    ref = resolve(model, overrides or [])
    lengths = parse_lengths(seq) if seq is not None else []
    if len(lengths) > 1:
        raise InputError("bench ranks times one --seq at a time")
    layout = plan_dist_bench(ref, nproc, batch, lengths[0] if lengths else None,
                             dtype.value if dtype else default_dtype(run_on), tp, zero_stage(zero, fsdp) or 0,
                             sequence_parallel)
    check_dist_bench(ref, layout, warmup, repeat, run_on)
    if say is not None:
        say()
    with busy_host(f"bench ranks {ref.label}"), \
            render.ranks_progress(f"bench ranks {ref.label}", layout.gpus, enabled=not out.quiet) as show:
        report = build_dist_bench(ref, layout, warmup, repeat, run_on, on_status=show)
    render.emit([report], out, view.document)


def bench_decode(
    model: BenchModel = None,
    overrides: Overrides = None,
    steps: Steps = 32,
    batch: Batch = 1,
    seq: Seqs = None,
    dtype: DType = None,
    device: Device = None,
    warmup: Warmup = 3,
    repeat: Repeat = 5,
    matmul_size: MatmulSize = None,
    copy_size: CopySize = None,
    format: FormatOption = Format.table,
    table: DecodeTable = None,
    json_out: Json = False,
    exact: Exact = False,
    verbose: Verbose = False,
    eager: Eager = False,
    compile: Annotated[bool, typer.Option(
        "--compile", help="Run each decode step through torch.compile (Inductor's fused kernels, default mode), "
        "captured in tfcalc's CUDA graph as the default mode is; mode \"compile\". CUDA only. Each cache "
        "bucket compiles before its first timed step.")] = False,
) -> None:
    """Time generation: time to first token, then --steps decode steps with a static KV cache.

    The prefill of a --seq prompt, then per-token median/p10/p90, tokens/s, bytes read per token (weights + KV
    cache), the bandwidth achieved and MBU against a measured bandwidth ceiling (the slowest of a large device copy,
    a read-only reduction and a matrix-vector product, timed the same way), and the roofline's prediction with the
    measured ceilings beside each figure. Without a model: gpt2 (said in one line), on the --device given. Was
    `tfcalc bench --decode N`.
    """
    out = output(format, json_out, exact, verbose, table)
    model, say = bench_model(model, "bench decode", device)
    run_decode(model, overrides, batch, seq, steps, dtype, device, warmup, repeat, matmul_size, copy_size, out, eager,
               compile, say)


def bench_ranks(
    model: Model,
    overrides: Overrides = None,
    nproc: Annotated[int, typer.Option(
        "--nproc", help="Local torch.distributed ranks to run (gloo on the CPU, NCCL with one GPU each; the same "
        "program runs under torchrun).", metavar="N")] = 2,
    batch: Batch = 1,
    seq: Seqs = None,
    dtype: DType = None,
    device: Device = None,
    tp: TP = None,
    zero: Zero = None,
    fsdp: FSDP = False,
    sequence_parallel: SequenceParallel = False,
    warmup: Warmup = 3,
    repeat: Repeat = 5,
    format: FormatOption = Format.table,
    table: RanksTable = None,
    json_out: Json = False,
    exact: Exact = False,
    verbose: Verbose = False,
) -> None:
    """Time a training step (forward + backward) on --nproc local torch.distributed ranks.

    gloo on the CPU; --device cuda: NCCL, one GPU each. Data parallel (DDP; --fsdp: FSDP2) with --tp ranks of tensor
    parallelism, each rank timed by the same loop; the step is the slowest rank's median, MFU counts the training
    FLOPs (3 × forward). Was `tfcalc bench --nproc N`.
    """
    run_ranks(model, overrides, nproc, batch, seq, dtype, device, tp, zero, fsdp, sequence_parallel, warmup, repeat,
              output(format, json_out, exact, verbose, table))
