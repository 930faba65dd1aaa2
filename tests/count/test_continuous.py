"""Continuous batching (tfcalc.count.serving.continuous, `infer --rate`): the steady state against a discrete-event
simulation of the same scheduler (Poisson arrivals, prefills first, one decode step for every sequence in
flight per iteration, step times from the same roofline), Little's law, the low-rate limit against the
static estimate, capacity, and the hostile cases."""

from __future__ import annotations

from collections import deque

import pytest
from conftest import assert_one_line_error
from serving_sim import poisson_arrivals, token_step

import tfcalc
from tfcalc.count.model.quant import plain
from tfcalc.count.serving import continuous
from tfcalc.presets import load
from tfcalc.report.infer import datasheet_ceilings

BF16 = plain("bf16")


def simulate(e: continuous.Engine, rate: float, out: int, requests: int, seed: int = 7):
    """The scheduler of the module docstring, request by request: returns the time-mean sequences in
    decode, the mean gap between a sequence's tokens, and the mean time to first token (without the
    runtime's fixed work per request)."""
    arrivals = poisson_arrivals(rate, requests, seed)
    now, running, area, gaps, ttfts = 0.0, [], 0.0, [], []
    waiting: deque = deque()
    while arrivals or waiting or running:
        while arrivals and arrivals[0] <= now:
            waiting.append(arrivals.popleft())
        if waiting:  # a prefill iteration: one prompt, its first token at the end
            arrived = waiting.popleft()
            area += len(running) * e.prefill_s
            now += e.prefill_s
            ttfts.append(now - arrived)
            if out > 1:
                running.append([out - 1, now])
        elif running:  # a decode iteration: one token for every sequence in flight
            step = e.step_s(len(running))
            area += len(running) * step
            now, running = token_step(running, now, step, gaps)
        else:
            now = arrivals[0]
    return area / now, sum(gaps) / len(gaps), sum(ttfts) / len(ttfts)


@pytest.mark.parametrize("rate", [4.0, 20.0])
def test_steady_state_matches_a_simulation_of_the_scheduler(rate):
    cfg = load("llama2-7b")
    spec, c = datasheet_ceilings("h100-sxm", BF16)
    t = continuous.Traffic(rate, 256, 48)
    e = continuous.Engine(cfg, BF16, "bf16", c, t, None, None)
    state = continuous.steady_state(cfg, BF16, "bf16", c, t)
    n, itl, ttft = simulate(e, rate, 48, 6000)
    assert state.concurrency == pytest.approx(n, rel=0.05)
    assert state.itl_s == pytest.approx(itl, rel=0.05)
    assert state.ttft_s - state.request_s == pytest.approx(ttft, rel=0.15)  # M/D/1 and a mean residual step


def test_littles_law_and_the_low_rate_limit():
    cfg = load("llama2-7b")
    _, c = datasheet_ceilings("h100-sxm", BF16)
    s = continuous.steady_state(cfg, BF16, "bf16", c, continuous.Traffic(7.0, 512, 128))
    assert s.concurrency == pytest.approx(7.0 * 127 * s.itl_s, rel=1e-9)  # N = R·D, D = (O − 1)·ITL
    assert s.itl_s == pytest.approx(s.decode_step_s / (1 - s.prefill_share))
    # a trickle of requests: one sequence at a time, the static estimate's batch-1 figures
    slow = continuous.steady_state(cfg, BF16, "bf16", c, continuous.Traffic(1e-4, 512, 128))
    static = tfcalc.infer("llama2-7b", batch=1, seq=512, gen=128, device_spec="h100-sxm").estimates[0]
    assert slow.itl_s == pytest.approx(static.decode_s_per_token, rel=1e-3)
    assert slow.ttft_s == pytest.approx(static.prefill_s, rel=0.02)


def test_capacity_is_where_the_steady_state_ends(cli):
    r = tfcalc.infer("llama3-8b", rate=10, mean_input=512, mean_output=256).to_json()["continuous"]
    top = r["max_rate_per_s"]
    below = tfcalc.infer("llama3-8b", rate=top * 0.99, mean_input=512, mean_output=256).to_json()["continuous"]
    above = tfcalc.infer("llama3-8b", rate=top * 1.01, mean_input=512, mean_output=256).to_json()["continuous"]
    assert not below["over_capacity"] and above["over_capacity"] and above["limit"] in ("decode", "memory")
    assert below["concurrency"] > r["concurrency"]
    over = cli("infer", "llama3-8b", "--rate", "100", "--mean-input", "512", "--mean-output", "256", "--json",
               "--prefill-chunk", "0")  # prompts prefilled whole, alone
    assert over.code == 0 and over.json()["continuous"]["limit"] == "prefill"  # 100 × 13.5 ms > 1 s
    fail = cli("infer", "llama3-8b", "--rate", "100", "--mean-input", "512", "--mean-output", "256", "--require-fit")
    assert fail.code == 1 and "over capacity" in fail.err


def test_memory_bounds_the_concurrency():
    """Long requests on a small GPU: the KV cache of the sequences in flight runs out first."""
    r = tfcalc.infer("llama3-8b", rate=0.1, mean_input=3000, mean_output=2000, device_spec="l4").to_json()
    x = r["continuous"]
    assert x["over_capacity"] and x["limit"] == "memory"
    assert r["fits"] and r["batch"] == r["max_batch"]  # the static table at the largest batch that fits


def test_tp_serves_more():
    one = tfcalc.infer("llama2-13b", rate=5, mean_input=512, mean_output=256, device_spec="a100-80gb").to_json()
    two = tfcalc.infer("llama2-13b", rate=5, mean_input=512, mean_output=256, device_spec="a100-80gb",
                       tp=2).to_json()
    assert two["continuous"]["max_rate_per_s"] > one["continuous"]["max_rate_per_s"]
    assert two["continuous"]["itl_s"] < one["continuous"]["itl_s"]


@pytest.mark.parametrize("args,message", [
    (("--rate", "0", "--mean-input", "10", "--mean-output", "10"), "--rate must be a positive number"),
    (("--rate", "-3", "--mean-input", "10", "--mean-output", "10"), "--rate must be a positive number"),
    (("--rate", "inf", "--mean-input", "10", "--mean-output", "10"), "--rate must be a positive number"),
    (("--rate", "nan", "--mean-input", "10", "--mean-output", "10"), "--rate must be a positive number"),
    (("--rate", "2", "--mean-input", "0", "--mean-output", "10"), "--mean-input must be a positive whole number"),
    (("--rate", "2", "--mean-input", "10"), "--mean-output is missing"),
    (("--mean-input", "10",), "--mean-input belongs to continuous batching"),
    (("--rate", "2", "--mean-input", "10", "--mean-output", "10", "--batch", "4"), "--batch is a static batch's"),
    (("--rate", "2", "--mean-input", "10", "--mean-output", "10", "--gen", "4"), "--gen is a static batch's"),
    (("--rate", "2", "--mean-input", "10", "--mean-output", "10", "--requests", "4"), "--requests belongs to"),
    (("--rate", "2", "--mean-input", "10", "--mean-output", "10", "--draft", "llama2-7b", "--accept-rate", "0.5"),
     "not modelled"),
])
def test_hostile_rate(cli, args, message):
    assert_one_line_error(cli("infer", "llama2-13b", *args), message)


@pytest.mark.parametrize("option", ["--rate", "--mean-input", "--mean-output"])
def test_not_a_number_is_a_usage_error(cli, option):
    args = {"--rate": "2", "--mean-input": "10", "--mean-output": "10"} | {option: "lots"}
    flat = [x for kv in args.items() for x in kv]
    assert_one_line_error(cli("infer", "gpt2", *flat), f"Invalid value for '{option}'")
