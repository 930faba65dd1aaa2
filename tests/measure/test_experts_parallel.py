"""Expert parallelism run for real (tfcalc.measure.experts_parallel): 2 gloo ranks, a tiny Mixtral-like model
with ep 2 -- the plan's model states and its all-to-all bytes and calls agree exactly with the run, and the run
computes the unsharded model's loss."""

import pytest
import torch
import torch.nn.functional as F
from conftest import MIXTRAL_LIKE, tiny

from tfcalc.count.training.layout import Layout
from tfcalc.count.training.steptime import Hardware
from tfcalc.errors import InputError
from tfcalc.measure.parallelize import check_measurable
from tfcalc.model import build_model
from tfcalc.report.plan_check import check_plan

H100 = Hardware(989e12, 80 * 10**9, 450e9, 50e9, 8)
CFG = tiny(**MIXTRAL_LIKE, n_layer=2, d_ff=24)


def L(**changes) -> Layout:
    fields = dict(tp=1, pp=1, dp=2, seq=16, global_batch=4, micro_batch=1, ep=2)
    fields.update(changes)
    return Layout(**fields)


# a latent MoE (Nemotron 3 Super's, tfcalc.architecture.ffn step 7): the routed rows projected to 16 before the
# dispatch, so each exchanged row is 16 wide, not d 32
LATENT = tiny(**MIXTRAL_LIKE, n_layer=2, d_ff=24, moe_latent_dim=16)


@pytest.mark.parametrize("CFG, width", [(CFG, 32), (LATENT, 16)], ids=["mixtral-like", "latent"])
def test_ep_run_agrees_with_the_plan_and_computes_the_unsharded_loss(CFG, width):
    check = check_plan(CFG, L(), 2, H100, None)
    assert check.states_exact and check.collectives_exact
    planned = {(c.cause, c.op): c for c in check.plan.collectives}
    tokens = planned["ep_tokens", "all_to_all"]
    # 2 micro-batches × 2 MoE layers × 4 exchanges of 16 tokens × top-2 × width (d 32, or the latent 16) × fp32
    assert (tokens.calls, tokens.payload_bytes) == (2 * 2 * 4, 2 * 2 * 4 * 16 * 2 * width * 4)
    assert planned["ep_counts", "all_to_all"].payload_bytes == 2 * 2 * 4 * 8  # n_expert int64 per layer
    # each rank holds 2 of the 4 experts: the weights the plan counts, measured on both ranks
    assert {r["weights_bytes"] for r in check.ranks} == {check.plan.memory.weights}
    torch.manual_seed(0)  # the ranks' seed: the same initial weights
    model = build_model(CFG, "cpu", torch.float32).train()
    for rank, r in enumerate(check.ranks):
        gen = torch.Generator().manual_seed(1000 + rank)
        idx = torch.randint(0, CFG.vocab_size, (1, 16), generator=gen)
        with torch.no_grad():
            logits = model(idx)
        expected = F.cross_entropy(logits.float().view(-1, CFG.vocab_size), idx.view(-1))
        assert r["first_loss"] == pytest.approx(expected.item(), rel=1e-5)


@pytest.mark.parametrize("changes, message", [
    (dict(zero=3), "ep = dp"),
    (dict(dp=2, ep=1, tp=1), None),
])
def test_what_an_ep_run_covers(changes, message):
    if message is None:
        check_measurable(CFG, L(**changes))
        return
    with pytest.raises(InputError, match=message):
        check_measurable(CFG, L(**changes))
