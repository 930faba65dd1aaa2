"""`tfcalc infer`: serving estimates on a roofline for a listed device, or measured on this one."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from tfcalc.cli import render
from tfcalc.cli.infer_options import (
    AcceptRate,
    ADPBalance,
    AttentionDP,
    CachedPrefix,
    Concurrency,
    ContextChunking,
    Disaggregate,
    Draft,
    DraftTokens,
    EPComm,
    EPOverlap,
    ExpertImbalance,
    HostOpUs,
    Launch,
    Lengths,
    MaxBatch,
    MaxTime,
    MeanInput,
    MeanOutput,
    PrefillChunk,
    Rate,
    RedundantExperts,
    Requests,
    ServeEP,
    ServeTP,
    adp_balance as parse_adp_balance,
    ep_overlap,
)
from tfcalc.cli.options import (
    BandwidthEfficiency,
    Batches,
    CopySize,
    Device,
    DeviceSpec,
    DType,
    Eager,
    Exact,
    Format,
    FormatOption,
    Gen,
    GroupSize,
    Json,
    KvDType,
    MatmulEfficiency,
    Measure,
    Overrides,
    Repeat,
    RequireFit,
    SrcSeq,
    Verbose,
    Warmup,
    length_value,
    output,
    parse_lengths,
    table_option,
    warn_past_context,
)
from tfcalc.cli.render.host import busy_host
from tfcalc.count.model.budget import parse_bytes
from tfcalc.errors import InputError
from tfcalc.report import continuous_measured, resolve, speculative_measured
from tfcalc.report.continuous import parse_max_batch
from tfcalc.report.infer import build_infer
from tfcalc.report.infer_options import InferOptions
from tfcalc.workload import default_dtype

Seq = Annotated[Optional[int], typer.Option(
    "--seq", "-s", help="Prompt length T in tokens (an encoder-decoder's target length); 4k = 4,096 [default: the "
    "model's context less --gen, so that prompt and generated tokens stay within it].", show_default=False,
    metavar="T", parser=length_value)]
TableOption = table_option("serving", "roofline", "speculative", "speculative-measured", "continuous",
                           "continuous-measured")


def infer(
    model: Annotated[Optional[str], typer.Argument(
        help="A preset name or alias, or a path to a YAML file or a Hugging Face config.json.", show_default=False,
        metavar="MODEL")] = None,  # optional only for the old `infer --device-spec list`, now `tfcalc devices`
    overrides: Overrides = None,
    batch: Batches = None,
    seq: Seq = None,
    gen: Gen = 256,
    src_seq: SrcSeq = None,
    dtype: DType = None,
    kv_dtype: KvDType = None,
    group_size: GroupSize = None,
    device_spec: DeviceSpec = None,
    measure: Measure = False,
    device: Device = None,
    warmup: Warmup = 3,
    repeat: Repeat = 10,
    copy_size: CopySize = None,
    matmul_efficiency: MatmulEfficiency = None,
    bandwidth_efficiency: BandwidthEfficiency = None,
    require_fit: RequireFit = False,
    tp: ServeTP = 1,
    ep: ServeEP = 1,
    attention_dp: AttentionDP = None,
    redundant_experts: RedundantExperts = 0,
    overlap: EPOverlap = None,
    expert_imbalance: ExpertImbalance = None,
    ep_comm: EPComm = "auto",
    adp_balance: ADPBalance = None,
    draft: Draft = None,
    accept_rate: AcceptRate = None,
    draft_tokens: DraftTokens = None,
    rate: Rate = None,
    concurrency: Concurrency = None,
    lengths: Lengths = None,
    mean_input: MeanInput = None,
    mean_output: MeanOutput = None,
    prefill_chunk: PrefillChunk = None,
    context_chunking: ContextChunking = None,
    cached_prefix: CachedPrefix = None,
    max_batch: MaxBatch = None,
    disaggregate: Disaggregate = None,
    requests: Requests = None,
    max_time: MaxTime = None,
    format: FormatOption = Format.table,
    table: TableOption = None,
    json_out: Json = False,
    exact: Exact = False,
    verbose: Verbose = False,
    eager: Eager = False,
    launch: Launch = None,
    host_op_us: HostOpUs = None,
) -> None:
    """How fast a model serves: prefill latency (time to first token), decode tokens/s per sequence and in total, KV
    cache and weight bytes, the largest batch that fits, and the batch at which decode turns compute-bound.

    A roofline, matmul by matmul: each takes the longer of FLOPs ÷ (peak × its GEMM shape's efficiency) and bytes ÷
    the achievable bandwidth (weights read once per step, the KV cache per sequence, activations); each step adds a
    cost per kernel, int8/int4 dequantization and the non-matmul traffic (docs/predictions.md). Steps are priced
    captured (--launch graph, the default); --launch eager adds the host's time launching each kernel from Python,
    overlapped with the GPU's (a step takes the longer of the two).
    Memory: the driver's total less the CUDA context. The device is a datasheet entry (--device-spec, default h100-sxm;
    `tfcalc devices` lists them) or, with --measure, the one it runs on (--device cpu|cuda): its matmul and
    bandwidth ceilings are measured, the real model is timed, and the measurement is shown beside the prediction
    with their ratio. --dtype int8/int4/fp8 counts quantized weights with their scales and zero points
    (--group-size); --kv-dtype sets the cache's dtype apart. A sliding window of W caches W − 1 positions per layer
    (chunks of C: C − 1), as transformers' generate() keeps them; a decode step reads those and its own K and V.
    Experts stored as MXFP4 (gpt-oss) are read as stored. Latent attention (DeepSeek's MLA) decodes in its absorbed
    form, as tfcalc's module and MLA servers run it (W_UK into the query, W_UV into the output, multi-query over the
    cached latents, read once; W_kvb's weights read once per step); its prefill in the naive form.

    --tp T: tensor-parallel serving on T GPUs of one node (Megatron's column/row splits; T divides the query heads;
    KV heads split, or replicated when T exceeds them): weights, KV cache, fits and times are one GPU's, each step
    adds its all-reduces (the embedding's, attention out and FFN out per layer, α-β on the node's link); the memory
    less NCCL's buffers too. With --measure, the collectives of the real model's forward under DTensor TP on T
    local ranks (gloo on the CPU, fp32) are set beside the prediction (calls and bytes); the prediction stays for
    --device-spec.

    --ep E [--tp T] [--attention-dp D]: expert-parallel serving of a mixture on E GPUs (the published stacks'
    layout: SGLang's --ep with --enable-dp-attention, vLLM's --enable-expert-parallel, DeepSeek-V3's inference
    system): the routed experts split E ways ((n + R)/E a GPU, --redundant-experts R), attention, dense layers
    and shared experts tensor-parallel over T and whole on each of the D = E / T data-parallel groups, each group
    holding the KV cache of its own ⌈B/D⌉ of the B sequences. A step on one GPU reads its experts that the step's
    tokens hit (h·(1 − (1 − k/(n + R))^tokens) of its h), its group's attention, and sends its B/E tokens to the
    experts' GPUs and back (dispatch and combine per MoE layer, over NVLink in a node, DeepEP's node-limited route
    over the network across nodes), after the compute (--overlap ep: two half batches, one's all-to-all under the
    other's compute). Figures per GPU; tok/s total is all E GPUs'. With --measure
    (E ranks of one node, no --tp): the real model's experts split over E gloo ranks of this machine, each rank its
    own sequences, one-token steps: per-rank parameter bytes, all-to-all bytes off a rank and experts hit, beside
    the prediction of that run; the prediction stays the listed device's.

    --draft MODEL --accept-rate A [--draft-tokens K]: speculative decoding (Leviathan et al. 2023): a round of K draft
    steps and one target step verifying K + 1 tokens yields (1 − A^(K+1)) / (1 − A) tokens; printed beside plain
    decoding with its speedup, and the draft's weights and KV cache beside the target's. With --measure (one
    sequence, decoder-only models whose cache rewinds): greedy rounds run for real on the device, the draft and
    the target with random weights (seed 0: a draft of MODEL's own configuration is MODEL and accepts every
    proposal); measured: the draft and verify step times, the acceptance, tokens per round, seconds per token
    beside plain decoding's in the same run, and that the output is the target's greedy output; predicted beside:
    the steps, and the round at the measured acceptance.

    --rate R --mean-input I --mean-output O: continuous batching in steady state (Orca's iteration-level scheduling,
    vLLM's prefills-first without chunked prefill, paged KV cache, Poisson arrivals): the requests in flight by
    Little's law, the mean decode batch, TTFT, inter-token latency, throughput, the KV cache's bound on concurrency
    and the largest rate the server sustains; over capacity is a warning (--require-fit: exit 1). With --measure
    (decoder-only models whose layers keep every position): a server loop runs on the device with that scheduler,
    --requests N seeded Poisson arrivals of exactly I and O tokens, a KV cache slot per request, for at most
    --max-time seconds; measured: throughput, TTFT, inter-token and end-to-end latency (mean, median, p90), the
    decode batch and step, the prefills' share; predicted beside them with the ceilings measured in the same run.
    The run is refused before allocating when the weights and the slots' KV cache do not fit.
    --concurrency C in place of --rate: a closed loop of C users, each sending its next request when its last one
    ends (genai-perf's concurrency mode, vLLM's --max-concurrency): throughput, TTFT (mean, p50, p99) and inter-token
    latency from the engine's steps simulated for C users with fixed lengths (--lengths fixed, the default), or by
    mean-value analysis of the same server (--lengths random); C = throughput × end-to-end latency.
    --cached-prefix N: the first N tokens of every prompt are cached (a shared system prompt under vLLM's prefix
    caching or SGLang's RadixAttention; whole blocks of 16 hit): a prefill computes the rest, attending to all the
    prompt's positions, and under load the KV cache holds the prefix once (count/serving/prefix.py).

    A mixture of experts: FLOPs are the top-k routed experts' matmuls per token plus shared experts and the router;
    a step reads the weights of only the experts some token routes to -- E·(1 − (1 − k/E)^tokens) per layer under
    uniform routing, tokens = the batch in a decode step (k experts at batch 1, nearly all E once a batch touches
    them all) and batch × seq in the prefill; the output says how many at each batch.

    A hybrid (short convolutions, gated DeltaNet): its K/V grows only in the layers that cache positions; the other
    layers keep a fixed state per sequence (a convolution's last K inputs in the model's dtype, a DeltaNet's
    recurrent state in fp32), which each decode step reads whole and writes back whole (the row state_write, in
    bytes per token); the output shows both, JSON generation_state.
    """
    out = output(format, json_out, exact, verbose, table)
    if device_spec is not None and device_spec.strip().lower() == "list":  # the old spelling, kept a while
        from tfcalc.cli.devices import show_devices

        show_devices(out)
        render.note("`infer --device-spec list` is now `tfcalc devices`")
        return
    if model is None:
        raise InputError("infer: give a MODEL (the devices: `tfcalc devices`)")
    if device is not None and not measure:
        raise InputError("--device says where --measure runs; without --measure, name the device with --device-spec")
    if eager and not measure:
        raise InputError("--eager says how --measure runs its decode steps; it needs --measure")
    run_on = device or "cpu"
    if rate is not None or concurrency is not None:  # continuous batching derives the batch and takes the means
        load = "--rate" if rate is not None else "--concurrency"  # in place of --seq and --gen
        for name, given in (("--batch", batch is not None), ("--seq", seq is not None), ("--gen", gen != 256)):
            if given:
                raise InputError(f"{name} is a static batch's; with {load} give --mean-input and --mean-output "
                                 "(the batch follows from the load)")
    options = InferOptions(
        batches=tuple(parse_lengths(batch, "--batch")) if batch is not None else (1,), seq=seq, gen=gen,
        dtype=dtype.value if dtype else default_dtype(run_on if measure else None), group_size=group_size,
        kv_dtype=kv_dtype.value if kv_dtype else None, src_seq=src_seq, device_spec=device_spec, measure=measure,
        device=run_on, warmup=warmup, repeat=repeat, copy_bytes=parse_bytes(copy_size) if copy_size else None,
        matmul_efficiency=matmul_efficiency, bandwidth_efficiency=bandwidth_efficiency, tp=tp,
        ep=ep, attention_dp=attention_dp, redundant_experts=redundant_experts, ep_overlap=ep_overlap(overlap),
        expert_imbalance=expert_imbalance, ep_comm=ep_comm, adp_balance=parse_adp_balance(adp_balance),
        draft=draft, accept_rate=accept_rate, draft_tokens=draft_tokens, rate=rate, concurrency=concurrency,
        lengths=lengths, mean_input=mean_input, mean_output=mean_output, prefill_chunk=prefill_chunk,
        context_chunking=context_chunking, cached_prefix=cached_prefix, max_batch=parse_max_batch(max_batch),
        disaggregate=disaggregate,
        requests=requests,
        max_time=max_time, eager=eager, launch=launch,
        host_op_s=None if host_op_us is None else host_op_us * 1e-6,
    )
    ref = resolve(model, overrides or [])
    if seq is not None:  # the default prompt is the whole context: its --gen past it is said in the table's notes
        warn_past_context(ref, seq, gen)
    # as tfcalc.measure.decode.DecodePlan.calls: both ceilings, then per batch the prefills and the decode steps
    loaded = rate is not None or concurrency is not None
    timed_gen = mean_output if loaded and mean_output else gen  # --rate: the decode timed at O tokens
    calls = 4 * (warmup + repeat) + len(options.batches) * (warmup + repeat + warmup + max(0, timed_gen - 1))
    calls += speculative_measured.calls(options) + continuous_measured.calls(options)
    with busy_host(f"infer --measure {ref.label}", measure and out.format in ("json", "csv")), \
            render.progress(f"infer {ref.label}", calls,
                            enabled=measure and tp == 1 and ep == 1 and not out.quiet) as advance:
        report = build_infer(ref, options, advance)
    from tfcalc.cli.render import infer as view

    render.emit([report], out, view.document)
    if require_fit:
        data = report.to_json()
        rows = data if isinstance(data, list) else [data]
        steady = rows[0]["disaggregated"] or rows[0]["continuous"]  # --disaggregate: the disaggregated server's
        if steady and steady["over_capacity"]:
            render.does_not_fit(f"{ref.label} at {steady['rate_per_s']:g} requests/s: over capacity "
                                f"({steady['limit']}; at most {steady['max_rate_per_s']:.3g} requests/s)")
            raise typer.Exit(1)
        short = [f"batch {x['batch']:,}" for x in rows if x["fits"] is False]
        if short:
            render.does_not_fit(f"{ref.label}, {report.seq:,} + {gen:,} positions: {', '.join(short)} (weights + KV "
                                f"cache past {rows[0]['memory_bytes'] / 2**30:,.1f} GiB)")
            raise typer.Exit(1)
