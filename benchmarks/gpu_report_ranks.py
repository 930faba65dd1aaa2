"""The distributed steps of benchmarks/gpu_report.py: plan --measure on real ranks (NCCL, one rank per GPU; gloo
on the CPU with --device cpu --quick) and infer --tp --measure, each measurement beside the plan of exactly
what ran (tfcalc.report.plan_check: the same reduction of the planned layout and small copy as `tfcalc plan
--measure`), model-state and collective bytes exact.

The 2-rank layouts run in ONE launch of ranks (tfcalc.measure.launch takes a list of jobs; each job builds
its model, runs two warm-up steps and a measured one): starting ranks (importing torch, NCCL's rendezvous)
costs more than a small copy's steps, and one launch keeps the report within its 10 minutes. Each layout's
comparisons are named after it; a layout refused before the launch (tfcalc's one line) is recorded as such
and the others run.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from gpu_report_steps import Sizes, compare

# name -> (which model of Sizes, the planned layout's fields)
TWO_RANKS = {
    "tp 2": ("plan_model", dict(tp=2)),
    "dp 2, ZeRO-1": ("plan_model", dict(dp=2, zero=1)),
    "dp 2, ZeRO-2": ("plan_model", dict(dp=2, zero=2)),
    "dp 2, ZeRO-3": ("plan_model", dict(dp=2, zero=3)),
    "dp 2, ep 2": ("moe_model", dict(dp=2, ep=2)),
    "dp 2, ZeRO-3, MoE": ("latent_moe_model", dict(dp=2, zero=3)),
    "pp 2, 1f1b": ("plan_model", dict(pp=2)),
    "pp 2, zero-bubble": ("plan_model", dict(pp=2, schedule="zero-bubble")),
}
FOUR_RANKS = {  # one launch of 4 ranks
    "dp 4, ZeRO-3, hsdp 2": ("plan_model", dict(dp=4, zero=3, hsdp=2)),
    "pp 2 × dp 2": ("plan_model", dict(pp=2, dp=2)),
}


def _planned(sizes: Sizes, fields: dict[str, Any]):
    from tfcalc.count.training.layout import Layout

    dp = fields.get("dp", 1)
    return Layout(**{**dict(tp=1, pp=1, dp=1, seq=sizes.plan_seq, global_batch=4 * dp, micro_batch=1), **fields})


def _comparisons(name: str, check) -> list[dict]:
    """Model-state bytes of every rank against its stage's plan (a pipeline) or rank 0's (the rest), and
    each collective's bytes and calls."""
    from tfcalc.report.plan_check import STATE_KEYS, stage_plans

    out = []
    if check.layout.pp > 1:
        for r, (rank, (states, _)) in enumerate(zip(check.ranks, stage_plans(check.cfg, check.layout), strict=True)):
            out += [compare(f"{name}: rank {r} {k}", "bytes", states[k], rank[k], "its stage's plan (exact)")
                    for k in STATE_KEYS]
    else:
        out += [compare(f"{name}: per rank {k}", "bytes", check.planned_per_rank[k], check.per_rank[k],
                        "plan of the measured run (exact)") for k in STATE_KEYS]
    planned = check.plan.comm_bytes
    out += [compare(f"{name}: collective bytes {k}", "bytes", planned.get(k), v, "plan of the measured run (exact)")
            for k, v in check.comm_bytes.items()]
    return out


def plan_layouts_step(sizes: Sizes, layouts: dict[str, tuple[str, dict]], nproc: int) -> dict:
    """Every layout on nproc ranks in one launch (see the module docstring)."""
    from tfcalc.count.training.plan import make_plan
    from tfcalc.count.training.steptime import Hardware
    from tfcalc.errors import InputError
    from tfcalc.measure.launch import launch, ranks_device
    from tfcalc.report.plan_check import PlanCheck, measured_run

    hw = Hardware(1e12, 10**12, 1e9, 1e9, 8)  # the plan's bytes need no device; its times are not compared here
    prepared, refused = {}, {}
    for name, (model, fields) in layouts.items():
        try:
            prepared[name] = measured_run(getattr(sizes, model), _planned(sizes, fields), nproc)
        except InputError as e:
            refused[name] = str(e)
    jobs = [dict(config=dataclasses.asdict(cfg), layout=dataclasses.asdict(ran)) for cfg, ran, _ in prepared.values()]
    device = ranks_device(nproc, None)
    answers = launch(jobs, nproc, device=device) if jobs else []
    comparisons, measured = [], {"backend": None, "world_size": nproc, "refused": refused, "layouts": {}}
    for (name, (cfg, ran, small)), ranks in zip(prepared.items(), answers, strict=True):
        check = PlanCheck(cfg, small, ran, make_plan(cfg, ran, hw, 0.4), tuple(ranks), ())
        comparisons += _comparisons(name, check)
        measured["backend"] = check.rank0["backend"]
        measured["layouts"][name] = {"model": cfg.name, "states_exact": check.states_exact,
                                     "collectives_exact": check.collectives_exact,
                                     "devices": [r["device"] for r in check.ranks],
                                     "step_time_s": max(r["step_s"] for r in check.ranks),
                                     "schedule": check.rank0.get("schedule")}
    return {"comparisons": comparisons, "measured": measured}


def infer_tp_step(sizes: Sizes, device: str) -> dict:
    """infer --tp 2 --measure: the collectives of the tensor-parallel forward (prefill, one decode step)."""
    import tfcalc

    j = tfcalc.infer(sizes.plan_model, batch=1, seq=sizes.plan_seq, gen=4, tp=2, measure=True,
                     device=device.split(":")[0]).to_json()
    m = j["tensor_parallel"]["measured"]
    out = []
    for phase in ("prefill", "decode"):
        for op, x in m[phase]["measured"].items():
            p = m[phase]["predicted"].get(op, {})
            out.append(compare(f"{phase}: {op} bytes", "bytes", p.get("payload_bytes"), x["payload_bytes"],
                               "tfcalc.count.serving.serving_tp in fp32 (exact)"))
            out.append(compare(f"{phase}: {op} calls", "calls", p.get("calls"), x["calls"],
                               "tfcalc.count.serving.serving_tp (exact)"))
    return {"comparisons": out, "measured": {k: m[k] for k in ("backend", "world_size", "equal", "batch", "seq")}}
