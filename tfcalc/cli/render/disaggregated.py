"""`tfcalc infer --disaggregate P:D` as a table: the disaggregated server (tfcalc.report.disaggregated) beside the
colocated one of the continuous table."""

from __future__ import annotations

from typing import Any

from tfcalc import units
from tfcalc.cli.render.doc import Column, Doc


def disaggregated_table(doc: Doc, row: dict[str, Any]) -> None:
    x = row.get("disaggregated")
    if x is None:
        return
    p, d = x["prefill_instances"], x["decode_instances"]
    t = doc.table(f"Disaggregated {p}:{d} ({p} prefill, {d} decode instance{'s' if p + d > 2 else ''}): "
                  f"{x['rate_per_s']:g} requests/s, {x['mean_input']:,} tokens in and {x['mean_output']:,} out",
                  Column("decode batch"), Column("TTFT", "seconds"), Column("queue", "seconds", priority=1),
                  Column("KV transfer", "seconds", priority=1), Column("inter-token", "seconds"),
                  Column("end to end", "seconds", priority=1), Column("tok/s out", "tokens_rate"),
                  Column("capacity"), name="disaggregated")
    t.add("over capacity" if x["decode_batch"] is None else f"{x['decode_batch']:,.3g}", x["ttft_s"],
          x["prefill_wait_s"], x["kv_transfer_exposed_s"], x["itl_s"], x["e2e_s"], x["output_tokens_per_s"],
          f"{x['max_rate_per_s']:,.3g} req/s")
    if x["over_capacity"]:
        why = ("the prefill instances' prompts alone fill them" if x["limit"] == "prefill" else
               f"the decode instances cannot keep up ({x['decode_limit']}"
               + (f": {x['max_concurrency'] or 0:,} sequences fit a server" if x["decode_limit"] == "memory" else "")
               + ")")
        doc.note(f"Over capacity at {x['rate_per_s']:g} requests/s (limit {x['limit']}): {why}. The prefill instances "
                 f"sustain {x['prefill_max_rate_per_s']:.3g} requests/s, the decode instances "
                 f"{x['decode_max_rate_per_s']:.3g} (--require-fit: exit 1).", "warning")
    path = ("the network between nodes, per GPU" if x["kv_link"] == "network" else
            f"the node's {x['kv_link_name']} (all instances in one node)")
    doc.note(f"Scheduler: {x['scheduler']}. A prompt's prefill {units.seconds(x['prefill_s'])} (each prefill server "
             f"busy {x['prefill_share']:.0%}); its KV cache, {units.nbytes(x['kv_transfer_bytes'])} per GPU, moves in "
             f"{units.seconds(x['kv_transfer_s'])} over {path}, layer by layer under the prefill: the KV transfer "
             "column is the part past it. "
             + (f"Prompts batched to 8,192 tokens ({x['prompts_per_step_batched']:,} a step, not in the queue) "
                f"would raise the prefill instances' bound from {x['prefill_max_rate_per_s']:.3g} to "
                f"{x['prefill_batched_max_rate_per_s']:.3g} requests/s. " if x["prompts_per_step_batched"] > 1 else "")
             + "Decode batch per decode server (Little's law, "
             "no prefill stalls); the continuous table above is the colocated server, one instance at the same rate. "
             "More: docs/serving.md.", "dim")
