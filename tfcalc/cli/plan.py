"""`tfcalc plan`: a parallel training layout's memory per rank, communication, step and training time --
or the layouts that fit -- and, with --measure, the plan checked on a real torch.distributed run."""

from __future__ import annotations

import dataclasses
import enum
from typing import Annotated, Optional

import typer

from tfcalc.cli import render
from tfcalc.cli.lora_options import BaseDType, LoraRank, LoraTargets
from tfcalc.cli.options import (
    COUNTS_RULE,
    FSDP,
    TP,
    BandwidthEfficiency,
    DType,
    Exact,
    Format,
    FormatOption,
    Json,
    MatmulEfficiency,
    Measure,
    Model,
    Nproc,
    Overrides,
    RequireFit,
    Seq,
    SequenceParallel,
    Verbose,
    Zero,
    count_value,
    output,
    table_option,
    zero_stage,
)
from tfcalc.cli.plan_options import (
    CP,
    Kernels,
    Overlap,
    PPLayers,
    PPSplitCounts,
    RopeKind,
    Schedule,
    VirtualStages,
    overlap_names,
    split_count_names,
)
from tfcalc.cli.render import plan as view
from tfcalc.cli.render.host import busy_host
from tfcalc.cli.sharding_options import (
    EP,
    ETP,
    HSDP,
    ComputeDType,
    EPDispatch,
    ExpertImbalance,
    FP8AllGather,
    FP8Recipe,
    GradDType,
    NoReshard,
    Offload,
    lower,
    offload_parts,
)
from tfcalc.count.model import lora
from tfcalc.count.training.layout import ATTENTION_KERNELS, RECOMPUTE
from tfcalc.count.training.steptime import parse_count
from tfcalc.report import resolve
from tfcalc.report.plan import DEFAULT_DEVICE_SPEC, PlanRequest, build_plan
from tfcalc.report.plan_request import DEFAULT_MFU
from tfcalc.report.plan_schedule import stage_counts
from tfcalc.workload import ESTIMATE_DTYPE

Recompute = enum.Enum("Recompute", {name: name for name in RECOMPUTE}, type=str)
Attention = enum.Enum("Attention", {name: name for name in ATTENTION_KERNELS}, type=str)


TableOption = table_option("layouts", "memory", "communication", "step", "measured", "measured-collectives")


def _gpus(text: Optional[str]):
    if text is None or text.strip().lower() == "auto":
        return None if text is None else "auto"
    try:
        return int(text)
    except ValueError:
        from tfcalc.errors import InputError

        raise InputError(f"--gpus: expected a number of GPUs or 'auto'; got '{text}'") from None


def plan(
    model: Model,
    overrides: Overrides = None,
    gpus: Annotated[Optional[str], typer.Option(
        "--gpus", help="GPUs in all, or 'auto': the fewest that fit [default: tp × pp × dp; auto without a layout].",
        show_default=False, metavar="N|auto")] = None,
    device_spec: Annotated[str, typer.Option(
        "--device-spec", help="GPU kind from the datasheet table (h100-sxm, a100-80gb, ...) or a YAML file.",
        metavar="KEY|FILE")] = DEFAULT_DEVICE_SPEC,
    tp: TP = None,
    pp: Annotated[Optional[int], typer.Option("--pp", help="Pipeline stages (see --schedule).", show_default=False,
                                              metavar="P")] = None,
    dp: Annotated[Optional[int], typer.Option("--dp", help="Data-parallel degree [default: the GPUs left].",
                                              show_default=False, metavar="D")] = None,
    zero: Zero = None,
    fsdp: FSDP = False,
    recompute: Annotated[Optional[Recompute], typer.Option(
        "--recompute", help="Activation recompute: selective (attention scores), full (block inputs only) or op "
        "(torchtitan's op-level checkpointing: matmul and attention outputs kept, every second matmul and the rest "
        "run again) [default: none; a search tries each].", show_default=False)] = None,
    attention: Annotated[Attention, typer.Option(
        "--attention", help="Attention kernel the activations assume: flash (no T×T scores kept, as every current "
        "training stack runs) or math (the scores kept, Korthikanti et al. 2022's count).")] = Attention.flash,
    sequence_parallel: SequenceParallel = False,
    micro_batch: Annotated[Optional[int], typer.Option(
        "--micro-batch", help="Sequences per forward pass of one rank [default: 1; a search tries powers of two up "
        "to what fits].", metavar="B", parser=count_value, show_default=False)] = None,
    global_batch: Annotated[Optional[int], typer.Option(
        "--global-batch", help=f"Sequences per optimizer step; {COUNTS_RULE} [default: 4M tokens, 2²² / seq].",
        show_default=False, metavar="N", parser=count_value)] = None,
    seq: Seq = None,
    dtype: DType = None,
    mfu: Annotated[Optional[float], typer.Option(
        "--mfu", help="End-to-end MFU to assume: the step time at which model FLOPs / (time × peak × GPUs) is F, "
        "so the printed MFU is F [default: the performance model's prediction].", show_default=False,
        metavar="F")] = DEFAULT_MFU,
    matmul_efficiency: MatmulEfficiency = None,
    bandwidth_efficiency: BandwidthEfficiency = None,
    schedule: Schedule = None,
    virtual_stages: VirtualStages = None,
    pp_split_counts: PPSplitCounts = None,
    pp_layers: PPLayers = None,
    overlap: Overlap = None,
    cp: CP = None,
    kernels: Kernels = None,
    rope: RopeKind = "complex",
    power_limit: Annotated[Optional[float], typer.Option(
        "--power-limit", help="Watts each GPU is capped at (nvidia-smi -pl): the clock it sustains through the step, "
        "((W - static) / (rated - static))^(1/3) of its own, static the watts that do not follow the clock "
        "(perf.static_power_w: H100 85, A100 59) [default: the rated power].", show_default=False, metavar="W")] = None,
    dropout: Annotated[bool, typer.Option(
        "--dropout", help="Train with dropout: each dropout's mask (1 byte an element) and its output kept for the "
        "backward pass, the attention probabilities' too under --attention math (Korthikanti et al. 2022, Table 2; "
        "transformers' BERT and GPT-2 train with it) [default: no dropout, as LLM pre-training runs].")] = False,
    zero_engine: Annotated[str, typer.Option(
        "--zero-engine", help="How ZeRO 0/1 hold the states: flat (Megatron's and DeepSpeed's flat buffers), torch "
        "(ZeroRedundancyOptimizer, ZeRO-1: whole tensors dealt out) or deepspeed (DeepSpeed's BF16_Optimizer, with "
        "--grad-dtype fp32: the bf16 gradients stay allocated beside the fp32 accumulation, 2 bytes a parameter "
        "more).", metavar="ENGINE")] = "flat",
    optimizer: Annotated[str, typer.Option(
        "--optimizer", help="adam: mixed-precision AdamW (fp32 master, two moments); muon: Muon on the blocks' 2-D "
        "matrices (one fp32 momentum; 5 Newton-Schulz steps, the matrices all-gathered over ZeRO's DP and TP ranks "
        "first, as Moonlight's distributed Muon, arXiv 2502.16982 sec. 2.3), AdamW on the rest.",
        metavar="adam|muon")] = "adam",
    tokens: Annotated[Optional[str], typer.Option(
        "--tokens", help="Training tokens, e.g. 2T (2·10¹²) or 300B: training time and GPU-hours.", show_default=False,
        metavar="D")] = None,
    top: Annotated[int, typer.Option("--top", help="Layouts a search lists.", metavar="K")] = 10,
    lora_rank: LoraRank = None,
    lora_targets: LoraTargets = None,
    base_dtype: BaseDType = None,
    # issue 20, sharding and precision (tfcalc.cli.sharding_options)
    ep: EP = None,
    etp: ETP = None,
    ep_dispatch: EPDispatch = "auto",
    expert_imbalance: ExpertImbalance = None,
    compute_dtype: ComputeDType = None,
    fp8_recipe: FP8Recipe = "delayed",
    fp8_all_gather: FP8AllGather = False,
    no_reshard_after_forward: NoReshard = False,
    hsdp: HSDP = None,
    grad_dtype: GradDType = None,
    offload: Offload = None,
    require_fit: RequireFit = False,
    measure: Measure = False,
    nproc: Nproc = None,
    format: FormatOption = Format.table,
    table: TableOption = None,
    json_out: Json = False,
    exact: Exact = False,
    verbose: Verbose = False,
) -> int:
    """Plan parallel training: memory per rank, bytes of each collective, step time, training time.

    Per rank: weights, gradients and Adam states under ZeRO 0-3 (Rajbhandari et al. 2020; FSDP pads each tensor's
    rows), activations (the same model as `memory --training`: the terms autograd keeps in the real module,
    shared out by TP, sequence parallelism, recompute and the pipeline's micro-batches in flight, Korthikanti et
    al. 2022; flash attention unless --attention math), against the device's memory. Per step: every collective by
    cause, ring conventions (all-reduce sends 2(N−1)/N of its payload per rank). Step time from the performance model
    (docs/predictions.md): each matmul at its GEMM shape's efficiency (tile and wave
    quantization), fused attention at its kernel's, the non-matmul kernels' traffic at the achievable bandwidth, a
    cost per kernel; collectives α-β over NVLink within a node and the network across (Megatron's rank order); DP
    reduction overlapped with the backward pass, TP and PP not; the pipeline bubble (p−1)/(m+p−1). --mfu F states
    the end-to-end MFU instead (the printed MFU is F); --matmul-efficiency F sets the matmuls' share of the peak.
    Device memory: the driver's total (79.2 GiB on an "80 GB" H100) less the CUDA context and NCCL buffers.
    Variants: --ep (experts over E ranks of the DP group, the token all-to-all; with --etp or --sp, or an E that does
    not divide dp, folded over TP × CP × DP as Megatron-Core's MoE Parallel Folding), --compute-dtype fp8, --hsdp,
    --no-reshard-after-forward, --grad-dtype fp32, --recompute op (torchtitan's op-level checkpointing), --offload
    (docs/plans.md, "Sharding and precision variants").

    Without --tp/--pp/--dp: the layouts of --gpus that fit, fastest first, or (--gpus auto) the fewest GPUs that
    fit. --measure runs the layout on --nproc local ranks (a small copy of a large model; fp32) with PyTorch's DDP,
    ZeroRedundancyOptimizer (ZeRO-1), FSDP2 (ZeRO-2 as FSDP2 without resharding after forward, ZeRO-3, HSDP),
    tensor-parallel APIs, expert parallelism's all-to-all and torch.distributed.pipelining (1F1B, interleaved,
    zero-bubble, and DualPipeV for dualpipe and dualpipev; with data parallelism on 4 ranks or more), and shows the
    plan of that run beside what it measured: model-state and collective bytes agree exactly.
    """
    out = output(format, json_out, exact, verbose, table)
    request = PlanRequest(
        gpus=_gpus(gpus), tp=tp, pp=pp, dp=dp, zero=zero_stage(zero, fsdp),
        recompute=recompute.value if recompute else None, attention=attention.value,
        sequence_parallel=sequence_parallel, micro_batch=micro_batch, global_batch=global_batch, seq=seq,
        dtype=dtype.value if dtype else ESTIMATE_DTYPE, mfu=mfu, matmul_efficiency=matmul_efficiency,
        bandwidth_efficiency=bandwidth_efficiency,
        tokens=parse_count(tokens, "--tokens") if tokens is not None else None,
        top=top, ep=ep, etp=etp, ep_dispatch=lower(ep_dispatch), expert_imbalance=expert_imbalance,
        compute_dtype=lower(compute_dtype),
        fp8_recipe=lower(fp8_recipe), fp8_all_gather=fp8_all_gather, reshard_after_forward=not no_reshard_after_forward,
        hsdp=hsdp, grad_dtype=lower(grad_dtype), offload=offload_parts(offload),
        schedule=schedule.value if schedule else None, virtual_stages=virtual_stages,
        overlap=overlap_names(overlap), cp=cp, pp_split_counts=split_count_names(pp_split_counts),
        pp_layers=stage_counts(pp_layers),
        kernels=kernels.value if kernels else None, power_limit=power_limit, dropout=dropout, zero_engine=zero_engine,
        rope=lower(rope), optimizer=lower(optimizer))
    if nproc is not None and not measure:
        from tfcalc.errors import InputError

        raise InputError("--nproc is the number of ranks --measure runs; add --measure")
    # --lora-rank, --lora-targets, --base-dtype (tfcalc.count.training.lora_plan)
    request = dataclasses.replace(request, lora=lora.spec(lora_rank, lora_targets, base_dtype))
    ref = resolve(model, overrides or [])  # a --seq past the context is refused (build_plan): no warning
    ranks = 2 if nproc is None else nproc
    # a --gpus auto search of a large MoE at a long context tries hundreds of GPU counts (seconds): the
    # count under way is shown on a terminal
    searching = request.searching and request.gpus in (None, "auto")
    with busy_host(f"plan --measure {ref.label}", measure), \
            render.ranks_progress(f"plan {ref.label}", ranks, enabled=measure and not out.quiet) as show, \
            render.progress(f"plan {ref.label}: the fewest GPUs that fit", 1,
                            enabled=searching and not out.quiet) as searched:
        report = build_plan(ref, request, device_spec, measure, ranks, on_status=show,
                            on_try=lambda gpus, limit: searched.describe(
                                f"plan {ref.label}: trying {gpus:,} GPUs (at most {limit:,})"))
        searched()
    render.emit([report], out, view.document)
    m = report.measured
    if m is not None and not (m.states_exact and m.collectives_exact):
        what = [w for w, ok in (("model-state bytes", m.states_exact), ("collectives", m.collectives_exact)) if not ok]
        render.error(f"{ref.label}: the plan and the measured run disagree on {' and '.join(what)}")
        return 1
    if require_fit and not report.plan.fits:
        m = report.plan.memory
        render.does_not_fit(f"{ref.label}: {m.total / 2**30:,.1f} GiB per rank in {report.device.name} "
                            f"({report.device.memory_bytes / 2**30:,.1f} GiB)")
        return 1
    return 0
