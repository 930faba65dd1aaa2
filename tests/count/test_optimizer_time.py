"""The optimizer step's time (tfcalc.count.perf.optimizer): Adam over the rank's shard, memory-bound, added to
the step -- against the module's hand count of bytes per parameter."""

import pytest

from tfcalc.count.perf.hardware import perf_spec
from tfcalc.count.perf.optimizer import adam_bytes_per_param, optimizer_seconds
from tfcalc.count.training.layout import Layout
from tfcalc.count.training.plan import make_plan
from tfcalc.count.training.steptime import Hardware
from tfcalc.presets import load

PSI_7B = 6_738_415_616
BW = 3.35e12 * 0.85
H100 = Hardware(989e12, 80 * 10**9, 450e9, 50e9, 8, perf=perf_spec("h100-sxm"))


def test_bytes_per_parameter():
    """Read master, m, v (12) and the gradient; write master, m, v (12) and the 16-bit weight; clipping
    reads the gradient for the norm and reads and writes it to scale: 24 + 4g + w."""
    assert adam_bytes_per_param(2, 2) == 34
    assert adam_bytes_per_param(2, 4) == 42  # --grad-dtype fp32
    assert adam_bytes_per_param(4, 4) == 40  # fp32 training: no master copy


def test_worked_example():
    assert optimizer_seconds(PSI_7B, 2, 2, BW) == pytest.approx(229_106_130_944 / BW)
    assert PSI_7B * 34 == 229_106_130_944 and 229_106_130_944 / BW == pytest.approx(80.45e-3, rel=1e-3)


@pytest.mark.parametrize("zero, shard", [(0, PSI_7B), (1, -(-PSI_7B // 8))])
def test_plan_adds_the_shards_step(zero, shard):
    """ZeRO-0: every rank steps all its parameters; ZeRO-1 over 8: its ⌈Ψ/8⌉ (the flat buffer's split)."""
    L = Layout(tp=1, pp=1, dp=8, zero=zero, seq=4096, global_batch=8, micro_batch=1)
    st = make_plan(load("llama2-7b"), L, H100, None).step
    assert st.optimizer_s == pytest.approx(shard * 34 / BW)
    assert st.overlap_s == st.physics_s and st.no_overlap_s > st.optimizer_s


def test_offloaded_optimizer_is_not_timed_on_the_gpu():
    L = Layout(tp=1, pp=1, dp=8, zero=1, seq=4096, global_batch=8, micro_batch=1, offload_optimizer=True)
    assert make_plan(load("llama2-7b"), L, H100, None).step.optimizer_s == 0.0


def test_mfu_stated_keeps_its_step():
    L = Layout(tp=1, pp=1, dp=8, seq=4096, global_batch=8, micro_batch=1)
    st = make_plan(load("llama2-7b"), L, H100, 0.4).step
    assert st.mfu == pytest.approx(0.4) and st.optimizer_s > 0
