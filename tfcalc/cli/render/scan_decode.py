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
                      Column("memory roof", "tokens_rate", priority=2),
                      Column("compute roof", "tokens_rate", priority=2),
                      Column("intensity", "intensity", priority=1), Column("bound"), Column("KV cache", "bytes"),
                      Column("fits"), name="decode")
        for row in r.rows:
            fits = Cell("yes") if row["fits"] else Cell("no", "bad")
            t.add(row["batch"], row["step_s"], row["decode_tokens_per_s_total"], row["decode_tokens_per_s"],
                  row["memory_roof_tokens_per_s"], row["compute_roof_tokens_per_s"], row["intensity"], row["bound"],
                  row["kv_cache_bytes"], fits)
        whole = ("never turns compute-bound (attention over the KV cache grows with the batch as its FLOPs do)"
                 if r.compute_bound_batch is None else f"turns compute-bound at batch {r.compute_bound_batch:,}")
        weights = "never do" if r.weight_matmuls_compute_bound_batch is None else \
            f"do at batch {r.weight_matmuls_compute_bound_batch:,}"
        doc.note(f"Ridge {units.intensity(c.ridge)} ({c.source}). The whole step {whole}; its weight matmuls alone "
                 f"{weights}. Weights + KV cache fit {units.nbytes(r.spec.memory_bytes)} up to batch {r.max_batch:,}. "
                 "Roofs: the tokens/s were every byte moved at full bandwidth, or every FLOP done at peak.")
        if r.plot:
            doc.note(f"Plot written to {r.plot}.")
    return doc
