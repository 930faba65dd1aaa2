"""The slowest GPU of a synchronous step (tfcalc.count.perf.slowest_rank): the expected largest of N normals
against its closed forms, published tables and draws on the CPU; Sinha et al.'s variation against the same
statistic computed as their artifact computes it; the term in a plan, its JSON and table, and its override."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from tfcalc import plan
from tfcalc.count.perf.slowest_rank import expected_max, sigma, slowest_rank_s

ROOT = Path(__file__).parents[2]
GRAND_TETON = ROOT / "benchmarks" / "devices" / "grand-teton-h100-500w.yaml"
FSDP = dict(zero=3, micro_batch=2, seq=8192, recompute="op", grad_dtype="fp32", kernels="compile")


def test_expected_max_against_its_closed_forms_and_tables():
    assert expected_max(1) == 0.0
    assert expected_max(2) == pytest.approx(1 / math.sqrt(math.pi), abs=1e-6)  # E max(X1, X2) = 1/√π
    assert expected_max(3) == pytest.approx(3 / (2 * math.sqrt(math.pi)), abs=1e-6)
    # Harter 1961 (Biometrika 48, "Expected values of normal order statistics"), the largest of n: 10 1.53875,
    # 100 2.50759
    assert expected_max(10) == pytest.approx(1.53875, abs=1e-5)
    assert expected_max(100) == pytest.approx(2.50759, abs=1e-5)
    # Blom's approximation Φ⁻¹((n − 0.375)/(n + 0.25)), within a percent from 8 to 16,384
    from statistics import NormalDist
    for n in (8, 128, 1024, 16384):
        assert expected_max(n) == pytest.approx(NormalDist().inv_cdf((n - 0.375) / (n + 0.25)), rel=0.01)
    values = [expected_max(n) for n in (1, 2, 8, 64, 128, 1024, 16384, 10**6)]
    assert values == sorted(values)


@pytest.mark.parametrize("n", [8, 128])
def test_expected_max_against_draws(n):
    # the maxima of 40,000 sets of n standard normal draws on the CPU: their mean within 4 standard errors
    g = torch.Generator().manual_seed(31)
    maxima = torch.randn(40_000, n, generator=g, dtype=torch.float64).amax(dim=1)
    error = maxima.std().item() / math.sqrt(maxima.numel())
    assert abs(maxima.mean().item() - expected_max(n)) < 4 * error


def test_sigma_recovers_sinha_et_als_variation_from_draws():
    # hal-uw/gpu_variability_sc22_artifact plot_script/plot_aggregated.py: variability = ((Q3 + 1.5 IQR) −
    # (Q1 − 1.5 IQR)) / Q2; GPUs whose speed is normal with σ = sigma(0.08) around 1 show 8 % that way
    s = sigma(0.08)
    assert s == pytest.approx(0.08 / (4 * 2 * 0.6744897501960817))  # 1.48 %
    g = torch.Generator().manual_seed(7)
    speeds = 1 + s * torch.randn(200_000, generator=g, dtype=torch.float64)
    q1, q2, q3 = (torch.quantile(speeds, q).item() for q in (0.25, 0.5, 0.75))
    assert (q3 + 1.5 * (q3 - q1) - (q1 - 1.5 * (q3 - q1))) / q2 == pytest.approx(0.08, rel=0.01)
    assert sigma(0.0) == 0.0 and slowest_rank_s(2.0, 1.0, 0.08, 1) == 0.0


@pytest.mark.parametrize("gpus", [8, 128])
def test_plan_charges_the_slowest_gpu_of_its_matmuls(gpus):
    r = plan("llama3-8b", dp=gpus, global_batch=2 * gpus, device_spec=str(GRAND_TETON), **FSDP)
    st, perf = r.plan.step, r.hardware.perf
    assert perf.gpu_variation == 0.08
    expected = st.matmul_s * sigma(0.08) * expected_max(gpus)  # no pipeline: no stretch
    assert st.slowest_rank_s == pytest.approx(expected)
    assert st.physics_s == pytest.approx(st.pipelined_s + sum(st.exposed_s.values()) + st.contention_s
                                         + st.hbm_contention_s + st.fsdp_copy_s + st.optimizer_s + expected)
    j = r.to_json()
    assert j["step"]["slowest_rank_s"] == st.slowest_rank_s and j["step"]["perf"]["gpu_variation"] == 0.08
    assert j["step"]["perf"]["constants_from"]["gpu_variation"] == "h100-sxm, inherited"


def test_more_gpus_wait_longer_and_one_gpu_not_at_all():
    one = plan("llama2-7b", gpus=1, seq=2048, global_batch=8, micro_batch=1, zero=0, recompute="full")
    assert one.plan.step.slowest_rank_s == 0.0
    few, many = (plan("llama3-8b", dp=n, global_batch=2 * n, device_spec=str(GRAND_TETON), **FSDP).plan.step
                 for n in (8, 128))
    assert many.slowest_rank_s / many.matmul_s > few.slowest_rank_s / few.matmul_s


def test_the_pipeline_stretches_it_and_mfu_stays():
    kw = dict(tp=8, pp=4, dp=2, seq=2048, global_batch=64, micro_batch=1, recompute="full")
    st = plan("llama2-70b", **kw).plan.step
    assert st.bubble > 0
    assert st.slowest_rank_s == pytest.approx(st.matmul_s * st.pipelined_s / st.compute_s * sigma(0.08)
                                              * expected_max(64))
    stated = plan("llama2-70b", mfu=0.4, **kw).plan.step
    assert stated.mfu == pytest.approx(0.4) and stated.physics_s == pytest.approx(st.physics_s)


def test_a_device_file_states_its_own_variation(tmp_path, cli):
    path = tmp_path / "calm.yaml"
    path.write_text(GRAND_TETON.read_text().replace("perf: {sustained_clock: 0.877}",
                                                    "perf: {sustained_clock: 0.877, gpu_variation: 0}"))
    args = ("plan", "llama3-8b", "--dp", "8", "--zero", "3", "--global-batch", "16", "--micro-batch", "2", "--seq",
            "8192", "--recompute", "op", "--grad-dtype", "fp32", "--kernels", "compile", "--device-spec")
    calm, base = cli(*args, str(path), "--json").json(), cli(*args, str(GRAND_TETON), "--json").json()
    assert calm["step"]["slowest_rank_s"] == 0.0 and calm["step"]["perf"]["constants_from"]["gpu_variation"] == \
        "the device file"
    assert calm["step_time_s"] == pytest.approx(base["step_time_s"] - base["step"]["slowest_rank_s"])
    table = " ".join(cli(*args, str(GRAND_TETON)).out.split())
    assert "slowest of 8 GPUs" in table and "σ 1.48% × e_N 1.42" in table
    assert "slowest of" not in " ".join(cli(*args, str(path)).out.split())
