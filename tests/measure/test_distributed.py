"""Plans checked on a real distributed run: 2 gloo ranks on the CPU, one launch for every layout
(DDP, FSDP2, TP, TP with sequence parallelism), plan == measured for model-state bytes and for the bytes
and calls of every collective; the TP model computes the same loss as the single-device model."""

import dataclasses
import sys
import time

import pytest
import torch
import torch.nn.functional as F
from conftest import tiny

from tfcalc.config import replace
from tfcalc.count.training.layout import Layout
from tfcalc.count.training.plan import make_plan
from tfcalc.count.training.steptime import Hardware
from tfcalc.errors import InputError
from tfcalc.measure.launch import check_nproc, launch, run_ranks
from tfcalc.measure.parallelize import check_measurable, interleave_rows
from tfcalc.model import build_model
from tfcalc.presets import load
from tfcalc.report.plan_check import small_copy

# Odd vocabulary (61 rows: torch.chunk gives 31 and 30, FSDP2 pads to 31), GQA, gated FFN, biases.
CFG = tiny(n_kv_head=2, d_ff=40, pos_encoding="rope", norm="rmsnorm", norm_bias=False, gated_ffn=True,
           activation="silu", tie_embeddings=False)
HW = Hardware(1e12, 10**12, 1e9, 1e9, 8)


def L(**changes) -> Layout:
    fields = dict(tp=1, pp=1, dp=1, seq=16, global_batch=2, micro_batch=1, dtype="fp32")
    fields.update(changes)
    return Layout(**fields)


LAYOUTS = {
    "ddp": L(dp=2, global_batch=4),  # 2 micro-batches: accumulation under no_sync
    "fsdp": L(dp=2, zero=3, global_batch=4),  # 2 micro-batches: a reduce-scatter each
    "tp": L(tp=2, micro_batch=2),
    "tp-sp": L(tp=2, sequence_parallel=True),  # 2 micro-batches
}


STATUSES: list = []  # what launch's on_status saw during the `runs` launch (issue 21: each rank's progress)


@pytest.fixture(scope="module")
def runs():
    jobs = [dict(config=dataclasses.asdict(CFG), layout=dataclasses.asdict(lay)) for lay in LAYOUTS.values()]
    return dict(zip(LAYOUTS, launch(jobs, 2, on_status=lambda s: STATUSES.append(tuple(s))), strict=True))


def test_each_rank_reports_its_phase_and_only_moves_forward(runs):
    """1 rendezvous + per job (4 of them): the model built, 2 warm-up steps, the measured step = 17 steps."""
    assert STATUSES
    total = 1 + len(LAYOUTS) * (1 + 2 + 1)
    for rank in (0, 1):
        seen = [snap[rank] for snap in STATUSES]
        assert [s.rank for s in seen] == [rank] * len(seen)
        done = [s.done for s in seen]
        assert done == sorted(done), f"rank {rank} moved back: {done}"
        assert seen[-1].done == seen[-1].total == total and seen[-1].phase == f"job {len(LAYOUTS)} of 4: done"
        assert len(set(done)) > 3  # seen part-way, not only at the start and the end
        phases = {s.phase for s in seen}
        assert any("warm-up step" in p for p in phases) or any("measured step" in p for p in phases)


# The three presets whose tensors the plan once listed apart from the model (qwen2-7b's O biases, gemma-2-9b's
# sandwich post-norms, falcon-7b's single shared norm) and GPT-2, as small copies under tp 2: one launch
DRIFTED = ("qwen2-7b", "gemma-2-9b", "falcon-7b", "gpt2")


@pytest.fixture(scope="module")
def drifted_runs():
    cfgs = {n: small_copy(replace(load(n), tie_embeddings=False), 2) for n in DRIFTED}
    layout = dataclasses.asdict(L(tp=2, micro_batch=2))
    jobs = [dict(config=dataclasses.asdict(c), layout=layout) for c in cfgs.values()]
    return {n: (cfgs[n], r) for n, r in zip(DRIFTED, launch(jobs, 2), strict=True)}


@pytest.mark.parametrize("name", DRIFTED)
def test_the_presets_that_drifted_agree_under_tp(drifted_runs, name):
    cfg, ranks = drifted_runs[name]
    _assert_agree(make_plan(cfg, L(tp=2, micro_batch=2), HW, 0.5), ranks)


@pytest.mark.parametrize("name", list(LAYOUTS))
def test_plan_equals_measured(runs, name):
    _assert_agree(make_plan(CFG, LAYOUTS[name], HW, 0.5), runs[name])


def _assert_agree(plan, ranks) -> None:
    assert [r["rank"] for r in ranks] == [0, 1]
    assert all(r["backend"] == "gloo" and r["world_size"] == 2 for r in ranks)
    rank0 = ranks[0]
    # model states: the plan's rank 0 holds the largest torch.chunk blocks; FSDP2 pads, Adam's state does not
    assert (rank0["weights_bytes"], rank0["grads_bytes"], rank0["optimizer_bytes"]) == (
        plan.memory.weights, plan.memory.grads, plan.memory.optimizer)
    for r in ranks:
        assert r["weights_bytes"] <= plan.memory.weights and r["optimizer_bytes"] <= plan.memory.optimizer
    # collectives: every (cause, op), its payload, its calls (where the plan names them), its ring bytes
    measured = {(c["cause"], c["op"]): c for c in rank0["collectives"]}
    planned = {(c.cause, c.op): c for c in plan.collectives}
    assert set(measured) == set(planned)
    for key, c in planned.items():
        m = measured[key]
        assert (m["payload_bytes"], m["group_size"]) == (c.payload_bytes, c.group_size), key
        assert c.calls is None or m["calls"] == c.calls, key
    # CommDebugMode's own count of calls agrees with the recorder's
    assert sum(rank0["comm_counts"].values()) == sum(c["calls"] for c in rank0["collectives"])
    assert rank0["activation_bytes"] > 0 and rank0["peak_bytes"] > 0


def test_the_sharded_models_compute_the_single_device_loss(runs):
    """Same seed, same tokens: TP (fused Q/K/V and gate/up re-ordered per rank) and FSDP compute the loss
    of the unsharded model, so the re-ordering shards heads and FFN columns consistently."""
    torch.manual_seed(0)
    model = build_model(CFG, "cpu").train()
    for name, ranks in runs.items():
        for r in ranks:
            dp_rank = r["rank"] if LAYOUTS[name].dp > 1 else 0
            gen = torch.Generator().manual_seed(1000 + dp_rank)
            idx = torch.randint(0, CFG.vocab_size, (LAYOUTS[name].micro_batch, 16), generator=gen)
            with torch.no_grad():
                logits = model(idx)
            expected = F.cross_entropy(logits.float().view(-1, CFG.vocab_size), idx.view(-1))
            assert r["first_loss"] == pytest.approx(expected.item(), rel=1e-5), name


def test_interleave_rows_gives_each_rank_its_part_of_every_block():
    w = torch.arange(12).view(12, 1)
    out = interleave_rows(w, [4, 4, 4], 2).view(-1).tolist()
    assert out == [0, 1, 4, 5, 8, 9, 2, 3, 6, 7, 10, 11]  # [Q0 K0 V0 | Q1 K1 V1]


@pytest.mark.parametrize("changes, message", [
    (dict(dp=2, zero=1, global_batch=2), "ZeRO-1 is planned"),
    (dict(pp=2), "pp > 1"),
    (dict(recompute="full"), "recompute"),
    (dict(tp=2, dp=2, global_batch=2), "not with DDP"),
])
def test_layouts_not_measured(changes, message):
    with pytest.raises(InputError, match=message):
        check_measurable(CFG, L(**changes))


def test_tied_embeddings_are_measured_under_tp():
    check_measurable(tiny(), L(tp=2))  # one vocabulary-split tensor: tests/measure/test_tp_architectures.py


@pytest.mark.parametrize("nproc", [0, 10**6])
def test_nproc_out_of_range(nproc):
    with pytest.raises(InputError, match="--nproc"):
        check_nproc(nproc)


def test_a_failing_rank_stops_the_others_and_is_one_line(tmp_path):
    """Rank 1 raises; rank 0 would wait for it forever (as in a collective): it is stopped."""
    code = ("import os, time\n"
            "if os.environ['RANK'] == '1': raise ValueError('boom on ' + os.environ['WORLD_SIZE'])\n"
            "time.sleep(60)\n")
    logs = [str(tmp_path / f"{r}.err") for r in range(2)]
    start = time.monotonic()
    with pytest.raises(InputError, match=r"^the distributed run failed: rank 1 \(exit 1\): ValueError: boom on 2$"):
        run_ranks([sys.executable, "-c", code], 2, logs, timeout=30)
    assert time.monotonic() - start < 20


def test_a_rank_past_the_time_limit_is_stopped(tmp_path):
    logs = [str(tmp_path / "0.err")]
    with pytest.raises(InputError, match="took more than 0.5 s"):
        run_ranks([sys.executable, "-c", "import time; time.sleep(60)"], 1, logs, timeout=0.5)


@pytest.mark.parametrize("changes, message", [
    (dict(attn_sinks=True), "attention sinks under TP are planned, not run"),
    (dict(kv_lora_rank=8, qk_nope_head_dim=8, qk_rope_head_dim=4, v_head_dim=8), "latent attention under TP"),
    (dict(qk_norm=True, qk_norm_per_head=True), r"Q/K norms with weights per head \(Cohere\) under TP"),
])
def test_mixers_a_tp_run_does_not_split_are_refused_by_their_module(changes, message):
    """Each mixer's torch module says whether a run under TP splits it (tfcalc.model.mixers: tp_refusal)."""
    cfg = tiny(pos_encoding="rope", norm="rmsnorm", norm_bias=False, **changes)
    check_measurable(cfg, L(tp=1))
    with pytest.raises(InputError, match=message):
        check_measurable(cfg, L(tp=2))
