"""`tfcalc bench --nproc N` as a document: the distributed step's timing, then rank by rank."""

from __future__ import annotations

from tfcalc import units
from tfcalc.cli.render.doc import Column, Doc
from tfcalc.cli.render.plan import short
from tfcalc.report.bench_dist import DistBenchReport


def document(reports: list[DistBenchReport], verbose: bool = False) -> Doc:
    doc = Doc()
    for report in reports:
        j, L = report.to_json(), report.layout
        title = (f"{report.model.label}: forward + backward on {L.gpus} {j['backend']} ranks ({j['device_name']}), "
                 f"{short(L)}, {L.dtype}, batch {L.micro_batch} per DP rank, seq {L.seq:,} "
                 f"({report.repeat} timed steps after {report.warmup} warm-up)")
        t = doc.table(title, Column("Step (slowest rank)", "text"), Column("median", "seconds"),
                      Column("p10", "seconds", priority=1), Column("p90", "seconds", priority=1),
                      Column("tokens/s", "tokens_rate"), Column("per rank", "flop_rate"), Column("MFU", "share"),
                      name="step")
        t.add("forward + backward", j["median_s"], j["p10_s"], j["p90_s"], j["tokens_per_s"],
              j["achieved_flops_per_s"], "—" if j["mfu"] is None else j["mfu"])
        ranks = doc.table("Rank by rank", Column("rank", "int"), Column("median", "seconds"),
                          Column("p10", "seconds"), Column("p90", "seconds"), name="ranks")
        for r in j["ranks"]:
            ranks.add(r["rank"], r["median_s"], r["p10_s"], r["p90_s"])
        peak = j["peak_flops_per_s"]
        doc.note(f"Per GPU: the analytic training FLOPs (3 × forward, full T×T square) of the {L.dp * L.micro_batch} "
                 f"sequences of a step, over {L.gpus} ranks and the slowest rank's median; datasheet peak: "
                 f"{units.flop_rate(peak) if peak else 'unknown for this device, so no MFU'}. Each rank times its "
                 "steps with tfcalc bench's loop (CUDA events on GPUs, a synchronized clock elsewhere).", "dim")
    return doc
