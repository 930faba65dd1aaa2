"""The time budget of tfcalc bench (tfcalc.measure.autorange): warm-up until stable, calls to fill the
budget, interleaved rounds. Driven by a fake clock (scripted call durations): no timing thresholds."""

import pytest
import torch

from tfcalc.measure import autorange as ar, bench


class Script:
    """Calls whose durations follow a script (then the last value forever); records the order of calls."""

    def __init__(self, name, durations, log):
        self.name, self.durations, self.log, self.i = name, list(durations), log, 0

    def __call__(self):
        self.log.append(self.name)

    def next(self):
        d = self.durations[min(self.i, len(self.durations) - 1)]
        self.i += 1
        return d


def fake_timers():
    def time_one(fn):
        fn()
        return fn.next()

    def time_block(fn, n):
        return tuple(time_one(fn) for _ in range(n))

    return time_one, time_block


def test_split_is_even_and_never_empty():
    assert ar.split(5, 3) == [2, 2, 1]
    assert ar.split(2, 3) == [1, 1]
    assert ar.split(9, 3) == [3, 3, 3]
    assert ar.split(1, 1) == [1]


def test_calls_fill_the_budget_with_a_floor_and_a_cap():
    b = ar.Budget(min_time=3.0, min_calls=5)
    assert ar.calls_for(b, 1.5) == 5  # 2 calls would fill 3 s: the floor of 5 wins
    assert ar.calls_for(b, 0.1) == 30
    assert ar.calls_for(b, 1e-9) == ar.MAX_CALLS
    assert ar.calls_for(b, None) == 5  # nothing to go by


def test_warm_up_stops_once_calls_stop_getting_faster():
    b = ar.Budget(min_time=10.0)
    assert not ar.warmed_up([0.5], b)
    assert not ar.warmed_up([0.5, 0.2], b)  # 60% faster: still warming up
    assert ar.warmed_up([0.5, 0.2, 0.19], b)  # within 10%
    assert ar.warmed_up([0.5, 0.2, 0.25], b)  # slower is no longer warming up either


def test_a_long_call_is_warm_up_enough():
    b = ar.Budget(min_time=3.0)
    assert ar.warmed_up([4.0], b)  # one forward pass longer than a quarter of the budget
    assert not ar.warmed_up([0.1], b)
    assert ar.warmed_up([1.0] * ar.MAX_WARMUP, ar.Budget(min_time=1e9))


def test_an_explicit_warmup_count_is_exact():
    assert ar.warmed_up([], ar.Budget(warmup=0))
    assert not ar.warmed_up([9.0], ar.Budget(warmup=2))
    assert ar.warmed_up([1.0, 0.1], ar.Budget(warmup=2))


def test_the_secondary_budget_is_a_sixteenth_and_three_calls():
    s = ar.Budget(min_time=4.0, min_calls=5, rounds=3, warmup=1).secondary()
    assert (s.min_time, s.min_calls, s.rounds, s.warmup) == (0.25, 3, 3, 1)  # issue 32: an eighth cost too much
    assert ar.Budget(min_calls=2).secondary().min_calls == 2


def test_rounds_interleave_every_item_and_time_the_planned_calls():
    log = []
    fwd = Script("fwd", [2.0, 1.0], log)  # slow first call, then 1 s
    head = Script("head", [0.1], log)
    items = [ar.Autorange(fwd, ar.Budget(min_time=10.0, min_calls=5, rounds=3)),
             ar.Autorange(head, ar.Budget(min_time=0.5, min_calls=3, rounds=3))]
    left = []
    ar.run_interleaved(items, *fake_timers(), remaining=left.append)
    f, h = items
    assert f.warmup == [2.0, 1.0, 1.0]  # 50% faster: warming up; then as fast: warm
    assert f.plan == [4, 3, 3] and ar.samples(f) == (1.0,) * 10  # 10 s at 1 s a call
    assert h.warmup == [0.1, 0.1] and h.plan == [2, 2, 1]  # 0.5 s / 0.1 s = 5 calls
    # round 0 of each (with its warm-up), then round 1 of each, then round 2 of each
    assert log == ["fwd"] * 7 + ["head"] * 4 + ["fwd"] * 3 + ["head"] * 2 + ["fwd"] * 3 + ["head"]
    assert left[-1] == 0 and left[0] > 0  # the forecast ran down to nothing


def test_between_round_spread_sees_a_drift_that_one_round_hides():
    item = ar.Autorange(lambda: None, ar.Budget())
    item.rounds = [(1.0, 1.0), (1.2, 1.2), (1.0, 1.0)]
    assert ar.round_spread(item) == pytest.approx(0.2)
    item.rounds = [(1.0, 1.1)]
    assert ar.round_spread(item) is None


def test_without_warm_up_the_first_timed_call_sets_the_plan():
    log = []
    item = ar.Autorange(Script("x", [0.5], log), ar.Budget(min_time=2.0, min_calls=2, rounds=2, warmup=0))
    ar.run_interleaved([item], *fake_timers())
    assert item.warmup == [] and ar.samples(item) == (0.5,) * 4 and item.plan == [2, 2]


def test_a_meter_sees_the_warm_up_and_the_first_round():
    events = []

    class Meter:
        def start(self):
            events.append("start")

        def peak(self):
            events.append("peak")
            return 123

    item = ar.Autorange(Script("x", [1.0], events), ar.Budget(min_time=0, min_calls=3, warmup=1), meter=Meter())
    ar.run_interleaved([item], *fake_timers())
    assert events == ["start", "x", "x", "peak", "x", "x"] and item.peak == 123


def test_the_budget_runs_through_the_one_timing_loop_on_the_cpu():
    calls = []
    item = ar.Autorange(lambda: calls.append(1), ar.Budget(min_time=0.0, min_calls=4, rounds=2, warmup=1))
    device = torch.device("cpu")
    ar.run_interleaved([item], lambda fn: bench.time_calls(fn, device, 0, 1).samples[0],
                       lambda fn, n: bench.time_calls(fn, device, 0, n).samples)
    assert len(calls) == 5 and len(ar.samples(item)) == 4 and len(item.rounds) == 2
