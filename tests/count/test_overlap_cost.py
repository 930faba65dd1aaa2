"""Overlap's own cost (tfcalc.count.training.steptime, step 5): a NCCL collective's kernel holds SMs while the
compute it overlaps runs on the rest -- against a hand derivation of the waves."""

import pytest

from tfcalc.count.perf import gemm
from tfcalc.count.perf.hardware import perf_spec
from tfcalc.count.training.layout import Layout
from tfcalc.count.training.plan import make_plan
from tfcalc.count.training.steptime import Hardware, _stage_s
from tfcalc.presets import load


def test_the_forums_gemm_loses_its_single_wave():
    """The NVIDIA forum's case: a GEMM of exactly 132 tiles of 256 × 128 (m 3072, n 1408, k 2048) fills one wave of
    an H100's 132 SMs; with NCCL's 24 CTAs holding 24 SMs, the best tiling left is 128 × 64 (528 tiles,
    4.89 waves of 108: wave 0.9778 × shape 0.8636 = 0.8444), at 108/132 of the peak:
    time × (132/108) / 0.8444 = 1.447 (the forum measured nearly 2: cuBLAS kept its 132-block launch)."""
    full = gemm.seconds(3072, 1408, 2048, 989e12, 132, 0.801)
    held = gemm.seconds(3072, 1408, 2048, 989e12 * 108 / 132, 108, 0.801)
    best_held = max(gemm.tile_efficiency(3072, 1408, tm, tn) * gemm.shape_efficiency(tm, tn)
                    * gemm.wave_efficiency(-(-3072 // tm) * -(-1408 // tn), 108) for tm, tn in gemm.TILES)
    assert best_held == pytest.approx(0.84444, abs=1e-4)
    assert held / full == pytest.approx(132 / 108 / best_held)


def test_dp_reduction_behind_the_backward_pays_for_the_sms():
    """ZeRO-2 over 4 nodes: the reduce-scatters hide behind every micro-batch's backward; the step adds
    (micro-batch time on 132 − 24 SMs ÷ on 132, minus 1) × min(DP seconds, the window)."""
    cfg = load("llama2-7b")
    hw = Hardware(989e12, 80 * 10**9, 450e9, 50e9, 8, perf=perf_spec("h100-sxm"))
    L = Layout(tp=1, pp=1, dp=32, zero=2, seq=4096, global_batch=64, micro_batch=1)
    st = make_plan(cfg, L, hw, None).step
    s, held = _stage_s(cfg, L, hw), _stage_s(cfg, L, hw, 24)
    window = s.backward * L.micro_batches
    assert st.contention_s == pytest.approx((held.total / s.total - 1) * min(st.comm_s["dp"], window))
    assert held.total > s.total
    free = make_plan(cfg, L, Hardware(989e12, 80 * 10**9, 450e9, 50e9, 8, perf=perf_spec("h100-sxm").__class__(
        **{**perf_spec("h100-sxm").__dict__, "comm_sms": 0})), None).step
    assert free.contention_s == 0 and free.overlap_s == pytest.approx(st.overlap_s - st.contention_s)


def test_overlap_tp_pays_for_the_sms_under_the_hidden_collectives():
    """--overlap tp hides the blocks' all-gathers and reduce-scatters behind the GEMMs; the GEMMs under them
    run on 132 − 24 SMs: contention = slow × (DP's overlapped seconds + the hidden TP seconds), one GPU
    group of TP 8 in one node (no DP, no pipeline: no stretch)."""
    from tfcalc.count.perf.pipeline import OVERLAPPED_TP
    from tfcalc.count.training.steptime import collective_seconds

    cfg = load("llama2-7b")
    hw = Hardware(989e12, 80 * 10**9, 450e9, 50e9, 8, perf=perf_spec("h100-sxm"))
    L = Layout(tp=8, pp=1, dp=1, seq=4096, global_batch=4, micro_batch=1, sequence_parallel=True, overlap=("tp",))
    plan = make_plan(cfg, L, hw, None)
    st = plan.step
    s, held = _stage_s(cfg, L, hw), _stage_s(cfg, L, hw, 24)
    hidden = sum(collective_seconds(c, L, hw) for c in plan.collectives if c.cause in OVERLAPPED_TP)
    assert 0 < hidden < L.micro_batches * s.matmuls
    assert st.contention_s == pytest.approx((held.total / s.total - 1) * hidden)
    plain = make_plan(cfg, Layout(tp=8, pp=1, dp=1, seq=4096, global_batch=4, micro_batch=1,
                                  sequence_parallel=True), hw, None).step
    assert plain.contention_s == 0  # nothing overlapped: TP on the critical path, no DP
