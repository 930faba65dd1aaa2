"""`tfcalc scan`: how forward FLOPs and memory grow with the sequence length, and where attention takes over."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Annotated, Optional

import typer

from tfcalc.cli import render
from tfcalc.cli.options import (Batch, DType, Exact, Format, FormatOption, Json, Model, Overrides, Verbose, output,
                                parse_lengths)
from tfcalc.cli.render import scan as view
from tfcalc.count.budget import parse_bytes
from tfcalc.report import resolve
from tfcalc.report.scan import build_scan
from tfcalc.workload import default_dtype


def scan(
    model: Model,
    overrides: Overrides = None,
    seq: Annotated[str, typer.Option(
        "--seq", "-s", help="Sequence lengths: a doubling range (128..131072) or several (256,1024,4096).",
        metavar="T[,T...]|A..B")] = "128..131072",
    batch: Batch = 1,
    dtype: DType = None,
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
    json_out: Json = False,
    exact: Exact = False,
    verbose: Verbose = False,
) -> None:
    """Forward FLOPs (attention scores, projections, FFN, LM head) and memory (KV cache, training activations and total) against sequence length, with the lengths where attention overtakes the FFN marked.

    Counts beyond the model's context length are arithmetic only (the model could not run there).
    """
    from tfcalc.errors import InputError

    out = output(format, json_out, exact, verbose)
    if not (0.5 <= size[0] <= 100 and 0.5 <= size[1] <= 100) or not 10 <= dpi <= 1200:
        raise InputError("--size takes 0.5 to 100 inches each way and --dpi 10 to 1200")
    capacity = parse_bytes(budget) if budget is not None else None
    report = build_scan(resolve(model, overrides or []), parse_lengths(seq), batch,
                        dtype.value if dtype else default_dtype(None))
    if plot is not None:
        from tfcalc.cli.render import plot as plotting

        plotting.scan_plot(report.to_json(), plot, size, dpi, capacity)
        report = replace(report, plot=str(plot))
    render.emit([report], out, view.document)
