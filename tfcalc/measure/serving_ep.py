"""Expert-parallel serving measured on torch.distributed (gloo on the CPU): E ranks, each holding n/E of every
mixture's experts (tfcalc.measure.experts_parallel.apply_ep, the training run's split and all-to-alls) and its own
sequences (attention data-parallel: every rank the whole of the rest of the model), runs one-token forwards -- a
decode step's MoE traffic: b new tokens a rank routed, dispatched and combined; the real model's forward keeps no
KV cache here, so the cache is not what this checks -- and records, per rank, what
tfcalc.count.serving.expert_parallel predicts:

- the bytes of its parameters (the routed experts it holds, and the rest), exact;
- per MoE layer and step, the rows it sends to other ranks in the dispatch and in the combine (the splits each
  ``all_to_all_single`` is given; the rows a rank keeps for itself move nothing), in its activations' dtype;
- per MoE layer and step, the distinct experts of its own that some token of any rank chose (the experts whose
  weights its step reads), from every rank's router choices gathered after the step.

One rank's program, launched by ``measure`` (tfcalc.measure.launch), as tfcalc.measure.serving_tp's:

    python -m tfcalc.measure.serving_ep request.json   # as rank RANK of WORLD_SIZE

A request: {"config": {...}, "batch": b (sequences a rank), "steps": S}; the steps' tokens drawn at random
(seeded by rank), so the routing varies from step to step as a server's does.
"""

from __future__ import annotations

import json
import os
import sys

import torch


def _recorders(model, sent: list, chosen: list):
    """Record every all-to-all's send splits (``sent``: (rows to each rank, row width, bytes a value)) and every
    mixture's router choices (``chosen``: (N, k) expert ids); returns the undo."""
    import torch.distributed.nn.functional as dnn

    from tfcalc.measure.experts_parallel import moe_modules

    real = dnn.all_to_all_single

    def all_to_all_single(output, input, output_split_sizes=None, input_split_sizes=None, group=None):  # noqa: A002
        sent.append((list(input_split_sizes), input.shape[1], input.element_size()))
        return real(output, input, output_split_sizes, input_split_sizes, group)

    dnn.all_to_all_single = all_to_all_single
    undo = [lambda: setattr(dnn, "all_to_all_single", real)]
    for _, m in moe_modules(model):
        route = m.route

        def recorded(flat, _route=route):
            weights, ids = _route(flat)
            chosen.append(ids.detach().clone())
            return weights, ids

        m.route = recorded
        undo.append(lambda m=m: m.__dict__.pop("route"))
    return lambda: [u() for u in undo]


def run(job: dict, device: torch.device) -> dict:
    import torch.distributed as dist

    from tfcalc.config import from_mapping
    from tfcalc.measure.experts_parallel import apply_ep, moe_modules
    from tfcalc.model import build_model

    cfg = from_mapping(job["config"])
    E, rank = dist.get_world_size(), dist.get_rank()
    torch.manual_seed(0)  # every rank the same weights
    model = build_model(cfg, device, torch.float32).eval()
    local = set(apply_ep(model, dist.group.WORLD, E, rank))
    params = dict(model.named_parameters())
    expert_bytes = sum(p.numel() * p.element_size() for n, p in params.items() if n in local)
    rest_bytes = sum(p.numel() * p.element_size() for n, p in params.items() if n not in local)
    n_expert = next(m.n_expert for _, m in moe_modules(model))
    held = range(rank * n_expert // E, (rank + 1) * n_expert // E)
    gen = torch.Generator().manual_seed(1000 + rank)
    off_rank_rows, a2a_bytes, hit, calls = 0, 0, [], 0
    for _ in range(job["steps"]):
        sent, chosen = [], []
        undo = _recorders(model, sent, chosen)
        idx = torch.randint(0, cfg.vocab_size, (job["batch"], 1), generator=gen).to(device)
        with torch.no_grad():
            model(idx)
        undo()
        for splits, width, nbytes in sent:  # dispatch and combine, each MoE layer
            off = sum(splits) - splits[rank]
            off_rank_rows += off
            a2a_bytes += off * width * nbytes
            calls += 1
        for ids in chosen:  # every rank's choices of this layer: which of this rank's experts some token chose
            everyone = [torch.empty_like(ids) for _ in range(E)]
            dist.all_gather(everyone, ids)
            picked = set(torch.cat(everyone).flatten().tolist())
            hit.append(sum(e in picked for e in held))
    layers = len(hit) // job["steps"]
    return {"rank": rank, "world_size": E, "routed_experts_bytes": expert_bytes, "rest_bytes": rest_bytes,
            "moe_layers": layers, "steps": job["steps"], "tokens_per_step": job["batch"],
            "all_to_all_calls": calls, "off_rank_rows": off_rank_rows, "off_rank_bytes": a2a_bytes,
            "experts_hit_mean": sum(hit) / len(hit)}


def main(argv: list[str] | None = None) -> None:
    import torch.distributed as dist

    from tfcalc.measure.distributed import init_process_group, leave_process_group
    from tfcalc.measure.lifeline import die_with_parent

    die_with_parent()
    path = (argv or sys.argv[1:])[0]
    with open(path, encoding="utf-8") as f:
        request = json.load(f)
    device = init_process_group("cpu")
    answer = run(request, device)
    folder = os.path.dirname(os.path.abspath(path))
    with open(os.path.join(folder, f"rank-{dist.get_rank()}.json"), "w", encoding="utf-8") as f:
        json.dump(answer, f)
    dist.barrier()  # leave together (tfcalc.measure.serving_tp: rank 0 hosts the store)
    leave_process_group()


def measure(config: dict, ep: int, batch: int, steps: int, timeout: float = 300) -> list[dict]:
    """Run the request on ``ep`` local gloo ranks; every rank's record. Refused, before any rank starts, when
    the ranks would not fit (tfcalc.measure.fit.require_serving_ranks_fit: each builds the whole model first)."""
    from tfcalc.config import from_mapping
    from tfcalc.measure.fit import require_serving_ranks_fit
    from tfcalc.measure.launch import check_nproc, run_module

    check_nproc(ep, "cpu")
    cfg = from_mapping(config)
    require_serving_ranks_fit(cfg, ep, batch, 1, "cpu", f"{cfg.name} expert-parallel serving (fp32)")
    return run_module("tfcalc.measure.serving_ep", {"config": config, "batch": batch, "steps": steps}, ep, timeout)

if __name__ == "__main__":
    main()
