"""`plan --measure` on the small copies of the two presets whose copies once failed to build (deepseek-v3: latent
attention, first-k dense, shared experts, grouped sigmoid routing; llama-4-scout: chunked and NoPE layers, the
router scaling the expert's input): 2 gloo ranks, one launch, plan == measured exactly on model-state bytes and
on every collective's bytes and calls. Every other MoE or mixed preset's copy is built and planned without
ranks in tests/report/test_small_copy.py."""

import dataclasses

import pytest

from tfcalc.count.training.layout import Layout
from tfcalc.count.training.plan import make_plan
from tfcalc.count.training.steptime import Hardware
from tfcalc.measure.launch import launch
from tfcalc.presets import load
from tfcalc.report.plan_check import PlanCheck, measured_run

HW = Hardware(1e12, 10**12, 1e9, 1e9, 8)
CASES = {  # preset, planned layout
    "deepseek-v3-ep": ("deepseek-v3", dict(dp=2, ep=2)),
    "llama-4-scout-fsdp": ("llama-4-scout", dict(dp=2, zero=3)),
}


@pytest.fixture(scope="module")
def checks():
    prepared = {}
    for name, (preset, layout) in CASES.items():
        planned = Layout(**{**dict(tp=1, pp=1, dp=1, seq=4096, global_batch=16, micro_batch=1), **layout})
        prepared[name] = measured_run(load(preset), planned, 2)
    jobs = [dict(config=dataclasses.asdict(cfg), layout=dataclasses.asdict(ran)) for cfg, ran, _ in prepared.values()]
    return {name: PlanCheck(cfg, small, ran, make_plan(cfg, ran, HW, 0.4), tuple(ranks), ())
            for (name, (cfg, ran, small)), ranks in zip(prepared.items(), launch(jobs, 2), strict=True)}


@pytest.mark.parametrize("name", CASES)
def test_small_copy_runs_and_agrees_exactly(checks, name):
    check = checks[name]
    assert check.small and check.rank0["world_size"] == 2
    assert check.states_exact, (check.per_rank, check.planned_per_rank)
    assert check.collectives_exact, (check.collectives, check.plan.collectives)
    ops = {(c["cause"], c["op"]) for c in check.collectives}
    if check.layout.ep > 1:  # the experts' tokens really travel by all-to-all
        assert ("ep_tokens", "all_to_all") in ops and ("dp_grads", "all_reduce") in ops
    else:
        assert ("zero_params", "all_gather") in ops and ("dp_grads", "reduce_scatter") in ops
    losses = [r["first_loss"] for r in check.ranks]
    assert all(x == x and x > 0 for x in losses)  # a finite loss on each rank
