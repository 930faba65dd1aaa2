"""The roofline's "bound" label against the ceilings its predicted time uses (issue 20, part G, point 3).

With the performance model, a row's compute time divides by the peak times its matmul's efficiency
(tfcalc.count.perf.gemm), and the bandwidth is the achievable one. The label used to compare FLOPs over
the nominal peak with bytes over the achievable bandwidth: a step the prediction times as compute-bound
(most of its rows on the compute roof) was called memory-bound."""

from __future__ import annotations

import pytest

from tfcalc import devices
from tfcalc.count.model import quant
from tfcalc.count.perf.hardware import perf_spec
from tfcalc.count.serving import roofline, static as serving
from tfcalc.presets import load
from tfcalc.workload import Workload

BF16 = quant.plain("bf16")


def h100_model() -> roofline.Ceilings:
    """The performance model's ceilings on an H100 SXM, as tfcalc.report.infer.datasheet_ceilings makes them."""
    spec, perf = devices.by_key("h100-sxm"), perf_spec("h100-sxm")
    return roofline.Ceilings(spec.peak("bf16"), spec.bandwidth_bytes_per_s * perf.bandwidth_efficiency, "test", perf)


def test_a_step_timed_on_the_compute_roof_is_labelled_compute():
    # Llama 2 70B decoding 320 sequences at context 128: 8 of its 11 rows take longer for their FLOPs (at
    # their GEMM shapes' efficiency) than for their bytes; at the nominal peak the FLOPs would take 0.98×
    # the bytes' time (the old label: memory), at the achievable ceiling 1.23×.
    c, step = h100_model(), roofline.decode_step(load("llama2-70b"), 320, 128, BF16, "bf16")
    assert sum(r.bound(c) == "compute" for r in step.rows) == 8
    assert step.flops / c.flops_per_s < step.bytes / c.bytes_per_s  # what the nominal peak said
    assert step.compute_s(c) == pytest.approx(sum(r.flops / (c.flops_per_s * c.efficiency(r)) for r in step.rows))
    assert step.memory_s(c) == pytest.approx(step.bytes / c.bytes_per_s)
    assert step.compute_s(c) > 1.2 * step.memory_s(c) and step.bound(c) == "compute"


def test_the_plain_roofline_is_unchanged():
    # measured ceilings carry no performance model: efficiency 1, the comparison is FLOPs/peak vs bytes/bandwidth
    c = roofline.Ceilings(989e12, 3.35e12, "test")
    for batch in (1, 64, 300, 512):
        step = roofline.decode_step(load("llama2-70b"), batch, 128, BF16, "bf16")
        nominal = "compute" if step.flops / c.flops_per_s >= step.bytes / c.bytes_per_s else "memory"
        assert step.bound(c) == nominal


def test_the_estimate_labels_its_decode_steps_at_the_same_ceilings():
    c, cfg = h100_model(), load("llama2-70b")
    est = serving.estimate(cfg, Workload(batch=320, seq=127, gen=3), BF16, c)
    steps = [roofline.decode_step(cfg, 320, 127 + j, BF16, "bf16") for j in (1, 2)]
    assert sum(s.compute_s(c) for s in steps) > sum(s.memory_s(c) for s in steps)
    assert est.bound == "compute"
    # the compute-bound batch is the first whose step is labelled compute at those ceilings
    first = serving.compute_bound_batch(cfg, Workload(seq=128), BF16, c)
    assert roofline.decode_step(cfg, first, 128, BF16, "bf16").bound(c) == "compute"
    assert roofline.decode_step(cfg, first - 1, 128, BF16, "bf16").bound(c) == "memory"
    assert first <= 320
