"""`tfcalc scan`: how forward FLOPs and memory grow with the sequence length, and where attention takes over."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from tfcalc.cli import render
from tfcalc.cli.options import Json, Model, Overrides
from tfcalc.config import ModelConfig
from tfcalc.count import flops as count_flops
from tfcalc.count import memory as count_memory
from tfcalc.presets import load


def parse_seq_range(text: str) -> list[int]:
    """'128..131072' -> 128, 256, ..., 131072 (doubling; the end is included even off the doubling);
    '256,1024,4096' -> those lengths."""
    try:
        if ".." in text:
            lo_text, hi_text = text.split("..", 1)
            lo, hi = int(lo_text), int(hi_text)
            if lo < 1 or hi < lo:
                raise typer.BadParameter(f"expected START..END with 1 <= START <= END, got '{text}'", param_hint="--seq")
            seqs = []
            while lo < hi:
                seqs.append(lo)
                lo *= 2
            return seqs + [hi]
        seqs = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise typer.BadParameter(f"expected START..END or a comma list of integers, got '{text}'", param_hint="--seq") from None
    if not seqs or any(s < 1 for s in seqs):
        raise typer.BadParameter(f"sequence lengths must be positive, got '{text}'", param_hint="--seq")
    return sorted(set(seqs))


def scan_row(cfg: ModelConfig, batch: int, seq: int, dtype: str) -> dict[str, Any]:
    totals = count_flops.breakdown(cfg, batch, seq).totals()
    forward = sum(totals.values())
    # an encoder-decoder's cross-attention counts as attention, BERT's pooler with the head
    scores = totals["attention_scores"] + totals["cross_attention_scores"]
    return {
        "seq": seq,
        "attention_scores": scores,
        "attention_proj": totals["attention_proj"] + totals["cross_attention_proj"],
        "ffn": totals["ffn"],
        "lm_head": totals["lm_head"] + totals["pooler"],
        "forward_flops": forward,
        "scores_share": scores / forward,
        "kv_cache_bytes": count_memory.kv_cache_bytes(cfg, batch, seq, dtype),
        "activation_bytes": count_memory.activations(cfg, batch, seq, dtype).total,
    }


def scan_report(cfg: ModelConfig, batch: int, seqs: list[int], dtype: str) -> dict[str, Any]:
    crossover = count_flops.crossover_seq(cfg)
    return {
        "preset": cfg.name,
        "batch": batch,
        "dtype": dtype,
        "max_seq_len": cfg.max_seq_len,
        "weights_bytes": count_memory.weights_bytes(cfg, dtype),
        "crossover_seq": {"scores_vs_ffn": crossover.scores_vs_ffn, "attention_vs_ffn": crossover.attention_vs_ffn},
        "rows": [scan_row(cfg, batch, seq, dtype) for seq in seqs],
    }


def scan(
    model: Model,
    overrides: Overrides = None,
    seq: Annotated[str, typer.Option(help="START..END (doubling) or a comma list of lengths.")] = "128..131072",
    batch: Annotated[int, typer.Option(help="Batch size.")] = 1,
    dtype: Annotated[str, typer.Option(help="dtype for the KV cache and activation bytes.")] = "bf16",
    plot: Annotated[Optional[Path], typer.Option(help="Also draw the curves to this PNG file (needs tfcalc[plot]).", show_default=False)] = None,
    json_out: Json = False,
) -> None:
    """Forward FLOPs (attention scores, projections, FFN, LM head) and memory (KV cache, training
    activations) against sequence length, with the lengths where attention overtakes the FFN marked.

    Counts beyond the model's context length are arithmetic only (the model could not run there).
    """
    if batch < 1:
        raise typer.BadParameter(f"must be at least 1, got {batch}", param_hint="--batch")
    count_memory.check_dtype(dtype)
    cfg = load(model, overrides or [])
    report = scan_report(cfg, batch, parse_seq_range(seq), dtype)
    if plot is not None:
        from tfcalc.cli import plot as plotting

        plotting.scan_plot(report, plot)
    render.scan_report(report, json_out, plot)
