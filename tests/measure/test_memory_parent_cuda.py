"""`memory --measure --device cuda`: the measuring child is the only process that touches CUDA. Reading the
GPU's free memory (the fit check) starts a CUDA context, hundreds of MB of the GPU held by the parent
while the child measures; so the child reads it and refuses there, and the parent formats the refusal.
Here (no GPU) torch.cuda is booby-trapped in the parent: the run must get as far as the child, which says
CUDA is absent. On a GPU: tests/gpu/test_serving_cuda.py."""

from __future__ import annotations

import pytest
import torch

from tfcalc.config import ConfigError
from tfcalc.errors import InputError
from tfcalc.measure.memory import measure_peak
from tfcalc.report import resolve
from tfcalc.report.memory import build_memory
from tfcalc.workload import Workload

TINY = ["n_layer=1", "d_model=32", "n_head=4", "vocab_size=64", "max_seq_len=16"]
CUDA_CALLS = ("is_available", "init", "_lazy_init", "mem_get_info", "current_device", "device_count",
              "get_device_name", "get_device_properties", "set_device", "synchronize", "memory_allocated",
              "empty_cache", "reset_peak_memory_stats")


@pytest.fixture
def cuda_trap(monkeypatch):
    touched = []

    def trap(name):
        def call(*args, **kwargs):
            touched.append(name)
            raise AssertionError(f"the parent process called torch.cuda.{name}")
        return call

    for name in CUDA_CALLS:
        monkeypatch.setattr(torch.cuda, name, trap(name))
    return touched


def test_the_parent_never_touches_cuda(cuda_trap):
    ref = resolve("gpt2", TINY)
    with pytest.raises(ConfigError, match="CUDA is not available") as caught:
        build_memory(ref, Workload(batch=1, seq=8, dtype="bf16"), measure=True, device="cuda")
    assert cuda_trap == [] and not isinstance(caught.value, AssertionError)
    assert not torch.cuda.is_initialized()


def test_a_bad_device_name_is_still_refused_in_the_parent(cuda_trap):
    with pytest.raises(ConfigError, match="unknown device 'cuda:x'"):
        build_memory(resolve("gpt2", TINY), Workload(batch=1, seq=8, dtype="bf16"), measure=True, device="cuda:x")
    assert cuda_trap == []


def test_the_child_refuses_what_does_not_fit_and_the_parent_says_so():
    """The child's side of the check, on the CPU (the same code reads a GPU's free memory there): a run
    needing more than any machine has is refused before the model is built, in the parent's words."""
    cfg = resolve("gpt2", TINY).cfg
    seen = []

    def refused(limit):
        seen.append(limit)
        raise InputError(f"not running: {limit.what}")

    with pytest.raises(InputError, match="not running: ") as caught:
        measure_peak(cfg, Workload(batch=1, seq=8, dtype="fp32"), "cpu", require_bytes=2**62, on_refused=refused)
    assert len(seen) == 1 and 0 < seen[0].bytes < 2**62 and seen[0].what in str(caught.value)
