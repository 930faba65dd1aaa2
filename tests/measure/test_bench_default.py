"""bench without --seq on a CPU times a length that finishes: the context capped so one forward pass is
about CPU_FORWARD_SECONDS at an assumed CPU rate, and it says which; its progress bar names each phase,
never moves back, and shows the run's own forecast as its ETA."""

from __future__ import annotations

import time

import pytest

from tfcalc.count.model.flops import forward_flops
from tfcalc.report import resolve
from tfcalc.report.bench import CPU_FORWARD_FLOP, plan_bench
from tfcalc.workload import Workload


@pytest.mark.parametrize("name, kwargs", [("gpt2", {}), ("mistral-7b", dict(n_layer=1)), ("llama2-7b", {})])
def test_cpu_default_is_the_longest_power_of_two_within_the_budget(name, kwargs):
    """`bench mistral-7b --set n_layer=1` timed the whole context (8,192 here, 32,768 in Mistral's card) and did
    not finish in 150 s."""
    plan = plan_bench(resolve(name), **kwargs)
    (seq,) = plan.seqs
    assert seq < plan.cfg.max_seq_len and seq & (seq - 1) == 0
    assert forward_flops(plan.run_cfg, Workload(batch=1, seq=seq)) <= CPU_FORWARD_FLOP or seq == 16
    assert forward_flops(plan.run_cfg, Workload(batch=1, seq=2 * seq)) > CPU_FORWARD_FLOP
    assert "capped on a CPU" in plan.seq_rule and f"({plan.cfg.max_seq_len:,})" in plan.seq_rule


def test_the_context_where_it_fits_and_on_a_gpu_and_as_given():
    assert plan_bench(resolve("bert-base")).seqs == (512,)
    assert plan_bench(resolve("gpt2"), device="cuda").seqs == (1024,)
    given = plan_bench(resolve("gpt2"), seqs=[1024])
    assert given.seqs == (1024,) and given.seq_rule == ""


def test_the_output_says_which_length_and_why(cli):
    tiny = ["--set", "n_layer=1", "--set", "d_model=32", "--set", "n_head=2", "--set", "vocab_size=64",
            "--set", "d_ff=64", "--set", "max_seq_len=100000", "--min-time", "0.01", "--repeat", "1",
            "--matmul-size", "16", "--rounds", "1", "--warmup", "0"]
    r = cli("bench", "gpt2", *tiny, "--json")
    assert r.code == 0, r.err
    j = r.json()
    assert j["seq"] < 100000 and "capped on a CPU" in j["seq_rule"]
    text = " ".join(cli("bench", "gpt2", *tiny).out.split())
    assert f"seq {j['seq']:,}: the context (100,000) capped on a CPU" in text


class Bar:
    def __init__(self):
        self.updates = []

    def update(self, task, **fields):
        self.updates.append(fields)


def test_a_bar_in_seconds_never_moves_back_and_its_eta_is_the_forecast():
    from tfcalc.cli.render import Progress

    bar = Bar()
    p = Progress(bar, 0, seconds=True, title="bench gpt2")
    p.total = 1.0
    shown = []
    for left in (1.0, 0.5, 5.0, None, 0.1, None):  # a forecast that grows must not pull the bar back
        time.sleep(0.02)
        p() if left is None else p.remaining(left)
        u = bar.updates[-1]
        shown.append(u["completed"] / u["total"])
        if left is not None:
            assert u["eta"] == f"ETA 0:{round(left):02d}"
    assert shown == sorted(shown) and shown[-1] > shown[0]
    p.phase("round 2 of 3: seq 256: forward")
    assert bar.updates[-1]["description"] == "bench gpt2: round 2 of 3: seq 256: forward"


def test_bench_names_its_phases(cli, monkeypatch):
    from contextlib import contextmanager

    from tfcalc.cli import render

    phases = []

    class Handle:
        def __call__(self, steps=1):
            pass

        def remaining(self, seconds):
            pass

        def phase(self, text):
            phases.append(text)

    @contextmanager
    def progress(description, total, enabled=True, unit="steps"):
        yield Handle()

    monkeypatch.setattr(render, "progress", progress)
    r = cli("bench", "gpt2", "--set", "n_layer=1", "--set", "d_model=48", "--set", "vocab_size=64", "--seq", "16",
            "--min-time", "0.01", "--matmul-size", "16", "--json")
    assert r.code == 0, r.err
    assert any(p.startswith("warm-up and round 1 of") and "matmul ceiling" in p for p in phases), phases
    assert any("seq 16: forward" in p for p in phases) and any(p.startswith("round 2 of") for p in phases)
