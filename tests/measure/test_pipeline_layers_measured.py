"""An uneven pipeline split (--pp-layers) on real ranks: 4 blocks over 2 gloo ranks as 3,1 (torch.distributed.
pipelining's Schedule1F1B, tfcalc.measure.pipeline): each rank holds its own stage's planned parameters,
gradients and optimizer states and sends what the plan says; rank 0, the heavier stage, holds the plan's
activations (m = p = 2 micro-batches in flight) within the RoPE tables' slack of test_pipeline_measured."""

import dataclasses

import pytest
from conftest import tiny

from tfcalc.count.training.layout import Layout
from tfcalc.count.training.plan import make_plan
from tfcalc.count.training.steptime import Hardware
from tfcalc.measure.launch import launch
from tfcalc.report.plan_check import PlanCheck, stage_plans

CFG = tiny(n_layer=4, n_kv_head=2, d_ff=40, pos_encoding="rope", norm="rmsnorm", norm_bias=False, gated_ffn=True,
           activation="silu", tie_embeddings=True)
HW = Hardware(1e12, 10**12, 1e9, 1e9, 8)
LAYOUT = Layout(pp=2, seq=16, global_batch=2, micro_batch=1, dtype="fp32", pp_layers=(3, 1))


@pytest.fixture(scope="module")
def check():
    (ranks,) = launch([dict(config=dataclasses.asdict(CFG), layout=dataclasses.asdict(LAYOUT))], 2)
    return PlanCheck(CFG, False, LAYOUT, make_plan(CFG, LAYOUT, HW, None), tuple(ranks), ())


def test_every_rank_holds_its_uneven_stages_plan(check):
    assert check.states_exact and check.collectives_exact
    plans = stage_plans(CFG, LAYOUT)
    for rank, (states, _) in zip(check.ranks, plans, strict=True):
        assert {k: rank[k] for k in states} == states
    # the split is real: stage 0's three blocks outweigh stage 1's one block and the final norm
    assert plans[0][0]["weights_bytes"] > plans[1][0]["weights_bytes"]


def test_rank0_activations(check):
    assert check.plan.memory.stage == 0
    assert 0 <= check.rank0["activation_bytes"] - check.plan.memory.activations <= 1024 * 2
