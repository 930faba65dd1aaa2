"""Curves drawn to PNG files with matplotlib, an optional extra (`pip install 'tfcalc[plot]'`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tfcalc.config import ConfigError

# one colour per component, shared by both panels so a reader matches them at a glance
COLOURS = {"attention_scores": "#d62728", "attention_proj": "#ff7f0e", "ffn": "#1f77b4", "lm_head": "#7f7f7f",
           "kv_cache_bytes": "#9467bd", "activation_bytes": "#2ca02c"}
LABELS = {"attention_scores": "attention scores (QKᵀ, A·V)", "attention_proj": "attention projections (Q, K, V, O)",
          "ffn": "FFN", "lm_head": "LM head", "kv_cache_bytes": "KV cache (inference)",
          "activation_bytes": "activations (training)"}


def _pyplot():
    try:
        import matplotlib
    except ImportError:
        raise ConfigError("--plot needs matplotlib: pip install 'tfcalc[plot]'") from None
    matplotlib.use("Agg")  # files only, no display needed
    import matplotlib.pyplot as plt

    return plt


def _short(x: float, decimal: bool = False) -> str:
    """Tick labels: 131072 -> '128K' (powers of two for lengths), 1e15 -> '1P' (powers of ten)."""
    base, units = (1000, ("", "K", "M", "G", "T", "P", "E")) if decimal else (1024, ("", "K", "M", "G"))
    i = 0
    while abs(x) >= base and i < len(units) - 1:
        x, i = x / base, i + 1
    return f"{x:g}{units[i]}"


def scan_plot(report: dict[str, Any], path: Path) -> None:
    """Two log-log panels against sequence length: forward FLOPs by component, and memory; the
    crossovers as vertical lines, the context length as a shaded edge."""
    plt = _pyplot()
    rows = report["rows"]
    seqs = [r["seq"] for r in rows]
    fig, (flops_ax, mem_ax) = plt.subplots(1, 2, figsize=(13, 5.2), constrained_layout=True)
    for key in ("attention_scores", "attention_proj", "ffn", "lm_head"):
        flops_ax.plot(seqs, [max(r[key], 1) for r in rows], marker="o", ms=3, color=COLOURS[key], label=LABELS[key])
    flops_ax.plot(seqs, [r["attention_scores"] + r["attention_proj"] for r in rows], color=COLOURS["attention_scores"],
                  lw=1.2, ls="--", label="attention sub-layer (projections + scores)")
    flops_ax.plot(seqs, [r["forward_flops"] for r in rows], color="black", lw=1, ls=":", label="forward total")
    flops_ax.set_ylabel(f"forward FLOPs per sequence (batch {report['batch']}, full T×T square)")
    for key in ("kv_cache_bytes", "activation_bytes"):
        mem_ax.plot(seqs, [r[key] for r in rows], marker="o", ms=3, color=COLOURS[key], label=LABELS[key])
    mem_ax.axhline(report["weights_bytes"], color="black", lw=1, ls=":", label=f"weights ({report['dtype']})")
    mem_ax.set_ylabel(f"bytes ({report['dtype']}, batch {report['batch']})")
    crossover = report["crossover_seq"]
    for key, text in (("scores_vs_ffn", "scores = FFN"), ("attention_vs_ffn", "attention = FFN")):
        if seqs[0] <= crossover[key] <= seqs[-1]:
            flops_ax.axvline(crossover[key], color="black", ls=(0, (4, 3)), lw=0.8)
            flops_ax.annotate(f"{text}, T = {crossover[key]:,}", (crossover[key], 0.02), xycoords=("data", "axes fraction"),
                              rotation=90, ha="right", va="bottom", fontsize=8)
    from matplotlib.ticker import FuncFormatter

    for ax, unit in ((flops_ax, ""), (mem_ax, "B")):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("sequence length T (tokens)")
        ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: _short(x)))
        ax.yaxis.set_major_formatter(FuncFormatter(lambda y, _, unit=unit: _short(y, decimal=True) + unit))
        ax.grid(True, which="major", alpha=0.3)
        if report["max_seq_len"] < seqs[-1]:
            ax.axvspan(report["max_seq_len"], seqs[-1], color="grey", alpha=0.08, lw=0)
        ax.legend(fontsize=8, loc="upper left")
    flops_ax.set_title("Where the forward FLOPs go")
    mem_ax.set_title("Memory")
    note = f" (shaded: beyond the context of {report['max_seq_len']:,})" if report["max_seq_len"] < seqs[-1] else ""
    fig.suptitle(f"{report['preset']}: compute and memory against sequence length{note}")
    try:
        fig.savefig(path, dpi=110)
    except OSError as e:
        raise ConfigError(f"{path}: cannot write the plot ({e.strerror or e})") from None
    finally:
        plt.close(fig)
