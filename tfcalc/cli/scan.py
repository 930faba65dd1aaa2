"""`tfcalc scan`: how forward FLOPs and memory grow with the sequence length, and where attention takes over."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from tfcalc.cli import render
from tfcalc.cli.options import Batch, Json, Model, Overrides, parse_lengths
from tfcalc.config import ModelConfig
from tfcalc.count import flops as count_flops
from tfcalc.count import memory as count_memory
from tfcalc.presets import load


def parse_seq_range(text: str) -> list[int]:
    """The --seq lengths (START..END doubling, or a comma list), in increasing order, each once."""
    return sorted(set(parse_lengths(text)))


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
    batch: Batch = 1,
    dtype: Annotated[str, typer.Option(help="dtype for the KV cache and activation bytes.")] = "bf16",
    plot: Annotated[Optional[Path], typer.Option(help="Also draw the curves to this PNG file (needs tfcalc[plot]).", show_default=False)] = None,
    json_out: Json = False,
) -> None:
    """Forward FLOPs (attention scores, projections, FFN, LM head) and memory (KV cache, training
    activations) against sequence length, with the lengths where attention overtakes the FFN marked.

    Counts beyond the model's context length are arithmetic only (the model could not run there).
    """
    count_memory.check_dtype(dtype)
    cfg = load(model, overrides or [])
    report = scan_report(cfg, batch, parse_seq_range(seq), dtype)
    if plot is not None:
        from tfcalc.cli import plot as plotting

        plotting.scan_plot(report, plot)
    render.scan_report(report, json_out, plot)
