"""Any nn.Module as a document: its module tree, each module's parameters, buffers, FLOPs and the bytes a
training step saves while it runs (tfcalc.report.inspect)."""

from __future__ import annotations

from tfcalc import units
from tfcalc.cli.render.doc import Column, Doc
from tfcalc.report.inspect import InspectReport

DEPTH = 3  # without --verbose: the modules this deep, the tree's upper levels
MOST_ROWS = 60


def document(reports: list[InspectReport], verbose: bool = False) -> Doc:
    doc = Doc()
    for r in reports:
        doc.separate()
        _one(doc, r, verbose)
    return doc


def _one(doc: Doc, r: InspectReport, verbose: bool) -> None:
    i = r.inspection
    ran = i.flops is not None
    inputs = f" on {', '.join(i.inputs)}" if i.inputs else ""
    t = doc.table(f"{r.label}: {i.kind}{inputs} ({i.device})", Column("Module"), Column("Class", priority=1),
                  Column("Parameters", "int"), Column("Buffers", "int", priority=2),
                  *([Column("Forward FLOPs", "flop"), Column("Saved (training)", "bytes")] if ran else []),
                  name="modules")
    shown = [row for row in i.rows if verbose or row.depth <= DEPTH]
    hidden = len(i.rows) - len(shown[: MOST_ROWS if not verbose else None])
    for row in shown[: None if verbose else MOST_ROWS]:
        name = row.path.rsplit(".", 1)[-1] if row.path else "(all)"
        cells = [row.flops, row.saved_bytes] if ran else []
        t.add("  " * row.depth + name, row.kind, row.params, row.buffers, *cells, style="bold" if not row.path else "")
    what = [f"{i.params:,} parameters ({units.nbytes(i.param_bytes)}), each shared tensor once",
            f"buffers apart: {i.buffers:,} elements ({units.nbytes(i.buffer_bytes)})"]
    if ran:
        what.append(f"forward {units.flop(i.flops)} (FlopCounterMode: a multiply-add is 2 FLOPs, SDPA counted)")
        what.append("saved for the backward: " + ("not counted on meta (no storages to tell apart)"
                                                  if i.saved_bytes is None else
                                                  f"{units.nbytes(i.saved_bytes)} (saved_tensors_hooks, each storage "
                                                  "once, parameters and buffers left out)"))
    else:
        what.append("no example inputs, so no FLOPs or activations: return (module, (input, ...)) from the factory")
    doc.note("; ".join(what) + ".")
    if hidden > 0:
        doc.note(f"{hidden:,} deeper modules not shown: --verbose shows every module.", "dim")
