"""`tfcalc snapshot` and `tfcalc check` as documents."""

from __future__ import annotations

from typing import Any

from tfcalc.cli.render.doc import Cell, Column, Doc
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
        by_model: dict[str, list] = {}
        for d in r.drifts:
            by_model.setdefault(d.preset, []).append(d)
        doc.note(f"✗ {r.path}: {len(r.drifts)} counts of {len(by_model)} of {r.models} models drifted.", "bad")
        for model, drifts in by_model.items():
            # one table per model, the field first (the column never hidden): at any width a figure that
            # moves below the table is named by its field, and the title names the model and the cause
            t = doc.table(f"{model}: {len(drifts)} drifted; {drifts[0].cause}", Column("Field"),
                          Column("Pinned", "int"), Column("Now", "int"), Column("Difference", "text"), name="drifts")
            for d in drifts:
                diff = d.difference
                shown = "—" if diff is None else f"{diff:+,}" if isinstance(diff, int) else f"{diff:+.6g}"
                t.add(d.field, _cell(d.expected), _cell(d.got), Cell(shown, raw=diff))  # CSV: the number
        doc.note(f"To accept today's figures: {r.accept}")
    return doc
