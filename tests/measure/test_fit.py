"""Refuse before allocating (tfcalc.measure.fit), for every path that builds or runs a module."""

from __future__ import annotations

import time

import pytest
from conftest import configs, tiny
from hypothesis import given, settings

from tfcalc.config import replace
from tfcalc.errors import InputError
from tfcalc.measure import device as dev, fit, params as mp
from tfcalc.measure.flops import estimate_bytes
from tfcalc.presets import load
from tfcalc.workload import Workload

GiB = 2**30


def test_smaller_run_names_the_largest_batch_then_the_longest_sequence():
    def need(batch: int, seq: int) -> int:
        return 1000 + batch * seq

    suggest = fit.smaller_run(need, batch=64, seq=100)
    assert suggest(1000 + 12 * 100 + 50).startswith("--batch 12 ")
    assert suggest(1000 + 99).startswith("--batch 1 --seq 99 ")
    # not even one token fits: the model's own size is named (issue 33: not --batch, which cannot help)
    assert suggest(1000) == ("a smaller model (one token alone needs 1001 bytes: its size fields, the preset's or "
                             "--set's)")


def test_a_model_too_large_at_one_token_is_refused_for_its_size_not_its_batch(monkeypatch):
    monkeypatch.setattr(fit, "read_limits", lambda kind, free, name: [fit.Limit(4 * GiB, "free memory on cpu")])
    with pytest.raises(InputError) as e:
        fit.require_fits(100 * GiB, "cpu", "x", "a smaller --batch or --seq, or --dtype bf16",
                         fit.smaller_run(lambda b, t: 100 * GiB + b * t, 8, 64))
    assert str(e.value) == ("not running x: it needs an estimated 100 GiB but the free memory on cpu is 4 GiB; try a "
                            "smaller model (one token alone needs 100 GiB: its size fields, the preset's or --set's)")


def test_the_refusal_names_need_limit_and_a_run_that_fits(monkeypatch):
    monkeypatch.setattr(dev, "free_memory", lambda device: 4 * GiB)
    with pytest.raises(InputError) as e:
        fit.require_fits(10 * GiB, "cpu", "x", "a smaller model", fit.smaller_run(lambda b, t: b * GiB, 10, 8))
    assert str(e.value) == ("not running x: it needs an estimated 10 GiB but the free memory on cpu is 4 GiB; "
                            "try --batch 4 (an estimated 4 GiB), or a smaller model")


def test_the_tightest_limit_wins(monkeypatch):
    monkeypatch.setattr(fit, "rlimit_limits", lambda: [
        fit.Limit(3 * GiB, "room under the address-space limit (ulimit -v)", per_process=True)])
    monkeypatch.setattr(fit, "cgroup_room", lambda: 5 * GiB)
    assert fit.tightest_limit("cpu", 8 * GiB, "cpu").what.startswith("room under the address-space limit")
    monkeypatch.setattr(fit, "cgroup_room", lambda: GiB)
    assert fit.tightest_limit("cpu", 8 * GiB, "cpu").what == "room under the cgroup's memory limit"
    assert fit.tightest_limit("cuda", 8 * GiB, "cuda:0").bytes == 8 * GiB  # a GPU's memory is neither


def test_a_build_of_too_many_modules_is_refused_at_once():
    start = time.monotonic()
    with pytest.raises(InputError, match="more than the 20,000 tfcalc builds"):
        fit.require_buildable(tiny(), 5_000, "x", "--no-measure")
    fit.require_buildable(load("mixtral-8x7b"), 32, "x", "--no-measure")  # 32 blocks of 8 experts: fine
    # a layer's experts are grouped tensors (tfcalc.model.experts): their number adds no modules
    fit.require_buildable(tiny(n_expert=100_000, n_expert_active=2), 2, "x", "--no-measure")
    assert fit.modules_built(tiny(n_expert=256, n_expert_active=8), 58) == fit.modules_built(
        tiny(n_expert=2, n_expert_active=1), 58) < 2_000
    assert time.monotonic() - start < 2


def test_flops_estimate_counts_activations_and_training():
    cfg = load("gpt2")
    run = Workload(batch=16, seq=1024)
    forward, training = estimate_bytes(cfg, run), estimate_bytes(cfg, run, training=True)
    assert 2 * GiB < forward < training and 18 * GiB < training < 21 * GiB  # 16 × 1024 tokens: activations dominate


# ---------- deep models: one real block per stack, times the depth ----------


def test_a_million_layers_count_in_seconds():
    start = time.monotonic()
    count = mp.empirical_count(replace(load("gpt2"), n_layer=1_000_000))
    assert time.monotonic() - start < 10
    assert count.method == "per_block" and count.blocks_built == 1
    assert count.total == 1_000_000 * 7_087_872 + 38_597_376 + 786_432 + 1536


@settings(max_examples=25, deadline=None)
@given(cfg=configs())
def test_per_block_counting_equals_building_every_block(cfg):
    deeper = replace(cfg, n_layer=cfg.n_layer + 2)
    full = mp.empirical_count(deeper)
    assert full.method == "full"
    original = mp.FULL_BUILD_BLOCKS
    mp.FULL_BUILD_BLOCKS = 0  # force the per-block path on the same model
    try:
        per_block = mp.empirical_count(deeper)
    finally:
        mp.FULL_BUILD_BLOCKS = original
    assert per_block.method == "per_block"
    assert (per_block.total, per_block.breakdown) == (full.total, full.breakdown)


def test_params_says_how_it_counted(cli):
    deep = cli("params", "gpt2", "--set", "n_layer=200", "--json").json()
    assert deep["empirical_method"] == "per_block" and deep["agree"] is True
    assert any("one real block of each kind in each stack" in n for n in deep["notes"])
    assert cli("params", "gpt2", "--json").json()["empirical_method"] == "full"
    table = cli("params", "gpt2", "--set", "n_layer=200", "-f", "markdown").out
    assert "empirical (one meta block per kind × its layers)" in table


# ---- issue 33, cause 1: ranks on one host share its memory; an rlimit binds each rank alone ----

def _limits(*limits):
    return lambda kind, free, name: list(limits)


def test_ranks_on_this_host_share_its_free_memory(monkeypatch):
    """Two ranks of 3 GiB each need 6 GiB of the host's 5 GiB free: refused, naming both figures."""
    monkeypatch.setattr(fit, "read_limits", _limits(fit.Limit(5 * GiB, "free memory on cpu")))
    fit.require_fits(2 * GiB, "cpu", "x", "fewer ranks", ranks=2)  # 4 GiB of 5: runs
    with pytest.raises(InputError) as e:
        fit.require_fits(3 * GiB, "cpu", "x", "fewer ranks", ranks=2)
    assert str(e.value) == ("not running x: it needs an estimated 6 GiB (2 ranks × 3 GiB) but the free memory on cpu "
                            "is 5 GiB; try fewer ranks")


def test_an_rlimit_binds_each_rank_alone(monkeypatch):
    """ulimit -v is inherited by every rank, each its own address space: 3 GiB a rank under a 4 GiB limit
    runs on any number of ranks, 5 GiB does not on one."""
    rlimit = fit.Limit(4 * GiB, "room under the address-space limit (ulimit -v)", per_process=True)
    monkeypatch.setattr(fit, "read_limits", _limits(rlimit, fit.Limit(100 * GiB, "free memory on cpu")))
    fit.require_fits(3 * GiB, "cpu", "x", "less", ranks=8)
    with pytest.raises(InputError, match=r"needs an estimated 5 GiB per rank but the room under the address-space "
                                         r"limit \(ulimit -v\) is 4 GiB"):
        fit.require_fits(5 * GiB, "cpu", "x", "less", ranks=2)


def test_rlimit_data_is_read_beside_rlimit_as(monkeypatch):
    import resource

    limits = {resource.RLIMIT_AS: (resource.RLIM_INFINITY,) * 2, resource.RLIMIT_DATA: (6 * GiB, 6 * GiB)}
    monkeypatch.setattr(fit.resource, "getrlimit", lambda which: limits[which])
    monkeypatch.setattr(fit, "_status_bytes", lambda field: GiB if field == "VmData" else 0)
    (only,) = fit.rlimit_limits()
    assert only == fit.Limit(5 * GiB, "room under the data-segment limit (ulimit -d)", per_process=True)


def test_serving_ranks_are_refused_before_any_starts(monkeypatch):
    """infer --tp 2 --measure: each rank builds the whole model in fp32 (the shard comes after), so two
    ranks of llama2-7b need twice its 6.74e9 parameters × 4 bytes (25.1 GiB) and more."""
    from tfcalc.measure import launch

    monkeypatch.setattr(fit, "read_limits", _limits(fit.Limit(40 * GiB, "free memory on cpu")))
    monkeypatch.setattr(launch, "run_ranks", lambda *a, **k: pytest.fail("a rank started"))
    from tfcalc.measure.serving_tp import measure

    with pytest.raises(InputError, match=r"not running llama2-7b serving \(fp32\) on 2 rank\(s\): it needs an "
                                         r"estimated 5\d\.\d+ GiB \(2 ranks × 2\d\.\d+ GiB\)"):
        measure(__import__("dataclasses").asdict(load("llama2-7b")), 2, 1, 8, device="cpu")
