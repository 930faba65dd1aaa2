"""`tfcalc params` as a document: the breakdown by component, the two totals, the approximation."""

from __future__ import annotations

from tfcalc import units
from tfcalc.cli.render.doc import Cell, Column, Doc
from tfcalc.count.model import params as count, parts
from tfcalc.count.model.layer_kinds import layer_kinds, mtp_summary
from tfcalc.report.params import ParamsReport

GROUP_TITLES = {
    "embeddings": "Embeddings", "attention": "Attention", "cross_attention": "Cross-attention", "ffn": "FFN",
    "norms": "Norms", "pooler": "Pooler", "lm_head": "LM head",
}


def agree_cell(ok: bool) -> Cell:
    return Cell("✓ agree", "green") if ok else Cell("✗ DISAGREE", "bold red")


def _title(r: ParamsReport) -> str:
    title = f"{r.model.label}: parameters"
    if r.nominal_rel_difference is not None and r.model.as_published:
        title += f" (named {r.cfg.nominal_params}; exact count {r.nominal_rel_difference:+.1%} from it)"
    return title


def _caption(r: ParamsReport) -> str:
    if not r.cfg.source:
        return ""
    return f"Source: {r.cfg.source}" + ("" if r.model.as_published else " (before the --set overrides)")


def _component_rows(table, r: ParamsReport, verbose: bool) -> None:
    """Group rows, each with its tensors under --verbose; an encoder-decoder in two sections."""
    cfg, total = r.cfg, r.analytic_total
    sections = [("", list(r.entries))]
    if cfg.arch == "encoder-decoder":
        layers = {"encoder": cfg.encoder_layers, "decoder": cfg.decoder_layers}
        sections = [(stack, [e for e in r.entries if e.stack == stack]) for stack in count.STACKS]
    titles = {**GROUP_TITLES, **parts.param_titles(cfg)}  # each mixer's tensors under its declared role
    for stack, entries in sections:
        indent = "  " if stack else ""
        if stack:
            n = sum(e.total for e in entries)
            table.add(f"{stack.capitalize()} ({layers[stack]} layers)", None, None, n, n / total, style="bold")
        for group in parts.param_parts(cfg):
            in_group = [e for e in entries if (e.part or e.group) == group]
            if not in_group:
                continue
            n = sum(e.total for e in in_group)
            tied = all(e.tied_to for e in in_group)
            title = titles[group] + (" (tied: counted in embeddings)" if tied else "")
            table.add(indent + title, None, None, n, n / total, style="bold")
            for e in in_group if verbose else []:
                copies = f"{e.copies // e.experts} × {e.experts}" if e.experts > 1 else f"{e.copies}"
                shape = " × ".join(str(d) for d in e.shape)
                counted = Cell(f"tied to {e.tied_to}", "dim") if e.tied_to else e.total
                table.add(f"{indent}  {e.label}", shape, copies, counted, None)


def document(reports: list[ParamsReport], verbose: bool = False) -> Doc:
    doc = Doc()
    for r in reports:
        doc.separate()
        doc.extend(_one(r, verbose))
    if len(reports) > 1:
        doc.separate()
        doc.extend(_summary(reports))
    return doc


def _one(r: ParamsReport, verbose: bool) -> Doc:
    cfg, total, doc = r.cfg, r.analytic_total, Doc()
    table = doc.table(_title(r), Column("Component"), Column("Shape", priority=1), Column("Copies", priority=1),
                      Column("Parameters", "int"), Column("Share", "share"), caption=_caption(r), name="components")
    _component_rows(table, r, verbose)
    if cfg.pos_encoding in ("sinusoidal", "rope", "alibi", "none"):
        # only RoPE rotates a subset of channels (rope_dim is 0 for the others): the others add to all of x
        partial = (f" on {cfg.rope_dim} of {cfg.head_dim} channels per head"
                   if cfg.pos_encoding == "rope" and cfg.rope_dim < cfg.head_dim else "")
        table.add(f"Positions: {cfg.pos_encoding}{partial}, no parameters", None, None, None, None, style="dim")
    table.add("Total, analytic", None, None, total, None, style="bold", rule=True)
    if r.empirical is not None:
        mark = "✓ agree" if r.agrees else "✗ DISAGREE"
        how = "meta module" if r.empirical_method != "per_block" else "one meta block per kind × its layers"
        table.add(f"{mark}: total, empirical ({how})", None, None, r.empirical_total, None,
                  style="green" if r.agrees else "bold red")
    else:
        table.add("Total, empirical: not measured", None, None, None, None, style="dim")
    if r.checkpoint is not None:
        _checkpoint_rows(table, doc, r)
    moe = cfg.architecture.moe()  # the mixture of experts' component
    if moe is not None:
        table.add(f"Active per token (top-{moe.top_k} of {moe.n_expert})", None, None, r.active_params,
                  r.active_params / total)
    _kind_rows(table, doc, r)
    table.add(f"Approximation ({r.approximation_rel_error:+.2%}), below", None, None, r.approximation, None)
    doc.note(f"Approximation: {count.seeds_formula(cfg)} = {r.approximation:,}, {r.approximation_rel_error:+.2%} "
             "from the exact count.")
    named = {"bf16+mxfp4": "bf16 with the experts in MXFP4, as stored"}
    weights = ", ".join(f"{units.nbytes(n)} in {named.get(dtype, dtype)} ({n:,} bytes)"
                        for dtype, n in r.weights_bytes.items())
    if "stored" in r.weights_bytes:  # a quantized checkpoint: never a bf16 figure for it
        n = r.weights_bytes["stored"]
        weights = f"{units.nbytes(n)} as the checkpoint stores them, {r.stored_label} ({n:,} bytes)"
    doc.note(f"Weights: {weights}; `tfcalc memory` for the KV cache, activations and training state.")
    if not verbose:
        doc.note("Tensor by tensor, with shapes: --verbose.", "dim")
    for note in r.notes:
        doc.note(f"Note: {note}", "warning")
    return doc


def _kind_rows(table, doc: Doc, r: ParamsReport) -> None:
    """Dense and MoE layers apart (tfcalc.count.model.layer_kinds), and DeepSeek-V3's MTP module beside the total."""
    for kind in layer_kinds(r.cfg):
        table.add(f"  {kind.layers} {kind.label} layers", kind.shape, None, kind.params, kind.params / r.analytic_total)
        table.add("    active per token", None, None, kind.active, None, style="dim")
    mtp = mtp_summary(r.cfg)
    if mtp is not None:
        table.add(f"MTP module ×{mtp['modules']}, beside: not in the total", None, None, mtp["params"], None,
                  style="bold", rule=True)
        table.add("  active per token", None, None, mtp["active_params"], None, style="dim")
        doc.note(f"MTP (multi-token prediction, DeepSeek-V3 sec. 2.2): its modules share the embedding and head; "
                 f"a checkpoint stores copies of them ({mtp['shared_copies']:,}), {mtp['stored']:,} elements in all. "
                 "Hugging Face's model leaves the modules out, so the total does too.", "dim")


def _checkpoint_rows(table, doc: Doc, r: ParamsReport) -> None:
    """The checkpoint's total, what of it the config explains, and what it does not (named in notes)."""
    c = r.checkpoint
    files = f"{len(c.files)} file{'s' if len(c.files) > 1 else ''}"
    table.add(f"Total, checkpoint ({files}, headers only)", None, None, c.total, None)
    ok = c.agrees and c.matched == r.analytic_total
    table.add(f"{'✓ agree' if ok else '✗ DISAGREE'}: parameters the config explains", None, None, c.matched, None,
              style="green" if ok else "bold red")
    dtypes = ", ".join(f"{d}: {v['elements']:,} in {v['tensors']} tensors ({units.nbytes(v['bytes'])})"
                       for d, v in c.by_dtype.items())
    doc.note(f"Checkpoint {', '.join(c.files)}: {dtypes}.")
    for title, names in (("stored copies of tied parameters", c.tied_copies), ("buffers, not parameters", c.buffers),
                         ("MXFP4 scales of the experts (each byte of *_blocks holds two 4-bit values)", c.scales)):
        if names:
            doc.note(f"Checkpoint: {title}: {', '.join(list(names)[:6])}{' ...' if len(names) > 6 else ''} "
                     f"({sum(names.values()):,} elements).", "dim")
    problems = r.checkpoint_problems()
    if problems:
        shown = "; ".join(problems[:8]) + (f"; and {len(problems) - 8} more (--json)" if len(problems) > 8 else "")
        doc.note(f"Checkpoint vs config: {shown}.", "warning")


def _summary(reports: list[ParamsReport]) -> Doc:
    doc = Doc()
    table = doc.table("Summary", Column("Model"), Column("Parameters", "params"), Column("Empirical"),
                      Column("Active", "params", priority=2), Column("Named", priority=2),
                      Column("Approx. error", priority=1), Column("Attention", "share", priority=1),
                      Column("FFN", "share", priority=1), Column("bf16 weights", "bytes", priority=1), name="summary")
    for r in reports:
        total = r.analytic_total
        empirical = "—" if r.empirical is None else agree_cell(bool(r.agrees))
        table.add(r.model.label, total, empirical, r.active_params if r.cfg.n_expert else "—",
                  r.cfg.nominal_params or "—", f"{r.approximation_rel_error:+.2%}", r.attention_params / total,
                  r.groups["ffn"] / total, r.weights_bytes["bf16"])
    doc.note("Attention: self- and cross-attention parameters, as a share of all parameters.", "dim")
    return doc
