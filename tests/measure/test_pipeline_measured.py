"""Pipeline parallelism on real ranks (tfcalc.measure.pipeline, torch.distributed.pipelining's Schedule1F1B,
ScheduleInterleaved1F1B and ScheduleInterleavedZeroBubble on 2 gloo ranks, one launch for the three): every
rank's model-state bytes, its sends (payload and calls) and the tied embedding's all-reduce equal its stage's
plan; rank 0's saved activations equal the plan's in-flight count (all its forwards are in flight at m = p);
the first loss equals the single-device model's. And what is refused, before any rank starts."""

import dataclasses

import pytest
from conftest import assert_one_line_error, single_device_first_loss, tiny

from tfcalc.count.training.layout import Layout
from tfcalc.count.training.plan import make_plan
from tfcalc.count.training.steptime import Hardware
from tfcalc.errors import InputError
from tfcalc.measure.launch import launch
from tfcalc.report.plan_check import PlanCheck, measured_layout, stage_plans

CFG = tiny(n_layer=4, n_kv_head=2, d_ff=40, pos_encoding="rope", norm="rmsnorm", norm_bias=False, gated_ffn=True,
           activation="silu", tie_embeddings=True)  # tied: the first and last stages all-reduce its gradient
HW = Hardware(1e12, 10**12, 1e9, 1e9, 8)
LAYOUTS = {"1f1b": Layout(pp=2, seq=16, global_batch=2, micro_batch=1, dtype="fp32"),
           "interleaved": Layout(pp=2, seq=16, global_batch=2, micro_batch=1, dtype="fp32", schedule="interleaved",
                                 virtual_stages=2),
           "zero-bubble": Layout(pp=2, seq=16, global_batch=2, micro_batch=1, dtype="fp32", schedule="zero-bubble")}


@pytest.fixture(scope="module")
def checks():
    jobs = [dict(config=dataclasses.asdict(CFG), layout=dataclasses.asdict(lay)) for lay in LAYOUTS.values()]
    answers = launch(jobs, 2)
    return {name: PlanCheck(CFG, False, lay, make_plan(CFG, lay, HW, None), tuple(ranks), ())
            for (name, lay), ranks in zip(LAYOUTS.items(), answers, strict=True)}


@pytest.mark.parametrize("name", list(LAYOUTS))
def test_every_rank_equals_its_stages_plan(checks, name):
    check = checks[name]
    assert check.states_exact and check.collectives_exact
    v = LAYOUTS[name].virtual_stages
    for rank, (states, collectives) in zip(check.ranks, stage_plans(CFG, LAYOUTS[name]), strict=True):
        assert {k: rank[k] for k in states} == states
        sends = next(c for c in rank["collectives"] if c["cause"] == "pp_activations")
        assert sends["calls"] == 2 * (2 * v - 1)  # m = 2 micro-batches × (2V − 1) chunk boundaries on each rank
        assert sends["payload_bytes"] == sends["calls"] * 16 * CFG.d_model * 4  # fp32 (1, 16, d) activations
        assert {(c.cause, c.op) for c in collectives} == {(c["cause"], c["op"]) for c in rank["collectives"]}


@pytest.mark.parametrize("name", list(LAYOUTS))
def test_saved_activations_and_first_loss(checks, name):
    check = checks[name]
    # rank 0 is the plan's stage (its largest) and holds every forward of the step in flight (m = p = 2).
    # Beside the plan's terms autograd keeps the RoPE cos and sin each chunk forward slices (2 × 16 × 8 × 4 =
    # 1,024 bytes; distinct storages only while the allocator does not reuse them): at most that much more
    assert check.plan.memory.stage == 0
    forwards = 2 * LAYOUTS[name].virtual_stages  # chunk forwards on rank 0: m × V
    assert 0 <= check.rank0["activation_bytes"] - check.plan.memory.activations <= 1024 * forwards
    expected = single_device_first_loss(CFG)
    assert all(r["first_loss"] == pytest.approx(expected, rel=1e-5) for r in check.ranks)


def test_zero_bubble_runs_pytorchs_zero_bubble_schedule(checks):
    """ZB-H1 as PyTorch runs it: each backward split into I (inputs' gradient) and W (weights'), the Ws
    deferred; the same sends and states as 1F1B (the plan's), and the same first loss."""
    zb, one = checks["zero-bubble"], checks["1f1b"]
    assert {r["schedule"] for r in zb.ranks} == {"ScheduleInterleavedZeroBubble"}
    for rank in zb.ranks:
        kinds = [a.rstrip("0123456789")[-1] for a in rank["actions"]]  # "0F1" -> F
        assert kinds.count("F") == kinds.count("I") == kinds.count("W") == 2 and "B" not in kinds
        assert kinds.index("I") < kinds.index("W")  # a weight gradient after the input gradient it follows
    assert [r["collectives"] for r in zb.ranks] == [r["collectives"] for r in one.ranks]
    assert [{k: r[k] for k in ("weights_bytes", "grads_bytes", "optimizer_bytes")} for r in zb.ranks] == \
        [{k: r[k] for k in ("weights_bytes", "grads_bytes", "optimizer_bytes")} for r in one.ranks]


def test_measured_layout_of_a_planned_pipeline():
    planned = Layout(tp=1, pp=16, dp=64, seq=8192, global_batch=2048, micro_batch=1, zero=1,
                     schedule="interleaved", virtual_stages=4, overlap=("pp",))
    ran = measured_layout(planned, 2)
    assert (ran.tp, ran.pp, ran.dp, ran.zero, ran.schedule, ran.virtual_stages, ran.micro_batches) == \
        (1, 2, 1, 0, "interleaved", 4, 2)
    assert ran.overlap == ("pp",) and not ran.sequence_parallel
    on4 = measured_layout(planned, 4)  # 4 ranks: data parallel beside the pipeline, 2 replicas of 2 stages
    assert (on4.pp, on4.dp, on4.zero, on4.micro_batches) == (2, 2, 0, 2)
    assert (measured_layout(dataclasses.replace(planned, dp=3), 4).dp, measured_layout(planned, 8).dp) == (1, 4)
    zb = measured_layout(dataclasses.replace(planned, schedule="zero-bubble", virtual_stages=1), 2)
    assert (zb.schedule, zb.virtual_stages) == ("zero-bubble", 1)  # run with PyTorch's zero-bubble schedule
    with_tp = measured_layout(dataclasses.replace(planned, tp=8, sequence_parallel=True, overlap=("tp", "pp")), 2)
    assert (with_tp.tp, with_tp.pp, with_tp.schedule) == (2, 1, "1f1b")  # TP planned: the run keeps the TP


def test_cp_and_unsplittable_pipelines_are_refused_before_any_rank_starts(cli):
    assert_one_line_error(cli("plan", "llama2-7b", "--pp", "2", "--cp", "2", "--global-batch", "8", "--measure"),
                          "context_parallel has no CPU kernel")
    assert_one_line_error(cli("plan", "t5-base", "--pp", "1", "--cp", "2", "--measure"), "cross-attention")
    with pytest.raises(InputError, match="equal chunks"):
        from tfcalc.measure.pipeline import check_pipeline_measurable

        check_pipeline_measurable(tiny(n_layer=3), Layout(pp=2, seq=16, global_batch=2), 2)
