"""Activation offload under each pipeline schedule (tfcalc.count.training.offload): the host holds every micro-batch
in flight but the two blocks the GPU works on -- 1F1B's min(p − i, m), and the interleaved schedule's count
per chunk, checked against the action list of PyTorch's own ScheduleInterleaved1F1B."""

import dataclasses

import pytest
from test_pipeline_schedules import torch_in_flight

from tfcalc.count.training import rank_memory as rm
from tfcalc.count.training.layout import check_layout
from tfcalc.count.training.plan import make_plan
from tfcalc.count.training.steptime import Hardware
from tfcalc.presets import load
from tfcalc.workload import Layout

H100 = Hardware(989e12, 80 * 10**9, 450e9, 50e9, 8)
BLOCK = 2 * 4096 * 4096  # llama2-7b under full recompute keeps each block's input, bf16, one sequence


@pytest.mark.parametrize("p, v, m", [(2, 2, 4), (4, 2, 8), (4, 4, 16), (2, 4, 2), (4, 2, 4)])
def test_interleaved_offload_counts_each_chunks_micro_batches_in_flight(p, v, m):
    cfg = load("llama2-7b")  # 32 blocks: p · v chunks of 32 / (p · v)
    L = Layout(pp=p, dp=1, seq=4096, global_batch=m, recompute="full", schedule="interleaved", virtual_stages=v,
               offload_activations=True)
    check_layout(cfg, L)
    chunk = 32 // (p * v)
    for rank in range(p):
        held = sum(torch_in_flight(p, v, m, rank)) * chunk * BLOCK
        off = rm.rank_offload(cfg, L, rank, 0)
        assert off.activations_saved == held - 2 * BLOCK, rank
        assert off.activation_pcie_bytes == 2 * m * (32 // p) * BLOCK  # every block of the rank, out and back


def test_interleaved_offload_holds_more_on_the_host_than_1f1b():
    """The warm-up's extra chunks (Korthikanti et al. 2022, sec. 4.2.3) were counted as 1F1B's before."""
    cfg = load("llama2-7b")
    one = Layout(pp=4, dp=2, seq=4096, global_batch=16, recompute="full", offload_activations=True)
    inter = dataclasses.replace(one, schedule="interleaved", virtual_stages=2)
    assert rm.rank_offload(cfg, inter, 0, 0).activations_saved > rm.rank_offload(cfg, one, 0, 0).activations_saved
    # what stays on the GPU is the same two blocks, so the planned rank's GPU bytes are unchanged by offload
    kept = make_plan(cfg, dataclasses.replace(inter, offload_activations=False), H100, None).memory
    off = make_plan(cfg, inter, H100, None).memory
    assert kept.activations - off.activations == off.host
