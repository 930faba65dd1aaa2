"""`tfcalc flops` as a document: forward FLOPs by matmul group, training, measured; the crossover answer;
the standard formulas (--training) and decode against prefill (--decode)."""

from __future__ import annotations

from tfcalc.cli.render.doc import Cell, Column, Doc
from tfcalc.count.model import parts
from tfcalc.report.flops import FlopsReport

GROUP_TITLES = {
    "attention_proj": "Attention projections", "attention_scores": "Attention scores",
    "cross_attention_proj": "Cross-attention projections", "cross_attention_scores": "Cross-attention scores",
    "ffn": "FFN", "pooler": "Pooler", "lm_head": "LM head",
}


def _shape(shape: tuple[int, int, int]) -> str:
    m, k, n = shape
    return f"{m}×{k} @ {k}×{n}"


def _forward_table(doc: Doc, r: FlopsReport, verbose: bool) -> None:
    b, fwd = r.breakdown, r.forward
    title = f"{r.model.label}: forward FLOPs at B = {r.batch}, T = {r.seq:,} (matmuls, full T×T square)"
    table = doc.table(title, Column("Component"), Column("Matmul (m×k @ k×n)", priority=3),
                      Column("Matmuls", "int", priority=2), Column("Per layer", "flop", priority=2),
                      Column("Total", "flop"), Column("Per token", "flop", priority=1), Column("Share", "share"),
                      caption=f"Source: {r.cfg.source}" if r.cfg.source and r.model.as_published else "",
                      name="forward")
    # each token mixer's rows under the role it declares (tfcalc.count.model.parts: SSM projections, SSM scan)
    per_layer, totals = parts.flop_per_layer(b), r.parts
    titles = {**GROUP_TITLES, **parts.flop_titles(r.cfg)}
    for group in (g for g in parts.flop_parts(b) if g in titles):
        title_ = titles[group]
        entries = [e for e in b.entries if parts.shown(e) == group]
        if not entries:  # a kind without it: no cross-attention in a decoder, no LM head in BertModel
            continue
        alone = entries[0] if len(entries) == 1 and entries[0].copies == 1 else None  # the LM head: one row
        table.add(title_, _shape(alone.shape) if alone else None, alone.count if alone else None,
                  per_layer.get(group), totals[group], b.per_token(totals[group]), totals[group] / fwd, style="bold")
        for e in [] if alone or not verbose else entries:
            table.add(f"  {e.label}", _shape(e.shape), e.count, e.per_copy, e.total, None, None)
    table.add("Embeddings (lookups)", None, None, None, 0, 0, 0.0, style="dim")
    table.add("Forward, full square", None, None, sum(per_layer.values()), fwd, b.per_token(fwd), 1.0, style="bold",
              rule=True)
    causal = r.forward_causal
    causal_layer = sum(b.per_layer(True).values())  # one block, like the group rows' Per layer cells
    table.add("Forward, causal (unmasked scores)", None, None, causal_layer, causal, b.per_token(causal), causal / fwd)
    for mult, label in ((3, "Training ×3 (forward + backward)"), (4, "Training ×4 (full recompute)")):
        table.add(label, None, None, None, mult * fwd, b.per_token(mult * fwd), None,
                  style="bold" if mult == r.training_multiplier else "")
    m = r.measured
    if m is not None:
        mark = "✓ agree" if r.agrees else "✗ DISAGREE"
        table.add(f"{mark}: measured forward, FlopCounterMode ({m.device})", None, None, None, m.total, None, None,
                  style="green" if r.agrees else "bold red")
        if m.training_total is not None:
            table.add(f"Measured training ({m.device}), ×{m.training_total / m.total:.4g}", None, None, None,
                      m.training_total, None, None)
    else:
        table.add("Measured: not run (--measure)", None, None, None, None, None, None, style="dim")
    table.add("Non-matmul (approximate; not in forward)", None, None, None, b.non_matmul_total,
              b.per_token(b.non_matmul_total), b.non_matmul_total / fwd, style="bold", rule=True)
    for e in b.non_matmul if verbose else []:
        table.add(f"  {e.label}", f"{e.per_element} FLOP × {e.elements:,}", e.copies, None, e.total, None, None)


def _formulas_table(doc: Doc, r: FlopsReport) -> None:
    exact, exact_causal = r.training_exact
    table = doc.table(f"{r.model.label}: training FLOPs at B = {r.batch}, T = {r.seq:,}: the standard formulas",
                      Column("Formula"), Column("Expression", priority=2), Column("Source", priority=1),
                      Column("N", "params", priority=3), Column("Training FLOPs", "flop"),
                      Column("vs exact", "rel"), Column("vs causal", "rel", priority=1), name="training")
    table.add("Exact, full square", "3 × forward", "tfcalc", None, exact, None, None, style="bold")
    table.add("Exact, causal", "3 × forward", "tfcalc", None, exact_causal, None, None, style="bold")
    for f in r.formulas:
        table.add(f.name, f.formula, f.source, f.n_params, f.training_flops, f.rel_error(exact),
                  f.rel_error(exact_causal))


def _decode_table(doc: Doc, r: FlopsReport) -> None:
    decode, b = r.decode, r.breakdown
    table = doc.table(f"{r.model.label}: one decode step at context T = {r.seq:,} against prefill (B = {r.batch})",
                      Column(""), Column("FLOPs", "flop"), Column("Per token", "flop"), Column("÷ decode", "ratio"),
                      name="decode")
    table.add("Decode: 1 new token, scores against T cached keys", decode, decode // r.batch, None)
    table.add(f"Prefill of {r.seq:,} tokens, full square", r.forward, b.per_token(r.forward), r.forward / decode)
    table.add(f"Prefill of {r.seq:,} tokens, causal", r.forward_causal, b.per_token(r.forward_causal),
              r.forward_causal / decode)


def document(reports: list[FlopsReport], verbose: bool = False, training: bool = False, decode: bool = False) -> Doc:
    doc = Doc()
    for r in reports:
        doc.separate()
        _forward_table(doc, r, verbose)
        doc.note(r.crossover_sentence())
        for note in r.notes:
            doc.note(f"Note: {note}", "warning")
        if training:
            _formulas_table(doc, r)
        if decode and r.decode is not None:
            _decode_table(doc, r)
    if not verbose:
        doc.note("Each matmul with its shape, and each non-matmul kind: --verbose.", "dim")
    if len(reports) > 1:
        doc.separate()
        _summary(doc, reports)
    return doc


def _summary(doc: Doc, reports: list[FlopsReport]) -> None:
    table = doc.table("Summary: forward FLOPs, full square", Column("Model"), Column("B × T"),
                      Column("Forward", "flop"), Column("Causal", "flop", priority=2), Column("Measured"),
                      Column("Attention", "share"), Column("FFN", "share", priority=1),
                      Column("LM head", "share", priority=2), Column("Crossover T", priority=1), name="summary")
    for r in reports:
        totals, fwd, x = r.parts, r.forward, r.crossover
        measured = "—" if r.measured is None else Cell("✓", "green") if r.agrees else Cell("✗", "bold red")
        crossing = " / ".join("never" if t is None else f"{t:,}" for t in (x.scores_vs_ffn, x.attention_vs_ffn))
        table.add(r.model.label, f"{r.batch} × {r.seq:,}", fwd, r.forward_causal, measured, r.attention_share,
                  totals["ffn"] / fwd, totals["lm_head"] / fwd, crossing)
    doc.note("Attention: the attention share of forward FLOPs (self- and cross-attention, projections and scores). "
             "Crossover T: where per layer the scores / the whole attention sub-layer reach the FFN's FLOPs.", "dim")
