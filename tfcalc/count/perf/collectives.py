"""Time of a collective on one link kind: the α-β model. Pure arithmetic.

Hockney's model as used for collectives by Thakur, Rabenseifner & Gropp 2005 ("Optimization of
Collective Communication Operations in MPICH", IJHPCA 19(1), sec. 2): a message of b bytes takes
α + b/β; a ring algorithm on N ranks runs its steps one after the other, each moving 1/N of the payload:

- reduce-scatter and all-gather: N − 1 steps, (N − 1)·α + (N − 1)/N · payload / β;
- all-reduce (reduce-scatter then all-gather): 2(N − 1)·α + 2(N − 1)/N · payload / β;
- send/recv: α + payload / β;
- all-to-all (expert parallelism's token exchange), pairwise: N − 1 steps, (N − 1)·α + (N − 1)/N ·
  payload / β (Thakur et al. 2005, sec. 3.6, the pairwise-exchange algorithm for long messages).

The bytes term is tfcalc.count.comm's ``sent_bytes`` (bytes one rank sends); β is the link's per-GPU,
per-direction rate times the bus efficiency that NCCL reaches on it (tfcalc.count.perf.hardware). The
calls matter: ``calls`` collectives pay their latency ``calls`` times (DDP's buckets, where PyTorch
chooses the calls: one per 25 MiB bucket, PyTorch's DistributedDataParallel default bucket_cap_mb).

Worked example (tests/count/perf/test_collectives.py): an all-reduce of 1 GB over 8 ranks on NVLink 3
(300 GB/s per direction, efficiency 0.8, α = 2 µs): 14 · 2 µs + 1.75 GB / 240 GB/s = 28 µs + 7.2917 ms.
"""

from __future__ import annotations

import math

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


def ddp_calls(payload_bytes: int) -> int:
    """DDP's buckets: one all-reduce per 25 MiB of gradients."""
    return max(1, math.ceil(payload_bytes / DDP_BUCKET_BYTES))
