"""The device's own peak-memory counters: start(), run, then peak() bytes above the start.

CUDA: the caching allocator's counters. CPU: PyTorch keeps no counters for CPU memory, so the operating
system's: the peak resident set size of the process (tfcalc.measure.memory's docstring says why a child
process and why glibc's mmap threshold)."""

from __future__ import annotations

import gc
import sys
from typing import Optional

from tfcalc.measure.device import Device


def _proc_status(field: str) -> Optional[int]:
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def _release_free_heap() -> None:
    """Hand the C heap's free pages back to the system (glibc's malloc_trim(0), which since glibc 2.8 also
    releases free pages inside every arena, not only at the top). Without it a small run fits in pages that
    earlier, freed work left resident, and its RSS never rises above the baseline. Not glibc: nothing."""
    import ctypes
    import ctypes.util

    try:
        ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


class CpuPeakMeter:
    """Peak resident memory of this process above start() (see the module docstring).

    Two reads, the larger taken: the high-water RSS above the baseline, and the anonymous memory still live
    when peak() reads it above its own baseline (RssAnon). The second is a floor that the first can fall
    under: the kernel updates the high-water mark when pages are unmapped, not when it reclaims the
    process's clean file pages (shared libraries) under memory pressure, so a reclaim during the run lowers
    the RSS that the run's own allocations must climb over."""

    def start(self) -> None:
        gc.collect()
        _release_free_heap()
        self.reset = False
        try:
            with open("/proc/self/clear_refs", "w", encoding="ascii") as f:
                f.write("5")  # resets VmHWM to the current RSS (Linux >= 4.0)
            self.reset = True
        except OSError:
            pass
        self.baseline = _proc_status("VmRSS") or self._maxrss()
        self.anon_baseline = _proc_status("RssAnon")

    @staticmethod
    def _maxrss() -> int:
        import resource

        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return rss if sys.platform == "darwin" else rss * 1024  # bytes on macOS, KiB on Linux

    def peak(self) -> int:
        hwm = _proc_status("VmHWM") if self.reset else None
        anon = _proc_status("RssAnon")
        live = anon - self.anon_baseline if anon is not None and self.anon_baseline is not None else 0
        return max(0, (hwm if hwm is not None else self._maxrss()) - self.baseline, live)

    @property
    def method(self) -> str:
        how = "VmHWM, reset via clear_refs" if self.reset else "ru_maxrss"
        return f"peak RSS of a child process above its baseline ({how})"


class CudaPeakMeter:
    """The CUDA caching allocator's peak above start()."""

    def __init__(self, device: str):
        self.device = device

    def start(self) -> None:
        import torch

        gc.collect()
        torch.cuda.synchronize(self.device)
        torch.cuda.empty_cache()
        self.baseline = torch.cuda.memory_allocated(self.device)
        torch.cuda.reset_peak_memory_stats(self.device)

    def peak(self) -> int:
        import torch

        torch.cuda.synchronize(self.device)
        return torch.cuda.max_memory_allocated(self.device) - self.baseline

    method = "torch.cuda.max_memory_allocated above the start (caching allocator's counters)"


def peak_meter(device: Device) -> CpuPeakMeter | CudaPeakMeter:
    """The device's own peak-memory counter: start(), run, then peak() bytes above the start.
    CUDA: the caching allocator; otherwise the process's peak RSS (on MPS, unified memory that the
    process maps, which is an approximation)."""
    return CudaPeakMeter(device.name) if device.kind == "cuda" else CpuPeakMeter()
