"""`tfcalc compare`: models side by side, differences highlighted."""

from __future__ import annotations

from tfcalc.cli import render
from tfcalc.cli.options import (
    DType,
    Exact,
    Format,
    FormatOption,
    Json,
    Models,
    Overrides,
    Seq,
    Verbose,
    output,
    warn_past_context,
)
from tfcalc.cli.render import compare as view
from tfcalc.report import resolve
from tfcalc.report.compare import build_compare
from tfcalc.workload import default_dtype


def compare(
    models: Models,
    overrides: Overrides = None,
    seq: Seq = None,
    dtype: DType = None,
    format: FormatOption = Format.table,
    json_out: Json = False,
    exact: Exact = False,
    verbose: Verbose = False,
) -> None:
    """Models side by side: shapes, parameters, FLOPs per token, KV cache per token, attention and FFN shares.

    Every model is taken at the same sequence length: --seq, or the shortest context among them. Cells that differ
    from the first model's are highlighted. KV cache / token is the K/V of the layers that cache it; a hybrid's
    fixed state (a convolution's ring, a recurrent state) is a row of its own, per sequence, and so is the whole
    state of one sequence at the length.
    """
    out = output(format, json_out, exact, verbose)
    refs = [resolve(m, overrides or []) for m in models]
    for ref in refs:
        warn_past_context(ref, seq)
    report = build_compare(refs, seq, dtype.value if dtype else default_dtype(None))
    render.emit([report], out, view.document)
