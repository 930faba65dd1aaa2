"""`tfcalc infer --ep E`: the expert-parallel layout and its terms per batch (tfcalc.report.infer_ep's JSON object
``expert_parallel``), one GPU's: weights, KV cache, experts hit, the all-to-all per decode step."""

from __future__ import annotations

from typing import Any, Optional

from tfcalc import units
from tfcalc.cli.render.doc import Column, Doc


def ep_table(doc: Doc, rows: list[dict[str, Any]]) -> None:
    first = rows[0]["expert_parallel"]
    if first is None:
        return
    x = first
    t = doc.table(f"Expert parallel: {x['ep']} GPUs over {x['nodes']} node{'s' if x['nodes'] > 1 else ''}, attention "
                  f"TP {x['attention_tp']} × DP {x['attention_dp']}, {x['experts_per_gpu']} of {x['n_expert']} experts "
                  f"per GPU" + (f" ({x['redundant_experts']} redundant)" if x["redundant_experts"] else "")
                  + (", two-batch overlap" if x["overlap"] else "") + "; per GPU",
                  Column("batch", "int"), Column("seqs / group", "int", priority=2), Column("weights", "bytes"),
                  Column("KV cache", "bytes"), Column("experts hit / layer", priority=1),
                  Column("max/mean tokens", priority=1),
                  Column("weights read / step", "bytes", priority=1), Column("a2a / step", "seconds"),
                  Column("a2a exposed", "seconds", priority=1),
                  Column("a2a bytes / step", "bytes", priority=2), Column("tok/s per GPU", "tokens_rate"),
                  Column("tok/s per node", "tokens_rate", priority=1), name="expert-parallel")
    for row in rows:
        x = row["expert_parallel"]
        a = x["decode_all_to_all"]
        t.add(row["batch"], x["sequences_per_attention_group"], x["weights_bytes_per_gpu"],
              x["kv_cache_bytes_per_gpu"], f"{x['decode_experts_hit_per_gpu_per_layer']:.3g}",
              _factor(x["expert_imbalance"]),
              x["decode_weights_read_bytes_per_gpu"], x["a2a_s_per_decode_step"], None if a is None else a["exposed_s"],
              None if a is None else a["network_bytes"] + a["nvlink_bytes"], x["decode_tokens_per_s_per_gpu"],
              x["decode_tokens_per_s_per_node"])
    a = x["decode_all_to_all"] or x["prefill_all_to_all"]
    doc.note(f"Expert parallel: routed experts {units.nbytes(x['routed_experts_bytes_per_gpu'])} + attention, dense "
             f"and shared {units.nbytes(x['attention_dense_shared_bytes_per_gpu'])} per GPU; "
             + ("every GPU gathers all GPUs' tokens and reduce-scatters the experts' outputs back (--ep-comm allgather,"
                " TensorRT-LLM's CUTLASS MoE under attention DP)" if a["route"] == "allgather" else
                "each GPU dispatches its tokens to the experts' GPUs and takes their outputs back")
             + f" at each of {a['moe_layers']} MoE layers, "
             f"{units.nbytes(a['dispatch_bytes_per_token_per_layer'])} + "
             f"{units.nbytes(a['combine_bytes_per_token_per_layer'])} a token and layer ({a['route']} route), "
             + ("two half batches each computing while the other's all-to-all runs (--overlap ep)" if x["overlap"]
                else "after the compute (--overlap ep: two half batches overlapping it)")
             + "; experts hit under uniform routing. " + _imbalance_note(x["expert_imbalance"])
             + " tok/s total in the table above is all GPUs'.")


def _factor(i: dict[str, Any]) -> str:
    """The decode step's max/mean (the prefill's where there is no decode)."""
    f = i["decode_factor"] if i["decode_factor"] is not None else i["prefill_factor"]
    return f"{f:.3f}"


def _imbalance_note(i: dict[str, Any]) -> str:
    how = (f"fixed at {i['fixed']:g} (--expert-imbalance)" if i["fixed"] is not None else
           f"the expected maximum over the GPUs under the {i['skew']} skew (CV {i['skew_cv']:.3g} by GPU) and each "
           "step's routing noise")
    return (f"The fullest GPU's routed tokens over the mean ({i['prefill_factor']:.3f} in the prefill): {how}; the "
            "experts' GEMMs and the all-to-all's wire time wait on it.")


def ep_measured_note(doc: Doc, first: dict[str, Any]) -> None:
    """--measure --ep: the run on E gloo ranks beside its prediction (tfcalc.report.infer_ep.measure)."""
    x = first["expert_parallel"]
    m = None if x is None else x.get("measured")
    if not m:
        return
    a, h = m["a2a_bytes_per_rank_per_step"], m["experts_hit_per_rank_per_layer"]
    doc.note(f"Measured on {m['world_size']} {m['backend']} ranks ({m['dtype']}, {m['sequences_per_rank']} sequences a "
             f"rank, {m['steps']} one-token steps): parameters per rank "
             + ("equal to the prediction" if m["weights_equal"] else "NOT equal to the prediction")
             + f"; all-to-all {units.nbytes(a['measured'])} off a rank a step (predicted "
             f"{units.nbytes(a['predicted'])}); {h['measured']:.3g} of its experts hit a layer (predicted "
             f"{h['predicted']:.3g}, uniform routing).", "ok" if m["weights_equal"] else "warning")


def pace_note(doc: Doc, p: Optional[dict[str, Any]]) -> None:
    """--rate/--concurrency under attention DP: the groups' stall (count.serving.adp_pace), one note."""
    if not p:
        return
    doc.note(f"Attention DP (--adp-balance {p['balance']}): " + (
        "every group's prompts in the same steps." if p["balance"] == "on" else
        f"the {p['groups']} groups schedule their prompts apart, {p['prompts_per_step']:.3g} a step each; a step "
        f"waits for the group with the most ({p['expected_max_prompts']:.3g} expected), so a prompt's attention and "
        f"dense rows ({units.seconds(p['nonexpert_prompt_s'])}) hold the groups with fewer for "
        f"{units.seconds(p['stall_s_per_prompt'])} in all (count/serving/adp_pace.py)."))
