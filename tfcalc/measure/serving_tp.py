"""Tensor-parallel serving measured on torch.distributed: the collectives of one forward of the real model
under DTensor tensor parallelism (tfcalc.measure.parallelize.apply_tp, the plan's measured TP), recorded
by tfcalc.measure.collectives, to set beside tfcalc.count.serving.serving_tp's calls and bytes. One rank's
program (gloo on the CPU, NCCL on GPUs), launched by ``measure`` (tfcalc.measure.launch):

    python -m tfcalc.measure.serving_tp request.json   # as rank RANK of WORLD_SIZE, torchrun's variables

A request: {"config": {...}, "batch": B, "seq": T}. Two forwards without gradients, each recorded: a
prefill of T tokens per sequence and a one-token forward (the shapes of a decode step; the real model's
TP forward has no KV cache, so the cache's reads are not what this checks), each followed by the
all-gather of the last position's vocabulary-parallel logits (what sampling needs). Timing is not
measured: gloo on a CPU says nothing about NVLink.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys

import torch


def run(job: dict, device: torch.device) -> dict:
    import torch.distributed as dist

    from tfcalc.config import from_mapping
    from tfcalc.measure.collectives import CollectiveLog
    from tfcalc.measure.parallelize import apply_tp, device_mesh, group_names
    from tfcalc.model import build_model

    cfg = from_mapping(job["config"])
    tp = dist.get_world_size()
    torch.manual_seed(0)
    model = build_model(cfg, device, torch.float32).eval()
    mesh = device_mesh(device.type, 1, tp)
    apply_tp(model, mesh["tp"], sp=False)
    gen = torch.Generator().manual_seed(1)
    out = {}
    for phase, seq in (("prefill", job["seq"]), ("decode", 1)):
        idx = torch.randint(0, cfg.vocab_size, (job["batch"], seq), generator=gen).to(device)
        log = CollectiveLog(group_names(mesh))
        with torch.no_grad(), log.section(phase):
            logits = model(idx)
            last = logits[:, -1]
            last = last.full_tensor() if hasattr(last, "full_tensor") else last
        out[phase] = [dataclasses.asdict(c) for c in log.calls]
        out[f"{phase}_logits_shape"] = list(last.shape)
    return out


def main(argv: list[str] | None = None) -> None:
    import torch.distributed as dist

    from tfcalc.measure.distributed import init_process_group, leave_process_group
    from tfcalc.measure.lifeline import die_with_parent

    die_with_parent()
    path = (argv or sys.argv[1:])[0]
    with open(path, encoding="utf-8") as f:
        request = json.load(f)
    device = init_process_group(request.get("device"))
    answer = run(request, device)
    folder = os.path.dirname(os.path.abspath(path))
    with open(os.path.join(folder, f"rank-{dist.get_rank()}.json"), "w", encoding="utf-8") as f:
        json.dump(answer, f)
    # Both ranks leave together: without it rank 0 (the TCPStore's host) could exit while rank 1 still tears
    # down its gloo pairs, and rank 1 then died in std::terminate ("terminate called without an active
    # exception", SIGABRT) -- seen in tests/measure/test_serving_tp_measured.py; tfcalc.measure.distributed
    # has always had this barrier and never showed it.
    dist.barrier()
    leave_process_group()


def measure(config: dict, tp: int, batch: int, seq: int, timeout: float = 300, device: str = "cpu") -> dict:
    """Run the request on tp local ranks; rank 0's record ({phase: [calls]}). Refused, before any rank
    starts, when the ranks would not fit (tfcalc.measure.fit.require_serving_ranks_fit)."""
    from tfcalc.config import from_mapping
    from tfcalc.measure.fit import require_serving_ranks_fit
    from tfcalc.measure.launch import check_nproc, run_module

    check_nproc(tp, device)
    cfg = from_mapping(config)
    require_serving_ranks_fit(cfg, tp, batch, seq, device, f"{cfg.name} serving (fp32)")  # before any rank starts
    request = {"config": config, "batch": batch, "seq": seq, "device": device}
    return run_module("tfcalc.measure.serving_tp", request, tp, timeout)[0]  # rank 0's record

if __name__ == "__main__":
    main()
