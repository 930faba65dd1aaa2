"""What `tfcalc plan`'s search chose beyond tp, pp and dp -- HSDP, no resharding after forward, offload where
nothing fits without it -- said in the report's notes and its JSON (tfcalc.count.training.search_space: what a search
varies). ``report`` is a tfcalc.report.plan.PlanReport."""

from __future__ import annotations

from typing import Any

from tfcalc.report.plan_schedule import search_space


def searched_offload(report: Any) -> bool:
    """Whether the search turned to offload (nothing fit without it; the request named none)."""
    L = report.plan.layout
    return report.search is not None and not report.request.offload and (L.offload_optimizer or L.offload_activations)


def search_notes(report: Any) -> list[str]:
    """What the search chose beyond tp, pp and dp, in words (tfcalc.count.training.search_space)."""
    if report.search is None:
        return []
    L, out = report.plan.layout, []
    if searched_offload(report):
        where = "with any number of GPUs" if report.search == "gpus" else f"on {L.gpus} GPUs"
        out.append(f"no layout fits in the GPUs' memory {where} without offload, so the search tried offload "
                   "(optimizer, activations, both) and chose the fastest that fits")
    if L.hsdp is not None and report.request.hsdp is None:
        out.append(f"the search chose HSDP: ZeRO-3 shards within each node's {L.hsdp} data-parallel ranks, "
                   f"replicated over the {L.dp // L.hsdp} nodes")
    if not L.reshard_after_forward and report.request.reshard_after_forward:
        out.append("the search chose FSDP without resharding after forward (ZeRO-3 fits with room for the "
                   "stage's gathered weights)")
    return out


def search_json(report: Any) -> dict[str, Any]:
    """The search's added keys: what it varied (each True where the request left it open), and whether it
    needed offload."""
    r, space = report.request, search_space(report.request)
    return {"varied": {"micro_batch": space.micro_batch is None, "schedule": space.schedule is None,
                       "cp": space.cp is None, "ep": r.ep is None and report.model.cfg.architecture.has_moe,
                       "zero": r.zero is None, "recompute": r.recompute is None, "fsdp_variants": space.fsdp,
                       "offload": space.offload, "compute_dtype_fp8": False},
            "offload_needed": searched_offload(report)}
