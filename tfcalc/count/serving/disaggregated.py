"""Disaggregated prefill and decode (``infer --rate R --mean-input I --mean-output O --disaggregate P:D``): P prefill
instances and D decode instances, each of the layout the other options give (one GPU, --tp T, or --ep E's attention-DP
groups), the KV cache of every prompt moved from the prefill instance that computed it to a decode instance. Pure
arithmetic on the serving roofline (the steps of tfcalc.count.serving.continuous's Engine, or ep_continuous's).

Sources: DistServe (Zhong et al., OSDI 2024, arXiv 2401.09670: a prefill instance runs prompts only, analysed as an
M/D/1 queue, sec. 3.1, Avg TTFT = D + R·D² / (2(1 − R·D)); a decode instance runs decode steps only; its placement for
slow cluster networks keeps each prompt's KV transfer inside a node, on NVLink), Splitwise (Patel et al., ISCA 2024:
the KV cache sent layer by layer while the prompt still computes, so that only the part past the prefill's own time is
exposed), Mooncake (Qin et al., FAST 2025, arXiv 2407.00079: layer-wise prefill, each layer's KV stored and sent while
the next layer runs), SGLang's PD disaggregation (lmsys.org/blog/2025-05-05-large-scale-ep: prefill and decode
servers, the KV moved by RDMA from each GPU to its counterpart; the response streamed from the decode server, so the
first token leaves after the KV arrives).

1. Prefill instance: prompts only, each prefilled whole, one at a time per server (an attention-DP group under --ep),
   t_p as continuous's step 1 (the same step, so P:D = 1:1 agrees with the colocated server where it must). The
   requests split evenly over the P·g prefill servers (g: attention-DP groups per instance, 1 without --ep), each an
   M/D/1 queue at r_p = R/(P·g): ρ_p = r_p·t_p, wait W = ρ_p·t_p / (2(1 − ρ_p)) (Pollaczek-Khinchine; DistServe
   sec. 3.1).
   Not modelled in the queue: several prompts batched into one step by a token budget B (SGLang's
   --max-prefill-tokens, vLLM's max_num_batched_tokens; a prompt of a few hundred tokens or more is compute-bound, so
   batching saves little but the weight read). Beside it, the bound batching gives: k = max(1, ⌊B/I⌋) prompts a step
   at B = 8,192 (chunked.DEFAULT_BUDGET), T(k) their step, P·g·k/T(k) requests/s the prefill instances could
   sustain were every step full -- how far the one-prompt queue's capacity may fall short for short prompts.
2. KV transfer: the prompt's generation state at I positions in the KV dtype (a hybrid's fixed state with it), each
   GPU of the prefill server sending its own share (under --tp T a T-th of the heads) to its counterpart in the decode
   server over its own link: a layer's share in x = α + bytes / (L·bw·η), the whole X = L·x. The link: the node's
   GPU-to-GPU link (NVLink or PCIe) when all (P + D) instances fit in one node, else the network between nodes (the
   device's inter_node_bytes_per_s per GPU, one NIC per GPU); bw, α, η the performance model's for that link. Layer
   by layer (Splitwise; Mooncake's layer-wise prefill): layer l's KV is sent once layer l has computed, while layer
   l + 1 computes. With c = t_p/L a layer's compute, the last send ends at t_p + x when x ≤ c, else at c + L·x: the
   exposed part past the prefill is max(x, L·x − (L − 1)·c) -- never below one layer's send.
3. Decode instance: decode steps only (no prefill stalls). The sequences split over the D·g decode servers, each at
   r_d = R/(D·g); Little's law with ρ = 0 (continuous, step 3): N = r_d·(O − 1)·τ(N), the smallest root, N within the
   KV cache's bound (the decode server holds every sequence's I + O/2 positions, as continuous step 4). ITL = τ(N).
4. Latencies (means): TTFT = W + t_p + the exposed transfer + the runtime's fixed work per request; end to end
   TTFT + (O − 1)·ITL. Not modelled: the wait for the decode step under way when the KV arrives (below one step, τ).
5. Capacity: min(P·g / t_p, D·g · the decode server's largest rate), the latter by bisection on r_d with step 3's
   solver (as continuous.max_rate). Over capacity: the limit 'prefill' (ρ_p ≥ 1) or 'decode' (no N solves step 3 within
   the KV cache: decode_limit says 'decode' or 'memory').
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

from tfcalc.count.serving.chunked import DEFAULT_BUDGET
from tfcalc.count.serving.continuous import ITERATIONS, Engine, Traffic, first_root
from tfcalc.count.serving.static import BATCH_LIMIT
from tfcalc.errors import InputError
from tfcalc.workload import Workload

INSTANCES_LIMIT = 1 << 16  # --disaggregate's P and D at most: 65,536 instances, past the largest clusters built


@dataclass(frozen=True)
class Link:
    """The path of the KV cache from a prefill GPU to its decode counterpart (step 2)."""

    kind: str  # 'nvlink' or 'pcie' (all instances in one node) or 'network'
    bytes_per_s: float  # per GPU, one direction
    latency_s: float
    efficiency: float
    name: str = "network"  # how the output names it: 'NVLink', 'Infinity Fabric', 'PCIe' (devices.intra_link_name)


@dataclass(frozen=True)
class Disaggregated:
    traffic: Traffic
    prefill_instances: int  # P
    decode_instances: int  # D
    groups: int  # g: servers (attention-DP groups) per instance
    prefill_s: float  # t_p
    prefill_share: float  # ρ_p of a prefill server
    prefill_wait_s: Optional[float]  # W (None: over the prefill's capacity)
    kv_transfer_bytes: int  # one prompt's state per GPU
    kv_transfer_s: float  # L·x
    kv_exposed_s: float  # step 2's part past the prefill
    link: Link
    layers: int
    concurrency: Optional[float]  # N per decode server (None: over capacity)
    decode_step_s: Optional[float]  # τ(N)
    ttft_s: Optional[float]
    itl_s: Optional[float]
    kv_cache_bytes: Optional[int]  # per GPU of a decode server at N
    max_concurrency: Optional[int]  # per decode server
    prefill_max_rate: float  # P·g / t_p
    decode_max_rate: float  # D·g · a decode server's
    limit: Optional[str]  # None, 'prefill' or 'decode'
    decode_limit: Optional[str]  # where the decode runs out: 'decode' or 'memory'
    request_s: float
    prompts_per_step: int = 1  # k = max(1, ⌊B/I⌋): the budget's prompts a step (step 1's bound beside)
    prefill_batched_s: float = 0.0  # T(k)
    prefill_batched_max_rate: float = 0.0  # P·g·k / T(k)

    @property
    def max_rate(self) -> float:
        return min(self.prefill_max_rate, self.decode_max_rate)

    @property
    def e2e_s(self) -> Optional[float]:
        if self.ttft_s is None or self.itl_s is None:
            return None
        return self.ttft_s + (self.traffic.mean_output - 1) * self.itl_s


def parse(value) -> tuple[int, int]:
    """--disaggregate P:D: two whole numbers from 1 to INSTANCES_LIMIT in ASCII digits (str.isdecimal alone takes
    '١' and '１', which int reads), one line otherwise."""
    text = str(value).strip()
    parts = text.split(":")
    if len(parts) != 2 or not all(p.strip().isascii() and p.strip().isdecimal() and 1 <= int(p) <= INSTANCES_LIMIT
                                  for p in parts):
        raise InputError(f"--disaggregate takes P:D, the prefill and decode instances, two whole numbers from 1 to "
                         f"{INSTANCES_LIMIT:,} (e.g. 1:3); got {text[:40]!r}")
    return int(parts[0]), int(parts[1])


def exposed_s(t_p: float, layers: int, x: float) -> float:
    """Step 2: the part of a layer-by-layer transfer (x per layer) past a prefill of t_p over ``layers`` layers."""
    c = t_p / layers
    return max(x, layers * x - (layers - 1) * c)


def layer_send_s(per_gpu_bytes: int, layers: int, link: Link) -> float:
    """Step 2's x: one layer's share of a GPU's KV over the link, with the link's latency."""
    return link.latency_s + per_gpu_bytes / layers / (link.bytes_per_s * link.efficiency)


def decode_concurrency(e: Engine, rate: float, mean_output: int, cap: float,
                       why: bool = True) -> tuple[Optional[float], Optional[str]]:
    """Step 3: a decode server's N at r_d, or (None, 'decode' or 'memory'; None unless ``why``: the search past the
    KV cache's bound that tells them apart is skipped)."""
    if mean_output == 1:  # the prefill yields the one token; nothing decodes
        return 0.0, None
    scale = rate * (mean_output - 1)
    bound = max(cap, 1.0) if cap != math.inf else float(BATCH_LIMIT)
    n = first_root(lambda n: scale * e.tau(n) - n, bound)
    if n is not None and n <= cap:
        return n, None
    if not why:
        return None, None
    free = n if n is not None or cap == math.inf else first_root(lambda n: scale * e.tau(n) - n, float(BATCH_LIMIT))
    return None, "memory" if free is not None else "decode"


def decode_max_rate(e: Engine, mean_output: int, cap: float) -> float:
    """Step 5: a decode server's largest rate (bisection; N grows with the rate)."""
    if mean_output == 1:
        return math.inf
    hi = max(cap if cap != math.inf else float(BATCH_LIMIT), 1.0) / ((mean_output - 1) * e.tau(1.0))
    lo = 0.0
    for _ in range(ITERATIONS):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if decode_concurrency(e, mid, mean_output, cap, False)[0] is not None else (lo, mid)
    return lo


def solve(e: Engine, t: Traffic, prefill: int, decode: int, groups: int, link: Link) -> Disaggregated:
    """Steps 1-5 for the engine ``e`` of one server (its prefill t_p, decode τ(n), KV cache per GPU), built without
    chunked prefill; ``groups``: servers per instance (attention-DP groups, 1 without --ep)."""
    t_p, layers = e.prefill_s, sum(n for _, _, n in e.cfg.architecture.kinds())  # the blocks, each a layer sent
    request = e.c.perf.request_s if e.c.perf is not None else 0.0
    rho = t.rate / (prefill * groups) * t_p
    prompt = Workload(seq=t.mean_input, dtype=e.fmt.dtype, kv_dtype=e.kv, src_seq=e.src)
    nbytes = e.shard.state(prompt)
    x = layer_send_s(nbytes, layers, link)
    exposed = exposed_s(t_p, layers, x)
    cap_n = e.max_concurrency()
    cap = math.inf if cap_n is None else float(cap_n)
    n, why = decode_concurrency(e, t.rate / (decode * groups), t.mean_output, cap)
    d_rate = decode_max_rate(e, t.mean_output, cap)
    limit = "prefill" if rho >= 1 else None if n is not None else "decode"
    if n is None:
        why = why or "decode"
    wait = None if rho >= 1 else rho * t_p / (2 * (1 - rho))
    tau = None if n is None else e.tau(n) if n > 0 else e.step_s(1)
    ok = limit is None
    k = max(1, DEFAULT_BUDGET // (t.mean_input - e.cached))
    t_k = e.prompts_s(k) if k > 1 else t_p
    return Disaggregated(
        t, prefill, decode, groups, t_p, rho, wait, nbytes, layers * x, exposed, link, layers,
        n if ok else None, tau if ok else None, wait + t_p + exposed + request if ok else None, tau if ok else None,
        e.kv_bytes(n) if ok else None, cap_n, prefill * groups / t_p, decode * groups * d_rate, limit,
        None if n is not None else why, request, k, t_k, prefill * groups * k / t_k)
