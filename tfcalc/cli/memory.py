"""`tfcalc memory`: weights, KV cache, activations and training state -- estimated, and measured on a device."""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import Annotated, Optional

import typer

from tfcalc.cli import render
from tfcalc.cli.lora_options import BaseDType, LoraRank, LoraTargets
from tfcalc.cli.options import (
    Batch,
    Device,
    DType,
    Exact,
    Format,
    FormatOption,
    GroupSize,
    Json,
    KvDType,
    Measure,
    Models,
    Overrides,
    RequireFit,
    Seq,
    SrcSeq,
    Training,
    Verbose,
    output,
    table_option,
    warn_past_context,
)
from tfcalc.cli.render import memory as view
from tfcalc.count.model import lora, memory as mem
from tfcalc.count.model.budget import parse_bytes
from tfcalc.errors import InputError
from tfcalc.report import resolve
from tfcalc.report.memory import MemoryOptions, build_memory, measure_steps
from tfcalc.workload import Workload, default_dtype

Optimizer = enum.Enum("Optimizer", {name: name for name in mem.OPTIMIZERS}, type=str)
Attention = enum.Enum("Attention", {name: name for name in mem.ATTENTION_KERNELS}, type=str)
Recompute = enum.Enum("Recompute", {name: name for name in mem.RECOMPUTE}, type=str)


TableOption = table_option("memory", "summary")


def _step_tracker(progress, label: str) -> tuple[Callable[[str], None], list[str]]:
    """(on_step, the steps begun so far) for one model: a step begins, the one before it is done."""
    done: list[str] = []

    def on_step(step: str) -> None:
        if done:
            progress()
        done.append(step)
        progress.describe(f"memory {label}: {step}")

    return on_step, done


def memory(
    models: Models,
    overrides: Overrides = None,
    batch: Batch = 1,
    seq: Seq = None,
    src_seq: SrcSeq = None,
    dtype: DType = None,
    kv_dtype: KvDType = None,
    group_size: GroupSize = None,
    training: Training = False,
    optimizer: Annotated[Optimizer, typer.Option(
        "--optimizer", help="adam-mixed: fp32 master weights and moments (16 bytes/param in bf16); adam: all in "
        "the dtype; sgd: no state; muon: Muon's one fp32 momentum buffer per hidden matrix, AdamW on embeddings, head, "
        "norms and biases, fp32 masters (Jordan et al. 2024; Moonlight, arXiv 2502.16982).")] = Optimizer["adam-mixed"],
    attention: Annotated[Optional[Attention], typer.Option(
        "--attention", help="Attention kernel: flash (no s² scores kept, as training stacks run) or math (scores "
        "kept) [default: flash; with --measure, what the real module runs].", show_default=False)] = None,
    recompute: Annotated[Recompute, typer.Option(
        "--recompute", help="selective: rebuild the attention scores (none kept under flash); full: keep only each "
        "block's input (activation checkpointing); op: torchtitan's op-level checkpointing (each block's input, "
        "QKV, attention and FFN-up outputs kept).")] = Recompute.none,
    lora_rank: LoraRank = None,
    lora_targets: LoraTargets = None,
    base_dtype: BaseDType = None,
    budget: Annotated[Optional[str], typer.Option(
        "--budget", help="Memory to fit, e.g. 80GB (10⁹) or 80GiB (2³⁰): the largest context and batch that fit.",
        show_default=False, metavar="SIZE")] = None,
    require_fit: RequireFit = False,
    measure: Measure = False,
    device: Device = None,
    format: FormatOption = Format.table,
    table: TableOption = None,
    json_out: Json = False,
    exact: Exact = False,
    verbose: Verbose = False,
) -> None:
    """How much memory: weights, KV cache, activations, training state -- and, with --measure, the peak.

    Weights: params × bytes per element; int8/int4/fp8 quantize the block matrices, counting their scales and zero
    points (--group-size; int4 packs two per byte), the rest in bf16. The KV cache is in --kv-dtype. KV cache:
    2·B·T·n_layer·n_kv_head·d_head elements; a layer with a sliding window of W keeps T ≤ W − 1 positions, a chunked
    one T ≤ C − 1 (what a decode step reads beside its own K and V, as transformers' generate() keeps). Activations:
    what autograd keeps for the backward pass (Korthikanti et al. 2022, generalized to the config; the paper's
    figure is shown beside). Training: weights + gradients + optimizer state + activations. --measure runs the real
    model in a child process (CPU: its peak RSS; CUDA: the allocator's peak) and refuses, before allocating, a run
    that the estimate says will not fit in the tightest of free memory, the process's limit and its cgroup's. With
    --training it runs one step in the steady state (gradients and optimizer state made first, without a forward
    pass), each step shown as it runs. Where the dtype's matmuls are slow on this CPU (a timed probe), it says so
    and measures with stand-in matmul results of the same shapes and dtype: the same bytes, without the slow
    arithmetic.

    An encoder-decoder keeps, beside its decoder's KV cache, the cross-attention K and V of the --src-seq source
    tokens; a mixture of experts keeps activations for the top-k experts each token runs, and its weights follow
    the checkpoint's stored format where the config names one (gpt-oss's MXFP4 experts: 4-bit values and one 8-bit
    scale per 32, 4.25 bits per weight; the rest in --dtype); an encoder keeps no KV cache.

    A hybrid (LFM2's short convolutions, Qwen3-Next's gated DeltaNet beside attention): n_layer above counts only
    the layers that cache K and V; the others keep a fixed state per sequence whatever T, each tensor in its own
    dtype -- a convolution's last K inputs in the model's dtype (what transformers' cache holds; the next step
    needs K − 1), a DeltaNet's recurrent state H_v·d_k·d_v in fp32 -- shown apart from the K/V. --budget counts
    the fixed state once per sequence and the K/V per token.
    """
    out = output(format, json_out, exact, verbose, table)
    if require_fit and budget is None:
        raise InputError("--require-fit checks the fit in a --budget: give one (e.g. --budget 80GB)")
    run_on = device or "cpu"
    dtype_name = dtype.value if dtype else default_dtype(run_on if measure else None)
    options = MemoryOptions(training=training, optimizer=optimizer.value,
                            attention=attention.value if attention else None, recompute=recompute.value,
                            budget=parse_bytes(budget, "--budget") if budget is not None else None,
                            kv_dtype=kv_dtype.value if kv_dtype else None, group_size=group_size,
                            lora=lora.spec(lora_rank, lora_targets, base_dtype))
    workload = Workload(batch=batch, seq=seq, src_seq=src_seq, dtype=dtype_name)
    reports = []
    steps = measure_steps(training) if measure else ("count",)
    with render.progress("memory", len(models) * len(steps), enabled=measure and not out.quiet) as progress:
        for name in models:
            ref = resolve(name, overrides or [])
            workload.for_model(ref.cfg)  # every size checked first: a refused one is one error line, no warning
            warn_past_context(ref, seq)
            on_step, done = _step_tracker(progress, ref.label)
            reports.append(build_memory(ref, workload, options, measure, run_on, on_step, render.note))
            progress(len(steps) - len(done) + 1 if done else len(steps))
    render.emit(reports, out, view.document)
    if require_fit:
        short = [f"{r.model.label} at batch {r.batch}, seq {r.seq:,}" for r in reports if not r.fits]
        if short:
            render.does_not_fit(f"{'; '.join(short)} in {budget}")
            raise typer.Exit(1)
