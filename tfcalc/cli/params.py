"""`tfcalc params`: parameter counts, analytic (from the config) and empirical (from the real module)."""

from __future__ import annotations

from typing import Annotated

import typer

from tfcalc.cli import render
from tfcalc.cli.options import Exact, Format, FormatOption, Json, Models, Overrides, Verbose, output, table_option
from tfcalc.cli.render import params as view
from tfcalc.report import resolve
from tfcalc.report.params import build_params

TableOption = table_option("components", "summary")


def params(
    models: Models,
    overrides: Overrides = None,
    measure: Annotated[bool, typer.Option(
        "--measure/--no-measure",
        help="Also build the real module on the meta device (no memory) and count its parameters.",
        metavar="")] = True,
    format: FormatOption = Format.table,
    table: TableOption = None,
    json_out: Json = False,
    exact: Exact = False,
    verbose: Verbose = False,
) -> int:
    """Count parameters, analytically from the config and empirically from the instantiated module.

    The empirical count sums numel() over the unique parameters of the real PyTorch module built on the meta device
    (no storage: GPT-3 175B costs no memory); a tied embedding and LM head count once. A model folder, a
    .safetensors file or a Hugging Face id in the local cache is also counted from its checkpoint's headers (no
    tensor data read), by dtype, every tensor mapped onto the breakdown; exit 1 naming each tensor the config does
    not explain and each component the checkpoint lacks. Breakdown by component (an encoder-decoder's by encoder and
    decoder), the textbook approximation 12·L·d² + V·d beside it, and weight bytes. For a mixture of experts, also
    the parameters active per token. Exit 1 if the two counts disagree for any model.
    """
    out = output(format, json_out, exact, verbose, table)
    reports = []
    # Building on meta means importing torch first (most of the command's time): shown, as a step.
    with render.progress("params", len(models), enabled=measure and not out.quiet) as progress:
        for m in models:
            ref = resolve(m, overrides or [])
            progress.describe(f"params {ref.label}: building the module on meta")
            reports.append(build_params(ref, measure))
            progress()
    render.emit(reports, out, view.document)
    bad = [r for r in reports if r.agrees is False]
    for r in bad:
        render.error(f"{r.model.label}: analytic and empirical counts disagree in {', '.join(r.mismatches())}")
    unexplained = [r for r in reports if r.checkpoint_problems()]
    for r in unexplained:
        problems = r.checkpoint_problems()
        more = f" and {len(problems) - 5} more (--json lists them all)" if len(problems) > 5 else ""
        render.error(f"{r.model.label}: the checkpoint and its config disagree: {'; '.join(problems[:5])}{more}")
    return 1 if bad or unexplained else 0
