"""`tfcalc snapshot` pins every count in a JSON file; `tfcalc check` fails when any of them moves."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from tfcalc import snapshot as snap
from tfcalc.cli import render
from tfcalc.cli.options import Overrides
from tfcalc.presets import preset_names


def snapshot(
    models: Annotated[
        Optional[list[str]],
        typer.Argument(help="Presets or YAML paths to pin (default: every packaged preset).", show_default=False),
    ] = None,
    output: Annotated[Path, typer.Option("-o", "--output", help="Where to write the snapshot (written atomically).")] = Path("tfcalc-snapshot.json"),
    overrides: Overrides = None,
) -> None:
    """Write every count (parameters, FLOPs, memory) of the given models to a JSON snapshot."""
    data = snap.build(models or preset_names(), overrides or [])
    snap.write_atomic(output, data)
    render.snapshot_written(output, data)


def check(
    file: Annotated[Path, typer.Argument(help="A snapshot written by `tfcalc snapshot`.", show_default=False)],
    tolerance: Annotated[float, typer.Option(help="Relative tolerance for numbers; 0 means exact.")] = 0.0,
    json_out: Annotated[bool, typer.Option("--json", help="Print the drifts as JSON.")] = False,
) -> int:
    """Recompute every count in a snapshot: exit 0 when all match, 1 listing each drift, 2 on a bad file."""
    if tolerance < 0:
        raise typer.BadParameter(f"must be 0 or more, got {tolerance}", param_hint="--tolerance")
    data = snap.read(file)
    drifts = snap.compare(data, tolerance)
    render.check_result(file, data, drifts, json_out)
    return 1 if drifts else 0
