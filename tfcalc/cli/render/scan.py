"""`tfcalc scan` as a document: FLOPs and memory against sequence length, the crossovers marked."""

from __future__ import annotations

from typing import Any

from tfcalc import units
from tfcalc.cli.render.doc import Cell, Column, Doc
from tfcalc.count.model import parts
from tfcalc.report.flops import reached_at
from tfcalc.report.scan import ScanReport

# (key, character, style): the characters tell the parts apart without colour (NO_COLOR, plain files)
PARTS = (("attention_scores", "█", "red"), ("attention_proj", "▓", "dark_orange"), ("ffn", "▒", "blue"),
         ("lm_head", "░", "grey50"))
PART_NAMES = ("scores", "projections", "FFN", "head")


def share_bar(row: dict[str, Any], width: int = 16) -> str:
    """The forward FLOPs of one length as a bar of characters, one per part, widths by share."""
    bar, used = "", 0
    for i, (key, char, _) in enumerate(PARTS):
        n = width - used if i == len(PARTS) - 1 else round(width * row[key] / row["forward_flops"])
        n = max(0, min(n, width - used))
        bar += char * n
        used += n
    return bar


def _marks(report: ScanReport) -> dict[int, list[str]]:
    """seq -> the crossovers first reached at that length."""
    marks: dict[int, list[str]] = {}
    for key, text in (("scores_vs_ffn", "scores"), ("attention_vs_ffn", "attention")):
        at = report.crossover[key]  # None: never (a mixer whose cost grows like T)
        reached = [r["seq"] for r in report.rows if at is not None and r["seq"] >= at]
        if reached:
            marks.setdefault(reached[0], []).append(text)
    return marks


def _one(doc: Doc, report: ScanReport) -> None:
    marks, context = _marks(report), report.model.cfg.max_seq_len
    legend = ", ".join(f"{char} {name}" for (_, char, _), name in zip(PARTS, PART_NAMES, strict=True))
    t = doc.table(f"{report.model.label}: forward FLOPs and memory against T (batch {report.batch}, bytes in "
                  f"{report.dtype})", Column("T", wrap=False), Column("scores", "flop"),
                  Column("projections", "flop", priority=1),
                  Column("FFN", "flop"), Column("LM head", "flop", priority=3), Column("scores share", "share"),
                  Column("KV cache", "bytes"), Column("activations", "bytes", priority=1),
                  Column("training", "bytes", priority=4), Column("forward", "flop"),
                  Column("forward FLOPs", priority=2, wrap=False),
                  Column("crossover", wrap=False), name="scan")
    if report.hybrid:
        _hybrid_table(doc, report)
    for r in report.rows:
        seq_text = f"{r['seq']:,}" + ("*" if r["seq"] > context else "")
        mark = ", ".join(marks.get(r["seq"], []))
        t.add(seq_text, r["attention_scores"], r["attention_proj"], r["ffn"], r["lm_head"], r["scores_share"],
              r["kv_cache_bytes"], r["activation_bytes"], r["training_bytes"], r["forward_flops"], Cell(share_bar(r)),
              Cell(f"◀ {mark}", "bold red") if mark else None, style="bold" if mark else "")
    x, roles = report.crossover, parts.roles(report.model.cfg)  # a mixer that is not attention: named by its role
    scores = "attention scores" if not roles else "the position mixing (" + ", ".join(
        ["attention scores"] * parts.attends(report.model.cfg) + [r.mixing_title for r in roles]) + ")"
    sublayer, verb = ("attention sub-layer", "reach") if not roles else ("mixer sub-layer", "reaches")
    doc.note(f"Per layer, {scores} {verb} the FFN's FLOPs {reached_at(x['scores_vs_ffn'])} and the whole "
             f"{sublayer} (projections + scores) {reached_at(x['attention_vs_ffn'])} "
             "(full-square convention); ◀ marks the first length at or past each. "
             f"Forward FLOPs bar: {legend}. Weights: {units.nbytes(report.weights_bytes)} in {report.dtype} "
             "(in the training column, with gradients, optimizer states and activations).")
    if report.beyond_context:
        doc.note(f"* beyond the context length {context:,}: arithmetic only.", "dim")
    else:  # the JSON's max_seq_len, on screen either way
        doc.note(f"Every length within the context length {context:,}.", "dim")
    if report.plot:
        doc.note(f"Plot written to {report.plot}.")


def _hybrid_table(doc: Doc, report: ScanReport) -> None:
    """A hybrid's split (tfcalc.count.model.state_growth): the K/V that grows with T beside the fixed state that
    does not, and the mixing FLOPs of each kind of layer, so that a reader sees where the cost stops growing."""
    t = doc.table(f"{report.model.label}: where the cost grows with T (batch {report.batch}, bytes in "
                  f"{report.dtype})", Column("T", wrap=False), Column("K/V (grows)", "bytes"),
                  Column("fixed state", "bytes"), Column("fixed share", "share"),
                  Column("mixing, growing-state layers", "flop"), Column("mixing, fixed-state layers", "flop"),
                  name="scan_state")
    for r in report.rows:
        t.add(f"{r['seq']:,}", r["kv_growing_bytes"], r["fixed_state_bytes"], r["fixed_state_share"],
              r["scores_growing_layers"], r["scores_fixed_layers"])
    grows, layers = report.layers
    doc.note(f"K/V grows with T only in the {grows} of {layers} layers that cache positions (softmax attention); the "
             f"other {layers - grows} keep a fixed state per sequence (a convolution's ring, a recurrent state), the "
             "same at every T, and their mixing grows like T (constant per token) where attention's scores grow like "
             "T². The first table's `scores` is both kinds' mixing, full square; its KV cache both K/V and the "
             "fixed state.")


def document(reports: list[ScanReport], verbose: bool = False) -> Doc:
    doc = Doc()
    for report in reports:
        _one(doc, report)
    return doc
