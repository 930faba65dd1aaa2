"""Reports in a notebook: registers the command line's writers (tfcalc.cli.render) as the reports'
``_repr_markdown_``, ``_repr_html_`` and ``to_frame()`` (tfcalc.report.display). Imported by the public
API on first use; the tables are those `tfcalc COMMAND --format markdown` prints."""

from __future__ import annotations

import importlib
from typing import Any

from tfcalc.report import display

# report class -> its renderer module under tfcalc.cli.render
RENDERERS = {
    "ParamsReport": "params", "FlopsReport": "flops", "MemoryReport": "memory", "BenchReport": "bench",
    "DistBenchReport": "bench_dist", "DecodeBenchReport": "decode", "InferReport": "infer", "PlanReport": "plan",
    "CompareReport": "compare", "ScanReport": "scan", "DecodeScanReport": "scan_decode", "DevicesReport": "devices",
    "PresetsReport": "presets",
}


def document(report: Any):
    module = importlib.import_module(f"tfcalc.cli.render.{RENDERERS[type(report).__name__]}")
    return module.document([report])


def markdown(report: Any) -> str:
    from tfcalc.cli.render import backends

    return backends.write_markdown(document(report))


def html(report: Any) -> str:
    from tfcalc.cli.render.html import write_html

    return write_html(document(report))


def frame(report: Any) -> Any:
    """The main table as a DataFrame: the columns and raw values --format csv writes."""
    try:
        import pandas
    except ImportError:
        raise ImportError("to_frame() needs pandas (pip install pandas); to_dict() needs nothing") from None
    from tfcalc.cli.render import backends

    header, rows = backends.csv_rows(document(report))
    return pandas.DataFrame(rows, columns=header)


display.VIEWS.update(markdown=markdown, html=html, frame=frame)
