"""NCCL's own choice of algorithm and protocol per call (tfcalc.count.perf.collectives.nccl_call), against
hand derivations from the constants of NVIDIA/nccl src/graph/tuning.cc; and the plan's use of it."""

import pytest

from tfcalc.count.perf.collectives import nccl_call, nccl_seconds, seconds
from tfcalc.count.training.comm import Collective
from tfcalc.count.training.layout import Layout
from tfcalc.count.training.steptime import Hardware, collective_seconds, group_bus_bytes_per_s, group_nodes

NVLINK3 = 300e9 * 0.8  # A100 NVLink bus bandwidth, Simple
IB_HDR = 25e9 * 0.9  # one 200 Gb/s NIC per GPU


def test_small_all_reduce_takes_ring_ll():
    """96 KiB on 8 NVLink ranks: ring LL, latency 3.6 + 14 · 0.47 = 10.18 µs, bytes 2 · 7/8 · 98,304 =
    172,032 at a quarter of the bus (LL: a flag in every 8-byte word)."""
    t, algo, proto = nccl_call("all_reduce", 98304, 172032, 8, 1, "nvlink", NVLINK3)
    assert (algo, proto) == ("ring", "LL")
    assert t == pytest.approx(10.18e-6 + 172032 / (NVLINK3 / 4))
    # the α-β ring of 2 µs a step says 28 µs of latency for the same call
    assert seconds("all_reduce", 172032, 8, 1, 300e9, 2e-6, 0.8) > 2 * t


def test_large_all_reduce_takes_ring_simple():
    """1 GB on 8 NVLink ranks: ring Simple, 8.4 + 14 · 3.4 = 56 µs + 1.75 GB / 240 GB/s; LL128 (10 + 14 ·
    1.9 µs, 0.92 of the bus) and the tree (2 · 7 · 28 µs, 2 GB / (0.9 · 240 GB/s)) are slower."""
    t, algo, proto = nccl_call("all_reduce", 1e9, 1.75e9, 8, 1, "nvlink", NVLINK3)
    assert (algo, proto) == ("ring", "Simple")
    assert t == pytest.approx(56e-6 + 1.75e9 / NVLINK3)


def test_dp_all_reduce_over_128_ranks_takes_the_tree():
    """A 25 MiB DDP bucket over 128 ranks on 16 nodes (8 GPUs each), one 200 Gb/s NIC per GPU:
    ring Simple (8.4 + 224 · 3.4 + 30 · 9.6) · 1.9 = 2,010.2 µs + 2 · 127/128 · 26,214,400 B / β;
    tree Simple 2 · (7 · 28 + 4 · 50) = 792 µs + 2 · 26,214,400 B / (0.9 β): the tree wins."""
    payload = 25 * 2**20
    sent = 2 * 127 * payload // 128
    t, algo, proto = nccl_call("all_reduce", payload, sent, 128, 16, "nvlink", IB_HDR)
    ring = (8.4 + 224 * 3.4 + 30 * 9.6) * 1.9e-6 + sent / IB_HDR
    tree = 792e-6 + 2 * payload / (0.9 * IB_HDR)
    assert (algo, proto) == ("tree", "Simple") and t == pytest.approx(tree) and tree < ring


def test_dp_reduce_scatter_over_128_ranks_counts_network_hops_apart():
    """Reduce-scatter is ring-only: 127 steps, 15 of them across the 16 nodes' network (9.6 µs), 112 on
    NVLink (3.4 µs): 8.4 + 112 · 3.4 + 15 · 9.6 = 533.2 µs, against the α-β ring's 127 · 6 = 762 µs."""
    sent = 127 * 2**30 // 128
    t, algo, proto = nccl_call("reduce_scatter", 2**30, sent, 128, 16, "nvlink", IB_HDR)
    assert (algo, proto) == ("ring", "Simple")
    assert t == pytest.approx(533.2e-6 + sent / IB_HDR)
    assert nccl_seconds("reduce_scatter", 3 * 2**30, 3 * sent, 128, 16, 3, "nvlink", IB_HDR) == pytest.approx(3 * t)
    assert nccl_seconds("reduce_scatter", 2**30, sent, 1, 1, 1, "nvlink", IB_HDR) == 0.0


@pytest.mark.parametrize("group, tp, dp, size, nodes", [("dp", 1, 128, 128, 16), ("dp", 8, 128, 128, 128),
                                                       ("dp", 2, 512, 512, 128), ("tp", 8, 4, 8, 1)])
def test_group_nodes_under_megatrons_order(group, tp, dp, size, nodes):
    """DP ranks sit tp apart: 8 GPUs a node hold 8 / tp of them."""
    L = Layout(tp=tp, pp=1, dp=dp, seq=2048, global_batch=dp, micro_batch=1)
    assert group_nodes(group, L, 8, size) == nodes


def test_plan_prices_reductions_with_nccls_choice():
    """collective_seconds: the DP bucket all-reduces of a 128-rank DDP plan at NCCL's per-call cost, on the
    bus of the 8 NICs each node's 8 ranks drive (group_bus_bytes_per_s: min(8 · 22.5, 240) = 180 GB/s)."""
    hw = Hardware(312e12, 80 * 10**9, 300e9, 25e9, 8)
    L = Layout(tp=1, pp=1, dp=128, seq=2048, global_batch=128, micro_batch=1)
    payload = 4 * 25 * 2**20
    c = Collective("dp_grads", "all_reduce", "dp", 128, payload, None)  # DDP: 4 buckets of 25 MiB
    bucket = nccl_call("all_reduce", payload / 4, c.sent_bytes / 4, 128, 16, "nvlink", 8 * IB_HDR)[0]
    assert collective_seconds(c, L, hw) == pytest.approx(4 * bucket)


A100 = Hardware(312e12, 80 * 10**9, 300e9, 25e9, 8)
H100 = Hardware(989e12, 80 * 10**9, 450e9, 50e9, 8)


@pytest.mark.parametrize("hw, group, tp, dp, hsdp, bus", [
    (A100, "dp", 1, 8, None, NVLINK3),        # one node: NVLink's bus, 300 · 0.8
    (A100, "dp", 1, 64, None, 8 * IB_HDR),    # 8 ranks in each of 8 nodes: 8 NICs · 22.5 = 180 GB/s < 240
    (A100, "dp", 2, 64, None, 4 * IB_HDR),    # TP 2: 4 DP ranks a node, 4 NICs: 90 GB/s
    (A100, "dp", 8, 64, None, IB_HDR),        # TP 8 fills the node: one rank and one NIC a node, 22.5 GB/s
    (A100, "dp_replicate", 1, 64, 8, IB_HDR),  # HSDP 8 × 8: a replica group holds one rank a node
    (A100, "dp_shard", 1, 64, 8, NVLINK3),    # HSDP's shard group is the node
    (H100, "dp", 1, 64, None, 360e9),         # min(8 · 50 · 0.9, 450 · 0.8): both 360 GB/s
])
def test_group_bus_counts_the_nics_a_node_drives(hw, group, tp, dp, hsdp, bus):
    """NCCL's busBw = nChannels × bwInter (tuning.cc), one channel per NIC on a rail-optimized node: a group
    with r ranks in a node drives r NICs, capped by the node's own links; hand values in the comments."""
    L = Layout(tp=tp, pp=1, dp=dp, seq=2048, global_batch=dp, micro_batch=1, zero=3 if hsdp else 0, hsdp=hsdp)
    size = {"dp": dp, "dp_replicate": dp // (hsdp or 1), "dp_shard": hsdp or dp}[group]
    assert group_bus_bytes_per_s(hw, size, group_nodes(group, L, hw.gpus_per_node, size)) == pytest.approx(bus)
