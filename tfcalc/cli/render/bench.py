"""`tfcalc bench` as a document: timings per sequence length, then where the time goes."""

from __future__ import annotations

from typing import Any

from tfcalc import units
from tfcalc.cli.render.doc import Column, Doc
from tfcalc.report.bench import BenchReport


def _where(first: dict[str, Any]) -> str:
    name, device = first["device_name"], first["device"]
    return name if name.startswith(device) else f"{name} ({device})"


def document(reports: list[BenchReport], verbose: bool = False) -> Doc:
    doc = Doc()
    for report in reports:
        rows = [dict(r) for r in report.rows]
        first = rows[0]
        title = (f"{report.model.label}: forward passes on {_where(first)}, {first['dtype']}, batch {first['batch']} "
                 f"({_calls(rows)})")
        t = doc.table(title, Column("seq", "int"), Column("median", "seconds"), Column("p10", "seconds", priority=1),
                      Column("p90", "seconds", priority=1), Column("rounds ±", "share", priority=1),
                      Column("tokens/s", "tokens_rate"), Column("achieved", "flop_rate"), Column("of ceiling", "share"),
                      Column("MFU", "share"), name="timing")
        for r in rows:
            spread = r["between_round_spread"]
            t.add(r["seq"], r["median_s"], r["p10_s"], r["p90_s"], "—" if spread is None else spread / 2,
                  r["tokens_per_s"], r["achieved_flops_per_s"], r["ceiling_fraction"],
                  "—" if r["mfu"] is None else r["mfu"])
        split = doc.table(f"{report.model.label}: where one block's time goes (sub-layers timed alone)",
                          Column("seq", "int"), Column("attention", "seconds"), Column("FFN", "seconds"),
                          Column("attention ÷ (attention + FFN): time", "share"), Column("FLOPs", "share"),
                          Column("peak memory", "bytes", priority=1), name="components")
        for r in rows:
            c = r["components"]
            split.add(r["seq"], c["attention_s"], c["ffn_s"], c["attention_time_share"], c["attention_flop_share"],
                      r["peak_memory_bytes"])
        _notes(doc, first)
    return doc


def _calls(rows: list[dict[str, Any]]) -> str:
    """'5 timed calls in 3 rounds after 1 warm-up', or ranges when the lengths differ."""
    def span(key: str) -> str:
        values = sorted({r[key] for r in rows})
        return str(values[0]) if len(values) == 1 else f"{values[0]}-{values[-1]}"

    return f"{span('samples')} timed calls in {span('rounds')} rounds after {span('warmup')} warm-up"


def _notes(doc: Doc, first: dict[str, Any]) -> None:
    peak = first["peak_flops_per_s"]
    doc.note(f"Matmul ceiling ({first['dtype']}, measured here the same way): "
             f"{units.flop_rate(first['matmul_ceiling_flops_per_s'])}; datasheet peak: "
             f"{units.flop_rate(peak) if peak else 'unknown for this device, so no MFU'}.", "dim")
    if first["extrapolated"]:
        doc.note(f"Ran {first['n_layer_run']} of {first['n_layer']} blocks; the full-depth time adds the missing "
                 f"blocks at the median time of one block timed alone (measured forward: "
                 f"{units.seconds(first['measured_forward_median_s'])}).", "dim")
    doc.note(f"Timed until {first['min_time_s']:g} s and at least the asked calls per length, in interleaved rounds; "
             "rounds ±: half the spread between the slowest and fastest round's median, over the median (the "
             "run-to-run noise that p10-p90 within one round misses).", "dim")
    doc.note("Attention ÷ (attention + FFN): one block's attention sub-layer against both sub-layers, in time and "
             "in FLOPs (not the attention share of the whole forward pass, which `tfcalc flops` reports); "
             "a time share above the FLOP share is memory-bound work (softmax, reshapes, KV reads). Achieved FLOP/s "
             "counts the analytic forward FLOPs, full T×T attention square.", "dim")
    if first["compiled"]:
        doc.note("The forward pass ran torch.compile'd; the sub-layer timings use the eager modules.", "dim")
