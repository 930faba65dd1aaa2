"""The pace of attention-DP steps measured on torch.distributed (gloo on the CPU): tfcalc.count.serving.adp_pace's
premise, that a step whose MoE layer is a collective over every rank lasts as long as its slowest rank's work.
D ranks, S steps; in each step every rank draws its prompts k_i ~ Poisson(λ) (seeded by rank and step, independent
as adp_pace step 1 has them), does k_i units of its own work before the collective -- a sleep of k_i·u seconds, so
that the ranks' work does not contend for this machine's cores and a loaded test machine does not blur it, standing
for a prompt's attention and dense rows (t_ne = u) -- then all-reduces a small tensor, as each MoE layer's allgather
/ reduce-scatter (or all-to-all) meets every rank. Each rank records each step's wall time and every rank's
k_i and its work's own seconds (gathered after the step). adp_pace says a step lasts u·max_i k_i plus the
collective, not u·(mean k): the measured mean step against the slowest rank's work and u·M_D(λ).

One rank's program, launched by ``measure`` (tfcalc.measure.launch):

    python -m tfcalc.measure.adp_pace request.json   # as rank RANK of WORLD_SIZE

A request: {"steps": S, "lam": λ, "unit_s": u}.
"""

from __future__ import annotations

import json
import os
import sys
import time


def run(job: dict) -> dict:
    import numpy as np
    import torch
    import torch.distributed as dist

    rank, d = dist.get_rank(), dist.get_world_size()
    one = torch.ones(1)
    dist.all_reduce(one)  # the group up before the first timed step
    starts, counts, works = [], [], []
    for s in range(job["steps"]):
        k = int(np.random.default_rng([rank, s]).poisson(job["lam"]))
        starts.append(time.perf_counter())
        if k:
            time.sleep(k * job["unit_s"])  # the rank's own prompts' attention and dense rows
        work = time.perf_counter() - starts[-1]  # the sleep as it lasted: a loaded machine wakes a rank late
        dist.all_reduce(one)  # the MoE layer's collective over every rank
        got = [torch.zeros(2, dtype=torch.float64) for _ in range(d)]
        # the counts and the work's own seconds, for the record (a second collective: the step's end)
        dist.all_gather(got, torch.tensor([float(k), work], dtype=torch.float64))
        counts.append([int(x[0].item()) for x in got])
        works.append([float(x[1].item()) for x in got])
    starts.append(time.perf_counter())
    # a step: from one step's start to the next's on this rank (the ranks leave a collective a little apart, so
    # a single step's time on one rank carries that skew; consecutive steps' starts share it)
    steps = [b - a for a, b in zip(starts, starts[1:], strict=False)]
    return {"rank": rank, "world_size": d, "step_s": steps, "counts": counts, "work_s": works}


def main(argv: list[str] | None = None) -> None:
    import torch.distributed as dist

    from tfcalc.measure.distributed import init_process_group, leave_process_group
    from tfcalc.measure.lifeline import die_with_parent

    die_with_parent()
    path = (argv or sys.argv[1:])[0]
    with open(path, encoding="utf-8") as f:
        request = json.load(f)
    init_process_group("cpu")
    answer = run(request)
    folder = os.path.dirname(os.path.abspath(path))
    with open(os.path.join(folder, f"rank-{dist.get_rank()}.json"), "w", encoding="utf-8") as f:
        json.dump(answer, f)
    dist.barrier()  # leave together (rank 0 hosts the store)
    leave_process_group()


def measure(ranks: int, steps: int, lam: float, unit_s: float, timeout: float = 300) -> list[dict]:
    """Run the request on ``ranks`` local gloo ranks; every rank's record."""
    from tfcalc.measure.launch import check_nproc, run_module

    check_nproc(ranks, "cpu")
    return run_module("tfcalc.measure.adp_pace", {"steps": steps, "lam": lam, "unit_s": unit_s}, ranks, timeout)

if __name__ == "__main__":
    main()
