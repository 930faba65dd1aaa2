"""`tfcalc scan --decode` as a document: decode tokens/s against the batch size, the bound of each."""

from __future__ import annotations

from tfcalc import units
from tfcalc.cli.render.doc import Cell, Column, Doc
from tfcalc.report.scan_decode import DecodeScanReport


def document(reports: list[DecodeScanReport], verbose: bool = False) -> Doc:
    doc = Doc()
    for r in reports:
        c = r.ceilings
        t = doc.table(f"{r.model.label}: decode at context {r.context:,} on {r.spec.name} (weights {r.fmt.label}, "
                      f"KV cache {r.kv_dtype})", Column("batch", "int"), Column("step", "seconds"),
                      Column("tok/s total", "tokens_rate"), Column("tok/s per seq", "tokens_rate"),
                      Column("memory roof", "tokens_rate", priority=2), Column("compute roof", "tokens_rate", priority=2),
                      Column("intensity", "intensity", priority=1), Column("bound"), Column("KV cache", "bytes"),
                      Column("fits"))
        for row in r.rows:
            fits = Cell("yes") if row["fits"] else Cell("no", "bad")
            t.add(row["batch"], row["step_s"], row["decode_tokens_per_s_total"], row["decode_tokens_per_s"],
                  row["memory_roof_tokens_per_s"], row["compute_roof_tokens_per_s"], row["intensity"], row["bound"],
                  row["kv_cache_bytes"], fits)
        whole = "never" if r.compute_bound_batch is None else f"at batch {r.compute_bound_batch:,}"
        weights = "never" if r.weight_matmuls_compute_bound_batch is None else \
            f"at batch {r.weight_matmuls_compute_bound_batch:,}"
        doc.note(f"Ridge {units.intensity(c.ridge)} ({c.source}). The whole step turns compute-bound {whole}, its weight "
                 f"matmuls {weights}; weights + KV cache fit {units.nbytes(r.spec.memory_bytes)} up to batch "
                 f"{r.max_batch:,}. Roofs: tokens/s were every byte at full bandwidth, or every FLOP at peak.")
        if r.plot:
            doc.note(f"Plot written to {r.plot}.")
    return doc
