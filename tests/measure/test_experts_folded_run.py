"""Experts folded over TP × DP, run for real on 4 gloo ranks (tfcalc.count.training.experts_folded): a 2-D
DeviceMesh of DP 2 × TP 2 (TP adjacent, Megatron's order) and one mixture of experts of the tiny Mixtral-like
model of tests/count/test_experts_folded.py with its 8 experts dealt over all 4 ranks (EP 4 = TP 2 × DP 2,
ETP 1: the expert grid etp-ep-edp is the world's order). Each rank feeds the MoE layer its own sequence shard
(its TP rank's S/TP positions of its DP rank's sequence, as under sequence parallelism) through
tfcalc.measure.experts_parallel's dispatch and combine, forward and backward. Measured against the plan of
``tp 2 · dp 2 · ep 4 · etp 1 · SP``: the expert bytes each rank holds, and the token all-to-alls' payload (a
mean over the ranks: what a rank receives depends on the routing, what all of them send and receive does
not) and the counts'. The attention's TP is not run here: tests/measure covers it apart."""

import json
import os
import socket

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from tfcalc.count.training import rank_memory as rm
from tfcalc.count.training.plan import make_plan
from tfcalc.count.training.steptime import Hardware
from tfcalc.presets import load
from tfcalc.workload import Layout

TINY_SET = ["n_layer=2", "d_model=64", "n_head=4", "n_kv_head=2", "d_head=16", "d_ff=32", "n_expert=8",
            "n_expert_active=2", "vocab_size=128", "max_seq_len=256"]
SEQ, D = 128, 64


def _rank(rank: int, world: int, port: int, out: str) -> None:
    from torch.distributed.device_mesh import init_device_mesh

    from tfcalc.measure.collectives import CollectiveLog
    from tfcalc.measure.experts_parallel import apply_ep, moe_modules
    from tfcalc.model import build_model

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))  # rank = dp·2 + tp: TP adjacent
        dp_rank, tp_rank = mesh.get_local_rank("dp"), mesh.get_local_rank("tp")
        torch.manual_seed(0)  # every rank the same initial weights (the router is replicated)
        model = build_model(load("mixtral-8x7b", TINY_SET), "cpu", torch.float32)
        apply_ep(model, dist.group.WORLD, world, rank)  # EP 4 over the whole TP × DP grid
        moe = moe_modules(model)[0][1]
        held = sum(p.numel() * p.element_size() for p in moe.experts.parameters())
        gen = torch.Generator().manual_seed(100 + dp_rank)
        x = torch.randn(1, SEQ, D, generator=gen)  # (B, S, h): the DP rank's sequence
        shard = x[:, tp_rank * SEQ // 2:(tp_rank + 1) * SEQ // 2].clone().requires_grad_()  # (B, S/TP, h): SP
        log = CollectiveLog({})
        with log.section("forward"):
            moe(shard).square().sum().backward()
        sums: dict[str, int] = {}
        for call in log.calls:
            sums[call.phase] = sums.get(call.phase, 0) + call.payload_bytes
        with open(os.path.join(out, f"{rank}.json"), "w") as f:
            json.dump({"held": held, "calls": len(log.calls), **sums}, f)
    finally:
        dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("folded"))
    mp.start_processes(_rank, args=(4, _free_port(), out), nprocs=4, start_method="spawn")
    return [json.load(open(os.path.join(out, f"{r}.json"))) for r in range(4)]


def plan():
    L = Layout(tp=2, dp=2, ep=4, etp=1, sequence_parallel=True, seq=SEQ, global_batch=2, micro_batch=1,
               dtype="fp32")
    return L, make_plan(load("mixtral-8x7b", TINY_SET), L, Hardware(989e12, 80 * 10**9, 450e9, 50e9, 8), None)


def test_each_rank_holds_the_planned_expert_bytes(measured):
    L, _ = plan()
    per_layer = rm.stage_expert_params(load("mixtral-8x7b", TINY_SET), L, 0) // 2 * 4  # fp32, 2 MoE layers
    assert per_layer == 2 * 6144 * 4  # 8 experts / EP 4, gate+up 64 × 64 and down 64 × 32 each
    assert {r["held"] for r in measured} == {per_layer}


def test_the_all_to_all_bytes_are_the_plans(measured):
    """Per MoE layer and micro-batch (m = 2 / (dp 2 × 1) = 1): the plan's 4 token all-to-alls of the rank's
    64 tokens × top-2 × 64 × 4 bytes, and one of 8 int64 counts."""
    _, p = plan()
    (tokens,) = [c for c in p.collectives if c.key == "ep_tokens_all_to_all"]
    (counts,) = [c for c in p.collectives if c.key == "ep_counts_all_to_all"]
    assert tokens.payload_bytes // 2 == 4 * 64 * 2 * 64 * 4
    assert sum(r["tokens"] for r in measured) == 4 * tokens.payload_bytes // 2  # the mean over the 4 ranks
    assert {r["counts"] for r in measured} == {counts.payload_bytes // 2}
    assert {r["calls"] for r in measured} == {tokens.calls // 2 + counts.calls // 2}
