"""The CUDA code paths' logic on the CPU (issue 20, part G): torch.cuda's API faked, the order of what
is called checked -- a synchronize before every clock read, events on the timed device's own stream,
the allocator's counters reset before a run and read after a synchronize, the GPU of each local rank,
NCCL only where there is a GPU for every rank. tests/gpu/ runs the same paths on a real GPU."""

from __future__ import annotations

import pytest
import torch

from tfcalc.errors import InputError
from tfcalc.measure import bench, launch
from tfcalc.measure.distributed import local_gpu


class Log(list):
    """One list of everything the fake device and the clock saw, in order."""


@pytest.fixture
def fake_cuda(monkeypatch):
    log = Log()

    class Event:
        def __init__(self, enable_timing=False):
            assert enable_timing
            self.stamp = None

        def record(self, stream=None):
            log.append(("record", stream))
            self.stamp = len(log)

        def elapsed_time(self, end):
            log.append(("read", None))
            return float(end.stamp - self.stamp)

    monkeypatch.setattr(torch.cuda, "Event", Event)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: log.append(("sync", str(device))))
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: f"stream of {device}")
    return log


def test_events_are_recorded_on_the_timed_devices_stream_and_read_after_a_synchronize(fake_cuda):
    device = torch.device("cuda", 1)  # not the current device (0): its stream, not cuda:0's
    timing = bench.time_calls(lambda: fake_cuda.append(("call", None)), device, warmup=2, repeat=3)
    assert len(timing.samples) == 3
    kinds = [k for k, _ in fake_cuda]
    assert kinds[:3] == ["call", "call", "sync"]  # the warm-up, then the queue drained before the first event
    records = [where for k, where in fake_cuda if k == "record"]
    assert records == ["stream of cuda:1"] * 6  # a pair around each timed call, on cuda:1's stream
    last_record, first_read = max(i for i, k in enumerate(kinds) if k == "record"), kinds.index("read")
    assert "sync" in kinds[last_record:first_read]  # no elapsed_time before the device has run the last event
    assert ("sync", "cuda:1") in fake_cuda


def test_the_host_clock_synchronizes_cuda_before_each_read(fake_cuda, monkeypatch):
    """A training step (collectives, optimizer) is timed on the host: on CUDA its kernels are queued, so the
    clock must wait for them (tfcalc.measure.distributed.run_measure times its step with host_seconds)."""
    ticks = iter(range(100))
    monkeypatch.setattr(bench.time, "perf_counter", lambda: fake_cuda.append(("clock", None)) or next(ticks))
    seconds = bench.host_seconds(lambda: fake_cuda.append(("call", None)), torch.device("cuda", 0))
    assert [k for k, _ in fake_cuda] == ["sync", "clock", "call", "sync", "clock"]
    assert seconds == 1 and fake_cuda[0] == ("sync", "cuda:0")


def test_the_host_clock_on_the_cpu_synchronizes_nothing(fake_cuda):
    assert bench.host_seconds(lambda: None, torch.device("cpu")) >= 0 and fake_cuda == []


@pytest.mark.parametrize(("local_rank", "visible", "gpu"), [(0, 8, 0), (3, 8, 3), (7, 8, 7), (0, 1, 0), (5, 1, 0)])
def test_each_local_rank_takes_its_gpu(local_rank, visible, gpu):
    # torchrun: LOCAL_RANK indexes the node's GPUs; a scheduler binding one GPU per task shows each rank one
    assert local_gpu(local_rank, visible) == gpu


def test_a_rank_without_a_gpu_is_one_line():
    with pytest.raises(RuntimeError, match="LOCAL_RANK 2 has no GPU: this process sees 2 CUDA device"):
        local_gpu(2, 2)


@pytest.mark.parametrize(("gpus", "nproc", "device"), [(0, 2, "cpu"), (1, 2, "cpu"), (1, 1, "cuda"), (2, 2, "cuda"),
                                                       (8, 4, "cuda")])
def test_nccl_only_where_there_is_a_gpu_for_every_rank(monkeypatch, gpus, nproc, device):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: gpus > 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: gpus)
    assert launch.ranks_device(nproc) == device
    assert launch.ranks_device(nproc, "cpu") == "cpu"
    launch.check_nproc(nproc)  # a one-GPU machine runs a two-rank plan on gloo rather than refusing it


def test_ranks_asked_on_cuda_are_refused_beyond_the_gpus(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    with pytest.raises(InputError, match="more than this machine runs .1 CUDA GPUs"):
        launch.check_nproc(2, "cuda")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(InputError, match="CUDA is not available"):
        launch.check_nproc(1, "cuda")


def test_the_cuda_peak_meter_resets_after_its_baseline_and_synchronizes_before_reading(monkeypatch):
    from tfcalc.measure.peak_meter import CudaPeakMeter

    log, state = [], {"allocated": 10, "peak": 10}
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: log.append("sync"))
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: log.append("empty_cache"))
    monkeypatch.setattr(torch.cuda, "memory_allocated",
                        lambda device=None: log.append("allocated") or state["allocated"])
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda device=None: log.append("max") or state["peak"])
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda device=None: log.append("reset"))
    meter = CudaPeakMeter("cuda:0")
    meter.start()
    state["peak"] = 10 + 512
    assert meter.peak() == 512
    assert log == ["sync", "empty_cache", "allocated", "reset", "sync", "max"]


@pytest.fixture
def fp32_precision():
    """torch's TF32 flags as the test found them, restored after (they are process-wide)."""
    matmul = torch.backends.cuda.matmul
    before = matmul.fp32_precision
    yield matmul
    matmul.fp32_precision = "ieee"  # back through the new API, then to 'none' (defer to the legacy flag)
    matmul.fp32_precision = before


@pytest.mark.parametrize(("precision", "tf32"), [("tf32", True), ("ieee", False)])
def test_tf32_is_read_through_the_new_api_first(fp32_precision, precision, tf32):
    from tfcalc.measure.device import tf32_matmuls

    # torch.backends.cuda.matmul.fp32_precision = 'tf32' then reading allow_tf32 raises in torch 2.9+ ("a mix of
    # the legacy and new APIs"): bench on CUDA read allow_tf32, and failed for a user who had set the new flag
    fp32_precision.fp32_precision = precision
    assert tf32_matmuls() is tf32


def test_tf32_through_the_legacy_api(fp32_precision):
    from tfcalc.measure.device import tf32_matmuls

    fp32_precision.fp32_precision = "none"
    assert tf32_matmuls() is bool(torch.backends.cuda.matmul.allow_tf32)
