"""`plan --optimizer muon --measure`: 2 gloo ranks under DDP run torch.optim.Muon on the small copy's block matrices
and AdamW on the rest (tfcalc.measure.muon_step); the optimizer's state tensors on rank 0 equal the plan's
8·Ψ − 4·M bytes (fp32: no master) exactly. A sharded layout is measured with Adam and says so."""

import dataclasses

import pytest

from tfcalc.count.training.layout import Layout
from tfcalc.count.training.plan import make_plan
from tfcalc.count.training.steptime import Hardware
from tfcalc.measure.launch import launch
from tfcalc.presets import load
from tfcalc.report.plan_check import PlanCheck, measured_layout, measured_run

HW = Hardware(1e12, 10**12, 1e9, 1e9, 8)
PRESETS = ("llama2-7b", "qwen3-30b-a3b")  # dense; grouped experts (one Muon matrix per expert)


@pytest.fixture(scope="module")
def checks():
    planned = Layout(tp=1, pp=1, dp=2, seq=4096, global_batch=16, micro_batch=1, optimizer="muon")
    prepared = [measured_run(load(p), planned, 2) for p in PRESETS]
    jobs = [dict(config=dataclasses.asdict(cfg), layout=dataclasses.asdict(ran)) for cfg, ran, _ in prepared]
    return [PlanCheck(cfg, small, ran, make_plan(cfg, ran, HW, 0.4), tuple(ranks), ())
            for (cfg, ran, small), ranks in zip(prepared, launch(jobs, 2), strict=True)]


def test_muon_states_measured_exactly(checks):
    for check in checks:
        assert check.layout.optimizer == "muon" and check.rank0["world_size"] == 2
        assert check.states_exact, (check.per_rank, check.planned_per_rank)
        adam = make_plan(check.cfg, dataclasses.replace(check.layout, optimizer="adam"), HW, 0.4).memory.optimizer
        assert check.per_rank["optimizer_bytes"] < adam  # one moment fewer on the matrices: not Adam's figure
        assert all(r["first_loss"] == r["first_loss"] for r in check.ranks)


def test_sharded_muon_is_measured_with_adam():
    planned = Layout(tp=1, pp=1, dp=2, zero=1, seq=4096, global_batch=16, micro_batch=1, optimizer="muon")
    assert measured_layout(planned, 2).optimizer == "adam"
