"""Disaggregated prefill and decode (tfcalc.count.serving.disaggregated, `infer --rate --disaggregate P:D`): each term
by hand on a small case (the KV bytes, the layer-by-layer transfer against an explicit pipeline, M/D/1, Little's law),
the whole server against a discrete-event simulation of it, P:D = 1:1 against the colocated server where they must
agree, capacity and its limit, and the bad inputs."""

from __future__ import annotations

import random
from collections import deque

import pytest
from conftest import assert_one_line_error
from serving_sim import token_step

import tfcalc
from tfcalc.count.model.quant import plain
from tfcalc.count.serving import continuous, disaggregated as dis
from tfcalc.presets import load
from tfcalc.report.infer import datasheet_ceilings

BF16 = plain("bf16")


def pipeline_end(t_p: float, layers: int, x: float) -> float:
    """When the last layer's KV has arrived: layer l computes in t_p/L after layer l − 1, and its send of x starts once
    it has computed and the link is free (Splitwise, Mooncake's layer-wise prefill), one layer at a time."""
    c, computed, link_free = t_p / layers, 0.0, 0.0
    for _ in range(layers):
        computed += c
        link_free = max(computed, link_free) + x
    return link_free


@pytest.mark.parametrize("t_p,layers,x", [(1.0, 4, 0.1), (1.0, 4, 0.25), (1.0, 4, 0.5), (0.02, 32, 1e-3),
                                          (0.3, 61, 1e-5)])
def test_exposed_transfer_is_the_pipeline_past_the_prefill(t_p, layers, x):
    assert dis.exposed_s(t_p, layers, x) == pytest.approx(pipeline_end(t_p, layers, x) - t_p, rel=1e-12)


def test_each_term_by_hand():
    """Llama-2-7B (32 layers, 32 KV heads of 128), 512 tokens in, bf16 KV, on an H100 node: one prompt's KV cache is
    2 (K, V) · 32 · 32 · 128 · 512 · 2 bytes = 256 MiB, a layer's 8 MiB sent over NVLink at the performance model's
    efficiency after its latency."""
    cfg = load("llama2-7b")
    _, c = datasheet_ceilings("h100-sxm", BF16)
    t = continuous.Traffic(6.0, 512, 64)
    e = continuous.Engine(cfg, BF16, "bf16", c, t, None, None)
    link = dis.Link("nvlink", 450e9, c.perf.link_latency_s["nvlink"], c.perf.link_efficiency["nvlink"])
    x = dis.solve(e, t, 2, 1, 1, link)
    assert x.kv_transfer_bytes == 2 * 32 * 32 * 128 * 512 * 2 == 256 * 2**20
    per_layer = link.latency_s + 8 * 2**20 / (450e9 * link.efficiency)
    assert x.kv_transfer_s == pytest.approx(32 * per_layer)
    assert x.kv_exposed_s == pytest.approx(per_layer)  # a layer's send is well under a layer's compute here
    rho = 3.0 * e.prefill_s  # 6 requests/s over 2 prefill instances
    assert x.prefill_share == pytest.approx(rho)
    assert x.prefill_wait_s == pytest.approx(rho * e.prefill_s / (2 * (1 - rho)))  # Pollaczek-Khinchine, M/D/1
    assert x.concurrency == pytest.approx(6.0 * 63 * e.tau(x.concurrency), rel=1e-9)  # Little's law, one decoder
    assert x.itl_s == x.decode_step_s == e.tau(x.concurrency)  # no prefill stalls
    assert x.ttft_s == pytest.approx(x.prefill_wait_s + e.prefill_s + per_layer + c.perf.request_s)
    assert x.e2e_s == pytest.approx(x.ttft_s + 63 * x.itl_s)
    assert x.prefill_max_rate == pytest.approx(2 / e.prefill_s)


def simulate(e: continuous.Engine, rate: float, out: int, exposed: float, requests: int, seed: int = 11):
    """One prefill and one decode instance, request by request: the prefill a FIFO queue of t_p each, the sequence
    joining the decode batch once its KV has arrived, every decode step one token for every sequence there. Returns
    the time-mean decode batch, the mean gap between a sequence's tokens and the mean time to the KV's arrival."""
    rng = random.Random(seed)
    t, free, ready = 0.0, 0.0, []
    for _ in range(requests):
        t += rng.expovariate(rate)
        free = max(free, t) + e.prefill_s
        ready.append((free + exposed, t))
    arrivals = deque(ready)  # in order: the prefill queue is FIFO with one service time
    ttft = sum(r - a for r, a in ready) / requests
    now, running, area, gaps = 0.0, [], 0.0, []
    while arrivals or running:
        while arrivals and arrivals[0][0] <= now:
            running.append([out - 1, arrivals.popleft()[0]])
        if not running:
            now = arrivals[0][0]
            continue
        step = e.step_s(len(running))
        area += len(running) * step
        now, running = token_step(running, now, step, gaps)
    return area / now, sum(gaps) / len(gaps), ttft


@pytest.mark.parametrize("rate", [5.0, 25.0])
def test_the_server_against_a_simulation(rate):
    cfg = load("llama2-7b")
    _, c = datasheet_ceilings("h100-sxm", BF16)
    t = continuous.Traffic(rate, 256, 48)
    e = continuous.Engine(cfg, BF16, "bf16", c, t, None, None)
    link = dis.Link("network", 50e9, c.perf.link_latency_s["network"], c.perf.link_efficiency["network"])
    x = dis.solve(e, t, 1, 1, 1, link)
    n, itl, ttft = simulate(e, rate, 48, x.kv_exposed_s, 6000)
    assert x.concurrency == pytest.approx(n, rel=0.05)
    assert x.itl_s == pytest.approx(itl, rel=0.05)
    assert x.ttft_s - x.request_s == pytest.approx(ttft, rel=0.05)


def test_one_to_one_against_the_colocated_server():
    """At a trickle of requests the colocated server (prompts whole, --prefill-chunk 0) and the disaggregated one
    prefill alike: TTFT differs by the exposed transfer alone, the decode step is τ(1) in both. Under load the
    disaggregated one has no prefill stalls (ITL below) and more capacity; its prefill capacity is the colocated
    server's bound 1/t_p."""
    args = dict(mean_input=1024, mean_output=128, prefill_chunk=0)
    slow = tfcalc.infer("llama3-8b", rate=1e-4, **args).to_json()["continuous"]
    x = tfcalc.infer("llama3-8b", rate=1e-4, mean_input=1024, mean_output=128,
                     disaggregate="1:1").to_json()["disaggregated"]
    assert x["prefill_s"] == pytest.approx(slow["prefill_s"], rel=1e-12)
    assert x["ttft_s"] == pytest.approx(slow["ttft_s"] + x["kv_transfer_exposed_s"], rel=1e-3)
    assert x["itl_s"] == pytest.approx(slow["itl_s"], rel=1e-3)
    assert x["kv_link"] == "nvlink"  # two H100s of one node
    busy = tfcalc.infer("llama3-8b", rate=8, **args).to_json()["continuous"]
    y = tfcalc.infer("llama3-8b", rate=8, mean_input=1024, mean_output=128, disaggregate="1:1").to_json()
    y = y["disaggregated"]
    assert y["itl_s"] < busy["itl_s"] and y["max_rate_per_s"] >= busy["max_rate_per_s"]
    assert y["prefill_max_rate_per_s"] == pytest.approx(1 / busy["prefill_s"], rel=1e-12)


def test_capacity_and_its_limit(cli):
    base = dict(mean_input=4096, mean_output=32)  # long prompts, short answers: the prefill runs out first
    x = tfcalc.infer("llama3-8b", rate=1, disaggregate="1:1", **base).to_json()["disaggregated"]
    top = x["max_rate_per_s"]
    assert top == pytest.approx(x["prefill_max_rate_per_s"])
    over = tfcalc.infer("llama3-8b", rate=top * 1.01, disaggregate="1:1", **base).to_json()["disaggregated"]
    assert over["over_capacity"] and over["limit"] == "prefill" and over["ttft_s"] is None
    two = tfcalc.infer("llama3-8b", rate=top * 1.01, disaggregate="2:1", **base).to_json()["disaggregated"]
    assert not two["over_capacity"] and two["prefill_max_rate_per_s"] == pytest.approx(2 * top)
    short = dict(mean_input=128, mean_output=1024)  # the decode runs out first
    y = tfcalc.infer("llama3-8b", rate=1, disaggregate="1:1", **short).to_json()["disaggregated"]
    past = tfcalc.infer("llama3-8b", rate=y["decode_max_rate_per_s"] * 1.02, disaggregate="1:1", **short).to_json()
    assert past["disaggregated"]["limit"] == "decode" and past["disaggregated"]["decode_limit"] in ("decode", "memory")
    near = tfcalc.infer("llama3-8b", rate=y["decode_max_rate_per_s"] * 0.98, disaggregate="1:2", **short).to_json()
    assert not near["disaggregated"]["over_capacity"]
    fail = cli("infer", "llama3-8b", "--rate", "1000", "--mean-input", "128", "--mean-output", "1024",
               "--disaggregate", "1:1", "--require-fit")
    assert fail.code == 1 and "over capacity" in fail.err


def test_layouts_and_links():
    """--tp T: each GPU sends its T-th of the KV heads; past one node of 8 the network carries it; --ep: each
    attention-DP group is a server."""
    args = dict(rate=2, mean_input=512, mean_output=64)
    one = tfcalc.infer("llama2-7b", disaggregate="1:1", **args).to_json()["disaggregated"]
    tp = tfcalc.infer("llama2-7b", tp=2, disaggregate="2:2", **args).to_json()["disaggregated"]
    far = tfcalc.infer("llama2-7b", tp=2, disaggregate="3:2", **args).to_json()["disaggregated"]
    assert tp["kv_transfer_bytes"] * 2 == one["kv_transfer_bytes"] and tp["kv_link"] == "nvlink"
    assert far["kv_link"] == "network" and far["kv_transfer_s"] > tp["kv_transfer_s"]
    ep = tfcalc.infer("qwen3-30b-a3b", ep=4, disaggregate="1:1", **args).to_json()
    assert ep["disaggregated"]["servers_per_instance"] == 4 and ep["disaggregated"]["ttft_s"] > 0


def test_nothing_without_the_flag():
    assert tfcalc.infer("llama2-7b", rate=2, mean_input=512, mean_output=64).to_json()["disaggregated"] is None


@pytest.mark.parametrize("args,message", [
    (("--rate", "2", "--disaggregate", "0:1"), "--disaggregate takes P:D"),
    (("--rate", "2", "--disaggregate", "1:0"), "--disaggregate takes P:D"),
    (("--rate", "2", "--disaggregate", "1.5:2"), "--disaggregate takes P:D"),
    (("--rate", "2", "--disaggregate", "2"), "--disaggregate takes P:D"),
    (("--rate", "2", "--disaggregate", "-1:2"), "--disaggregate takes P:D"),
    (("--rate", "2", "--disaggregate", "\u00b2:1"), "--disaggregate takes P:D"),  # a digit int() does not read
    (("--rate", "2", "--disaggregate", "1:2:3"), "--disaggregate takes P:D"),
    (("--disaggregate", "1:1"), "--disaggregate prices a server under a Poisson stream"),
    (("--concurrency", "4", "--disaggregate", "1:1"), "closed loop is not modelled disaggregated"),
    (("--rate", "2", "--disaggregate", "1:1", "--measure"), "prediction only"),
    (("--rate", "2", "--disaggregate", "1:1", "--prefill-chunk", "512"), "--prefill-chunk with --disaggregate"),
    (("--rate", "2", "--disaggregate", "1:1", "--cached-prefix", "32"), "--cached-prefix with --disaggregate"),
    (("--rate", "2", "--disaggregate", "1:1", "--max-batch", "8"), "--max-batch with --disaggregate"),
    (("--rate", "2", "--disaggregate", "1:1", "--context-chunking", "off"), "--context-chunking with --disaggregate"),
])
def test_hostile_disaggregate(cli, args, message):
    assert_one_line_error(cli("infer", "llama2-7b", "--mean-input", "100", "--mean-output", "10", *args), message)


def test_without_mean_lengths(cli):
    assert_one_line_error(cli("infer", "llama2-7b", "--disaggregate", "1:1"), "--disaggregate prices a server")


def test_expert_parallel_prefill_is_the_colocated_groups():
    """Under --ep each attention-DP group is a server: the prefill instance's prompt step is the colocated groups'
    (prompts whole), and at a trickle TTFT differs from theirs by the exposed transfer alone."""
    args = dict(ep=4, mean_input=512, mean_output=64)
    col = tfcalc.infer("qwen3-30b-a3b", rate=1e-4, prefill_chunk=0, **args).to_json()["continuous"]
    x = tfcalc.infer("qwen3-30b-a3b", rate=1e-4, disaggregate="1:1", **args).to_json()["disaggregated"]
    assert x["prefill_s"] == pytest.approx(col["prefill_s"], rel=1e-12)
    assert x["ttft_s"] == pytest.approx(col["ttft_s"] + x["kv_transfer_exposed_s"], rel=1e-3)
    assert x["prefill_max_rate_per_s"] == pytest.approx(4 / x["prefill_s"])  # 4 groups, one prompt each at a time


def test_the_table(cli):
    ok = cli("infer", "llama2-7b", "--rate", "2", "--mean-input", "512", "--mean-output", "64", "--disaggregate", "1:3")
    assert ok.code == 0 and "Disaggregated 1:3 (1 prefill, 3 decode instances)" in ok.out
    assert "NVLink" in ok.out and "Over capacity" not in ok.out
    over = cli("infer", "llama2-7b", "--rate", "500", "--mean-input", "512", "--mean-output", "64", "--disaggregate",
               "1:3")
    assert over.code == 0 and "(limit prefill)" in over.out


def test_the_budget_batched_bound_is_the_static_prefill():
    """Beside the one-prompt queue: k = ⌊8,192 / I⌋ prompts a step, T(k) the static estimate's prefill of a batch of k
    (less the runtime's 2 ms per request), and P·k/T(k) the prefill instances' bound were every step full."""
    x = tfcalc.infer("llama3-8b", rate=1, mean_input=1024, mean_output=64, disaggregate="2:1").to_json()
    x = x["disaggregated"]
    static = tfcalc.infer("llama3-8b", batch=8, seq=1024, gen=64).estimates[0]
    assert x["prompts_per_step_batched"] == 8
    assert x["prefill_batched_s"] == pytest.approx(static.prefill_s - x["request_s"], rel=1e-12)
    assert x["prefill_batched_max_rate_per_s"] == pytest.approx(2 * 8 / x["prefill_batched_s"])
    assert x["prefill_batched_max_rate_per_s"] >= x["prefill_max_rate_per_s"]
    one = tfcalc.infer("llama3-8b", batch=1, seq=1024, gen=64).estimates[0]
    assert x["prefill_s"] == pytest.approx(one.prefill_s - x["request_s"], rel=1e-12)
    long = tfcalc.infer("llama3-8b", rate=1, mean_input=9000, mean_output=64, disaggregate="1:1").to_json()
    assert long["disaggregated"]["prompts_per_step_batched"] == 1
    assert long["disaggregated"]["prefill_batched_s"] == long["disaggregated"]["prefill_s"]
