"""The fused attention kernel's efficiencies by name (tfcalc.count.perf.hardware.HOPPER_ATTENTION) against
their source, Shah et al. 2024 ("FlashAttention-3", arXiv 2407.08608) Fig. 5 and 6 on an H100 SXM5, head dim
128, 8K tokens, in TFLOP/s: forward with the causal mask FA2 333, cuDNN 529, FA3 602; without it 370, 600,
646; backward 318, 518, 559, counted by FlashAttention's benchmark as 2.5 forwards (benchmark_flash_attention.py,
``flops``), tfcalc's convention 2. And context parallelism's ring: the first step causal, the C − 1 later ones
unmasked blocks (torch's _templated_ring_attention), checked by hand on Llama 3 8B's shapes."""

from __future__ import annotations

import dataclasses

import pytest

from tfcalc.count.perf.hardware import HOPPER_ATTENTION, HOPPER_UNMASKED_FORWARD, perf_spec
from tfcalc.count.training.micro_batch_time import micro_batch_time
from tfcalc.presets import load
from tfcalc.workload import Layout

PAPER = {"fa2": (333, 370, 318), "cudnn": (529, 600, 518), "fa3": (602, 646, 559)}  # causal, unmasked, backward


@pytest.mark.parametrize("kernel", sorted(PAPER))
def test_each_kernel_is_its_published_h100_rate(kernel):
    causal, unmasked, backward = PAPER[kernel]
    assert HOPPER_ATTENTION[kernel] == pytest.approx((causal / 989, backward * 2 / 2.5 / 989), rel=1e-12)
    assert HOPPER_UNMASKED_FORWARD[kernel] == pytest.approx(unmasked / 989, rel=1e-12)


@pytest.mark.parametrize("device", ["h100-sxm", "h100-pcie", "h100-nvl", "h200"])
def test_hopper_table_devices_run_pytorchs_flashattention_2(device):
    perf = perf_spec(device)
    assert perf.attention_kernel == "fa2" and perf.flash_efficiency == HOPPER_ATTENTION["fa2"]
    assert perf.flash_unmasked_forward == HOPPER_UNMASKED_FORWARD["fa2"]


@pytest.mark.parametrize("cp", [2, 4, 8])
def test_the_rings_later_steps_run_unmasked(cp):
    cfg = load("llama3-8b", {})
    perf, peak, T = perf_spec("h100-sxm"), 989e12, 8192
    L = Layout(seq=T, global_batch=1, micro_batch=1, cp=cp, recompute="none")
    ring = micro_batch_time(cfg, L, peak, 3e12, perf).block_attention_s * 32
    masked = micro_batch_time(cfg, L, peak, 3e12, dataclasses.replace(perf, flash_unmasked_forward=None)
                              ).block_attention_s * 32
    # forward FLOPs of the rank: Q·Kᵀ and ·V over the causal pairs T(T+1)/2 of 32 heads of 128, 32 layers, / C
    flops = 2 * 2 * (T * (T + 1) // 2) * 128 * 32 * 32 / cp
    later = flops * (cp - 1) / cp
    saved = later / (peak * HOPPER_ATTENTION["fa2"][0]) - later / (peak * HOPPER_UNMASKED_FORWARD["fa2"])
    assert masked - ring == pytest.approx(saved, rel=1e-9)
    assert ring < masked


def test_without_context_parallelism_the_causal_rate_alone():
    cfg = load("llama3-8b", {})
    perf = perf_spec("h100-sxm")
    L = Layout(seq=8192, global_batch=1, micro_batch=1, recompute="none")
    a = micro_batch_time(cfg, L, 989e12, 3e12, perf).block_attention_s
    b = micro_batch_time(cfg, L, 989e12, 3e12, dataclasses.replace(perf, flash_unmasked_forward=None)).block_attention_s
    assert a == b
