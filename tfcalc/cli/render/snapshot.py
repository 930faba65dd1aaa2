"""`tfcalc snapshot` and `tfcalc check` as documents."""

from __future__ import annotations

from typing import Any

from tfcalc.cli.render.doc import Column, Doc
from tfcalc.report.snapshot import CheckReport, SnapshotReport


def snapshot_document(reports: list[SnapshotReport], verbose: bool = False) -> Doc:
    doc = Doc()
    for r in reports:
        models = r.data["entries"]
        doc.note(f"Wrote {r.path}: {len(models)} models ({', '.join(e['preset'] for e in models)}), "
                 f"tfcalc {r.data['tfcalc_version']}.")
    return doc


def _cell(x: Any) -> Any:
    return x if isinstance(x, int) and not isinstance(x, bool) else str(x)


def check_document(reports: list[CheckReport], verbose: bool = False) -> Doc:
    doc = Doc()
    for r in reports:
        if not r.drifts:
            doc.note(f"✓ {r.path}: all counts of {r.models} models match.", "ok")
            continue
        t = doc.table(f"{r.path}: {len(r.drifts)} counts drifted", Column("Model"), Column("Field"),
                      Column("Expected", "int"), Column("Got", "int"), Column("Difference", "text"), name="drifts")
        for d in r.drifts:
            diff = d.difference
            t.add(d.preset, d.field, _cell(d.expected), _cell(d.got),
                  "—" if diff is None else (f"{diff:+,}" if isinstance(diff, int) else f"{diff:+.6g}"))
    return doc
