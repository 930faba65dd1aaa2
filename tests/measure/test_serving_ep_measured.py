"""Expert-parallel serving run for real (tfcalc.measure.serving_ep): 2 gloo ranks, a tiny Mixtral-like mixture of 8
experts (top 2), each rank its own sequences: the parameter bytes on each rank are what
tfcalc.count.serving.expert_parallel.weights_per_gpu says (exact), and over many one-token steps the rows each rank
sends to the other in the dispatch and the combine, and the experts of its own that a step's tokens hit, agree with
the prediction's expectations under uniform routing (a random router on random tokens: within 15 %)."""

import dataclasses

import pytest
from conftest import MIXTRAL_LIKE, tiny

from tfcalc.count.model import quant
from tfcalc.count.serving import expert_parallel as ep

CFG = tiny(**{**MIXTRAL_LIKE, "n_expert": 8}, n_layer=2, d_ff=24)
E, B, STEPS = 2, 3, 40  # ranks, sequences a rank, decode steps


@pytest.fixture(scope="module")
def ranks():
    from tfcalc.measure.serving_ep import measure

    return measure(dataclasses.asdict(CFG), E, B, STEPS)


def lay() -> ep.ExpertLayout:
    return ep.ExpertLayout(E, 1, E, 0, 8, "nvlink", 450e9, 2e-6, 0.8, 50e9, 6e-6, 0.9)


def test_parameter_bytes_per_rank_exact(ranks):
    w = ep.weights_per_gpu(CFG, quant.plain("fp32"), lay())
    assert [r["routed_experts_bytes"] for r in ranks] == [w["routed_experts"]] * E
    assert [r["rest_bytes"] for r in ranks] == [w["rest"]] * E


def test_all_to_all_rows_against_the_prediction(ranks):
    """Per rank and step, both calls of both MoE layers: predicted b·L·k(E − 1)/E rows each way, d fp32 values a
    row (all_to_all at b tokens a rank); what one rank sends in the combine is what the others sent it."""
    assert all(r["all_to_all_calls"] == STEPS * 2 * 2 for r in ranks)
    predicted = ep.all_to_all(CFG, lay(), B, 4, fp8=False)
    measured = sum(r["off_rank_bytes"] for r in ranks) / (E * STEPS)
    assert predicted.intra_bytes == B * 2 * 2 * 2 * (E - 1) / E * 32 * 4
    assert measured == pytest.approx(predicted.intra_bytes, rel=0.15)


def test_experts_hit_against_the_prediction(ranks):
    """Of a rank's 4 experts, those some of the step's E·b tokens chose: 4·(1 − (1 − 2/8)^(E·b))."""
    measured = sum(r["experts_hit_mean"] for r in ranks) / E
    assert measured == pytest.approx(ep.hit_per_gpu(CFG, lay(), E * B), rel=0.15)


def test_infer_ep_measure_through_the_api():
    """`infer --ep 2 --measure`: the run beside the listed device's prediction, in JSON expert_parallel.measured."""
    import tfcalc

    r = tfcalc.infer(CFG, batch=4, seq=8, gen=2, ep=2, measure=True).to_json()
    m = r["expert_parallel"]["measured"]
    assert m["weights_equal"] and m["world_size"] == 2 and m["sequences_per_rank"] == 2
    a = m["a2a_bytes_per_rank_per_step"]
    assert a["predicted"] == 2 * 2 * 2 * 2 * (1 / 2) * 32 * 4  # b 2 tokens, 2 layers, 2 calls, k 2 · 1/2 off, d 32
    assert a["measured"] == pytest.approx(a["predicted"], rel=0.3)  # 16 steps of 4 tokens: a looser band
    assert r["device_spec"] == "h100-sxm" and r["measured"] is False  # the prediction stays the listed device's
