"""The pace of a step under attention DP (tfcalc.count.serving.adp_pace, ep_continuous's stall, `infer --adp-balance`):
the expected maximum of D Poisson counts against the joint distribution summed directly, the closed form's stall
against a simulation of independent groups' steps, its limits, and the engine's and CLI's use of it."""

from __future__ import annotations

import itertools
import json
import math

import numpy as np
import pytest
from conftest import assert_one_line_error

import tfcalc
from tfcalc.count.model.quant import plain
from tfcalc.count.serving import adp_pace, continuous, ep_continuous, expert_parallel as ep
from tfcalc.presets import load
from tfcalc.report.infer import datasheet_ceilings

BF16 = plain("bf16")
QWEN = load("qwen3-30b-a3b")


def pmf(lam: float, k: int) -> float:
    return math.exp(-lam) * lam ** k / math.factorial(k)


@pytest.mark.parametrize("lam,d", [(0.3, 2), (1.0, 3), (2.5, 2), (0.7, 4)])
def test_expected_max_is_the_joint_sum(lam, d):
    """E[max] summed over the joint pmf of d counts (each to 25: the tail beyond is below 1e-12 here)."""
    ks = range(26)
    direct = sum(max(c) * math.prod(pmf(lam, k) for k in c) for c in itertools.product(ks, repeat=d))
    assert adp_pace.expected_max(lam, d) == pytest.approx(direct, rel=1e-9)


def test_expected_max_of_one_is_the_mean():
    assert adp_pace.expected_max(3.7, 1) == pytest.approx(3.7, rel=1e-9)


def test_stall_limits():
    """λ → 0: each prompt stalls the other D − 1 groups for its whole t_ne; λ large: the prompts coincide, → 0."""
    assert adp_pace.stall_factor(0.0, 8) == 7.0
    assert adp_pace.stall_factor(1e-6, 8) == pytest.approx(7.0, rel=1e-4)
    assert adp_pace.stall_factor(5.0, 1) == 0.0
    f = [adp_pace.stall_factor(lam, 8) for lam in (0.1, 1.0, 10.0, 100.0)]
    assert f == sorted(f, reverse=True) and f[-1] < 0.15
    assert adp_pace.prompts_per_step(300, 101) == 3.0 and adp_pace.prompts_per_step(5, 1) == 1.0


def test_stall_against_a_simulation_of_the_steps():
    """D groups, k_i ~ Poisson(λ) prompts a step each: a step's prompt work t_ne·max k_i + t_x·Σ k_i. A group's
    prompt costs, over many steps, (that work) / (λ·steps); aligned it would cost t_ne + D·t_x; the difference is
    t_ne·(M_D(λ)/λ − 1)."""
    rng = np.random.default_rng(0)
    d, lam, t_ne, t_x, steps = 8, 0.627, 0.0128, 0.002, 400_000
    k = rng.poisson(lam, size=(steps, d))
    work = t_ne * k.max(axis=1).sum() + t_x * k.sum()
    per_group_prompt = work / (k.sum() / d)
    aligned = t_ne + d * t_x
    assert per_group_prompt - aligned == pytest.approx(t_ne * adp_pace.stall_factor(lam, d), rel=0.01)


def engine(balance: bool, n_out: int = 100) -> ep_continuous.Engine:
    _, c = datasheet_ceilings("h100-sxm", BF16)
    lay = ep.ExpertLayout(4, 1, 4, 0, 8, "nvlink", 450e9, c.perf.link_latency_s["nvlink"],
                          c.perf.link_efficiency["nvlink"], 0.0, 0.0, 1.0, comm="allgather")
    return ep_continuous.Engine(QWEN, BF16, "bf16", c, continuous.Traffic(1.0, 512, n_out), None, lay, 8192,
                                balance=balance)


def test_engine_adds_the_stall_to_the_chunked_prompt():
    """t_p(n) unbalanced = t_p(n) balanced + t_ne(n)·(M_4(n/(O − 1))/(n/(O − 1)) − 1); t_ne the prompt's non-expert
    rows beside n decoding, which at n = 0 are the prompt step's non-expert rows."""
    on, off = engine(True), engine(False)
    for n in (0, 3, 40):
        lam = n / 99
        want = on.chunked.seconds(n) + off.nonexpert_s(n) * adp_pace.stall_factor(lam, 4)
        assert off.chunked.seconds(n) == pytest.approx(want, rel=1e-12)
        assert off.prompt_s(n) == pytest.approx(want, rel=1e-12)
        assert off.own_prompt_s(n) == pytest.approx(on.chunked.seconds(n), rel=1e-12)  # its TTFT: its own steps
    prompt = on.shard.step(ep_continuous.chunked.chunk_step(QWEN, 0, 512, BF16, "bf16"))
    rest = sum(r.time_s(on.c) for r in prompt.rows if not r.component.startswith(ep.ROUTED))
    assert on.nonexpert_s(0) == pytest.approx(rest, rel=1e-12) and rest > 0
    assert {r.component for r in prompt.rows} & {"attn_q", "attn_o"}  # the rows it keeps are attention's


def test_light_load_ttft_keeps_the_prompts_own_steps():
    """At a light load the stall is (D − 1)·t_ne on the other groups' share, not on the prompt's own first token:
    TTFT off and on differ by less than one t_ne, while a prompt's share differs by nearly (D − 1)·t_ne."""
    kw = dict(device_spec="h100-sxm", ep=4, rate=0.05, mean_input=512, mean_output=64)
    off = tfcalc.infer("qwen3-30b-a3b", **kw).to_json()["continuous"]
    on = tfcalc.infer("qwen3-30b-a3b", adp_balance=True, **kw).to_json()["continuous"]
    t_ne = off["attention_dp_pace"]["nonexpert_prompt_s"]
    assert 0 <= off["ttft_s"] - on["ttft_s"] < t_ne
    assert off["prefill_s"] - on["prefill_s"] == pytest.approx(off["attention_dp_pace"]["stall_s_per_prompt"])
    assert off["attention_dp_pace"]["stall_s_per_prompt"] > 2.5 * t_ne


def test_balanced_is_the_aligned_model():
    assert engine(True).stall_s(10) == 0.0 and engine(False).stall_s(10) > 0.0


def cli_run(cli, *extra):
    return cli("infer", "qwen3-30b-a3b", "--device-spec", "h100-sxm", "--ep", "4", "--rate", "2", "--mean-input",
               "512", "--mean-output", "64", "--json", *extra)


def test_cli_pace_json_and_balance(cli):
    off = json.loads(cli_run(cli).out)["continuous"]
    on = json.loads(cli_run(cli, "--adp-balance", "on").out)["continuous"]
    assert off["attention_dp_pace"]["balance"] == "off" and off["attention_dp_pace"]["stall_s_per_prompt"] > 0
    assert on["attention_dp_pace"]["stall_s_per_prompt"] == 0.0
    assert on["max_rate_per_s"] > off["max_rate_per_s"] and on["ttft_s"] < off["ttft_s"]


def test_cli_bad_balance_one_line(cli):
    assert_one_line_error(cli_run(cli, "--adp-balance", "maybe"), "--adp-balance")


def test_api_balance_flag():
    a = tfcalc.infer("qwen3-30b-a3b", device_spec="h100-sxm", ep=4, rate=2.0, mean_input=512, mean_output=64,
                     adp_balance=True).to_json()["continuous"]["attention_dp_pace"]
    assert a["balance"] == "on" and a["stall_s_per_prompt"] == 0.0 and a["groups"] == 4
