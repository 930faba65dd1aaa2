"""--schedule dualpipe / dualpipev on real ranks: PyTorch's ScheduleDualPipeV (tfcalc.measure.pipeline) on 2 gloo
ranks, 4 blocks in 4 stages placed in a V (rank 0: stages 0 and 3, the embedding and the tied head once; rank 1:
stages 1 and 2), 4 micro-batches. Every rank's model states and sends equal its plan (tfcalc.count.perf.pipeline,
step 5: one copy of the parameters, no tied all-reduce, 4 − 2[first] − 2[last] sends a micro-batch); the
order the rank ran is the hand count (2m forwards, m backwards of each stage); the saved activations at their
peak are the plan's 2p − r and r + 1 micro-batches of its two stages, beside what PyTorch's runtime keeps
(named below); the first loss is the single-device model's. Then what `plan --measure` runs for a planned
dualpipe, and says it left out."""

import dataclasses
import re

import pytest
from conftest import single_device_first_loss, tiny

from tfcalc.count.training import rank_memory as rm
from tfcalc.count.training.layout import Layout, check_layout
from tfcalc.count.training.plan import make_plan
from tfcalc.count.training.steptime import Hardware
from tfcalc.measure.launch import launch
from tfcalc.report.plan_check import PlanCheck, _left_out, measured_layout, stage_plans

pytest.importorskip("torch.distributed.pipelining.schedules", exc_type=ImportError)
from torch.distributed.pipelining import schedules  # noqa: E402

if not hasattr(schedules, "ScheduleDualPipeV"):  # PyTorch before 2.11
    pytest.skip("no ScheduleDualPipeV in this PyTorch", allow_module_level=True)

CFG = tiny(n_layer=4, n_kv_head=2, d_ff=40, pos_encoding="rope", norm="rmsnorm", norm_bias=False, gated_ffn=True,
           activation="silu", tie_embeddings=True)
HW = Hardware(1e12, 10**12, 1e9, 1e9, 8)
LAYOUT = Layout(pp=2, seq=16, global_batch=4, micro_batch=1, dtype="fp32", schedule="dualpipev")
ROPE = 1024  # the RoPE cos and sin a chunk forward slices and autograd keeps (2 × 16 × 8 × 4 bytes): not the plan's


@pytest.fixture(scope="module")
def check():
    check_layout(CFG, LAYOUT)
    (ranks,) = launch([dict(config=dataclasses.asdict(CFG), layout=dataclasses.asdict(LAYOUT))], 2)
    return PlanCheck(CFG, False, LAYOUT, make_plan(CFG, LAYOUT, HW, None), tuple(ranks), ())


def test_every_rank_equals_its_plan(check):
    assert check.states_exact and check.collectives_exact
    assert {r["schedule"] for r in check.ranks} == {"ScheduleDualPipeV"}
    for rank, (states, planned) in zip(check.ranks, stage_plans(CFG, LAYOUT), strict=True):
        assert {k: rank[k] for k in states} == states
        assert [c["cause"] for c in rank["collectives"]] == [c.cause for c in planned] == ["pp_activations"]
        sends = rank["collectives"][0]
        assert sends["calls"] == 4 * 2  # m × (4 − 2 at the first or last rank): one boundary each way a stage
        assert sends["payload_bytes"] == sends["calls"] * 16 * CFG.d_model * 4  # fp32 (1, 16, d) activations
    # one copy: the two ranks' weights are the model's (4 bytes a parameter), the tied tensor once
    import torch

    from tfcalc.model import build_model

    model = build_model(CFG, torch.device("meta"), torch.float32)  # the real module, its tied tensor once
    assert sum(r["weights_bytes"] for r in check.ranks) == 4 * sum(q.numel() for q in model.parameters())


def test_the_order_each_rank_ran(check):
    for r, rank in enumerate(check.ranks):
        done = {}
        for a in rank["actions"]:  # "3F1": stage 3's forward of micro-batch 1
            stage, kind, mb = re.fullmatch(r"(\d+)([FBIW])(\d+)", a).groups()
            done.setdefault((int(stage), kind), []).append(int(mb))
        for stage in (r, 3 - r):  # the V of 4 stages
            assert sorted(done[stage, "F"]) == [0, 1, 2, 3]
            assert sorted(done.get((stage, "B"), []) + done.get((stage, "I"), [])) == [0, 1, 2, 3]
            assert sorted(done.get((stage, "W"), [])) == sorted(done.get((stage, "I"), []))


def test_saved_activations_at_their_peak(check):
    """Rank 1 (no end): 3 micro-batches of stage 1 and 2 of stage 2 (2p − r and r + 1) at once, the plan's,
    RoPE's slices beside. Rank 0 holds more than the schedule's order keeps: the last stage's first micro-batch
    runs its backward split (I, then W; step 3 of the order, p − r − 1 = 1 such on rank 0, none on rank 1)
    and PyTorch's split backward leaves part of its saved tensors alive past W, to the step's end
    (tfcalc.measure.pipeline, step 4): at most one micro-batch of that stage more."""
    planned = [rm.stage_memory(CFG, LAYOUT, r).activations for r in (0, 1)]
    measured = [r["activation_bytes"] for r in check.ranks]
    assert 0 <= measured[1] - planned[1] <= ROPE * 5
    head_chunk = rm.stage_memory(CFG, LAYOUT, 0)  # one micro-batch of stage 3: rank 0's plan less its stage 0's 4
    one_more = planned[0] - 4 * (planned[1] // 5)
    assert head_chunk.stage == 0 and 0 <= measured[0] - planned[0] <= one_more + ROPE * 5
    assert all(r["activation_peak_bytes"] == r["activation_bytes"] for r in check.ranks)


def test_first_loss(check):
    expected = single_device_first_loss(CFG)
    assert all(r["first_loss"] == pytest.approx(expected, rel=1e-5) for r in check.ranks)


def test_what_plan_measure_runs_for_a_planned_dualpipe():
    planned = Layout(tp=1, pp=8, dp=4, seq=4096, global_batch=256, micro_batch=1, schedule="dualpipe",
                     pp_split_counts=("embedding", "head"))
    ran = measured_layout(planned, 2)
    assert (ran.pp, ran.dp, ran.schedule, ran.micro_batches, ran.pp_split_counts) == (2, 1, "dualpipev", 4, ())
    on4 = measured_layout(planned, 4)  # 2 replicas of 2 ranks, each 2 × 2 micro-batches
    assert (on4.pp, on4.dp, on4.schedule, on4.micro_batches) == (2, 2, "dualpipev", 4)
    said = _left_out(planned, ran)
    assert any(s.startswith("dualpipe's two copies of the parameters (ran dualpipev") for s in said)
    assert "embedding and head counted as blocks (ran DualPipeV's own cut)" in said
    assert not any("dualpipev" in s for s in _left_out(dataclasses.replace(planned, schedule="dualpipev",
                                                                           pp_split_counts=()), ran))


def test_four_ranks_in_a_v():
    """pp 4 on 4 ranks, 8 blocks in 8 stages, 8 micro-batches (GPT-2-shaped, untied): every rank's states and
    sends are its plan's -- the middle ranks send 4 a micro-batch, the ends 2 (rank 3's fold is local); the
    last rank, with no split backward before its peak, saves exactly its plan's 2p − r + r + 1 = 9 stage
    micro-batches; rank r < 3 at most p − r − 1 micro-batches of its second stage more (see above)."""
    cfg = tiny(n_layer=8, max_seq_len=16, tie_embeddings=False)
    lay = dataclasses.replace(LAYOUT, pp=4, global_batch=8)
    check_layout(cfg, lay)
    (ranks,) = launch([dict(config=dataclasses.asdict(cfg), layout=dataclasses.asdict(lay))], 4)
    check = PlanCheck(cfg, False, lay, make_plan(cfg, lay, HW, None), tuple(ranks), ())
    assert check.states_exact and check.collectives_exact
    assert [r["collectives"][0]["calls"] for r in ranks] == [8 * 2, 8 * 4, 8 * 4, 8 * 2]
    planned = [rm.stage_memory(cfg, lay, r).activations for r in range(4)]
    block = planned[3] // 9  # rank 3: stages 3 and 4, one block each, 5 + 4 micro-batches
    assert ranks[3]["activation_bytes"] == planned[3]
    for r in range(3):
        second = planned[0] - 8 * block if r == 0 else block  # a micro-batch of stage 7 (block, head, loss) or a block
        assert 0 <= ranks[r]["activation_bytes"] - planned[r] <= (3 - r) * second
