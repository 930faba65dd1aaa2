"""Timing generation through the one timing loop (CPU here; the CUDA clock through faked events), the
bandwidth ceiling, and a whole measured run. No timing thresholds."""

from __future__ import annotations

import os

import pytest
import torch
from conftest import tiny
from test_bench import _FakeEvent

from tfcalc.errors import InputError
from tfcalc.measure import bench, decode
from tfcalc.model import build_model


def test_prefill_and_each_decode_step_are_timed_calls():
    cfg = tiny(max_seq_len=32, pos_encoding="rope", n_kv_head=2)
    model = build_model(cfg, "cpu")
    prompt = torch.randint(0, cfg.vocab_size, (2, 6))
    calls = []
    timing = decode.time_decode(model, prompt, steps=5, warmup=2, repeat=3, on_call=lambda: calls.append(1))
    assert len(timing.prefill.samples) == 3 and len(timing.step.samples) == 5
    assert len(calls) == (2 + 3) + 2 + 5  # prefill warm-up and timed, decode warm-up, decode timed
    assert timing.cache_bytes == 2 * cfg.n_layer * 2 * (6 + 5) * cfg.kv_dim * 4


def test_decode_goes_through_the_cuda_clock(monkeypatch):
    """The same loop on the CUDA clock (events faked, tensors on the CPU): one event pair per timed
    decode step, read after a synchronize, as on a GPU."""
    syncs, events = [], []

    class Event(_FakeEvent):
        def record(self, stream=None):
            events.append(self)
            _FakeEvent.clock[0] += 0.001  # every mark moves the fake device clock by 1 ms
            super().record(stream)

    monkeypatch.setattr(torch.cuda, "Event", Event)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: syncs.append(device))
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: ("stream", device))
    monkeypatch.setattr(bench, "clock_for", lambda device: bench.CudaEventClock(device))
    model = build_model(tiny(max_seq_len=32), "cpu")
    timing = decode.time_decode(model, torch.randint(0, 61, (1, 4)), steps=6, warmup=1, repeat=2)
    assert len(timing.step.samples) == 6 and len(timing.prefill.samples) == 2
    assert len(events) == 2 * (2 + 6)
    assert timing.step.samples == pytest.approx((0.001,) * 6)  # end stamp minus start stamp, in seconds
    assert len(syncs) == 4  # two per time_calls: after the warm-up, before reading the events


def test_bandwidth_ceiling_counts_a_copy_twice_and_reads_once(monkeypatch):
    seen, durations = [], iter([0.5, 0.2, 0.4])

    def fake_time_calls(fn, device, warmup, repeat, on_call=None):
        fn()
        seen.append((warmup, repeat))
        return bench.Timing((next(durations),))

    monkeypatch.setattr(bench, "time_calls", fake_time_calls)
    n = 4 << 20  # a whole number of 4096-wide fp32 rows
    bw = bench.bandwidth_ceiling(torch.device("cpu"), n, 1, 3)
    assert (bw.copy_bytes_per_s, bw.read_bytes_per_s, bw.matvec_bytes_per_s) == (2 * n / 0.5, n / 0.2, n / 0.4)
    assert bw.ceiling == bw.matvec_bytes_per_s  # the slowest of the three
    assert bench.Bandwidth(10.0, 4.0, 7.0).ceiling == 4.0 and seen == [(1, 3)] * 3


def test_bandwidth_ceiling_on_this_cpu_is_a_rate():
    bw = bench.bandwidth_ceiling(torch.device("cpu"), 8 << 20, 1, 3)
    assert 0 < bw.ceiling == min(bw.copy_bytes_per_s, bw.read_bytes_per_s, bw.matvec_bytes_per_s)


def _plan(cfg, **changes):
    fields = dict(cfg=cfg, device="cpu", dtype="fp32", points=((2, 8),), steps=4, warmup=1, repeat=2,
                  matmul_size=32, copy_bytes=1 << 20)
    fields.update(changes)
    return decode.DecodePlan(**fields)


def test_a_whole_measured_run_with_two_points():
    cfg = tiny(max_seq_len=64, n_layer=1)
    plan = _plan(cfg, points=((2, 8), (1, 12)))
    calls = []
    run = decode.run_decode(plan, lambda: calls.append(1))
    assert run.device == "cpu" and len(run.timings) == 2 and len(calls) == plan.calls
    assert [len(t.step.samples) for t in run.timings] == [4, 4]
    assert run.weights_bytes == 4 * sum(p.numel() for p in build_model(cfg, "meta").parameters())
    assert run.matmul_ceiling_flops_per_s > 0 and run.bandwidth_ceiling_bytes_per_s == run.bandwidth.ceiling > 0
    assert run.cpus == os.cpu_count() and run.busy == (run.load_average > run.cpus)
    assert run.estimate_bytes >= run.weights_bytes + max(t.cache_bytes for t in run.timings)


@pytest.mark.parametrize("changes, plan_changes, message", [
    (dict(arch="encoder", lm_head=False, tie_embeddings=False), {}, "no causal stack"),
    ({}, dict(dtype="int4"), "decoding runs in"),
    ({}, dict(points=((1, 60),), steps=10), r"--seq 60 \+ --steps 10 = 70 tokens is past custom.s 64"),
])
def test_bad_runs_are_refused_in_one_line(changes, plan_changes, message):
    with pytest.raises(InputError, match=message):
        decode.run_decode(_plan(tiny(max_seq_len=64, **changes), **plan_changes))


def test_a_run_that_cannot_fit_is_refused_before_allocating(monkeypatch):
    from tfcalc.measure import fit

    monkeypatch.setattr(fit, "tightest_limit", lambda *a: fit.Limit(1000, "free memory on cpu"))
    with pytest.raises(InputError, match="not running .* decoding"):
        decode.run_decode(_plan(tiny()))
