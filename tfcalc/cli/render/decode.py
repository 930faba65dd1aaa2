"""`tfcalc bench decode` as a document: time to first token and per-token decode latency measured,
bandwidth and MBU, and the roofline's prediction with the ceilings measured in the same run."""

from __future__ import annotations

from typing import Any

from tfcalc import units
from tfcalc.cli.render.doc import Column, Doc
from tfcalc.cli.render.infer import busy_note, roofline_table
from tfcalc.report.decode import DecodeBenchReport


def document(reports: list[DecodeBenchReport], verbose: bool = False) -> Doc:
    doc = Doc()
    for report in reports:
        rows = [dict(r) for r in report.rows]
        first = rows[0]
        where = first["device_name"] if first["device_name"].startswith(first["device"]) else \
            f"{first['device_name']} ({first['device']})"
        t = doc.table(f"{report.model.label}: generation on {where}, {first['dtype']}, batch {first['batch']}, "
                      f"{first['decode_steps']} decode steps (static KV cache, greedy, {first.get('mode', 'eager')} "
                      "steps)",
                      Column("prompt", "int"), Column("TTFT", "seconds"), Column("decode / token", "seconds"),
                      Column("p10", "seconds", priority=2), Column("p90", "seconds", priority=2),
                      Column("tok/s", "tokens_rate"), Column("bytes / token", "bytes", priority=1),
                      Column("achieved", "byte_rate"), Column("MBU", "share"),
                      Column("prefill MFU", "share", priority=3), name="decode")
        for r in rows:
            t.add(r["seq"], r["prefill_s"], r["decode_s_per_token"], r["decode_p10_s"], r["decode_p90_s"],
                  r["decode_tokens_per_s_total"], r["bytes_per_token"], r["achieved_bandwidth_bytes_per_s"], r["mbu"],
                  "—" if r["prefill_mfu"] is None else r["prefill_mfu"])
        keys = (" (each step over the keys it read: its bucket of the cache)"
                if rows[0]["predicted"].get("keys") == "read" else "")
        p = doc.table(f"{report.model.label}: predicted on the roofline{keys} with the ceilings measured here",
                      Column("prompt", "int"), Column("TTFT", "seconds"), Column("ratio", "ratio"),
                      Column("decode / token", "seconds"), Column("ratio", "ratio"), Column("decode bound"),
                      Column("prefill bound", priority=1), name="predicted")
        for r in rows:
            pr = r["predicted"]
            p.add(r["seq"], pr["prefill_s"], r["ratio"]["prefill"], pr["decode_s_per_token"], r["ratio"]["decode"],
                  pr["bound"], pr["prefill_bound"])
        _notes(doc, first)
        if verbose:
            roofline_table(doc, f"Roofline of the first decode step, prompt {first['seq']:,}",
                           first["roofline"]["first_decode_step"])
    return doc


def _notes(doc: Doc, first: dict[str, Any]) -> None:
    peak_bw = first["peak_bandwidth_bytes_per_s"]
    datasheet = (f"{units.byte_rate(peak_bw)}, MBU {units.share(first['mbu_datasheet'])}" if peak_bw
                 else "unknown for this device")
    doc.note(f"Ceilings measured here, timed like the model: bandwidth "
             f"{units.byte_rate(first['bandwidth_ceiling_bytes_per_s'])} (the slowest of a device copy, "
             f"{units.byte_rate(first['copy_bandwidth_bytes_per_s'])} read + written; a read-only reduction, "
             f"{units.byte_rate(first['read_bandwidth_bytes_per_s'])}; a matrix-vector product, "
             f"{units.byte_rate(first['matvec_bandwidth_bytes_per_s'])}), matmul "
             f"{units.flop_rate(first['matmul_ceiling_flops_per_s'])}; datasheet bandwidth: {datasheet}.", "dim")
    busy_note(doc, first)
    doc.note("TTFT: the prefill of the prompt (its last position's logits included). Decode: the median of the timed "
             "steps, step j attending to prompt + j positions. Bytes per token: weights + KV cache read per step, over "
             "the batch; MBU: achieved ÷ measured bandwidth. Ratio: predicted ÷ measured time. Each matmul's "
             "roofline: --verbose; more: docs/serving.md.", "dim")

