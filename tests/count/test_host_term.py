"""The host term of the serving performance model (tfcalc.count.perf.inference, step 6; PerfSpec.host_op_s and
launch): its fit against tfcalc's H100 run, its absence under CUDA graphs, and a measurement of the host's cost
per kernel on this CPU.

References: benchmarks/results/h100-2026-11-26-decode-profile.json (Llama-2-7B bf16, batch 1, prompt 512 on an
H100: step_s_graph 6.86 ms, step_s_eager 17.39 ms, 693 kernels a step, 6.58 ms of kernel time);
benchmarks/results/h100-2026-11-26-report-tests.json (the decode step captured: 6.80 ms; the CUDA context
714,670,080 bytes); ../shared/gpu-h100-2026-11.md (the eager step 14.0 ms at its fastest; a 4-layer 512-wide
draft step 1.66 ms, fp32, eager; TTFT at 512 tokens 16.4-27 ms).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import torch

import tfcalc
from tfcalc import devices
from tfcalc.config import ModelConfig
from tfcalc.count.perf.hardware import PerfSpec, with_launch
from tfcalc.count.perf.inference import Overhead, kernel_count
from tfcalc.errors import InputError
from tfcalc.presets import load

RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results"
PROFILE = json.loads((RESULTS / "h100-2026-11-26-decode-profile.json").read_text())
EAGER_FASTEST_S = 14.0e-3  # ../shared/gpu-h100-2026-11.md: the eager 7B step, 14.0-17.4 ms over the runs
DRAFT_STEP_S = 1.66e-3  # ../shared/gpu-h100-2026-11.md, "What did not" 4: the draft step, fp32, eager


def _find(test) -> dict:
    """The first object of the H100 tests report for which ``test`` holds."""
    def walk(o):
        if isinstance(o, dict):
            if test(o):
                yield o
            for v in o.values():
                yield from walk(v)
        elif isinstance(o, list):
            for v in o:
                yield from walk(v)
    return next(walk(json.loads((RESULTS / "h100-2026-11-26-report-tests.json").read_text())))


def _infer(model, **kw) -> dict:
    return tfcalc.infer(model, device_spec="h100-sxm", **kw).to_json()


def test_the_per_kernel_host_cost_is_the_eager_step_over_the_kernels_counted():
    """host_op_s = the eager step (the host's pace: async launches, max(device, host)) over the kernels
    tfcalc counts in that step: 14.0 ms / 450 = 31.1 µs; per real launch 14.0 ms / 693 = 20.2 µs."""
    cfg = load("llama2-7b", [])
    counted = kernel_count(cfg, 1, 1, 513)
    real = sum(k["per_step"] for k in PROFILE["kernels_eager"])
    assert counted == 450 and real == 693
    assert PerfSpec().host_op_s == pytest.approx(EAGER_FASTEST_S / counted, rel=0.01)
    # the same kernels eager and captured: the difference between the two steps is the host's
    assert real == pytest.approx(sum(k["per_step"] for k in PROFILE["kernels_graph"]), abs=2)
    kernel_time = sum(k["us_per_step"] for k in PROFILE["kernels_graph"]) * 1e-6
    assert kernel_time < PROFILE["step_s_graph"] < EAGER_FASTEST_S <= PROFILE["step_s_eager"]


def test_eager_decode_is_the_hosts_pace_and_graph_has_no_host_term():
    graph = _infer("llama2-7b", batch=1, seq=512, gen=64)
    eager = _infer("llama2-7b", batch=1, seq=512, gen=64, launch="eager")
    assert graph["launch"] == "graph" and eager["launch"] == "eager"
    g, e = graph["predicted"]["overhead"]["decode_step"], eager["predicted"]["overhead"]["decode_step"]
    assert g["host_s"] == 0.0 and g["launch"] == "graph"
    assert graph["predicted"]["host_bound"] == {"prefill": False, "decode": False}
    assert eager["predicted"]["host_bound"] == {"prefill": True, "decode": True}  # 14 ms of host > 12.2 ms, 6.6 ms
    assert e["host_s"] == pytest.approx(450 * PerfSpec().host_op_s, rel=1e-12)
    # graph: the device's time alone, as before the term (rows + kernels + traffic), 6.80 ms measured captured
    captured = _find(lambda o: o.get("mode") == "graph" and o.get("preset") == "llama2-7b" and o.get("seq") == 512
                     and o.get("batch") == 1)["decode_s_per_token"]
    assert 0.8 <= graph["decode_s_per_token"] / captured <= 1.25
    # eager: max(device, host) -- the host's here, well above the device's
    assert eager["decode_s_per_token"] == pytest.approx(max(graph["decode_s_per_token"], e["host_s"]), rel=1e-9)
    for measured in (EAGER_FASTEST_S, PROFILE["step_s_eager"]):
        assert 0.8 <= eager["decode_s_per_token"] / measured <= 1.25
    # the prefill too, plus the request's fixed work after it (synchronizing: not overlapped)
    p = eager["predicted"]["overhead"]["prefill"]
    device = graph["prefill_s"] - p["request_s"]
    assert eager["prefill_s"] == pytest.approx(max(device, p["host_s"]) + p["request_s"], rel=1e-9)


def test_step_time_takes_the_longer_of_device_and_host():
    o = Overhead(kernels=100, kernel_s=4e-4, dequant_s=0.0, traffic_s=1e-4, request_s=2e-3, host_s=3e-3,
                 launch="eager")
    assert o.step_s(1e-3) == pytest.approx(3e-3 + 2e-3)  # host-bound: 3 ms > 1.5 ms of device
    assert o.step_s(5e-3) == pytest.approx(5.5e-3 + 2e-3)  # device-bound: the host hides behind it


def test_a_small_draft_step_is_launch_bound_on_the_h100():
    """The 4-layer 512-wide draft of tests/gpu/test_serving_cuda.py, fp32: 62 µs on the roofline (0.3 ms with
    its kernels' device costs), 1.66 ms measured eager: 58 kernels × 31 µs of host."""
    draft = ModelConfig(name="t", n_layer=4, d_model=512, n_head=8, vocab_size=32000, max_seq_len=1024)
    graph = _infer(draft, batch=1, seq=128, gen=16, dtype="fp32")
    eager = _infer(draft, batch=1, seq=128, gen=16, dtype="fp32", launch="eager")
    assert graph["decode_s_per_token"] < DRAFT_STEP_S / 4
    assert 0.8 <= eager["decode_s_per_token"] / DRAFT_STEP_S <= 1.25


def test_the_launch_options_are_checked_and_overridable():
    half = _infer("llama2-7b", batch=1, seq=512, gen=8, launch="eager", host_op_s=15e-6)
    assert half["predicted"]["overhead"]["decode_step"]["host_s"] == pytest.approx(450 * 15e-6)
    for kw, message in (({"launch": "async"}, "launch must be one of"),
                        ({"launch": "eager", "host_op_s": -1.0}, "host.op.us must be"),
                        ({"host_op_s": 1e-5}, "launch eager too")):
        with pytest.raises(InputError, match=message):
            tfcalc.infer("gpt2", device_spec="h100-sxm", gen=4, **kw)
    assert with_launch(PerfSpec(), "eager", 0.0).host_op_s == 0.0


def test_the_cuda_context_is_the_measured_one():
    c = _find(lambda o: o.get("quantity") == "CUDA context and cuBLAS workspace")
    assert devices.CUDA_CONTEXT_BYTES == c["measured"] == 714_670_080


# ---------- the host's cost per kernel, measured on this CPU (no launches: the Python and dispatch share) ----------

def _llama_like(n_layer: int, d_model: int) -> ModelConfig:
    return ModelConfig(n_layer=n_layer, d_model=d_model, n_head=4, n_kv_head=2, vocab_size=128, max_seq_len=64,
                       gated_ffn=True, activation="silu", pos_encoding="rope", norm="rmsnorm", norm_bias=False,
                       attn_bias=False, ffn_bias=False)


def _fastest_step_s(cfg: ModelConfig, steps: int = 30) -> float:
    """The fastest eager decode step of tfcalc's own model on the CPU, tiny enough that the host's work
    dominates (the fastest: the host's pace when the shared machine lets it run)."""
    from tfcalc.model import build_model, next_token

    torch.manual_seed(0)
    model = build_model(cfg, "cpu", torch.float32)
    cache = model.new_cache(1, 48)
    times = []
    with torch.inference_mode():
        token = next_token(model.prefill(torch.zeros(1, 4, dtype=torch.long), cache))
        for _ in range(steps):
            t = time.perf_counter()
            token = next_token(model.decode(token, cache))
            times.append(time.perf_counter() - t)
    return min(times)


def _fastest_op_s(n: int = 2000) -> float:
    x, y = torch.ones(4), torch.ones(4)
    best = float("inf")
    for _ in range(5):
        t = time.perf_counter()
        for _ in range(n):
            x.add(y)
        best = min(best, (time.perf_counter() - t) / n)
    return best


def test_the_hosts_time_is_a_cost_per_counted_kernel_on_this_cpu():
    """The term's form, measured: one per-kernel cost fitted on a 4-layer model predicts a 12-layer one of another
    width within [0.8, 1.25] (kernel counts from the model, kernel_count; 1.06-1.09 here, the step's own glue
    -- positions, mask, argmax -- uncounted, so the smaller model's cost per kernel is a little higher); that
    cost (about 9 µs here) lies between one bare dispatched op (a loop of tiny adds, 0.9 µs) and the H100
    node's per-kernel cost with its CUDA launches (host_op_s, 31 µs)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        small, large = _llama_like(4, 32), _llama_like(12, 64)
        per_kernel = _fastest_step_s(small) / kernel_count(small, 1, 1, 8)
        predicted = kernel_count(large, 1, 1, 8) * per_kernel
        ratio = predicted / _fastest_step_s(large)
        op = _fastest_op_s()
    finally:
        torch.set_num_threads(threads)
    assert 0.8 <= ratio <= 1.25, f"{per_kernel * 1e6:.1f} µs a kernel predicts the larger step at {ratio:.2f}"
    assert op < per_kernel < PerfSpec().host_op_s, (op, per_kernel)
