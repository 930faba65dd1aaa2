"""The clock a GPU sustains under a power limit (tfcalc.count.training.overlap_costs.power_capped_clock): the
law against a hand derivation, against GEMM throughput measured on one die at two power limits, and against
torchtitan's own bound on its 500 W H100s; --power-limit through plan, on the table devices."""

from __future__ import annotations

import math

import pytest

from tfcalc import plan
from tfcalc.count.perf.hardware import STATIC_POWER_W, perf_spec
from tfcalc.count.training.overlap_costs import capped_clock, power_capped_clock
from tfcalc.errors import InputError


def test_the_law_by_hand():
    # P = P_s + (P_r - P_s) s^3: 500 W of 700 with 88 W static leaves 412 of the 612 W of dynamic power,
    # s^3 = 412/612 = 0.67320, s = 0.87643 (0.876^3 = 0.6722, 0.877^3 = 0.6745)
    s = power_capped_clock(500, 700, 88)
    assert 0.876 < s < 0.877
    assert 88 + (700 - 88) * s ** 3 == pytest.approx(500)  # the limit is spent, no more
    assert power_capped_clock(500, 700, 0) == pytest.approx(0.8939, abs=1e-4)  # 0.8939^3 = 0.7143 = 5/7
    # static power makes a cap cost more clock: the dynamic part shrinks by more than the total
    assert power_capped_clock(500, 700, 88) < power_capped_clock(500, 700, 0)
    assert power_capped_clock(700, 700, 88) == 1.0 and power_capped_clock(900, 700, 88) == 1.0


def test_a_limit_at_or_below_the_static_power_is_refused():
    for limit, static in ((88, 88), (50, 88)):
        with pytest.raises(InputError, match="no dynamic power"):
            power_capped_clock(limit, 700, static)


def test_against_one_die_measured_at_two_power_limits():
    # tusharhqq/napkin-math-gpu results/a100-80gb-pcie.json (power_limit_w 300) and a100-80gb-sxm4.json
    # (power_limit_w 500): bf16 8192^3 GEMM, medians of 7 rounds, one harness and torch 2.8: 236.28 and
    # 289.30 TFLOP/s. Same GA100 die (108 SMs, 1410 MHz boost), so the ratio is the clock the lower limit holds.
    measured = 236.28 / 289.30  # 0.817
    model = power_capped_clock(300, 500, perf_spec("a100-80gb").static_power_w)  # tfcalc states no A100 static
    assert model == pytest.approx(measured, rel=0.05)  # 0.843: within 5 %
    # the static power that makes the law exact on it is A100-idle-sized, tens of watts, not hundreds
    p_s = (300 - measured ** 3 * 500) / (1 - measured ** 3)
    assert 30 < p_s < 90 and power_capped_clock(300, 500, p_s) == pytest.approx(measured, rel=1e-9)


def test_torchtitan_bounds_its_500w_h100_between_the_nvl_and_the_sxm():
    # benchmarks/llama3_h100_202412_torchtitan.md, footnote 2: "HBM2e-based SXM H100 with lower TDP, the actual
    # peak TFLOPs number is between SXM and NVL". NVIDIA's datasheets: H100 NVL 1,671 sparse bf16 (835.5 dense),
    # SXM 1,979 (989.4): the 500 W clock lies in [0.845, 1].
    s = power_capped_clock(500, 700, STATIC_POWER_W["h100-sxm"])
    assert 835.5 / 989.4 <= s <= 1.0


def test_the_a100_at_its_rated_400w_is_not_derated_and_at_350w_is():
    assert capped_clock(400, "a100-80gb", static_w=perf_spec("a100-80gb").static_power_w) == 1.0
    assert capped_clock(350, "a100-80gb") == pytest.approx((350 / 400) ** (1 / 3))  # 0.956
    base = plan("llama2-7b", gpus=8, seq=4096, device_spec="a100-80gb")
    at_400 = plan("llama2-7b", gpus=8, seq=4096, device_spec="a100-80gb", power_limit=400)
    at_350 = plan("llama2-7b", gpus=8, seq=4096, device_spec="a100-80gb", power_limit=350)
    assert at_400.hardware.perf.sustained_clock == base.hardware.perf.sustained_clock == pytest.approx(1305 / 1410)
    assert at_350.hardware.perf.sustained_clock == pytest.approx(1305 / 1410 * (350 / 400) ** (1 / 3))


def test_the_h100_power_limit_takes_its_static_power_apart():
    r = plan("llama2-7b", gpus=8, seq=4096, device_spec="h100-sxm", power_limit=500)
    assert r.hardware.perf.static_power_w == 88.0
    assert r.hardware.perf.sustained_clock == pytest.approx(((500 - 88) / (700 - 88)) ** (1 / 3))
    assert math.isclose(plan("llama2-7b", gpus=8, seq=4096, device_spec="h100-sxm").hardware.perf.sustained_clock, 1.0)


def test_a_device_file_is_rated_as_the_device_it_inherits_and_may_state_its_static_power(tmp_path):
    from pathlib import Path

    grand_teton = Path(__file__).parents[2] / "benchmarks" / "devices" / "grand-teton-h100-500w.yaml"
    text = grand_teton.read_text().replace("perf: {sustained_clock: 0.876}", "perf: {static_power_w: 120}")
    path = tmp_path / "gt.yaml"
    path.write_text(text)
    r = plan("llama3-8b", dp=8, zero=3, seq=8192, device_spec=str(path), power_limit=500)
    assert r.hardware.perf.static_power_w == 120.0  # stated in the file, over the inherited H100's 88 W
    assert r.hardware.perf.sustained_clock == pytest.approx(((500 - 120) / (700 - 120)) ** (1 / 3))  # 0.868
    assert dict(r.hardware.perf.constants_from)["static_power_w"] == "the device file"
