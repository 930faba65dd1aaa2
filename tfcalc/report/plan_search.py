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


def offloaded_words(L: Any) -> str:
    """'optimizer', 'activation' or 'optimizer and activation': what a layout offloads."""
    return " and ".join(w for w, on in (("optimizer", L.offload_optimizer), ("activation", L.offload_activations))
                        if on)


def host_words(report: Any) -> str:
    """The answer in words where the search needed offload: 'llama3-70b does not fit 8 GPUs without offload;
    with optimizer offload it needs 1.1 TiB of host memory per node (8 ranks × 140 GiB; the node has 2 TiB)'."""
    from tfcalc import units

    p, L = report.plan, report.plan.layout
    limit = "its host memory is not known" if p.host_limit is None else f"the node has {units.nbytes(p.host_limit)}"
    where = "any number of GPUs" if report.search == "gpus" else f"{L.gpus} GPUs"
    return (f"{report.model.label} does not fit {where} without offload; with {offloaded_words(L)} offload it needs "
            f"{units.nbytes(p.host_per_node)} of host memory per node ({p.ranks_per_node} ranks × "
            f"{units.nbytes(p.memory.host)}; {limit})")


def search_notes(report: Any) -> list[str]:
    """What the search chose beyond tp, pp and dp, in words (tfcalc.count.training.search_space)."""
    if report.search is None:
        return []
    L, out = report.plan.layout, []
    if searched_offload(report):
        where = "with any number of GPUs" if report.search == "gpus" else f"on {L.gpus} GPUs"
        out.append(f"no layout fits in the GPUs' memory {where} without offload, so the search tried offload "
                   "(optimizer, activations, both) and chose the fastest whose node's host memory holds what its "
                   "ranks offload")
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
