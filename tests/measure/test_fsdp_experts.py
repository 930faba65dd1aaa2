"""FSDP2 (``fully_shard``) on a mixture of experts whose expert count the ranks do not divide: a block's routed
experts are one grouped tensor (E, rows, cols) (tfcalc.model.experts), which FSDP2 splits along dim 0 = E,
padding to ⌈E/N⌉ experts per rank -- not ⌈rows/N⌉ rows of each expert, as the plan once counted.

Hand derivation, the tiny Mixtral-like model below on 2 ranks, ZeRO-3 (elements per rank, dim 0 padded to
⌈n/2⌉): per block the attention norm 16, fused QKV (32 + 8 + 8, 32) -> 24·32 = 768, output (32, 32) -> 512,
the FFN norm 16, the router (3, 32) -> 2·32 = 64, the experts' [gate | up] (3, 80, 32) -> 2·80·32 = 5,120
and down (3, 32, 40) -> 2·32·40 = 2,560: 9,056, twice; the root: the tied embedding (61, 32) -> 31·32 = 992
and the final norm 16. 19,120 elements, 76,480 fp32 bytes (split per expert's rows: 61,120)."""

import dataclasses

import pytest
from conftest import MIXTRAL_LIKE, tiny

from tfcalc.count.training.layout import Layout
from tfcalc.count.training.plan import make_plan
from tfcalc.count.training.rank_memory import model_states
from tfcalc.count.training.steptime import Hardware
from tfcalc.measure.launch import launch
from tfcalc.report.plan_check import PlanCheck

HW = Hardware(1e12, 10**12, 1e9, 1e9, 8)
CFG = tiny(**{**MIXTRAL_LIKE, "n_expert": 3, "d_ff": 40})  # 3 experts on 2 ranks: 2 and 1 (padded to 2)
ZERO3 = Layout(tp=1, pp=1, dp=2, seq=16, global_batch=4, micro_batch=1, dtype="fp32", zero=3)


@pytest.mark.parametrize("reshard", [True, False])
def test_plan_shards_grouped_experts_along_the_experts(reshard):
    layout = dataclasses.replace(ZERO3, reshard_after_forward=reshard)
    _, weights, grads, optimizer = model_states(CFG, layout, 0)
    assert (weights, grads, optimizer) == (76_480, 76_480, 2 * 76_480)
    # each micro-batch (2) reduce-scatters the padded shards of every rank (2)
    rs = next(c for c in make_plan(CFG, layout, HW, 0.4).collectives if c.op == "reduce_scatter")
    assert rs.payload_bytes == 2 * 2 * 76_480


@pytest.fixture(scope="module")
def check():
    (ranks,) = launch([dict(config=dataclasses.asdict(CFG), layout=dataclasses.asdict(ZERO3))], 2)
    return PlanCheck(CFG, False, ZERO3, make_plan(CFG, ZERO3, HW, 0.4), tuple(ranks), ())


def test_fsdp2_holds_what_the_plan_counts_with_uneven_experts(check):
    assert check.per_rank["weights_bytes"] == 76_480 == check.planned_per_rank["weights_bytes"]
    assert check.states_exact and check.collectives_exact, (check.collectives, check.plan.collectives)
    # FSDP2 pads every rank's weights and gradients alike; Adam's moments follow the unpadded local shard, so
    # rank 1 (one expert of three) holds less: the plan's figure is rank 0's, the largest
    r0, r1 = check.ranks
    assert r1["weights_bytes"] == r0["weights_bytes"] and r1["optimizer_bytes"] < r0["optimizer_bytes"]
