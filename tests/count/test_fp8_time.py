"""FP8 matmuls' time (tfcalc.count.perf.fp8_time): their own ceiling, the casts that feed them in training,
16-bit attention in serving, and MFU against a named peak -- each against a hand derivation."""

import dataclasses
import json
import os
import subprocess
import sys

import pytest

from tfcalc.count.model.quant import weight_format
from tfcalc.count.perf import fp8_time, gemm
from tfcalc.count.perf.hardware import perf_spec
from tfcalc.count.serving.roofline import Ceilings, prefill_step
from tfcalc.count.training.layout import Layout
from tfcalc.count.training.micro_batch_time import micro_batch_time
from tfcalc.presets import load

H100_BW = 3.35e12 * 0.85


def test_cast_bytes_worked_example():
    """The module docstring's: Llama 2 7B's up projection, m = 4096, k = 4096, n = 11008, bf16: each input
    read in 2 bytes, written in 1 row-major and 1 transposed."""
    fwd, bwd = fp8_time.training_cast_bytes(4096, 4096, 11008, 2, 2)
    assert fwd == 4 * 4096 * 4096 + 4 * 4096 * 11008 == 247_463_936
    assert bwd == 4 * 4096 * 11008 == 180_355_072
    assert fwd / H100_BW == pytest.approx(86.9e-6, rel=1e-3) and bwd / H100_BW == pytest.approx(63.3e-6, rel=1e-3)


@pytest.mark.parametrize("key, ceiling", [("h100-sxm", 1402.6 / 1979), ("h200", 1453.4 / 1979),
                                          ("b200", 3432.5 / 4500), ("l40s", 1402.6 / 1979)])
def test_fp8_ceiling_is_the_mamf_tables_fp8_row(key, ceiling):
    """Bekman's MAMF table, FP8 rows (l40s: none measured, the H100 SXM's assumed)."""
    assert perf_spec(key).fp8_ceiling == pytest.approx(ceiling, abs=5e-4)
    assert perf_spec(key).fp8_ceiling < perf_spec(key).matmul_ceiling


def test_fp8_gemm_runs_the_shape_model_under_the_fp8_ceiling():
    """Same tiles and waves, the ceiling swapped: the ratio of the two efficiencies is the ceilings'."""
    p = perf_spec("h100-sxm")
    bf16 = gemm.efficiency(4096, 11008, 4096, p.sm_count, p.matmul_ceiling)
    fp8 = gemm.efficiency(4096, 11008, 4096, p.sm_count, p.fp8_ceiling)
    assert fp8 / bf16 == pytest.approx(0.709 / 0.801)


# Llama 2 7B's block linears (k, n): q, k, v, o 4096 × 4096; gate, up 4096 × 11008; down 11008 × 4096
LLAMA2_7B_LINEARS = [(4096, 4096)] * 4 + [(4096, 11008)] * 2 + [(11008, 4096)]


def test_training_casts_are_the_hand_sum_over_the_blocks_linears():
    """micro_batch_time with FP8 minus the same with FP8 GEMMs but no casts is, per block, the casts'
    bytes over the bandwidth and 3 kernels per linear; m = micro-batch 1 × seq 4096."""
    cfg, perf = load("llama2-7b"), perf_spec("h100-sxm")
    L = Layout(tp=1, pp=1, dp=1, seq=4096, global_batch=1, micro_batch=1, recompute="none", compute_dtype="fp8")
    with_casts = micro_batch_time(cfg, L, 989e12, H100_BW, perf, 1979e12)
    m = 4096
    fwd = sum(4 * m * k + 4 * k * n for k, n in LLAMA2_7B_LINEARS)
    bwd = sum(4 * m * n for k, n in LLAMA2_7B_LINEARS)
    casts = (fwd + bwd) / H100_BW + 7 * 3 * perf.kernel_s
    plain = micro_batch_time(cfg, dataclasses.replace(L, compute_dtype=None), 989e12, H100_BW, perf)
    assert with_casts.block_other_s - plain.block_other_s == pytest.approx(casts, rel=1e-9)


def test_plan_fp8_mfu_stays_below_one_and_names_both_peaks():
    """The issue's 103 %: FP8 GEMMs under their own ceiling and the casts bring the MFU against the bf16
    peak below 1; the FP8 peak's share is it × 989/1979 (H100 SXM: 989.4 and 1,979 TFLOP/s)."""
    out = subprocess.run([sys.executable, "-m", "tfcalc", "plan", "llama2-7b", "--dp", "8", "--compute-dtype", "fp8",
                          "--device-spec", "h100-sxm", "--json"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    step = json.loads(out.stdout)["step"]
    assert step["mfu"] < 1 and step["mfu_peak_dtype"] == "bf16"
    assert step["mfu_fp8_peak"] == pytest.approx(step["mfu"] * 989e12 / 1979e12, rel=1e-3)
    plain = subprocess.run([sys.executable, "-m", "tfcalc", "plan", "llama2-7b", "--dp", "8", "--device-spec",
                            "h100-sxm", "--json"], capture_output=True, text=True, timeout=120)
    assert json.loads(plain.stdout)["step"]["mfu_fp8_peak"] is None
    text = subprocess.run([sys.executable, "-m", "tfcalc", "plan", "llama2-7b", "--dp", "8", "--compute-dtype", "fp8",
                           "--device-spec", "h100-sxm"], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "COLUMNS": "250"}).stdout
    assert "of the bf16 peak" in text and "of the FP8 peak" in text


def test_serving_fp8_gemms_at_fp8_attention_and_head_at_16_bit():
    """infer --dtype fp8: the block matrices at the FP8 peak × their shape's efficiency under the FP8
    ceiling; the score products at the 16-bit peak × FlashAttention's; the LM head at the 16-bit peak."""
    cfg, perf = load("llama2-7b"), perf_spec("h100-sxm")
    c = Ceilings(1979e12, H100_BW, "test", perf, 67e12, 989e12)
    step = prefill_step(cfg, 1, 2048, weight_format("fp8"), "fp8")
    rows = {r.component: r for r in step.rows}
    up = rows["ffn_up"]
    m, k, n = up.shape
    assert c.rate(up) == pytest.approx(1979e12 * gemm.efficiency(m, n, k, perf.sm_count, perf.fp8_ceiling, up.count))
    assert c.rate(rows["attn_qk"]) == pytest.approx(989e12 * perf.flash_efficiency[0])
    assert c.peak(rows["lm_head"]) == 989e12
    bf16 = Ceilings(989e12, H100_BW, "test", perf, 67e12)  # no FP8: every row at flops_per_s, as before
    assert bf16.peak(rows["attn_qk"]) == 989e12 and not bf16.fp8(up)


def test_infer_says_which_peak_each_matmul_runs_at():
    """infer --dtype fp8: JSON ceilings name the 16-bit peak beside the FP8 one; a bf16 run has none."""
    def ceilings(dtype):
        out = subprocess.run([sys.executable, "-m", "tfcalc", "infer", "llama2-7b", "--dtype", dtype, "--device-spec",
                              "h100-sxm", "--json"], capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout)["ceilings"]

    fp8, bf16 = ceilings("fp8"), ceilings("bf16")
    assert (fp8["flops_per_s"], fp8["high_precision_flops_per_s"]) == (1979e12, 989e12)
    assert "MAMF FP8 H100 SXM 1402.6/1979" in fp8["source"]
    assert bf16["high_precision_flops_per_s"] is None and "FP8" not in bf16["source"]
