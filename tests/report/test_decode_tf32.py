"""A measured decode run in fp32 on a GPU whose fp32 matmuls ran as TF32 reads the tf32 peak for its
prefill MFU, as `bench` does (the fp32 peak would put an H100's prefill MFU near 7× too high)."""

from __future__ import annotations

from tfcalc import devices
from tfcalc.count.model import quant
from tfcalc.count.serving import static as serving
from tfcalc.count.serving.roofline import Ceilings
from tfcalc.measure.bench import Bandwidth, Timing
from tfcalc.measure.decode import DecodeRun, DecodeTiming
from tfcalc.presets import load
from tfcalc.report.decode import measured_json
from tfcalc.workload import Workload

H100 = "NVIDIA H100 80GB HBM3"


def _measured(tf32: bool) -> dict:
    cfg = load("gpt2")
    c = Ceilings(1e14, 1e12, "test")
    est = serving.estimate(cfg, Workload(batch=1, seq=8, gen=5), quant.plain("fp32"), c)
    timing = DecodeTiming(Timing((0.01,)), Timing((0.001,)), 1000)
    run = DecodeRun("cuda:0", H100, (timing,), 1e14, Bandwidth(2e12, 2e12, 2e12), 1, 1, tf32=tf32)
    return measured_json(est, timing, run, c, "fp32")


def test_the_prefill_mfu_reads_the_peak_the_matmuls_ran_at():
    assert _measured(tf32=True)["peak_flops_per_s"] == devices.peak_flops(H100, "fp32", tf32_enabled=True)
    assert _measured(tf32=False)["peak_flops_per_s"] == devices.peak_flops(H100, "fp32") == 67e12
    on, off = _measured(True), _measured(False)
    assert on["prefill_mfu"] * on["peak_flops_per_s"] == off["prefill_mfu"] * off["peak_flops_per_s"]
