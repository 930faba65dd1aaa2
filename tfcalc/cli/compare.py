"""`tfcalc compare`: presets side by side, differences highlighted."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from tfcalc.cli import render
from tfcalc.cli.options import Json, Models, Overrides
from tfcalc.config import ModelConfig
from tfcalc.count import flops as count_flops
from tfcalc.count import memory as count_memory
from tfcalc.count import params as count_params
from tfcalc.presets import load


def compare_row(cfg: ModelConfig, seq: int | None, dtype: str) -> dict[str, Any]:
    """One model's shapes and per-token figures at seq (default: its context length)."""
    T = seq or cfg.max_seq_len
    params = count_params.total(cfg)
    groups = count_params.group_totals(cfg, count_params.breakdown(cfg))
    flops = count_flops.breakdown(cfg, 1, T)
    totals = flops.totals()
    forward = flops.forward
    attention_flops = sum(totals[g] for g in ("attention_proj", "attention_scores") + count_flops.CROSS_GROUPS)
    return {
        "preset": cfg.name,
        "n_layer": cfg.n_layer,
        "d_model": cfg.d_model,
        "n_head": cfg.n_head,
        "n_kv_head": cfg.kv_heads,
        "d_head": cfg.head_dim,
        "d_ff": cfg.ffn_dim,
        "vocab_size": cfg.vocab_size,
        "max_seq_len": cfg.max_seq_len,
        "pos_encoding": cfg.pos_encoding,
        "norm": f"{cfg.norm_placement}-{cfg.norm}",
        "ffn": f"{'gated ' if cfg.gated_ffn else ''}{cfg.activation}",
        "tie_embeddings": cfg.tie_embeddings,
        "params": params,
        "seq": T,
        # every forward term carries a factor T (tokens, or query rows of the score square): exact, but for
        # BERT's pooler and an encoder-decoder's source side (rounded, see FlopBreakdown.per_token)
        "forward_flops_per_token": flops.per_token(forward),
        "training_flops_per_token": flops.per_token(3 * forward),
        "kv_cache_bytes_per_token": count_memory.kv_cache_bytes(cfg, 1, 1, dtype),
        "kv_dtype": dtype,
        "weights_bytes": count_memory.weights_bytes(cfg, dtype),
        "attention_param_share": groups["attention"] / params,
        "ffn_param_share": groups["ffn"] / params,
        "attention_flop_share": attention_flops / forward,
        "ffn_flop_share": totals["ffn"] / forward,
    }


def compare(
    models: Models,
    overrides: Overrides = None,
    seq: Annotated[int | None, typer.Option(help="Sequence length for the per-token FLOPs (default: each model's context).", show_default=False)] = None,
    dtype: Annotated[str, typer.Option(help="dtype for weight and KV-cache bytes.")] = "bf16",
    json_out: Json = False,
) -> None:
    """Presets side by side: shapes, parameters, FLOPs per token, KV cache per token, attention/FFN shares.

    Cells that differ from the first model's are highlighted.
    """
    if seq is not None and seq < 1:
        raise typer.BadParameter(f"must be positive, got {seq}", param_hint="--seq")
    count_memory.check_dtype(dtype)
    if len(models) < 2:
        raise typer.BadParameter("give at least two models to compare", param_hint="MODELS")
    rows = [compare_row(load(m, overrides or []), seq, dtype) for m in models]
    render.compare_table(rows, json_out)
