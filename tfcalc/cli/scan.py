"""`tfcalc scan`: how forward FLOPs and memory grow with the sequence length, and where attention takes over."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Annotated, Optional

import typer

from tfcalc.cli import render
from tfcalc.cli.options import (
    Batches,
    DeviceSpec,
    DType,
    Exact,
    Format,
    FormatOption,
    GroupSize,
    Json,
    KvDType,
    Model,
    Overrides,
    Verbose,
    output,
    parse_lengths,
    table_option,
    warn_past_context,
)
from tfcalc.cli.render import scan as view
from tfcalc.count.model.budget import parse_bytes
from tfcalc.report import resolve
from tfcalc.report.scan import build_scan
from tfcalc.workload import default_dtype

TableOption = table_option("scan", "decode")


def scan(
    model: Model,
    overrides: Overrides = None,
    seq: Annotated[Optional[str], typer.Option(
        "--seq", "-s", help="Sequence lengths: a doubling range or several (256,1024,4096) [default: 128..131072]; "
        "with --decode one context [default: the model's context length].", show_default=False,
        metavar="T[,T...]|A..B")] = None,
    batch: Batches = None,
    dtype: DType = None,
    decode: Annotated[bool, typer.Option(
        "--decode", help="Decode tokens/s against the batch size (--batch, default 1..1024) at one context, on "
        "a device's roofline (--device-spec).", metavar="")] = False,
    device_spec: DeviceSpec = None,
    kv_dtype: KvDType = None,
    group_size: GroupSize = None,
    plot: Annotated[Optional[Path], typer.Option(
        "--plot", help="Also draw the curves to this file: .png, .svg or .pdf (needs matplotlib: "
        "pip install 'tfcalc[plot]').", show_default=False, metavar="FILE")] = None,
    size: Annotated[tuple[float, float], typer.Option("--size", help="Plot size in inches, width height.",
                                                      metavar="W H")] = (13.0, 5.2),
    dpi: Annotated[int, typer.Option("--dpi", help="Plot resolution (PNG), dots per inch.", metavar="N")] = 110,
    budget: Annotated[Optional[str], typer.Option(
        "--budget", help="Draw a capacity line on the memory panel, e.g. 80GiB.", show_default=False,
        metavar="SIZE")] = None,
    format: FormatOption = Format.table,
    table: TableOption = None,
    json_out: Json = False,
    exact: Exact = False,
    verbose: Verbose = False,
) -> None:
    """Forward FLOPs (attention scores, projections, FFN, LM head) and memory (KV cache, training activations and
    total) against sequence length, with the lengths where attention overtakes the FFN marked.

    Counts beyond the model's context length are arithmetic only (the model could not run there). With --decode:
    decode tokens/s (in total and per sequence) against the batch size at one context, on a device's roofline
    (--device-spec, default h100-sxm), with the batch where decode turns compute-bound and the largest batch that
    fits marked.

    A hybrid (short convolutions, gated DeltaNet beside attention) gets a second table: the K/V that grows with T
    beside the fixed state of the other layers and its share, and the mixing FLOPs of the layers whose state grows
    (like T², attention's scores) beside those of the fixed-state layers (like T: constant per token).
    """
    from tfcalc.errors import InputError

    out = output(format, json_out, exact, verbose, table)
    if not (0.5 <= size[0] <= 100 and 0.5 <= size[1] <= 100) or not 10 <= dpi <= 1200:
        raise InputError("--size takes 0.5 to 100 inches each way and --dpi 10 to 1200")
    capacity = parse_bytes(budget, "--budget") if budget is not None else None
    if plot is not None:
        from tfcalc.cli.render.plot import check_plot_path

        check_plot_path(plot)  # a folder or an unknown extension: refused before the counting
        from tfcalc import writing
        from tfcalc.cli.snapshot import read_paths

        writing.refuse_inputs(plot, read_paths([model]) + [device_spec], "--plot")
    if decode:
        return _decode(model, overrides, seq, batch, dtype, device_spec, kv_dtype, group_size, plot, size, dpi, out)
    if device_spec is not None or kv_dtype is not None or group_size is not None:
        raise InputError("--device-spec, --kv-dtype and --group-size apply to scan --decode")
    batches = parse_lengths(batch, "--batch") if batch is not None else [1]
    if len(batches) != 1:
        raise InputError("--batch: one batch size, unless --decode scans them")
    seqs = parse_lengths(seq if seq is not None else "128..131072")
    dtype_name = dtype.value if dtype else default_dtype(None)
    ref = resolve(model, overrides or [])
    if seq is not None:  # the default sweep goes past every context on purpose, to show where attention wins
        warn_past_context(ref, max(seqs))
    report = build_scan(ref, seqs, batches[0], dtype_name)
    if plot is not None:
        report = replace(report, plot=str(_draw(report, plot, out, lambda plotting: plotting.scan_plot(
            report.to_json(), plot, size, dpi, capacity))))
    render.emit([report], out, view.document)


def _decode(model, overrides, seq, batch, dtype, device_spec, kv_dtype, group_size, plot, size, dpi, out) -> None:
    """scan --decode: one context, a range of batch sizes, a device's roofline."""
    from tfcalc.cli.render import scan_decode as decode_view
    from tfcalc.errors import InputError
    from tfcalc.report.scan_decode import build_decode_scan

    contexts = parse_lengths(seq) if seq is not None else [None]
    if len(contexts) != 1:
        raise InputError("--seq: scan --decode takes one context length (it scans --batch)")
    batches = parse_lengths(batch if batch is not None else "1..1024", "--batch")
    ref = resolve(model, overrides or [])
    warn_past_context(ref, contexts[0])
    report = build_decode_scan(ref, batches, contexts[0],
                               dtype.value if dtype else default_dtype(None), group_size,
                               kv_dtype.value if kv_dtype else None, device_spec)
    if plot is not None:
        report = replace(report, plot=str(_draw(report, plot, out, lambda plotting: plotting.decode_plot(
            report.to_json(), plot, size, dpi))))
    render.emit([report], out, decode_view.document)


def _draw(report, plot: Path, out, draw) -> Path:
    """draw(the plot module): importing matplotlib and drawing take seconds, so a progress line shows."""
    with render.progress(f"scan {report.model.label}: drawing {plot.name}", 1, enabled=not out.quiet) as done:
        from tfcalc.cli.render import plot as plotting

        draw(plotting)
        done()
    return plot
