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

    Any nn.Module: MODEL as `package.module:factory`, a function of no arguments returning the module or (module,
    example_inputs): its parameters (shared tensors once, buffers apart), FLOPs per module under FlopCounterMode
    (SDPA included) and the activation bytes a training step saves (saved-tensor hooks), beside the module tree.
    """
    out = output(format, json_out, exact, verbose, table)
    from tfcalc.report.inspect import is_factory

    if any(is_factory(m) for m in models):  # any nn.Module: pkg.module:factory (tfcalc.report.inspect)
        return _modules(models, overrides, out)
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


def _modules(models: list[str], overrides, out: render.Output) -> int:
    """`tfcalc params pkg.module:factory ...`: each factory's module, inspected (tfcalc.report.inspect)."""
    from tfcalc.cli.render import inspect as module_view
    from tfcalc.errors import InputError
    from tfcalc.report.inspect import from_factory, is_factory

    if overrides:
        raise InputError("--set overrides a config's fields; a factory builds its module itself")
    mixed = [m for m in models if not is_factory(m)]
    if mixed:
        raise InputError(f"give factories (pkg.module:function) or configs, not both: {mixed[0]} is a config")
    reports = []
    with render.progress("params", len(models), enabled=not out.quiet) as progress:
        for m in models:
            progress.describe(f"params {m}: building and running the module")
            reports.append(from_factory(m))
            progress()
    render.emit(reports, out, module_view.document)
    return 0
