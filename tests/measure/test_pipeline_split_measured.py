"""--pp-split-counts on real ranks (tfcalc.measure.pipeline; torch.distributed.pipelining's
ScheduleInterleaved1F1B on 2 gloo ranks): the ends counted as a block each, so a chunk may hold the embedding
alone or the head alone. Every rank's model-state bytes and sends (payload and calls) equal its stage's plan,
and the first loss equals the single-device model's.

Placement by hand (tfcalc.count.training.shard.stage_ranges), pp 2 × V 2 = 4 chunks of one "layer" each:
- 2 blocks + embedding + head = 4 layers: chunk 0 = the embedding, chunk 1 = block 0, chunk 2 = block 1,
  chunk 3 = the head. Rank 0 holds chunks 0 and 2 (the embedding, block 1), rank 1 chunks 1 and 3 (block 0,
  the head): one block each.
- 3 blocks + head = 4 layers: chunk 0 = block 0 (with the embedding, not counted), 1 = block 1, 2 = block 2,
  3 = the head alone. Rank 0 holds blocks 0 and 2, rank 1 block 1 and the head.
Sends: every chunk boundary, as without the split (3 boundaries: rank 0 sends forward from chunks 0 and 2
and backward from chunk 2; rank 1 forward from chunk 1, backward from chunks 1 and 3: 3 each per
micro-batch, 2V − 1 = 3)."""

import dataclasses

import pytest
from conftest import single_device_first_loss, tiny

from tfcalc.count.training.layout import Layout
from tfcalc.count.training.plan import make_plan
from tfcalc.count.training.rank_memory import stage_params
from tfcalc.count.training.steptime import Hardware
from tfcalc.measure.launch import launch
from tfcalc.report.plan_check import PlanCheck, stage_plans

BASE = dict(n_kv_head=2, d_ff=40, pos_encoding="rope", norm="rmsnorm", norm_bias=False, gated_ffn=True,
            activation="silu", tie_embeddings=True, attn_bias=False, ffn_bias=False)
HW = Hardware(1e12, 10**12, 1e9, 1e9, 8)
INTERLEAVED = dict(pp=2, seq=16, global_batch=2, micro_batch=1, dtype="fp32", schedule="interleaved", virtual_stages=2)
RUNS = {"embedding+head": (tiny(n_layer=2, **BASE), Layout(**INTERLEAVED, pp_split_counts=("embedding", "head"))),
        "head": (tiny(n_layer=3, **BASE), Layout(**INTERLEAVED, pp_split_counts=("head",)))}


@pytest.fixture(scope="module")
def checks():
    jobs = [dict(config=dataclasses.asdict(cfg), layout=dataclasses.asdict(lay)) for cfg, lay in RUNS.values()]
    answers = launch(jobs, 2)
    return {name: PlanCheck(cfg, False, lay, make_plan(cfg, lay, HW, None), tuple(ranks), ())
            for (name, (cfg, lay)), ranks in zip(RUNS.items(), answers, strict=True)}


@pytest.mark.parametrize("name", list(RUNS))
def test_every_rank_equals_its_stages_plan(checks, name):
    cfg, layout = RUNS[name]
    check = checks[name]
    assert check.states_exact and check.collectives_exact
    for rank, (states, collectives) in zip(check.ranks, stage_plans(cfg, layout), strict=True):
        assert {k: rank[k] for k in states} == states
        sends = next(c for c in rank["collectives"] if c["cause"] == "pp_activations")
        assert sends["calls"] == 2 * 3  # m = 2 micro-batches × 3 chunk boundaries on each rank
        assert sends["payload_bytes"] == sends["calls"] * 16 * cfg.d_model * 4  # fp32 (1, 16, d) activations
        assert {(c.cause, c.op) for c in collectives} == {(c["cause"], c["op"]) for c in rank["collectives"]}


def test_the_ranks_hold_the_hand_placement(checks):
    """The weights each rank holds: its blocks (by hand, the module docstring) plus its end's tensors."""
    cfg, layout = RUNS["embedding+head"]
    d, f, v = cfg.d_model, 40, cfg.vocab_size
    q, kv = d * d, 2 * (cfg.n_kv_head * (d // cfg.n_head)) * d
    block = 2 * d + q + kv + d * d + 3 * d * f  # two RMSNorms, Q, K and V, O, gate, up and down (no biases)
    embedding, head = v * d, d + v * d  # the tied table on both ends; the final norm on the last
    expected = [block + embedding, block + head]
    assert [stage_params(cfg, layout, s) for s in range(2)] == expected
    assert [r["weights_bytes"] for r in checks["embedding+head"].ranks] == [4 * n for n in expected]


@pytest.mark.parametrize("name", list(RUNS))
def test_first_loss_is_the_single_device_models(checks, name):
    cfg, _ = RUNS[name]
    expected = single_device_first_loss(cfg)
    assert all(r["first_loss"] == pytest.approx(expected, rel=1e-5) for r in checks[name].ranks)


@pytest.mark.parametrize("name", list(RUNS))
def test_the_shown_plan_is_rank_0s(checks, name):
    """The table beside the measurement is rank 0's plan (stage 0), whichever stage the plan shows as its
    largest; activations to the byte (no RoPE tables kept apart here, m = p)."""
    check = checks[name]
    assert {k: check.planned_per_rank[k] for k in ("weights_bytes", "grads_bytes", "optimizer_bytes")} == \
        {k: check.rank0[k] for k in ("weights_bytes", "grads_bytes", "optimizer_bytes")}
    assert check.planned_collectives == list(stage_plans(*RUNS[name])[0][1])
    assert 0 <= check.rank0["activation_bytes"] - check.planned_per_rank["activation_bytes"] <= 1024 * 4
