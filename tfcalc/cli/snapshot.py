"""`tfcalc snapshot` pins every count in a JSON file; `tfcalc check` fails when any of them moves."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from tfcalc import writing
from tfcalc.cli import render
from tfcalc.cli.options import Format, FormatOption, Json, Overrides, output
from tfcalc.cli.render import snapshot as view
from tfcalc.errors import InputError, shown_path
from tfcalc.presets import preset_names
from tfcalc.report import snapshot as snap


def snapshot(
    models: Annotated[Optional[list[str]], typer.Argument(
        help="Presets or YAML paths to pin [default: every packaged preset].", show_default=False,
        metavar="[MODEL...]")] = None,
    output_path: Annotated[Path, typer.Option(
        "-o", "--output", help="Where to write the snapshot: a file (replaced atomically; a symlink's target is "
        "rewritten; devices, FIFOs and folders are refused), or - for stdout.", metavar="FILE")] =
        Path("tfcalc-snapshot.json"),
    overrides: Overrides = None,
    format: FormatOption = Format.table,
    json_out: Json = False,
) -> None:
    """Write every count (parameters, FLOPs, memory) of the given models to a JSON snapshot."""
    out = output(format, json_out)
    to_stdout = writing.is_stdout(output_path)
    if to_stdout and out.format != "table":
        raise InputError(f"-o {shown_path(output_path)} writes the snapshot (JSON) to stdout, so there is no room for "
                         f"--format {out.format} as well; give one of them")
    if not to_stdout:
        writing.target_of(output_path)  # a device, FIFO or folder: refused before the counting starts
        writing.refuse_inputs(output_path, read_paths(models), "-o")
    data = snap.build(models or preset_names(), overrides or [])
    if to_stdout:
        render.print_json(data)  # the snapshot itself, as the file would hold it
        return
    snap.write_atomic(output_path, data)
    render.emit([snap.SnapshotReport(str(output_path), data)], out, view.snapshot_document)


def read_paths(models: Optional[list[str]]) -> list[Path]:
    """The files and folders counting models reads: each path given, and the presets' folder for a preset
    name (or for none given: every preset)."""
    from tfcalc.presets import is_path, preset_dir

    paths = [Path(m) for m in models or [] if is_path(m) or Path(m).exists()]
    if not models or len(paths) < len(models):
        paths.append(preset_dir())
    return paths


def check(
    file: Annotated[Path, typer.Argument(help="A snapshot written by `tfcalc snapshot`.", show_default=False,
                                         metavar="FILE")],
    tolerance: Annotated[float, typer.Option("--tolerance", help="Relative tolerance for numbers; 0 means exact.",
                                             metavar="X")] = 0.0,
    format: FormatOption = Format.table,
    json_out: Json = False,
) -> int:
    """Recompute every count in a snapshot: exit 0 when all match, 1 listing each drift, 2 on a bad file.

    Each drift names its model and field, the cause where check can tell (a config field that changed, tfcalc's
    version), and the `tfcalc snapshot` command that accepts the new figures. A warning when the presets of the
    tfcalc checkout around you differ from the installed ones that were counted.
    """
    from tfcalc.report.snapshot_cause import checkout_differences

    out = output(format, json_out)
    report = snap.build_check(file, tolerance)
    differ = checkout_differences(Path.cwd(), file.parent)
    if differ:
        render.warn(differ)
    render.emit([report], out, view.check_document)
    return 1 if report.drifts else 0
