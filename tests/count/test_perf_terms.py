"""The performance model's physical terms, each against a hand derivation (tfcalc.count.perf)."""

from __future__ import annotations

import dataclasses
import math

import pytest

from tfcalc import devices
from tfcalc.count.model.terms import NonMatmulEntry
from tfcalc.count.perf import collectives, elementwise, gemm
from tfcalc.count.perf.hardware import PerfSpec, perf_spec
from tfcalc.count.perf.inference import kernel_count, overhead, row_efficiency
from tfcalc.report.model_ref import resolve


def load(name):
    return resolve(name, []).cfg


# ---------- GEMM: tile and wave quantization (NVIDIA, "Matrix Multiplication Background User's Guide") ----------


def test_wave_quantization_worked_example():
    """The guide's example: on an A100's 108 SMs, 108 tiles fill one wave; 109 need two, the second with
    one tile: 109 / 216 of the SM-time does work."""
    assert gemm.wave_efficiency(108, 108) == 1.0
    assert gemm.wave_efficiency(109, 108) == pytest.approx(109 / 216)
    assert gemm.wave_efficiency(54, 108) == 0.5


def test_tile_quantization_worked_example():
    """m = 1000 rows in 128-row tiles: 8 tiles cover 1024 rows, 1000/1024 useful; n = 4096 exact."""
    assert gemm.tile_efficiency(1000, 4096, 128, 128) == pytest.approx(1000 / 1024)
    assert gemm.tile_efficiency(129, 128, 128, 128) == pytest.approx(129 / 256)


def test_gemm_efficiency_worked_example():
    """The module docstring's: 4096³ on an A100 (108 SMs, MAMF ceiling 0.859). Best tile 256 × 128:
    16 × 32 = 512 tiles, 512/108 = 4.74 waves -> 5: 0.948; loop 4096/4160 over 2048/2112."""
    best = (512 / 108) / 5
    expected = 0.859 * best * (4096 / 4160) / (2048 / 2112)
    assert gemm.efficiency(4096, 4096, 4096, 108, 0.859) == pytest.approx(expected)
    assert expected == pytest.approx(0.827, abs=1e-3)


def test_larger_gemms_run_closer_to_the_ceiling():
    """Megatron's Table 1 rises with size because its GEMMs grow: the model's efficiency does too, below
    the ceiling; a decode GEMV (m = 1) is far below it (memory-bound anyway)."""
    a100 = perf_spec("a100-80gb")
    effs = [gemm.efficiency(2048, 3 * h // 8, h, a100.sm_count, a100.matmul_ceiling) for h in (2048, 8192, 25600)]
    assert effs == sorted(effs) and effs[-1] <= a100.matmul_ceiling / gemm.loop_efficiency(gemm.K_REF)
    assert gemm.efficiency(1, 4096, 4096, 108, 0.859) < 0.05


def test_split_k_fills_the_sms_of_a_skinny_gemm():
    """m = 128, n = k = 4096 (a 128-token prefill): 32 tiles of 128 × 128 fill 30 % of an A100's 108 SMs;
    split-K multiplies the tiles (step 6), so the model takes at least the best unsplit tiling, and more."""
    unsplit = max(gemm.tile_efficiency(128, 4096, tm, tn) * gemm.shape_efficiency(tm, tn)
                  * gemm.wave_efficiency(math.ceil(128 / tm) * math.ceil(4096 / tn), 108) * gemm.loop_efficiency(4096)
                  for tm, tn in gemm.TILES) * 0.859 / gemm.loop_efficiency(gemm.K_REF)
    assert gemm.efficiency(128, 4096, 4096, 108, 0.859) > unsplit
    assert unsplit == pytest.approx(0.859 * (64 / 108) * gemm.shape_efficiency(128, 64) * (4096 / 4160) / (2048 / 2112))


# ---------- collectives: α-β ----------


def test_alpha_beta_all_reduce_worked_example():
    """The module docstring's: 1 GB all-reduced over 8 ranks on NVLink 3 (300 GB/s, efficiency 0.8, α 2 µs):
    2·7 ring steps of 2 µs, and 2·7/8 GB sent per rank over 240 GB/s."""
    sent = 2 * 7 * 10**9 // 8
    t = collectives.seconds("all_reduce", sent, 8, 1, 300e9, 2e-6, 0.8)
    assert t == pytest.approx(14 * 2e-6 + 1.75e9 / 240e9)
    assert t == pytest.approx(7.3197e-3, rel=1e-4)


def test_alpha_beta_latency_per_call_and_op():
    assert collectives.ring_steps("all_gather", 8) == 7
    assert collectives.ring_steps("reduce_scatter", 4) == 3
    assert collectives.ring_steps("send_recv", 2) == 1
    # 100 tiny calls are latency: 100 · 2(N − 1) · α
    assert collectives.seconds("all_reduce", 0, 4, 100, 1e9, 5e-6, 1.0) == pytest.approx(100 * 6 * 5e-6)
    assert collectives.ddp_calls(100 * 2**20) == 4  # DDP's 25 MiB buckets


# ---------- memory traffic, kernels, dequantization ----------


def test_elementwise_traffic_by_hand():
    """A norm over 10 elements × 3 copies, read and written in bf16: 2 · 30 · 2 bytes; a softmax (score level)
    is fused away; an activation splits over TP, a norm only under SP."""
    entries = [NonMatmulEntry("norms", "n", 4, 10, 3), NonMatmulEntry("softmax", "s", 5, 1000, 1),
               NonMatmulEntry("activation", "a", 4, 40, 1)]
    assert elementwise.forward_traffic(entries, 2) == 2 * 30 * 2 + 2 * 40 * 2
    assert elementwise.forward_traffic(entries, 2, tp=4) == 2 * 30 * 2 + 2 * 40 * 2 / 4
    assert elementwise.forward_traffic(entries, 2, tp=4, sp=True) == (2 * 30 * 2 + 2 * 40 * 2) / 4
    # math attention: Q·Kᵀ writes, softmax reads and writes, ·V reads: 4 passes (6 + a 1-byte mask with dropout)
    assert elementwise.score_traffic(1000, 2) == 8000
    assert elementwise.score_traffic(1000, 2, dropout=True) == 1000 * (6 * 2 + 1)


def test_dequantization_at_the_fp32_lane_rate():
    """6.48e9 int4 weights × 3 instructions on an A100 (19.5 TFLOP/s fp32: 9.75e12 lane instructions/s, each
    on a pair of 16-bit weights): 6.48e9 · 3 / 2 / 9.75e12 = 0.997 ms."""
    ops = PerfSpec().dequant_ops_per_weight
    assert elementwise.dequant_seconds(6_480_000_000, "int4", ops, 19.5e12) == pytest.approx(6.48e9 * 3 / 2 / 9.75e12)
    assert elementwise.dequant_seconds(10**9, "bf16", ops, 19.5e12) == 0


def test_kernel_count_worked_example():
    """tfcalc.count.perf.inference's docstring: Llama 2 7B decode, 450 kernels."""
    cfg = load("llama2-7b")
    assert kernel_count(cfg, 1, 1, 100) == 32 * 14 + 2
    o = overhead(cfg, 1, 1, 100, 0, "bf16", 2, 2.039e12 * 0.85, 19.5e12, perf_spec("a100-80gb"))
    assert o.kernel_s == pytest.approx(450 * 4e-6) and o.dequant_s == 0


def test_bandwidth_and_score_efficiency():
    """Fused attention runs at FlashAttention's forward efficiency; a flat --matmul-efficiency overrides all."""
    a100 = perf_spec("a100-80gb")
    assert row_efficiency("attn_qk", (128, 128, 128), 32, a100, mixing=True) == 0.6
    assert row_efficiency("ffn_up", (2048, 4096, 11008), 1, a100) == gemm.efficiency(2048, 11008, 4096, 108, 0.859)
    flat = dataclasses.replace(a100, matmul_efficiency=0.5)
    assert row_efficiency("ffn_up", (2048, 4096, 11008), 1, flat) == 0.5
    assert perf_spec("a100-80gb", bandwidth_efficiency=0.7).bandwidth_efficiency == 0.7


def test_usable_memory_is_the_drivers_less_the_runtime():
    """An "80 GB" H100 reports 81,089 MiB (torch.cuda.get_device_properties): 79.19 GiB, less the CUDA context
    measured on tfcalc's H100 run, 714,670,080 bytes (and 0.5 GiB of NCCL buffers in a parallel plan); a user's
    file states its own."""
    h100 = devices.by_key("h100-sxm")
    assert devices.driver_bytes(h100) == int(80 * 2**30 * 81089 / 81920)
    assert 79.1 < devices.driver_bytes(h100) / 2**30 < 79.6
    assert devices.usable_bytes(h100, communicating=False) == devices.driver_bytes(h100) - 714_670_080
    mine = dataclasses.replace(h100, key="mine")
    assert devices.usable_bytes(mine) == h100.memory_bytes
    assert devices.intra_link(devices.by_key("a100-pcie")) == "pcie" and devices.intra_link(h100) == "nvlink"


def test_first_token_adds_the_requests_fixed_work_once():
    """The prefill (time to first token) = its rows + its kernels and traffic + request_s (2 ms), and no
    decode step pays request_s: LLaMA 2 7B at 128 tokens on an A100, by hand from the estimate's parts."""
    import tfcalc

    r = tfcalc.infer("llama2-7b", batch=1, seq=128, gen=4, dtype="fp16", device_spec="a100-80gb")
    e = r.estimates[0]
    p = e.prefill_overhead
    assert p.request_s == perf_spec("a100-80gb").request_s == 2e-3
    assert e.prefill_s == pytest.approx(e.prefill.time_s(r.ceilings) + p.kernel_s + p.traffic_s + 2e-3)
    assert e.decode_overhead.request_s == 0
    plain = dataclasses.replace(perf_spec("a100-80gb"), request_s=0.0)  # overridable
    assert plain.request_s == 0 and hash(plain) != hash(perf_spec("a100-80gb"))
    assert r.to_json()["predicted"]["overhead"]["prefill"]["request_s"] == 2e-3


def test_h100_kernel_cost_from_tfcalcs_measured_runtime():
    """hardware.KERNEL_S["h100-sxm"]: tfcalc's fused runtime on the H100 (benchmarks/results/h100-2026-11-27-
    report.json, `infer --measure`, Llama-2-7B bf16, prompt 512 + 64): at batch 1 the measured step less the rows and
    the elementwise traffic (the model at kernel_s = 0), over the 450 kernels counted, is the constant; batch 16, not
    fitted, is predicted within 1 %."""
    import json
    from pathlib import Path

    import tfcalc
    from tfcalc.count.perf import hardware

    report = json.loads((Path(__file__).resolve().parents[2] / "benchmarks" / "results" /
                         "h100-2026-11-27-report.json").read_text())
    measured = {r["measured"]["batch"]: r["measured"] for r in report["results"]
                if r["name"].startswith("infer --measure --batch")}
    assert sorted(measured) == [1, 16]

    def predicted(batch: int) -> float:
        m = measured[batch]
        return tfcalc.infer("llama2-7b", batch=batch, seq=m["seq"], gen=m["gen"], device_spec="h100-sxm").to_json()[
            "decode_s_per_token"]

    fitted = hardware.KERNEL_S["h100-sxm"]
    assert perf_spec("h100-sxm").kernel_s == fitted and perf_spec("a100-80gb").kernel_s == 4e-6
    with_kernels = predicted(1)
    hardware.KERNEL_S["h100-sxm"] = 0.0
    try:
        rows_only = predicted(1)
    finally:
        hardware.KERNEL_S["h100-sxm"] = fitted
    assert with_kernels - rows_only == pytest.approx(450 * fitted)
    assert (measured[1]["decode_s_per_token"] - rows_only) / 450 == pytest.approx(fitted, rel=5e-3)
    assert predicted(16) / measured[16]["decode_s_per_token"] == pytest.approx(1.0, abs=0.01)
