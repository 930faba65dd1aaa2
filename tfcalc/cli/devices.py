"""`tfcalc devices`: the datasheet table that --device-spec picks from, with each entry's source."""

from __future__ import annotations

from tfcalc.cli import render
from tfcalc.cli.options import Format, FormatOption, Json, output


def show_devices(out: render.Output) -> None:
    from tfcalc.cli.render import devices as view
    from tfcalc.report.devices import build_devices

    render.emit([build_devices()], out, view.document)


def devices(format: FormatOption = Format.table, json_out: Json = False) -> None:
    """List the devices --device-spec knows: peak FLOP/s per dtype, memory, bandwidths, and each one's source.

    A key from this table, or a YAML file of the same fields, is what `infer`, `plan` and `scan --decode`
    take as --device-spec.
    """
    show_devices(output(format, json_out))
