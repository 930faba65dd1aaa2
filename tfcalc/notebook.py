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
    "PresetsReport": "presets", "InspectReport": "inspect",
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
    """The main table as a tidy DataFrame: one row per item, numeric columns numeric, totals apart (in
    ``df.attrs``); the reports without a tidy form of their own: the columns and raw values --format csv writes."""
    try:
        import pandas
    except ImportError:
        raise ImportError("to_frame() needs pandas (pip install pandas); to_dict() needs nothing") from None
    tidy = TIDY.get(type(report).__name__)
    if tidy is not None:
        return tidy(report, pandas)
    from tfcalc.cli.render import backends

    header, rows = backends.csv_rows(document(report))
    return pandas.DataFrame(rows, columns=header)


def _params_frame(report: Any, pandas: Any) -> Any:
    """One row per component group (and stack, for an encoder-decoder): Parameters sums to the analytic total
    (a tied head counts 0: its tensor is the embedding's); the totals in ``df.attrs["totals"]``."""
    from tfcalc.cli.render.params import GROUP_TITLES
    from tfcalc.count.model import params as count

    total, sums = report.analytic_total, {}
    for e in report.entries:
        sums[(e.stack, e.group)] = sums.get((e.stack, e.group), 0) + e.total
    order = {g: i for i, g in enumerate(count.GROUPS)} | {s: i for i, s in enumerate(count.STACKS)}
    rows = [{"Stack": stack, "Component": GROUP_TITLES.get(group, group), "Parameters": n, "Share": n / total}
            for (stack, group), n in sorted(sums.items(), key=lambda kv: (order.get(kv[0][0], -1),
                                                                           order.get(kv[0][1], 99)))]
    df = pandas.DataFrame(rows, columns=["Stack", "Component", "Parameters", "Share"]).astype(
        {"Parameters": "int64", "Share": "float64"})
    if not any(df["Stack"]):
        df = df.drop(columns="Stack")
    df.attrs["totals"] = {"analytic": total, "empirical": report.empirical_total}
    return df


def _scan_frame(report: Any, pandas: Any) -> Any:
    """One row per length: T an integer, "past context" beside it (the table's '*'), the bar left out."""
    from tfcalc.cli.render import backends

    header, rows = backends.csv_rows(document(report))
    df = pandas.DataFrame(rows, columns=header).drop(columns=["forward FLOPs"], errors="ignore")
    seqs = [r["seq"] for r in report.rows]
    df["T"] = pandas.Series(seqs, dtype="int64")
    df.insert(1, "past context", [s > report.model.cfg.max_seq_len for s in seqs])
    return df


TIDY = {"ParamsReport": _params_frame, "ScanReport": _scan_frame}


display.VIEWS.update(markdown=markdown, html=html, frame=frame)
