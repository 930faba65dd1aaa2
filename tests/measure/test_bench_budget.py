"""bench's whole run within 8x its median forward pass (issue 32; 17.8x for gpt2 at the issue): the timing plan
of the default run, replayed on a virtual clock with call times in the proportions gpt2 showed on this CPU."""

from __future__ import annotations

from dataclasses import replace

from tfcalc.measure import autorange
from tfcalc.report import resolve
from tfcalc.report.bench import plan_bench

# one call of each item, as a share of the forward pass (gpt2, seq 256, fp32, 2-core CPU: forward 9.86 s;
# attention 0.31 s, FFN 0.32 s, block 0.74 s, head 1.29 s, the 2048² fp32 matmul ceiling about 0.86 s)
SHARES = {"ceiling": 0.087, "attention": 0.031, "ffn": 0.033, "block": 0.075, "head": 0.13}
COLD = 1.3  # an item's first call: slower (allocation, thread pool, kernel selection)
FIXED = 2.0  # seconds: importing torch, building gpt2, the probes, on an idle 2-core CPU


def _timed_seconds(forward: float) -> float:
    plan = plan_bench(resolve("gpt2", []))
    budget, small = plan.budget, plan.budget.secondary()
    durations = {"forward": forward, **{k: v * forward for k, v in SHARES.items()}}
    items = {"ceiling": autorange.Autorange(lambda: "ceiling", small),
             "forward": autorange.Autorange(lambda: "forward", budget),
             **{k: autorange.Autorange(lambda k=k: k, replace(small, warmup=0))
                for k in ("attention", "ffn", "block", "head")}}
    calls: dict[str, int] = {}
    clock = [0.0]

    def one(fn) -> float:
        name = fn()
        seconds = durations[name] * (COLD if name not in calls else 1.0)
        calls[name] = calls.get(name, 0) + 1
        clock[0] += seconds
        return seconds

    autorange.run_interleaved(list(items.values()), one, lambda fn, n: tuple(one(fn) for _ in range(n)))
    return clock[0]


def test_the_default_bench_times_within_8x_its_forward_pass():
    for forward in (1.0, 2.0, 10.0):  # a fast CPU, the default length's aim, this busy machine
        ratio = (_timed_seconds(forward) + FIXED) / forward
        assert ratio <= 8.0, (forward, ratio)
