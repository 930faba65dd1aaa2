"""Time of a collective on one link kind: the α-β model. Pure arithmetic.

Hockney's model as used for collectives by Thakur, Rabenseifner & Gropp 2005 ("Optimization of
Collective Communication Operations in MPICH", IJHPCA 19(1), sec. 2): a message of b bytes takes
α + b/β; a ring algorithm on N ranks runs its steps one after the other, each moving 1/N of the payload:

- reduce-scatter and all-gather: N − 1 steps, (N − 1)·α + (N − 1)/N · payload / β;
- all-reduce (reduce-scatter then all-gather): 2(N − 1)·α + 2(N − 1)/N · payload / β;
- send/recv: α + payload / β;
- all-to-all (expert parallelism's token exchange), pairwise: N − 1 steps, (N − 1)·α + (N − 1)/N ·
  payload / β (Thakur et al. 2005, sec. 3.6, the pairwise-exchange algorithm for long messages).

The bytes term is tfcalc.count.training.comm's ``sent_bytes`` (bytes one rank sends); β is the link's per-GPU,
per-direction rate times the bus efficiency that NCCL reaches on it (tfcalc.count.perf.hardware). The
calls matter: ``calls`` collectives pay their latency ``calls`` times (DDP's buckets, where PyTorch
chooses the calls: one per 25 MiB bucket, PyTorch's DistributedDataParallel default bucket_cap_mb).

Worked example (tests/count/perf/test_collectives.py): an all-reduce of 1 GB over 8 ranks on NVLink 3
(300 GB/s per direction, efficiency 0.8, α = 2 µs): 14 · 2 µs + 1.75 GB / 240 GB/s = 28 µs + 7.2917 ms.

NCCL's choice (all-reduce, all-gather, reduce-scatter: ``nccl_seconds``). NCCL does not run every call as
a ring of equal steps: for each call it picks the algorithm (ring, or for all-reduce the double binary
tree) and the protocol (LL, LL128, Simple) its cost model predicts fastest. The model and its constants
are NCCL's own, src/graph/tuning.cc (NVIDIA/nccl, ncclTopoTuneModel and ncclTopoGetAlgoTime, at commit
01afd20): time = latency + bytes / bandwidth, with

- latency, µs: a base per (algorithm, protocol) -- ring LL 3.6, LL128 10.0, Simple 8.4; tree LL 4.4,
  LL128 4.4, Simple 0 -- plus a per-hop latency per link kind (NVLink, PCIe, network; ring LL .47/1.0/2.7,
  LL128 1.9/2.5/4.0, Simple 3.4/5.7/9.6; tree LL .52/1.0/5.0, LL128 1.2/1.9/8.5, Simple 28/28/50): a ring
  of N ranks over ν nodes takes s steps (2(N − 1) for all-reduce, N − 1 for the others), 2(ν − 1) (resp.
  ν − 1) of them across the network, the rest inside nodes (LL's intra-node hop × 1.8 when ν > 1); the
  tree 2·((N/ν − 1)·intra + log₂ν · inter); a multi-node ring Simple all-reduce of at least N/16 · 64 KiB
  pays its latency × 1.9 (NCCL's "plateau effect of ring");
- bandwidth: the link's bus bandwidth β (Simple, the efficiency above) times the protocol's share -- LL
  1/4 (1/3 for a one-node all-gather or reduce-scatter: half of each 8-byte word is a flag), LL128 0.92
  (NCCL enables it by default only where the ring stays on NVLink: one node); the tree's bus bandwidth
  0.9 β (LL ÷ 3.8, LL128 × 7/9 in one node) for an algorithm bandwidth of half of it: 2 · payload / bus.
The ring's bytes are tfcalc's sent bytes (2(N − 1)/N of an all-reduce's payload: the same quantity).
Small calls then take LL's latency (the α-β ring's 2(N − 1) · α of several µs a step overstates them:
a 96 KiB loss all-reduce on 8 NVLink GPUs is 3.6 + 14 · .47 = 10.2 µs of latency, not 28 µs), and an
all-reduce over many nodes takes the tree's log₂ν network hops. Send/recv, all-to-all and broadcast keep
the α-β ring above (``seconds``).
"""

from __future__ import annotations

import math
from functools import lru_cache

DDP_BUCKET_BYTES = 25 * 2**20  # torch.nn.parallel.DistributedDataParallel(bucket_cap_mb=25)


def ring_steps(op: str, n: int) -> int:
    """Latency terms of one call (see the module docstring)."""
    if op == "send_recv":
        return 1
    if op == "all_to_all":
        return n - 1
    return (2 if op == "all_reduce" else 1) * (n - 1)


def seconds(op: str, sent_bytes: int, n: int, calls: int, link_bytes_per_s: float, latency_s: float,
            efficiency: float) -> float:
    """α-β time of ``calls`` calls of ``op`` on n ranks moving ``sent_bytes`` per rank in all."""
    if n < 2 and op != "send_recv":
        return 0.0
    return calls * ring_steps(op, n) * latency_s + sent_bytes / (link_bytes_per_s * efficiency)


def two_link_seconds(calls: int, network: tuple[int, int, float, float, float],
                     intra: tuple[int, int, float, float, float]) -> float:
    """A collective that sends over the network and the intra-node link at once (an all-to-all across nodes:
    tfcalc.count.training.experts_parallel, step 3): each link a (bytes, peers, rate, latency, efficiency);
    every call pays each peer's latency, and the bytes take the longer of the two links."""
    latency = calls * sum(peers * alpha for _, peers, _, alpha, _ in (network, intra))
    return latency + max(b / (rate * eff) if b else 0.0 for b, _, rate, _, eff in (network, intra))


def ddp_calls(payload_bytes: int) -> int:
    """DDP's buckets: one all-reduce per 25 MiB of gradients."""
    return max(1, math.ceil(payload_bytes / DDP_BUCKET_BYTES))


# NCCL's cost model, src/graph/tuning.cc (see the module docstring): protocols LL, LL128, Simple
PROTOCOLS = ("LL", "LL128", "Simple")
BASE_LATENCY_US = {"ring": (3.6, 10.0, 8.4), "tree": (4.4, 4.4, 0.0)}
HOP_LATENCY_US = {"nvlink": {"ring": (0.47, 1.9, 3.4), "tree": (0.52, 1.2, 28.0)},
                  "pcie": {"ring": (1.0, 2.5, 5.7), "tree": (1.0, 1.9, 28.0)},
                  "network": {"ring": (2.7, 4.0, 9.6), "tree": (5.0, 8.5, 50.0)}}
NCCL_OPS = ("all_reduce", "all_gather", "reduce_scatter")


def _ring_share(op: str, protocol: str, nodes: int) -> float:
    if protocol == "LL":
        return 1 / 4 if nodes > 1 or op == "all_reduce" else 1 / 3
    return 0.92 if protocol == "LL128" else 1.0


def _tree_share(protocol: str, nodes: int) -> float:
    return 0.9 * {"LL": 1 / 3.8, "LL128": 7 / 9 if nodes == 1 else 0.915, "Simple": 1.0}[protocol]


@lru_cache(maxsize=65536)
def nccl_call(op: str, payload: float, sent: float, n: int, nodes: int, intra: str, bus: float
              ) -> tuple[float, str, str]:
    """(seconds, algorithm, protocol) of one call as NCCL's cost model picks it: ``payload`` and ``sent``
    the call's payload and ring-sent bytes per rank, n ranks over ``nodes`` nodes, ``intra`` the link
    kind inside a node, ``bus`` the group's bus bandwidth β (bytes/s, Simple)."""
    steps, inter_steps = (2 * (n - 1), 2 * (nodes - 1)) if op == "all_reduce" else (n - 1, nodes - 1)
    outer = "network" if nodes > 1 else intra
    best = (float("inf"), "", "")
    for i, protocol in enumerate(PROTOCOLS):
        if protocol == "LL128" and (nodes > 1 or intra != "nvlink"):
            continue  # enabled by default on NVLink only (tuning.cc, protoEnable)
        intra_lat = HOP_LATENCY_US[intra]["ring"][i] * (1.8 if nodes > 1 and protocol == "LL" else 1.0)
        lat = BASE_LATENCY_US["ring"][i] + (steps - inter_steps) * intra_lat + inter_steps * HOP_LATENCY_US[
            outer]["ring"][i]
        if protocol == "Simple" and nodes > 1 and op == "all_reduce" and payload >= n / 16 * 65536:
            lat *= 1.9  # "Plateau effect of ring"
        best = min(best, (lat * 1e-6 + sent / (bus * _ring_share(op, protocol, nodes)), "ring", protocol))
        if op == "all_reduce":
            intra_lat = HOP_LATENCY_US[intra]["tree"][i] * (1.8 if nodes > 1 and protocol == "LL" else 1.0)
            lat = BASE_LATENCY_US["tree"][i] + 2 * ((n // nodes - 1) * intra_lat + (nodes.bit_length() - 1)
                                                     * HOP_LATENCY_US["network"]["tree"][i])  # log2i
            best = min(best, (lat * 1e-6 + 2 * payload / (bus * _tree_share(protocol, nodes)), "tree", protocol))
    return best


def nccl_seconds(op: str, payload_bytes: int, sent_bytes: int, n: int, nodes: int, calls: int, intra: str,
                 bus: float) -> float:
    """``calls`` equal calls of ``op`` (all-reduce, all-gather, reduce-scatter) as NCCL runs them; the
    payload and sent bytes summed over the calls."""
    if n < 2:
        return 0.0
    return calls * nccl_call(op, payload_bytes / calls, sent_bytes / calls, n, max(1, nodes), intra, bus)[0]
