"""Curves drawn with matplotlib, an optional extra (`pip install 'tfcalc[plot]'`): PNG, SVG or PDF, as
the file's extension asks.

Every series has its own colour and its own line style or marker, so a reader tells them apart in grey
print too; one colour per component across both panels. Both plots tick their axes one way (_log2_x,
_decimal_y: 1K, 4K on x; 1M, 1G on y; bytes as the tables write them) and use fonts sized for a slide
at the default size (SLIDE): a 13-inch-wide figure shrunk onto a slide keeps its text readable."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Optional

from tfcalc.errors import InputError
from tfcalc.reading import special_kind
from tfcalc.units import nbytes

FORMATS = (".png", ".svg", ".pdf")
# matplotlib's defaults (10 pt) read as 4-5 pt once a 13 x 5.2 inch figure fills a slide's width
SLIDE = {"font.size": 14, "axes.titlesize": 16, "axes.labelsize": 14, "xtick.labelsize": 12,
         "ytick.labelsize": 12, "legend.fontsize": 11, "figure.titlesize": 17}
NOTE_SIZE = 11  # the crossover and compute-bound marks beside their vertical lines
# key: (colour, line style, marker, label)
SERIES = {
    "attention_scores": ("#d62728", "-", "o", "attention scores (QKᵀ, A·V)"),
    "attention_proj": ("#ff7f0e", "--", "s", "attention projections (Q, K, V, O)"),
    "ffn": ("#1f77b4", "-.", "^", "FFN"),
    "lm_head": ("#7f7f7f", ":", "v", "LM head"),
    "kv_cache_bytes": ("#9467bd", "-", "o", "KV cache (inference)"),
    "activation_bytes": ("#2ca02c", "--", "s", "activations (training)"),
    "training_bytes": ("#8c564b", "-.", "D", "training total (state + activations)"),
}


def check_plot_path(path: Path) -> Path:
    """The file to write: refused in one line when its extension is not one matplotlib is asked to write
    here, or when it names a folder."""
    path = Path(path)
    if path.is_dir():
        raise InputError(f"--plot {path}: is a folder; give a file name such as {path / 'scan.png'}")
    try:
        kind = special_kind(path.stat().st_mode)
    except (OSError, ValueError):
        kind = None  # a new file
    if kind is not None:  # a FIFO would block the write forever; a device would be written into
        raise InputError(f"--plot {path}: is {kind}; give the name of a regular file")
    if path.suffix.lower() not in FORMATS:
        raise InputError(f"--plot {path}: the extension must be one of {', '.join(FORMATS)}")
    return path


def _literal(text: str) -> str:
    """A user's text as matplotlib shows it: '$' would start mathtext (and an unbalanced one raises)."""
    return text.replace("$", r"\$")


def _pyplot():
    try:
        import matplotlib
    except ImportError:
        raise InputError("--plot needs matplotlib: pip install 'tfcalc[plot]'") from None
    matplotlib.use("Agg")  # files only, no display needed
    import matplotlib.pyplot as plt

    return plt


def _short(x: float, decimal: bool = False) -> str:
    """Tick labels: 131072 -> '128K' (powers of two for lengths), 1e15 -> '1P' (powers of ten)."""
    base, names = (1000, ("", "K", "M", "G", "T", "P", "E")) if decimal else (1024, ("", "K", "M", "G"))
    i = 0
    while abs(x) >= base and i < len(names) - 1:
        x, i = x / base, i + 1
    return f"{x:g}{names[i]}"


def _binary_ticks(ax) -> None:
    """Bytes on a log axis at powers of two (1 GiB, 4 GiB, ...), labelled as the tables write bytes."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

    ax.set_yscale("log", base=2)
    ax.figure.canvas.draw_idle()
    low, high = (max(v, 1.0) for v in ax.dataLim.intervaly)
    first, last = int(math.floor(math.log2(low))), int(math.ceil(math.log2(high)))
    step = max(1, -(-(last - first) // 8))  # at most about 9 ticks
    ax.yaxis.set_major_locator(FixedLocator([2.0**e for e in range(first, last + 1, step)]))
    ax.yaxis.set_minor_locator(NullLocator())
    ax.yaxis.set_major_formatter(FuncFormatter(lambda y, _: nbytes(y)))


def _log2_x(ax, xs: list[int], label: str) -> None:
    """A log-2 x axis over xs, at most about 12 ticks labelled 1K, 4K, ...; log y; a light grid."""
    from matplotlib.ticker import FixedLocator, FuncFormatter

    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel(label)
    ax.xaxis.set_major_locator(FixedLocator(xs if len(xs) <= 12 else xs[:: -(-len(xs) // 12)]))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: _short(x)))
    ax.set_xlim(xs[0] / 1.15, xs[-1] * 1.15)
    ax.grid(True, which="major", alpha=0.3)


def _decimal_y(ax) -> None:
    """A log y axis of counts or rates labelled as scan's FLOPs are: 1M, 10G, 1T (powers of ten)."""
    from matplotlib.ticker import FuncFormatter

    ax.yaxis.set_major_formatter(FuncFormatter(lambda y, _: _short(y, decimal=True)))


def _save(plt, fig, path: Path, dpi: int) -> None:
    """Write the figure atomically (tfcalc.writing: rendered in memory, then a temporary file renamed over
    the old one, so a full disk or a signal keeps the old plot) and free it; one-line error otherwise."""
    import io

    from tfcalc.writing import write_atomic

    buffer = io.BytesIO()
    try:
        fig.savefig(buffer, dpi=dpi, format=path.suffix.lower().lstrip("."))
    finally:
        plt.close(fig)
    write_atomic(path, buffer.getvalue())


def _line(ax, seqs, values, key: str, label: Optional[str] = None) -> None:
    colour, style, marker, default = SERIES[key]
    ax.plot(seqs, values, color=colour, ls=style, marker=marker, ms=3.5, lw=1.6, label=label or default)


def _mixer_labels(report: dict[str, Any]) -> dict[str, str]:
    """A hybrid's (its report names the roles of its other mixers): the attention_* series are its whole
    token-mixer sub-layer, labelled so; {} for a model of attention alone."""
    roles = report.get("mixer_roles") or ()
    if not roles:
        return {}
    mixing = ", ".join(["attention scores"] + [r["mixing_title"] for r in roles])
    projections = ", ".join(["attention"] + [r["noun"] for r in roles])
    return {"attention_scores": f"position mixing ({mixing})", "attention_proj": f"projections ({projections})"}


def scan_plot(report: dict[str, Any], path: Path, size: tuple[float, float] = (13.0, 5.2), dpi: int = 110,
              budget: Optional[int] = None) -> None:
    """Two log-log panels against sequence length: forward FLOPs by component, and memory (with the
    weights, the training total and, given a budget, the capacity line); the crossovers as vertical lines,
    the lengths past the context shaded."""
    path = check_plot_path(path)
    plt = _pyplot()

    with plt.rc_context(SLIDE):
        _scan_figure(plt, report, path, size, dpi, budget)


def _scan_figure(plt, report: dict[str, Any], path: Path, size: tuple[float, float], dpi: int,
                 budget: Optional[int]) -> None:
    rows = report["rows"]
    seqs = [r["seq"] for r in rows]
    fig, (flops_ax, mem_ax) = plt.subplots(1, 2, figsize=size, constrained_layout=True)
    labels = _mixer_labels(report)
    for key in ("attention_scores", "attention_proj", "ffn", "lm_head"):
        _line(flops_ax, seqs, [max(r[key], 1) for r in rows], key, labels.get(key))
    flops_ax.plot(seqs, [r["forward_flops"] for r in rows], color="black", lw=1, ls=(0, (1, 1)), label="forward total")
    flops_ax.set_ylabel(f"forward FLOPs per batch (batch {report['batch']}, full T×T square)")
    for key in ("kv_cache_bytes", "activation_bytes", "training_bytes"):
        if all(r.get(key) is not None for r in rows):
            _line(mem_ax, seqs, [r[key] for r in rows], key)
    mem_ax.axhline(report["weights_bytes"], color="black", lw=1, ls=(0, (1, 1)), label=f"weights ({report['dtype']})")
    if budget is not None:
        mem_ax.axhline(budget, color="#e377c2", lw=2, ls=(0, (6, 2)), label=f"capacity {nbytes(budget)}")
    mem_ax.set_ylabel(f"bytes ({report['dtype']}, batch {report['batch']})")
    crossover = report["crossover_seq"]
    for key, text in (("scores_vs_ffn", "scores = FFN"), ("attention_vs_ffn", "attention = FFN")):
        if crossover[key] is not None and seqs[0] <= crossover[key] <= seqs[-1]:  # None: never reached
            flops_ax.axvline(crossover[key], color="black", ls=(0, (4, 3)), lw=0.8)
            flops_ax.annotate(f"{text}, T = {crossover[key]:,}", (crossover[key], 0.02),
                              xycoords=("data", "axes fraction"), rotation=90, ha="right", va="bottom",
                              fontsize=NOTE_SIZE)
    for ax in (flops_ax, mem_ax):
        _log2_x(ax, seqs, "sequence length T (tokens)")
        if report["max_seq_len"] < seqs[-1]:
            ax.axvspan(report["max_seq_len"], seqs[-1] * 1.15, color="grey", alpha=0.08, lw=0)
        ax.legend(loc="upper left")
    _binary_ticks(mem_ax)
    _decimal_y(flops_ax)
    flops_ax.set_title("Where the forward FLOPs go")
    mem_ax.set_title("Memory")
    note = f" (shaded: beyond the context of {report['max_seq_len']:,})" if report["max_seq_len"] < seqs[-1] else ""
    fig.suptitle(f"{_literal(report['label'])}: compute and memory against sequence length{note}")
    _save(plt, fig, path, dpi)


def decode_plot(report: dict[str, Any], path: Path, size: tuple[float, float] = (13.0, 5.2), dpi: int = 110) -> None:
    """Decode against the batch size on a device's roofline: total tokens/s with the memory roof (every byte
    at full bandwidth) and the compute roof (every FLOP at peak), and tokens/s per sequence; the batch where
    the step turns compute-bound, where its weight matmuls do, and past which the memory is full, marked."""
    path = check_plot_path(path)
    plt = _pyplot()
    with plt.rc_context(SLIDE):
        _decode_figure(plt, report, path, size, dpi)


def _decode_figure(plt, report: dict[str, Any], path: Path, size: tuple[float, float], dpi: int) -> None:
    rows = report["rows"]
    batches = [r["batch"] for r in rows]
    fig, (total_ax, each_ax) = plt.subplots(1, 2, figsize=size, constrained_layout=True)
    # the predicted line sits on a roof wherever one bounds it: the roofs are drawn over it (zorder 3),
    # wider than it and half transparent, so the roof stays visible along the stretch they share
    total_ax.plot(batches, [r["decode_tokens_per_s_total"] for r in rows], color="#1f77b4", marker="o", ms=4, lw=1.6,
                  zorder=2, label="predicted (each matmul: the slower roof)")
    total_ax.plot(batches, [r["memory_roof_tokens_per_s"] for r in rows], color="#9467bd", ls="--", lw=3, alpha=0.6,
                  zorder=3, label="memory roof: bytes ÷ bandwidth")
    total_ax.plot(batches, [r["compute_roof_tokens_per_s"] for r in rows], color="#d62728", ls="-.", lw=3, alpha=0.6,
                  zorder=3, label="compute roof: FLOPs ÷ peak")
    total_ax.set_ylabel("decode tokens/s, all sequences")
    each_ax.plot(batches, [r["decode_tokens_per_s"] for r in rows], color="#2ca02c", marker="s", ms=4, lw=1.6,
                 label="predicted, per sequence")
    each_ax.set_ylabel("decode tokens/s per sequence")
    marks = (("compute_bound_batch", "whole step compute-bound", "#d62728"),
             ("weight_matmuls_compute_bound_batch", "weight matmuls compute-bound", "#ff7f0e"))
    for ax in (total_ax, each_ax):
        for key, text, colour in marks:
            b = report[key]
            if b is not None and batches[0] <= b <= batches[-1]:
                ax.axvline(b, color=colour, ls=(0, (4, 3)), lw=1)
                ax.annotate(f"{text}, B = {b:,}", (b, 0.02), xycoords=("data", "axes fraction"), rotation=90,
                            ha="right", va="bottom", fontsize=NOTE_SIZE)
        if report["max_batch"] < batches[-1]:
            ax.axvspan(max(report["max_batch"], batches[0] / 1.15), batches[-1] * 1.15, color="grey", alpha=0.12, lw=0,
                       label=f"does not fit {nbytes(report['memory_bytes'])} (B > {report['max_batch']:,})")
        _log2_x(ax, batches, "batch size B (sequences decoding together)")
        _decimal_y(ax)
        ax.legend(loc="best")
    c = report["ceilings"]
    total_ax.set_title(f"Throughput: {c['flops_per_s'] / 1e12:g} TFLOP/s, {c['bytes_per_s'] / 1e12:g} TB/s, "
                       f"ridge {c['ridge_flops_per_byte']:.0f} FLOP/byte")
    each_ax.set_title("Speed each sequence sees")
    fig.suptitle(f"{_literal(report['label'])} decoding at context {report['context']:,} on {report['device_name']} "
                 f"(weights {report['weight_format']}, KV cache {report['kv_dtype']})")
    _save(plt, fig, path, dpi)
