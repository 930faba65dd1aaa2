"""Time the routing and permutes of tfcalc's own mixture of experts (tfcalc.model.experts: the op sequence of
MixtureOfExperts.route and _dropless) on this CPU against the bytes tfcalc.count.perf.moe_dispatch derives
for them, beside a plain copy of the same size (the CPU's achievable bandwidth). Median of repeated runs.

    PYTHONPATH=$PWD python benchmarks/moe_dispatch_cpu.py [--tokens 8192 --d 1024 --experts 8 --k 2 --threads 1]

Each part's implied bandwidth (derived bytes / measured seconds) beside the copy's says how far a
memory-bound reading holds: near 1 the bytes explain the time; below 1 the op is slower than its bytes
(the sort's compares, index_add's scattered writes). The copy is a clone: a fresh output each call, as
every op here allocates its own (large outputs are fresh pages from the OS, first-touched by the op).
The CPU's sort is a comparison sort that moves its keys once (24 bytes per pair), not CUDA's 8 radix
passes: it is priced as such here.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from tfcalc.count.perf import moe_dispatch
from tfcalc.model.grouped import expert_ends


def median_s(fn, runs: int = 15) -> float:
    for _ in range(3):
        fn()
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=8192)
    ap.add_argument("--d", type=int, default=1024)
    ap.add_argument("--experts", type=int, default=8)
    ap.add_argument("--k", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    N, d, E, k = args.tokens, args.d, args.experts, args.k
    P, a = N * k, 4  # fp32
    flat = torch.randn(N, d)
    logits = torch.randn(N, E)
    top, chosen = logits.topk(k, dim=-1)
    weights = top.softmax(dim=-1)
    pair_expert = chosen.flatten()
    order = pair_expert.argsort(stable=True)
    token = order.div(k, rounding_mode="floor")
    w = weights.flatten().index_select(0, order)
    y = torch.randn(P, d)

    def index_work():
        o = pair_expert.argsort(stable=True)
        e = pair_expert.index_select(0, o)
        o.div(k, rounding_mode="floor")
        weights.flatten().index_select(0, o)
        expert_ends(e, E)

    def permute():
        flat.index_select(0, token)
        torch.zeros_like(flat).index_add(0, token, y * w[:, None])

    src = torch.randn(P, d)
    copy_s = median_s(lambda: src.clone())  # a fresh output, as every op here allocates its own
    copy_bw = 2 * P * d * a / copy_s
    cpu_sort = (moe_dispatch.SORT_PASSES * 32 - 24) * P  # the CPU's sort: its keys once (module docstring)
    parts = {
        "top-k (step 1)": (lambda: logits.topk(k, dim=-1), moe_dispatch.topk(N, E, k, a).forward_bytes),
        "index work (step 2)": (index_work, moe_dispatch.index_work(P, a).forward_bytes - cpu_sort),
        "permute + unpermute (step 3)": (permute, moe_dispatch.PERMUTE[0] * P * d * a + N * d * a),
        "  of it, gather (2a)": (lambda: flat.index_select(0, token), 2 * P * d * a),
        "  of it, × weight (2a)": (lambda: y * w[:, None], 2 * P * d * a),
        "  of it, zeros + index_add": (lambda: torch.zeros_like(flat).index_add(0, token, y),
                                       3 * P * d * a + N * d * a),
    }
    print(f"N {N}, d {d}, E {E}, k {k}, fp32, {args.threads} thread(s); copy {copy_bw / 1e9:.2f} GB/s")
    print(f"{'part':30} {'derived MB':>11} {'measured ms':>12} {'implied GB/s':>13} {'÷ copy':>7}")
    for name, (fn, nbytes) in parts.items():
        s = median_s(fn)
        print(f"{name:30} {nbytes / 1e6:11.2f} {s * 1e3:12.3f} {nbytes / s / 1e9:13.2f} {nbytes / s / copy_bw:7.2f}")


if __name__ == "__main__":
    main()
