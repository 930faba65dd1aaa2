"""`tfcalc flops`: where the compute of a transformer goes, analytically and measured on the real module."""

from __future__ import annotations

from functools import partial
from typing import Annotated

from tfcalc.cli import render
from tfcalc.cli.options import (
    Batch,
    Device,
    Exact,
    Format,
    FormatOption,
    Json,
    Measure,
    Models,
    Overrides,
    Seq,
    SrcSeq,
    Training,
    Verbose,
    output,
    switch,
    table_option,
)
from tfcalc.cli.render import flops as view
from tfcalc.report import resolve
from tfcalc.report.flops import build_flops
from tfcalc.workload import Workload

TableOption = table_option("forward", "training", "decode", "summary")


def flops(
    models: Models,
    overrides: Overrides = None,
    batch: Batch = 1,
    seq: Seq = None,
    src_seq: SrcSeq = None,
    measure: Measure = False,
    device: Device = None,
    training: Training = False,
    recompute: Annotated[bool, switch("--recompute", help="Training with full activation recompute: 4 × forward, "
                                     "not 3 ×.")] = False,
    decode: Annotated[bool, switch("--decode", help="Also FLOPs per generated token at context T with a KV "
                                  "cache; latent attention (DeepSeek's MLA) in its absorbed form.")] = False,
    format: FormatOption = Format.table,
    table: TableOption = None,
    json_out: Json = False,
    exact: Exact = False,
    verbose: Verbose = False,
) -> int:
    """Count FLOPs: attention projections, attention scores, FFN, LM head; forward, training and decode.

    A FLOP is one floating-point operation (a multiply-add is 2). forward_flops counts matmuls, with the attention
    scores over the full T×T square (PyTorch's FlopCounterMode, Megatron and PaLM count so); the causal count of the
    unmasked half is shown beside it. Non-matmul work (softmax, norms, activations, RoPE, residual and bias adds) is
    approximate and reported separately. Training = 3 × forward (4 × with --recompute). --measure runs the real
    module under FlopCounterMode (on meta by default: no memory; --training adds the backward); exit 1 if its count
    differs from the analytic one.

    A mixture of experts counts the routed experts' matmuls per token (its top-k; with a capacity factor, every
    expert's full buffer), plus the shared experts and the router: never all E experts. An encoder (BERT) masks no
    score. An encoder-decoder runs its encoder over --src-seq source tokens and its decoder over --seq target
    tokens; cross-attention scores T × S.

    A hybrid's other mixers are named by their roles: Mamba2's SSM projections and SSM scan, gated DeltaNet's
    projections and delta-rule recurrence, a short convolution's projections and depthwise convolution, each a row
    (JSON breakdown_by_role; the breakdown's attention_proj and attention_scores stay the whole mixer sub-layer).

    Latent attention (DeepSeek's MLA): the forward in the naive form transformers runs (W_kvb expands every key's
    latent); a decode step (--decode) in the absorbed form that tfcalc's module and MLA servers (vLLM, SGLang) run:
    W_UK folded into the query and W_UV into the output, per token 2·H·h_n·c_kv + 2·H·c_kv·h_v, per cached key
    2·H·(c_kv + h_r) + 2·H·c_kv, no expansion of the cached latents (the naive figure in JSON: flops_naive).
    """
    out = output(format, json_out, exact, verbose, table)
    workload = Workload(batch=batch, seq=seq, src_seq=src_seq)
    reports = []
    with render.progress("flops: counting on the real module", len(models), enabled=measure and not out.quiet) as step:
        for name in models:
            ref = resolve(name, overrides or [])
            step.describe(f"flops {ref.label}: FlopCounterMode on the real module ({device or 'meta'})")
            report = build_flops(ref, workload, measure, device or "meta", training, recompute)
            if report.beyond_context:
                render.warn(report.beyond_context)
            reports.append(report)
            step()
    render.emit(reports, out, partial(view.document, training=training or recompute, decode=decode))
    bad = [r for r in reports if r.agrees is False]
    for r in bad:
        render.error(f"{r.model.label}: measured {r.measured.total:,} FLOPs on {r.measured.device}, analytic "
                     f"{r.forward:,}; they differ in {', '.join(r.mismatches()) or 'the total'}")
    return 1 if bad else 0
