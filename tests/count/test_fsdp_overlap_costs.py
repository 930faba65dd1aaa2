"""tfcalc.count.training.overlap_costs against its own derivation (the module docstring), by hand."""

from pathlib import Path

import pytest
import yaml
from conftest import assert_one_line_error

from tfcalc import plan
from tfcalc.count.perf.collectives import DDP_BUCKET_BYTES
from tfcalc.count.training.comm import Collective
from tfcalc.count.training.overlap_costs import (
    NCCL_HBM_PASSES,
    dp_hbm_bytes,
    fsdp_copy_s,
    hbm_contention_s,
    power_capped_clock,
)
from tfcalc.errors import InputError

ROOT = Path(__file__).resolve().parents[2]


def test_zero3_bytes_by_hand():
    # an FSDP2 step on 4 ranks: 2 all-gathers of 8,000 bf16 bytes in all, a reduce-scatter of 16,000 fp32 bytes
    ag = Collective("zero_params", "all_gather", "dp", 4, 8000, 2)
    rs = Collective("dp_grads", "reduce_scatter", "dp", 4, 16000, 2)
    tp = Collective("tp_activations", "all_reduce", "tp", 2, 999, 4)  # not data-parallel: not counted
    b = dp_hbm_bytes([ag, rs, tp], zero=3, weight_bytes=2, grad_bytes=4)
    # NCCL: 3 crossings of each byte sent, 3/4 of each payload; the copy-in of the gather, 2 × 8000 / 4
    assert b.overlapped == 3 * 6000 + 3 * 12000 + 4000
    # copy-out 2 × 8000; reduce-scatter copy-in: 16000 written, the same 4000 elements read in bf16 (8000)
    assert b.exposed == 16000 + 16000 + 8000
    assert b.copy_calls == 4


def test_zero1_has_no_fsdp_copies():
    rs = Collective("dp_grads", "reduce_scatter", "dp", 8, 8000, 1)
    ag = Collective("zero_params", "all_gather", "dp", 8, 8000, 1)
    b = dp_hbm_bytes([rs, ag], zero=1, weight_bytes=2, grad_bytes=2)
    assert b.exposed == 0 and b.copy_calls == 0
    assert b.overlapped == NCCL_HBM_PASSES * (7000 + 7000)


def test_contention_and_copy_seconds_by_hand():
    # 3 GB of overlapped traffic at 2 TB/s is 1.5 ms of HBM; half of it hidden, 40 % of the compute memory-bound
    assert hbm_contention_s(3e9, 0.5, 2e12, 0.4) == pytest.approx(1.5e-3 * 0.5 * 0.4)
    assert hbm_contention_s(3e9, 1.5, 2e12, 1.0) == pytest.approx(1.5e-3)  # a share is at most 1
    assert hbm_contention_s(3e9, 1.0, 0.0, 1.0) == 0.0
    assert fsdp_copy_s(4e9, 10, 2e12, 4e-6) == pytest.approx(2e-3 + 40e-6)


def test_power_capped_clock():
    assert power_capped_clock(500, 700) == pytest.approx((5 / 7) ** (1 / 3))  # no static power: the cube root
    assert power_capped_clock(500, 700) == pytest.approx(0.894, abs=5e-4)
    assert power_capped_clock(700, 700) == 1.0 and power_capped_clock(800, 700) == 1.0
    with pytest.raises(InputError):
        power_capped_clock(0, 700)


def test_grand_teton_device_states_the_power_capped_clock():
    # the held-out rows' device (benchmarks/calibration_held_out.py): its clock is the 500 W formula's, the
    # H100's 85 W static power apart (tfcalc.count.perf.hardware.STATIC_POWER_W)
    data = yaml.safe_load((ROOT / "benchmarks" / "devices" / "grand-teton-h100-500w.yaml").read_text())
    assert data["inherits"] == "h100-sxm"
    assert data["perf"]["sustained_clock"] == pytest.approx(power_capped_clock(500, 700, 85.0), abs=5e-4)


def test_step_charges_fsdp_copies_from_its_collectives():
    r = plan("llama3-8b", dp=8, zero=3, global_batch=16, micro_batch=2, seq=8192, recompute="op", grad_dtype="fp32")
    st, hw = r.plan.step, r.hardware
    gathers = [c for c in r.plan.collectives if c.op == "all_gather" and c.group == "dp"]
    scatters = [c for c in r.plan.collectives if c.op == "reduce_scatter" and c.group == "dp"]
    # FSDP2: every gather's copy-out reads and writes its payload; every reduce-scatter's copy-in writes its
    # fp32 payload and reads the same elements in bf16 (half as many bytes)
    exposed = sum(2 * c.payload_bytes for c in gathers) + sum(c.payload_bytes * 3 // 2 for c in scatters)
    calls = sum(c.calls for c in gathers + scatters)
    bandwidth = hw.bandwidth_bytes_per_s * hw.perf.bandwidth_efficiency
    assert st.fsdp_copy_s == pytest.approx(exposed / bandwidth + calls * hw.perf.kernel_s)
    assert st.hbm_contention_s > 0
    assert st.physics_s == pytest.approx(st.pipelined_s + sum(st.exposed_s.values()) + st.contention_s
                                         + st.hbm_contention_s + st.fsdp_copy_s + st.optimizer_s + st.slowest_rank_s)
    assert r.to_json()["step"]["fsdp_copy_s"] == st.fsdp_copy_s


def test_power_limit_scales_the_sustained_clock():
    kw = dict(dp=8, zero=3, global_batch=16, micro_batch=2, seq=8192, recompute="op")
    full, capped = plan("llama3-8b", **kw), plan("llama3-8b", power_limit=500, **kw)
    clock = ((500 - 85) / (700 - 85)) ** (1 / 3)  # the H100's 85 W static power apart (count.perf.hardware)
    assert capped.hardware.perf.sustained_clock == pytest.approx(clock)
    assert capped.to_json()["step"]["power_limit_w"] == 500
    assert capped.to_json()["step"]["perf"]["sustained_clock"] == pytest.approx(0.877, abs=5e-4)
    assert capped.to_json()["step"]["perf"]["static_power_w"] == 85.0
    # the matmuls run at the lower clock: their time grows by its inverse
    assert capped.plan.step.matmul_s == pytest.approx(full.plan.step.matmul_s / clock, rel=1e-9)
    assert plan("llama3-8b", power_limit=700, **kw).plan.step.overlap_s == full.plan.step.overlap_s
    # the A100's own sustained clock (1305 of 1410 MHz at 400 W) scales further under a lower limit
    a100 = plan("llama3-8b", power_limit=300, device_spec="a100-80gb", **kw).hardware.perf.sustained_clock
    assert a100 == pytest.approx(1305 / 1410 * ((300 - 59) / (400 - 59)) ** (1 / 3))  # 59 W static


@pytest.mark.parametrize("watts, device, said", [(-5, "h100-sxm", "must be watts"),
                                                 (True, "h100-sxm", "must be a finite number"),
                                                 (1e9, "h100-sxm", "must be watts"), (300, "l4", "no rated power")])
def test_power_limit_bad_input_is_one_line(watts, device, said):
    with pytest.raises(InputError, match=said):
        plan("llama3-8b", dp=8, zero=3, power_limit=watts, device_spec=device)


def test_step_hbm_contention_is_the_hidden_share_of_the_traffic():
    # ZeRO-1 on 8 ranks: the gradients' reduce-scatter hides behind the last micro-batch's backward
    r = plan("llama3-8b", dp=8, zero=1, global_batch=64, micro_batch=2, seq=4096)
    st, hw = r.plan.step, r.hardware
    dp = [c for c in r.plan.collectives if c.group == "dp"]
    traffic = sum(NCCL_HBM_PASSES * c.sent_bytes for c in dp)  # no FSDP2 copies under ZeRO-1
    bandwidth = hw.bandwidth_bytes_per_s * hw.perf.bandwidth_efficiency
    # exposed: what overflows the window, plus the last 25 MiB bucket (steptime step 5); the hidden share is
    # what fits in the window
    last = min(st.comm_s["dp"], DDP_BUCKET_BYTES / hw.inter_node_bytes_per_s)
    hidden = (st.comm_s["dp"] - (st.exposed_s["dp"] - last)) / st.comm_s["dp"]
    memory_share = 1 - st.matmul_s / st.compute_s  # one stage: every micro-batch alike
    assert st.fsdp_copy_s == 0 and 0 < hidden <= 1
    assert st.hbm_contention_s == pytest.approx(traffic / bandwidth * memory_share * hidden)


def test_power_limit_on_the_command_line(cli):
    import json

    r = cli("plan", "llama3-8b", "--dp", "8", "--zero", "3", "--power-limit", "500", "--format", "json")
    assert r.code == 0, r.err
    step = json.loads(r.out)["step"]
    assert step["power_limit_w"] == 500 and step["perf"]["sustained_clock"] == pytest.approx(0.877, abs=5e-4)
    assert step["fsdp_copy_s"] > 0 and step["hbm_contention_s"] > 0
    table = cli("plan", "llama3-8b", "--dp", "8", "--zero", "3", "--power-limit", "500")
    assert "Clock at a 500 W power limit: 0.877" in table.out and "FSDP2 copies" in table.out
    assert "85 W static" in " ".join(table.out.split())
    assert_one_line_error(cli("plan", "llama3-8b", "--dp", "8", "--power-limit", "0"), "--power-limit must be watts")
