"""Rank workers kept between launches (tfcalc.measure.rank_pool): inside shared() -- the whole test run's, from
tests/conftest.py -- a second launch runs on the ranks of the first and answers what fresh ranks answer; a failed
run ends its pool with a fresh launch's one-line error, and the next launch starts a new pool; a changed
environment gets fresh ranks; when shared() ends no worker is left, nor its folder. Outside shared() every
launch starts its own ranks (tests/measure/test_rank_lifeline.py)."""

import dataclasses
import json
import os
import sys

import pytest
from conftest import tiny

from tfcalc.count.training.layout import Layout
from tfcalc.errors import InputError
from tfcalc.measure import rank_pool
from tfcalc.measure.launch import TEMP_PREFIX, launch, rank_env

# tests/measure/test_distributed.py's model and its TP layout: a DeviceMesh, DTensors, the loss parallel
CFG = tiny(n_kv_head=2, d_ff=40, pos_encoding="rope", norm="rmsnorm", norm_bias=False, gated_ffn=True,
           activation="silu", tie_embeddings=False)
JOB = dict(config=dataclasses.asdict(CFG),
           layout=dataclasses.asdict(Layout(tp=2, pp=1, dp=1, seq=16, global_batch=2, micro_batch=2, dtype="fp32")))
KEY = (2, "cpu")


def _pids() -> list[int]:
    return [p.pid for p in rank_pool._shared[KEY].procs]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _same(a: dict, b: dict) -> None:
    """What a run measures exactly: model-state bytes, each collective, the first loss."""
    keys = ("weights_bytes", "grads_bytes", "optimizer_bytes", "first_loss", "activation_bytes", "collectives")
    assert {k: a[k] for k in keys} == {k: b[k] for k in keys}


def test_a_second_launch_runs_on_the_first_launchs_ranks_and_answers_alike():
    """(Pooled runs are held to the plan and to the single-device loss by every rank test of the suite.)"""
    assert rank_pool._shared is not None, "tests/conftest.py runs the suite inside rank_pool.shared()"
    (first,) = launch([JOB], 2, device="cpu")
    pids, served = _pids(), rank_pool._shared[KEY].served
    (second,) = launch([JOB], 2, device="cpu")
    assert _pids() == pids and rank_pool._shared[KEY].served == served + 1
    for r in range(2):
        _same(first[r], second[r])


def test_a_failed_run_ends_the_pool_with_a_fresh_launchs_error_and_the_next_starts_anew():
    launch([JOB], 2, device="cpu")
    pids = _pids()
    bad = dict(JOB, layout=dict(JOB["layout"], tp=3))  # 3 does not divide 2 ranks: each rank raises
    with pytest.raises(InputError, match=r"^the distributed run failed: rank \d \(exit 1\): \w+Error: "):
        launch([bad], 2, device="cpu")
    assert not any(_alive(p) for p in pids)
    (after,) = launch([JOB], 2, device="cpu")
    assert set(_pids()).isdisjoint(pids) and len(after) == 2


def test_a_changed_environment_gets_fresh_ranks_and_no_worker_outlives_shared(monkeypatch, tmp_path):
    """At the pool's level, without a run (a worker imports torch at its first request only)."""
    request = tmp_path / "request.json"
    request.write_text(json.dumps({"jobs": [], "device": "cpu"}), encoding="utf-8")
    cmd = [sys.executable, "-m", "tfcalc.measure.distributed", str(request)]

    def pool():
        return rank_pool.pool_for(cmd, 2, lambda r: rank_env(r, 2, 0), TEMP_PREFIX)

    outer = rank_pool._shared
    with rank_pool.shared():
        first = pool()
        assert pool() is first and all(_alive(p.pid) for p in first.procs)
        monkeypatch.setenv("TFCALC_TEST_RANK_POOL_MARK", "1")  # the ranks would inherit it: fresh ones
        second = pool()
        assert second is not first and not any(_alive(p.pid) for p in first.procs)
        assert not os.path.exists(first.folder) and os.path.isdir(second.folder)
        assert rank_pool.pool_for([sys.executable, "-c", "pass", str(request)], 2, None, TEMP_PREFIX) is None
    assert rank_pool._shared is outer
    assert not any(_alive(p.pid) for p in second.procs) and not os.path.exists(second.folder)
