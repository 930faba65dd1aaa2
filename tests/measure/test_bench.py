"""tfcalc bench on the CPU with tiny configs: the timing logic that runs on GPUs too. No timing thresholds."""

import pytest
import torch
from conftest import tiny

from tfcalc import devices
from tfcalc.measure import bench
from tfcalc.model import build_model


def test_timing_statistics():
    t = bench.Timing((5.0, 1.0, 3.0, 2.0, 4.0))
    assert t.median == 3.0
    assert t.percentile(0) == 1.0 and t.percentile(100) == 5.0
    assert t.p10 == pytest.approx(1.4) and t.p90 == pytest.approx(4.6)
    assert bench.Timing((2.0,)).p90 == 2.0


def test_time_calls_warms_up_then_times_each_call():
    calls, steps = [], []
    timing = bench.time_calls(lambda: calls.append(1), torch.device("cpu"), warmup=3, repeat=7,
                              on_call=lambda: steps.append(1))
    assert len(calls) == 10 and len(steps) == 10
    assert len(timing.samples) == 7 and all(s >= 0 for s in timing.samples)


def test_clock_choice_is_the_only_device_difference():
    assert isinstance(bench.clock_for(torch.device("cpu")), bench.HostClock)
    assert isinstance(bench.clock_for(torch.device("cuda")), bench.CudaEventClock)


def test_extrapolation_adds_missing_blocks():
    assert bench.extrapolate(forward_median=1.0, block_median=0.25, n_run=2, n_full=10) == 3.0
    assert bench.extrapolate(1.0, 0.25, 4, 4) == 1.0


def test_bench_reads_peak_memory_with_the_shared_meter(cli):
    r = _bench(cli, "gpt2", *TINY, "--seq", "16")
    assert r["peak_memory_bytes"] >= r["weights_bytes"] > 0


@pytest.mark.parametrize(
    "name, dtype, expected",
    [("NVIDIA H100 80GB HBM3", "bf16", 989e12), ("NVIDIA H100 PCIe", "bf16", 756e12),
     ("NVIDIA H200", "fp32", 67e12), ("NVIDIA A100-SXM4-80GB", "bf16", 312e12), ("Tesla T4", "bf16", None),
     ("AMD EPYC 7B13", "fp32", None)],
)
def test_peak_table(name, dtype, expected):
    assert devices.peak_flops(name, dtype) == expected


def test_tf32_uses_the_tf32_peak():
    assert devices.peak_flops("NVIDIA A100-SXM4-40GB", "fp32", tf32_enabled=True) == 156e12


def test_components_time_the_sublayers_of_the_real_block():
    cfg = tiny()
    model = build_model(cfg, "cpu")
    idx = torch.randint(0, cfg.vocab_size, (2, 8))
    parts = bench.time_components(model, idx, warmup=1, repeat=3)
    for timing in (parts.attention, parts.ffn, parts.block, parts.head):
        assert len(timing.samples) == 3


def _bench(cli, *args):
    r = cli("bench", *args, "--json", "--min-time", "0", "--warmup", "1", "--repeat", "3", "--matmul-size", "64")
    assert r.code == 0, r.err
    return r.json()


TINY = ["--set", "n_layer=2", "--set", "d_model=64", "--set", "n_head=4", "--set", "n_kv_head=4",
        "--set", "d_head=16", "--set", "d_ff=128"]


def test_bench_json_fields_are_consistent(cli):
    r = _bench(cli, "gpt2", *TINY, "--seq", "32", "--batch", "2")
    keys = {"preset", "device", "dtype", "batch", "seq", "median_s", "p10_s", "p90_s", "tokens_per_s",
            "achieved_flops_per_s", "peak_flops_per_s", "mfu", "matmul_ceiling_flops_per_s", "components"}
    assert keys <= set(r)
    assert {"attention_s", "ffn_s"} <= set(r["components"])
    assert r["tokens_per_s"] == pytest.approx(2 * 32 / r["median_s"])
    assert r["achieved_flops_per_s"] == pytest.approx(r["forward_flops"] / r["median_s"])
    assert r["ceiling_fraction"] == pytest.approx(r["achieved_flops_per_s"] / r["matmul_ceiling_flops_per_s"])
    assert r["p10_s"] <= r["median_s"] <= r["p90_s"]
    assert r["mfu"] is None and r["peak_flops_per_s"] is None  # a CPU: no datasheet peak, said so
    assert r["samples"] == 3 and r["warmup"] == 1 and r["extrapolated"] is False
    assert r["rounds"] == 3 and len(r["round_medians_s"]) == 3 and r["between_round_spread"] >= 0


def test_bench_sweep_gives_one_row_per_length(cli):
    rows = _bench(cli, "gpt2", *TINY, "--seq", "8,16,24")
    assert [r["seq"] for r in rows] == [8, 16, 24]
    assert rows[2]["forward_flops"] > rows[0]["forward_flops"]


def test_bench_sweep_takes_a_doubling_range_like_scan(cli):
    assert [r["seq"] for r in _bench(cli, "gpt2", *TINY, "--seq", "8..32")] == [8, 16, 32]


def test_bench_n_layer_extrapolates(cli):
    r = _bench(cli, "gpt2", "--set", "n_layer=6", *TINY[2:], "--seq", "16", "--n-layer", "2")
    assert r["extrapolated"] and r["n_layer_run"] == 2 and r["n_layer"] == 6
    assert r["median_s"] == pytest.approx(r["measured_forward_median_s"] + 4 * r["components"]["block_s"])


def test_bench_table(cli):
    r = cli("bench", "gpt2", *TINY, "--seq", "16", "--min-time", "0", "--warmup", "0", "--repeat", "2",
            "--matmul-size", "64")
    assert r.code == 0, r.err
    assert "tokens/s" in r.out and "ceiling" in r.out and "no MFU" in r.out


@pytest.mark.parametrize(
    "args, message",
    [
        (["gpt3"], "needs an estimated"),  # refused at once from the estimate, nothing allocated
        (["gpt2", "--device", "cuda"], "CUDA is not available"),
        (["gpt2", "--dtype", "int8"], "bench runs fp32, bf16, fp16"),
        (["gpt2", "--seq", "0"], "must be between 1 and"),
        (["gpt2", "--seq", "a,b"], "expected integers"),
        (["gpt2", "--seq", "4096"], "at most 1024 tokens"),
        (["gpt2", "--batch", "0"], "--batch must be between 1 and"),
        (["gpt2", "--repeat", "0"], "--repeat must be between 1 and"),
        (["gpt2", "--rounds", "0"], "--rounds must be between 1 and"),
        (["gpt2", "--min-time", "-1"], "--min-time must be between 0 and 3600"),
        (["gpt2", "--min-time", "nan"], "--min-time must be between 0 and 3600"),
        (["gpt2", "--n-layer", "13"], "between 1 and 12"),
    ],
)
def test_bench_refusals(cli, args, message):
    r = cli("bench", *args)
    assert r.code == 2 and r.out == ""
    assert r.err.count("\n") == 1 and message in r.err


def test_progress_bar_advances_on_a_terminal_and_is_silent_otherwise(monkeypatch, capsys):
    from tfcalc.cli import render

    with render.progress("work", 3, enabled=True) as advance:  # stderr is captured: not a terminal
        advance()
    assert capsys.readouterr().err == ""
    monkeypatch.setattr(render.sys.stderr, "isatty", lambda: True)
    with render.progress("work", 3, enabled=True) as advance:
        for _ in range(3):
            advance()
    with render.progress("work", 3, enabled=False) as advance:  # --json
        advance()


class _FakeEvent:
    """Stands in for torch.cuda.Event: record() stamps a clock, elapsed_time() answers in milliseconds."""

    clock = [0.0]

    def __init__(self, enable_timing=False):
        assert enable_timing, "timing events must be created with enable_timing=True"
        self.stamp = None

    def record(self, stream=None):
        self.stamp = self.clock[0]

    def elapsed_time(self, end):
        assert self.stamp is not None and end.stamp is not None, "read before both events were recorded"
        return (end.stamp - self.stamp) * 1e3


def test_the_cuda_path_of_the_timing_loop_with_fake_events(monkeypatch):
    """No GPU here: the same loop, driven through the CUDA clock with torch.cuda's API faked, must
    record an event before and after each call, synchronize, and convert milliseconds to seconds."""
    syncs = []
    monkeypatch.setattr(torch.cuda, "Event", _FakeEvent)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: syncs.append(device))
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: ("stream", device))
    _FakeEvent.clock[0] = 0.0
    durations = iter([0.5, 0.25, 0.125, 1.0, 2.0])

    def call():  # each call "takes" the next duration on the fake device clock
        _FakeEvent.clock[0] += next(durations)

    timing = bench.time_calls(call, torch.device("cuda"), warmup=2, repeat=3)
    assert timing.samples == (0.125, 1.0, 2.0)
    assert len(syncs) == 2  # once after the warm-up, once before reading the events


def test_the_cuda_peak_meter_reads_the_allocators_counters(monkeypatch):
    from tfcalc.measure.device import Device
    from tfcalc.measure.peak_meter import CudaPeakMeter, peak_meter

    state = {"allocated": 1000, "peak": 1000, "reset": 0}
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: None)
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda device=None: state["allocated"])
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda device=None: state["peak"])
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats",
                        lambda device=None: state.update(reset=state["reset"] + 1, peak=state["allocated"]))
    meter = peak_meter(Device("cuda:0", "cuda", "NVIDIA H100 80GB HBM3"))
    assert isinstance(meter, CudaPeakMeter)
    meter.start()
    state["peak"] = 1000 + 4096  # the run allocated 4096 bytes at its highest point
    assert state["reset"] == 1 and meter.peak() == 4096


def test_a_dtype_slow_here_is_said_before_timing(cli, monkeypatch):
    from tfcalc.measure import stand_in

    monkeypatch.setattr(stand_in, "probe", lambda dtype, kind: stand_in.Probe(dtype, 1e9, 1e11))
    r = cli("bench", "gpt2", *TINY, "--seq", "8", "--dtype", "bf16", "--json", "--min-time", "0", "--repeat", "1",
            "--matmul-size", "32")
    assert r.code == 0, r.err
    assert r.err.startswith("tfcalc: note: bf16 matmuls are slow") and "timing bf16 as asked" in r.err
    assert r.err.count("\n") == 1 and r.json()["dtype"] == "bf16"
