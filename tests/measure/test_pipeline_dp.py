"""A pipeline with data parallelism on real ranks: pp 2 × dp 2 = 4 gloo ranks (tfcalc.measure.pipeline, step 5):
every rank's model-state bytes, sends, tied all-reduce and the replicas' gradient all-reduce (one contiguous
buffer over the stage's dp group) equal its stage's plan; each replica computes its own tokens' loss, the
replicas' first losses those of the single-device model on those tokens. One launch of 4 ranks."""

import dataclasses

import pytest
import torch
import torch.nn.functional as F
from conftest import tiny

from tfcalc.count.training.layout import Layout
from tfcalc.count.training.plan import make_plan
from tfcalc.count.training.steptime import Hardware
from tfcalc.measure.launch import launch
from tfcalc.model import build_model
from tfcalc.report.plan_check import PlanCheck

CFG = tiny(n_layer=4, n_kv_head=2, d_ff=40, pos_encoding="rope", norm="rmsnorm", norm_bias=False, gated_ffn=True,
           activation="silu", tie_embeddings=True)
HW = Hardware(1e12, 10**12, 1e9, 1e9, 8)
LAYOUT = Layout(pp=2, dp=2, seq=16, global_batch=4, micro_batch=1, dtype="fp32")


@pytest.fixture(scope="module")
def check():
    (ranks,) = launch([dict(config=dataclasses.asdict(CFG), layout=dataclasses.asdict(LAYOUT))], 4)
    return PlanCheck(CFG, False, LAYOUT, make_plan(CFG, LAYOUT, HW, None), tuple(ranks), ())


def test_every_rank_equals_its_stages_plan(check):
    assert check.states_exact and check.collectives_exact
    for rank, (states, planned) in zip(check.ranks, check.rank_plans(), strict=True):
        assert {k: rank[k] for k in states} == states
        grads = next(c for c in rank["collectives"] if c["cause"] == "dp_grads")
        assert (grads["op"], grads["group_size"], grads["calls"]) == ("all_reduce", 2, 1)
        assert grads["payload_bytes"] == states["grads_bytes"]  # every gradient of the stage, fp32, once
        assert {(c.cause, c.op) for c in planned} == {(c["cause"], c["op"]) for c in rank["collectives"]}


def test_each_replica_trains_on_its_own_tokens(check):
    torch.manual_seed(0)
    model = build_model(CFG, "cpu", torch.float32)
    losses = []
    for replica in (0, 1):
        gen = torch.Generator().manual_seed(1000 + replica)
        idx = torch.randint(0, CFG.vocab_size, (2, 16), generator=gen)[:1]
        with torch.no_grad():
            losses.append(float(F.cross_entropy(model(idx).float().view(-1, CFG.vocab_size), idx.view(-1))))
    assert losses[0] != losses[1]
    # rank r is stage r mod 2 of replica r div 2: both stages of a replica report its loss
    assert [r["first_loss"] for r in check.ranks] == pytest.approx([losses[0]] * 2 + [losses[1]] * 2, rel=1e-5)
