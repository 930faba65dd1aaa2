"""Expert parallelism across nodes (issue 31; tfcalc.count.training.experts_parallel, steps 3-4): which link carries
which token copies under the alltoall and DeepEP dispatchers, node-limited routing from the model's router groups,
--overlap ep and its cost -- against transformers' DeepSeek-V3 router, an enumeration of the routes and hand
derivations."""

import dataclasses
from itertools import combinations
from math import comb

import pytest
import torch
from conftest import assert_one_line_error

from tfcalc.count.perf import collectives as alpha_beta
from tfcalc.count.training.experts_parallel import token_routes, touched
from tfcalc.count.training.layout import Layout
from tfcalc.count.training.plan import make_plan
from tfcalc.count.training.sharding import ep_nodes
from tfcalc.count.training.steptime import Hardware
from tfcalc.errors import InputError
from tfcalc.presets import load

H800 = Hardware(989e12, 80 * 10**9, 200e9, 50e9, 8, fp8_peak_flops_per_s=1979e12)


def layout(**changes) -> Layout:
    fields = dict(tp=1, pp=1, dp=16, ep=16, seq=4096, global_batch=32, micro_batch=1)
    fields.update(changes)
    return Layout(**fields)


def tokens_of(plan):
    (c,) = [c for c in plan.collectives if c.cause == "ep_tokens"]
    return c


def small_moe():
    """Qwen3-30B-A3B's mixture (128 experts, top 8, no router groups) on 2 blocks: fast to plan."""
    return load("qwen3-30b-a3b", ["n_layer=2"])


# ---------- P_unit: the chance a node's (or a GPU's) share of the experts holds one of a token's ----------


@pytest.mark.parametrize("n_expert, k, units", [(8, 2, 4), (12, 3, 3), (16, 4, 8)])
def test_touched_without_groups_is_the_enumeration_of_every_k_subset(n_expert, k, units):
    """Ungrouped top-k of exchangeable scores is a uniform k-subset: count the subsets meeting unit 0's experts."""
    held = set(range(n_expert // units))
    hits = sum(bool(held & set(s)) for s in combinations(range(n_expert), k))
    assert touched(n_expert, k, 1, 1, units) == pytest.approx(hits / comb(n_expert, k), rel=1e-12)


def test_touched_matches_transformers_deepseek_v3_router():
    """DeepSeek-V3's grouped routing as transformers 5.24 runs it (DeepseekV3TopkRouter: sigmoid scores, groups
    scored by their two best, top 4 of 8 groups kept, top 8 of 256 experts) on random tokens: the share of tokens
    reaching a node (8 nodes, 32 experts each = one group) and a GPU (64 GPUs, 4 experts each)."""
    from transformers import DeepseekV3Config
    from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3TopkRouter

    torch.manual_seed(0)
    cfg = DeepseekV3Config(hidden_size=64, n_routed_experts=256, num_experts_per_tok=8, n_group=8, topk_group=4)
    router = DeepseekV3TopkRouter(cfg)
    torch.nn.init.normal_(router.weight, std=0.02)
    _, _, idx = router(torch.randn(8000, 64))  # (tokens, 8)
    for units, tol in ((8, 0.01), (64, 0.005)):
        reached = torch.zeros(idx.shape[0], units).scatter_(1, idx // (256 // units), 1.0).mean().item()
        assert touched(256, 8, 8, 4, units) == pytest.approx(reached, abs=tol)
    assert touched(256, 8, 8, 4, 8) == 0.5  # node-limited: at most 4 of 8 nodes, each kept group reached


def test_node_limited_routing_bounds_the_nodes_a_token_reaches():
    """A unit of whole groups is reached only when one of them is kept: 4 kept of 8 groups on 16 nodes
    (half a group each) or 4 nodes (two each) -- at most topk_group groups' nodes."""
    assert 8 * touched(256, 8, 8, 4, 8) == pytest.approx(4)
    assert 4 * touched(256, 8, 8, 4, 4) == pytest.approx(4 * (1 - comb(6, 4) / comb(8, 4)))
    assert touched(256, 8, 8, 4, 16) < touched(256, 8, 1, 1, 16)  # fewer than without the groups


# ---------- bytes by link ----------


def test_deepep_bytes_by_hand():
    """EP 16 over 2 nodes, bf16, no groups: per token and all-to-all the network carries (ν − 1)·P_node rows of
    d_model, NVLink (E − ν)·P_gpu; four all-to-alls per MoE layer and micro-batch (step 2), m = 2, 2 layers."""
    cfg = small_moe()
    plan = make_plan(cfg, layout(ep_dispatch="deepep"), H800, None)
    c = tokens_of(plan)
    h, T, m, layers = 2048, 4096, 2, 2
    p_node = 1 - comb(64, 8) / comb(128, 8)
    p_gpu = 1 - comb(120, 8) / comb(128, 8)
    assert c.links.network_bytes == pytest.approx(m * layers * T * 4 * 2 * h * 1 * p_node, rel=1e-9)
    assert c.links.intra_bytes == pytest.approx(m * layers * T * 4 * 2 * h * 14 * p_gpu, rel=1e-9)
    assert (c.links.network_peers, c.links.intra_peers) == (1, 7)
    assert c.sent_bytes == c.links.network_bytes + c.links.intra_bytes == c.payload_bytes
    # the time: each link's bytes at its rate and NCCL's efficiency, the longer of the two, and every peer's latency
    perf = H800.perf
    seconds = (c.calls * (perf.link_latency_s["network"] + 7 * perf.link_latency_s["nvlink"])
               + max(c.links.network_bytes / (50e9 * 0.9), c.links.intra_bytes / (200e9 * 0.8)))
    assert plan.step.comm_s["ep"] == pytest.approx(seconds + _counts_s(plan), rel=1e-9)


def _counts_s(plan):
    (c,) = [c for c in plan.collectives if c.cause == "ep_counts"]
    return c.calls * 15 * H800.perf.link_latency_s["network"] + c.sent_bytes / (50e9 * 0.9)


def test_alltoall_across_nodes_sends_each_copy_straight():
    """alltoall: of k copies per token k·(E − r)/E cross the network, k·(r − 1)/E stay in the node."""
    plan = make_plan(small_moe(), layout(ep_dispatch="alltoall"), H800, None)
    c = tokens_of(plan)
    rows = 2 * 2 * 4096 * 4 * 2 * 2048 * 8  # m · layers · T · 4 all-to-alls · e · h · k
    assert c.payload_bytes == rows
    assert (c.links.network_bytes, c.links.intra_bytes) == (rows * 8 // 16, rows * 7 // 16)
    assert (c.links.network_peers, c.links.intra_peers) == (8, 7)


def test_auto_is_deepep_across_nodes_and_alltoall_inside_one():
    cfg = small_moe()
    across = make_plan(cfg, layout(), H800, None)
    assert tokens_of(across) == tokens_of(make_plan(cfg, layout(ep_dispatch="deepep"), H800, None))
    inside = make_plan(cfg, layout(dp=8, ep=8, global_batch=16), H800, None)
    c = tokens_of(inside)
    assert c.links is None and c.sent_bytes == c.payload_bytes * 7 // 8  # the one-link all-to-all, as before
    assert ep_nodes(layout(tp=2, dp=8, ep=8, global_batch=16), 8) == 2  # EP ranks tp apart


def test_deepep_halves_deepseek_v3s_network_bytes():
    """DeepSeek-V3 at EP 64 over 8 nodes: 3.5 remote nodes a token under node-limited routing (4 of 8 groups)
    against 8·56/64 = 7 copies crossing nodes under alltoall; FP8 dispatches (sec. 3.3.2) shrink it further."""
    cfg = load("deepseek-v3")
    ffn = next(b.ffn for _, b, _ in cfg.architecture.kinds() if b.is_moe)
    deepep, alltoall = token_routes(ffn, 64, 8, "deepep", 8), token_routes(ffn, 64, 8, "alltoall", 8)
    assert deepep.network_rows == pytest.approx(3.5) and alltoall.network_rows == pytest.approx(7)
    L = layout(pp=16, dp=128, ep=64, global_batch=256, zero=1)
    bf16 = tokens_of(make_plan(cfg, L, H800, None)).links.network_bytes
    fp8 = tokens_of(make_plan(cfg, dataclasses.replace(L, compute_dtype="fp8"), H800, None)).links.network_bytes
    h = 7168
    assert fp8 / bf16 == pytest.approx((2 * (h + 4 * 56) + 4 * h) / (8 * h))


def test_two_link_seconds_by_hand():
    t = alpha_beta.two_link_seconds(10, (45e9, 7, 50e9, 6e-6, 0.9), (100e9, 7, 200e9, 2e-6, 0.8))
    assert t == pytest.approx(10 * (7 * 6e-6 + 7 * 2e-6) + 1.0)


# ---------- --overlap ep ----------


def test_overlap_ep_hides_all_but_one_micro_batch_at_the_cost_of_deepeps_sms():
    cfg = small_moe()
    L = layout(global_batch=128)  # m = 8
    plain = make_plan(cfg, L, H800, None).step
    over = make_plan(cfg, dataclasses.replace(L, overlap=("ep",)), H800, None).step
    ep = plain.comm_s["ep"]
    assert plain.exposed_s["ep"] == pytest.approx(ep) and plain.ep_contention_s == 0
    hidden = min(ep * 7 / 8, over.compute_s)
    assert over.exposed_s["ep"] == pytest.approx(ep - hidden)
    # the cost: the micro-batch on 132 − 20 SMs, over the hidden seconds
    from tfcalc.count.training.steptime import _stage_s

    slow = _stage_s(cfg, L, H800, 20).total / _stage_s(cfg, L, H800).total - 1  # DeepSeek-V3 sec. 3.2.2
    assert slow > 0 and over.ep_contention_s == pytest.approx(slow * hidden)
    assert over.overlap_s == pytest.approx(plain.overlap_s - hidden + over.ep_contention_s)


def test_overlap_ep_and_dispatch_refusals():
    with pytest.raises(InputError, match="needs --ep > 1"):
        make_plan(small_moe(), layout(ep=1, dp=16, overlap=("ep",)), H800, None)
    with pytest.raises(InputError, match="--ep-dispatch must be one of auto, alltoall, deepep"):
        make_plan(small_moe(), layout(ep_dispatch="nvshmem"), H800, None)


def test_cli_flags(cli):
    r = cli("plan", "qwen3-30b-a3b", "--dp", "16", "--ep", "16", "--ep-dispatch", "DeepEP", "--overlap", "ep",
            "--seq", "4096", "--global-batch", "64", "--json")
    assert r.code == 0, r.err
    j = r.json()
    assert j["layout"]["ep_dispatch"] == "deepep" and j["layout"]["overlap"] == ["ep"]
    assert j["step"]["ep_contention_s"] > 0
    (c,) = [c for c in j["collectives"] if c["cause"] == "ep_tokens"]
    assert c["links"]["network_peers"] == 1
    r = cli("plan", "qwen3-30b-a3b", "--dp", "16", "--ep", "16", "--overlap", "ep", "--seq", "4096",
            "--global-batch", "64")
    assert r.code == 0 and "EP overlap's cost" in r.out
    assert_one_line_error(cli("plan", "llama2-7b", "--dp", "8", "--overlap", "ep"), "--overlap ep")
    assert_one_line_error(cli("plan", "qwen3-30b-a3b", "--dp", "16", "--ep", "16", "--ep-dispatch", "x"),
                          "--ep-dispatch")


def test_measured_run_of_a_deepep_plan_says_it_ran_alltoall(cli):
    """gloo's all_to_all_single sends one copy per token and expert: the measured run is planned with alltoall,
    its bytes agree exactly, and what it left out says so."""
    r = cli("plan", "qwen3-30b-a3b", "--set", "n_layer=2", "--dp", "2", "--ep", "2", "--ep-dispatch", "deepep",
            "--seq", "64", "--measure", "--json")
    assert r.code == 0, r.err
    m = r.json()["measured"]
    assert m["layout"]["ep_dispatch"] == "alltoall" and m["collectives_exact"] and m["states_exact"]
    assert any("DeepEP" in x for x in m["left_out"])


def test_the_overlaps_sms_are_a_device_constant():
    """PerfSpec.ep_comm_sms (DeepEP's 20 by default): 0 makes the overlap free, more SMs cost more."""
    cfg, L = small_moe(), layout(global_batch=128, overlap=("ep",))
    cost = {sms: make_plan(cfg, L, dataclasses.replace(H800, perf=dataclasses.replace(H800.perf, ep_comm_sms=sms)),
                           None).step.ep_contention_s for sms in (0, 20, 40)}
    assert cost[0] == 0 < cost[20] < cost[40]


def _routing_cases():
    from hypothesis import strategies as st

    @st.composite
    def case(draw):
        groups = draw(st.sampled_from([1, 2, 4, 8]))
        per_group = draw(st.sampled_from([2, 4, 8, 16, 32]))
        n_expert = groups * per_group
        kept = draw(st.integers(1, groups)) if groups > 1 else 1
        k = draw(st.integers(1, min(8, kept * per_group)))
        E = draw(st.sampled_from([e for e in (2, 4, 8, 16, 32, 64) if n_expert % e == 0] or [1]))
        nodes = draw(st.sampled_from([n for n in (1, 2, 4, 8) if E % n == 0]))
        return n_expert, k, groups, kept, E, nodes
    return case()


def test_deepep_never_sends_more_over_the_network_than_alltoall():
    """On any routing: P_unit is a probability, a token reaches at most min(units, k) units in expectation (and
    at most topk_group nodes when whole groups sit on each node), and DeepEP's one copy per remote node never
    exceeds alltoall's copies crossing nodes."""
    from types import SimpleNamespace

    from hypothesis import given, settings

    @settings(max_examples=300, deadline=None)
    @given(_routing_cases())
    def check(c):
        n_expert, k, groups, kept, E, nodes = c
        for units in (nodes, E):
            p = touched(n_expert, k, groups, kept, units)
            assert 0 <= p <= 1 and units * p <= min(units, k) + 1e-9
        if groups > 1 and groups % nodes == 0:  # node-limited: at most topk_group nodes
            assert nodes * touched(n_expert, k, groups, kept, nodes) <= kept + 1e-9
        ffn = SimpleNamespace(n_expert=n_expert, top_k=k, routing=SimpleNamespace(n_group=groups, topk_group=kept))
        deep, flat = token_routes(ffn, E, nodes, "deepep", k), token_routes(ffn, E, nodes, "alltoall", k)
        assert deep.network_rows <= flat.network_rows + 1e-9
        # (not so the sum of both links: a copy for another GPU of a remote node crosses the network, then NVLink)

    check()
