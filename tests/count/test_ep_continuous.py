"""Continuous batching under expert parallelism (tfcalc.count.serving.ep_continuous, `infer --ep --rate` and
`--concurrency`): a group's step against the static expert-parallel estimate of the whole batch (a separate path:
expert_parallel.Sharding over the whole step), its all-to-all against expert_parallel's worked example, Little's law
over the whole server, the whole server D groups, and attention DP beside TP for a model of few KV heads."""

from __future__ import annotations

import dataclasses

import pytest
from conftest import assert_one_line_error

import tfcalc
from tfcalc.count.model.quant import plain, weight_format
from tfcalc.count.serving import continuous, ep_continuous, expert_parallel as ep
from tfcalc.presets import load
from tfcalc.report.infer import datasheet_ceilings
from tfcalc.workload import Workload

BF16 = plain("bf16")
QWEN = load("qwen3-30b-a3b")  # 48 layers, 128 experts, k 8, d 2048


def layout(c, E: int, T: int = 1) -> ep.ExpertLayout:
    return ep.ExpertLayout(E, T, E // T, 0, 8, "nvlink", 450e9, c.perf.link_latency_s["nvlink"],
                           c.perf.link_efficiency["nvlink"], 0.0, 0.0, 1.0)


@pytest.mark.parametrize("E,T,n", [(4, 1, 2), (8, 1, 16), (8, 2, 8)])
def test_group_step_is_the_static_estimates_at_the_whole_batch(E, T, n):
    """A group's decode step at n sequences, every group alike, is one GPU's step of the whole batch D·n as
    expert_parallel.estimate prices it (the compute, the per-step costs, the all-to-all after it)."""
    _, c = datasheet_ceilings("h100-sxm", BF16)
    lay = layout(c, E, T)
    ctx = 600
    e = ep_continuous.Engine(QWEN, BF16, "bf16", c, continuous.Traffic(1.0, ctx - 50, 100), None, lay)
    assert e.context == ctx
    est, terms = ep.estimate(QWEN, Workload(batch=lay.dp * n, seq=ctx - 1, gen=2, dtype="bf16", kv_dtype="bf16"),
                             BF16, c, None, lay)
    assert e.step_s(n) == pytest.approx(est.decode_s_per_token, rel=1e-9)
    assert e.a2a_s(n, True) == pytest.approx(terms.decode.a2a.seconds, rel=1e-12)


def test_all_to_all_of_the_worked_example():
    """expert_parallel's worked example: EP 4, 2 sequences a group, 205.1 µs on an H100 node's NVLink (balanced:
    --expert-imbalance 1; the fullest GPU's share is expert_imbalance's, tested there)."""
    _, c = datasheet_ceilings("h100-sxm", BF16)
    lay = ep.ExpertLayout(4, 1, 4, 0, 8, "nvlink", 450e9, 2e-6, 0.8, 50e9, 6e-6, 0.9, imbalance=1.0)
    e = ep_continuous.Engine(QWEN, BF16, "bf16", c, continuous.Traffic(1.0, 128, 16), None, lay)
    assert e.a2a_s(2, True) == pytest.approx(2 * 48 * 2e-6 + 4_718_592 / (450e9 * 0.8), rel=1e-9)


@pytest.mark.parametrize("load", [{"rate": 20.0}, {"concurrency": 64}])
def test_whole_server_littles_law(load):
    r = tfcalc.infer("qwen3-30b-a3b", ep=4, mean_input=512, mean_output=128, **load).to_json()
    x = r["continuous"]
    assert not x["over_capacity"]
    assert x["concurrency"] == pytest.approx(x["rate_per_s"] * 127 * x["itl_s"], rel=1e-9)  # N = R·(O − 1)·ITL
    if "concurrency" in load:
        assert x["users"] == 64 and 64 == pytest.approx(x["rate_per_s"] * x["e2e_s"], rel=1e-9)
    assert r["expert_parallel"]["attention_dp"] == 4


def test_groups_split_the_load():
    """D groups at R: each a server at R/D -- the whole's rate, batch and capacity D times one group's."""
    _, c = datasheet_ceilings("h100-sxm", BF16)
    lay = dataclasses.replace(layout(c, 4), comm="allgather")  # --ep-comm's default with attention DP in a node
    t = continuous.Traffic(5.0, 512, 128)
    e = ep_continuous.Engine(QWEN, BF16, "bf16", c, t, None, lay, 8192)
    group = continuous.steady_state(QWEN, BF16, "bf16", c, t, None, None, 8192, engine=e)
    r = tfcalc.infer("qwen3-30b-a3b", ep=4, rate=20.0, mean_input=512, mean_output=128).to_json()["continuous"]
    assert r["ttft_s"] == pytest.approx(group.ttft_s, rel=1e-9) and r["itl_s"] == pytest.approx(group.itl_s, rel=1e-9)
    assert r["concurrency"] == pytest.approx(4 * group.concurrency, rel=1e-9)


def test_attention_dp_serves_more_than_tp_for_few_kv_heads():
    """Qwen3-235B-A22B (4 KV heads) on 8 H200s: TP 8 replicates each KV head on 2 GPUs and splits every expert 8 ways
    (1,536 / 8 = 192 columns), with two all-reduces a layer; attention DP 8 + EP 8 keeps the experts whole and the
    caches apart: a higher capacity."""
    fp8 = dict(dtype="fp8", kv_dtype="fp8", device_spec="h200", rate=1.0, mean_input=1000, mean_output=1000)
    tp = tfcalc.infer("qwen3-235b-a22b", tp=8, **fp8).to_json()["continuous"]["max_rate_per_s"]
    dp = tfcalc.infer("qwen3-235b-a22b", ep=8, **fp8).to_json()["continuous"]["max_rate_per_s"]
    assert dp > 1.3 * tp


def test_fp8_dispatch_bytes():
    """FP8 weights: the dispatch in FP8 with a fp32 scale per 128 channels, the combine in bf16 (step 3 of
    expert_parallel's all-to-all): 2,048 + 16·4 + 2·2,048 bytes a row."""
    fmt = weight_format("fp8", None)
    _, c = datasheet_ceilings("h100-sxm", fmt)
    lay = ep.ExpertLayout(4, 1, 4, 0, 8, "nvlink", 450e9, 0.0, 1.0, 50e9, 0.0, 1.0, imbalance=1.0)  # balanced
    e = ep_continuous.Engine(QWEN, fmt, "fp8", c, continuous.Traffic(1.0, 128, 16), None, lay)
    assert e.a2a_s(4, True) == pytest.approx(4 * 48 * 8 * 3 / 4 * (2048 + 64 + 4096) / 450e9, rel=1e-9)


@pytest.mark.parametrize("args,message", [
    (("--ep", "4", "--rate", "2", "--overlap", "ep"), "--rate with --overlap ep"),
    (("--ep", "4", "--concurrency", "0"), "--concurrency must be a whole number"),
    (("--ep", "4", "--concurrency", "8", "--rate", "2"), "--rate and --concurrency"),
    (("--ep", "4", "--concurrency", "8", "--batch", "4"), "--batch is a static"),
])
def test_hostile(cli, args, message):
    assert_one_line_error(cli("infer", "qwen3-30b-a3b", *args, "--mean-input", "100", "--mean-output", "10"), message)
