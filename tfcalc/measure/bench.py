"""Timing forward passes of the real model, one code path for every device.

How the clock is read, and why:
- Every timed call is preceded by warm-up calls (first-call allocation, kernel selection, caches); how
  many, and how many timed calls, tfcalc.measure.autorange decides from a time budget.
- On CUDA, each call is bracketed by CUDA events recorded on the stream; the host synchronizes once at
  the end and reads ``start.elapsed_time(end)``: GPU time, not the host's launch time. Elsewhere the
  clock is ``time.perf_counter`` read after synchronizing the device (a no-op on the CPU, whose ops
  return when done; ``torch.mps.synchronize`` on Apple GPUs).
- The loop that calls, marks and collects is the same for all devices (``time_calls``); only the
  clock object differs, so the CPU tests exercise the logic that runs on a GPU.
- Statistics: median (robust to the odd slow call), p10 and p90 (inclusive deciles); never the mean.
- Ceilings, timed the same way: a large matmul (FLOP/s), and over one large buffer a device copy, a
  read-only reduction and a matrix-vector product (bytes/s, the slowest: see Bandwidth); the roofline's
  measured ridge is their ratio.
- Peak memory: tfcalc.measure.peak_meter, the device's own counters (CUDA: the caching
  allocator's ``max_memory_allocated`` after ``reset_peak_memory_stats``; CPU: the process's peak RSS,
  reset through /proc/self/clear_refs), read around the timed forward passes.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F

from tfcalc.model import Transformer


@dataclass(frozen=True)
class Timing:
    """Seconds per call over the timed repeats."""

    samples: tuple[float, ...]

    @property
    def median(self) -> float:
        return statistics.median(self.samples)

    def percentile(self, p: int) -> float:
        """Inclusive percentile p (0..100), linear interpolation between samples."""
        xs = sorted(self.samples)
        if len(xs) == 1:
            return xs[0]
        pos = (len(xs) - 1) * p / 100
        lo = int(pos)
        hi = min(lo + 1, len(xs) - 1)
        return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)

    @property
    def p10(self) -> float:
        return self.percentile(10)

    @property
    def p90(self) -> float:
        return self.percentile(90)


class HostClock:
    """perf_counter after a device synchronize: what a span of host work (a whole training step, its
    collectives included) is timed with. On CUDA the synchronize waits for the device's queued kernels,
    so the clock reads when the work is done, not when it was launched."""

    def __init__(self, device: torch.device):
        self.device = device

    def sync(self) -> None:
        if self.device.type == "mps":
            torch.mps.synchronize()
        elif self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def mark(self) -> float:
        self.sync()
        return time.perf_counter()

    @staticmethod
    def seconds(start: float, end: float) -> float:
        return end - start


class CudaEventClock:
    """CUDA events recorded on the timed device's current stream; read after one synchronize at the end.
    The stream is the device's own (torch.cuda.current_stream(device)), not the current device's: with
    --device cuda:1 in a process whose current device is 0, events on device 0's idle stream would time
    nothing (and elapsed_time between events of two devices is an error)."""

    def __init__(self, device: torch.device):
        self.device = device

    def sync(self) -> None:
        torch.cuda.synchronize(self.device)

    def mark(self):
        event = torch.cuda.Event(enable_timing=True)
        event.record(torch.cuda.current_stream(self.device))
        return event

    @staticmethod
    def seconds(start, end) -> float:
        return start.elapsed_time(end) / 1e3  # elapsed_time is in milliseconds


def clock_for(device: torch.device):
    return CudaEventClock(device) if device.type == "cuda" else HostClock(device)


def host_seconds(fn: Callable[[], object], device: torch.device) -> float:
    """Wall seconds of one call of fn, the device synchronized before and after (HostClock): for work that
    is more than kernels on one stream (a training step with its collectives and optimizer)."""
    clock = HostClock(device)
    start = clock.mark()
    fn()
    return clock.seconds(start, clock.mark())


def time_calls(fn: Callable[[], object], device: torch.device, warmup: int, repeat: int,
               on_call: Callable[[], None] | None = None) -> Timing:
    """Call fn warmup times untimed, then repeat times timed; the same loop on every device."""
    clock = clock_for(device)
    for _ in range(warmup):
        fn()
        if on_call:
            on_call()
    clock.sync()
    marks = []
    for _ in range(repeat):
        start = clock.mark()
        fn()
        end = clock.mark()
        marks.append((start, end))
        if on_call:
            on_call()
    clock.sync()
    return Timing(tuple(clock.seconds(s, e) for s, e in marks))


# ---------- what is timed ----------


def ceiling_call(device: torch.device, dtype: torch.dtype, n: int) -> Callable[[], torch.Tensor]:
    """One (n, n) @ (n, n) matmul, 2·n³ FLOPs: what measures the ceiling."""
    a = torch.randn(n, n, device=device).to(dtype)
    b = torch.randn(n, n, device=device).to(dtype)
    return lambda: torch.mm(a, b)


def matmul_ceiling(device: torch.device, dtype: torch.dtype, n: int, warmup: int, repeat: int,
                   on_call: Callable[[], None] | None = None) -> float:
    """FLOP/s of an (n, n) @ (n, n) matmul, 2·n³ FLOPs, timed exactly like the model."""
    timing = time_calls(ceiling_call(device, dtype, n), device, warmup, repeat, on_call)
    return 2 * n**3 / timing.median


@dataclass(frozen=True)
class Bandwidth:
    """Memory bandwidth measured three ways over one buffer of n bytes (fp32), each timed like the model."""

    copy_bytes_per_s: float  # dst.copy_(src): n read and n written, 2·n / t (STREAM's "copy", McCalpin 1995)
    read_bytes_per_s: float  # src.amax(): n read, n / t
    matvec_bytes_per_s: float  # the buffer as a (rows, 4096) matrix times one vector, F.linear: n read, n / t

    @property
    def ceiling(self) -> float:
        """The slowest of the three: what a decode step -- matrix-vector products streaming the weights and
        the KV cache in, writing little -- can count on. On GPUs the three agree closely (a copy's read and
        write share one bus; a large GEMV streams at the copy's rate). On CPUs they need not: a copy's
        write stream can overlap its reads, and a BLAS matrix-vector product can fall short of a plain
        read; the roofline's memory roof is then the slowest of the three."""
        return min(self.copy_bytes_per_s, self.read_bytes_per_s, self.matvec_bytes_per_s)


def bandwidth_ceiling(device: torch.device, nbytes: int, warmup: int, repeat: int,
                      on_call: Callable[[], None] | None = None) -> Bandwidth:
    """A device-to-device copy, a read-only reduction and a matrix-vector product over ``nbytes``, each
    timed like the model. Make nbytes far larger than the last-level cache (tens of MB on CPUs and GPUs
    alike), or they measure the cache."""
    width = 4096
    src = torch.ones(max(width, nbytes // 4 // width * width), device=device)  # fp32; written: pages present
    dst = torch.empty_like(src)
    matrix, vector = src.view(-1, width), torch.ones(1, width, device=device)
    n = src.numel() * src.element_size()
    copy = time_calls(lambda: dst.copy_(src), device, warmup, repeat, on_call)
    read = time_calls(lambda: src.amax(), device, warmup, repeat, on_call)
    matvec = time_calls(lambda: F.linear(vector, matrix), device, warmup, repeat, on_call)
    return Bandwidth(2 * n / copy.median, n / read.median, n / matvec.median)


@dataclass(frozen=True)
class ComponentTimes:
    """One block's sub-layers, and the head, timed in isolation at the run's shapes (seconds)."""

    attention: Timing
    ffn: Timing
    block: Timing
    head: Timing


COMPONENTS = ("attention", "ffn", "block", "head")


def component_calls(model: Transformer, idx: torch.Tensor, blocks: tuple[int, ...] = ()
                    ) -> dict[str, Callable[[], torch.Tensor]]:
    """Calls of an attention (mixer) sub-layer, an FFN sub-layer and block 0 whole, and of the final norm + LM
    head, at idx's shapes; and of each whole block i of ``blocks`` ("block i"); to be made under
    torch.inference_mode() (their input is made under it)."""
    block = model.blocks[0]
    with torch.inference_mode():
        x = model.embed(idx)
        rope, mask = model.block_inputs(idx.shape[1], x.dtype)
    # Gemma 3n: the sub-layers run on AltUp's active stream, the block on all of them (tfcalc.model.altup)
    part = x if getattr(block, "altup", None) is None else x.unflatten(-1, (block.altup.n, -1))[..., 0, :]
    # each sub-layer timed in the first block that has it (Nemotron-H's block 0 may be an FFN alone); a model
    # with no FFN at all (Codestral Mamba) has none to time: its FFN call returns its input, no work
    mixing = next((b for b in model.blocks if getattr(b.spec.mixer, "sublayer", True)), block)
    ffn = next((b for b in model.blocks if b.ffn is not None), None)
    out = {"attention": lambda: mixing.attention_sublayer(part, rope, mask),
           "ffn": (lambda: ffn.ffn_sublayer(part)) if ffn is not None else (lambda: part),
           "block": lambda: block(x, rope, mask, carry=[]), "head": lambda: model.head(x)}
    if blocks:
        with torch.inference_mode():  # each layer's own rotary table (None: NoPE) and mask (its window, chunk)
            ropes, masks = model.rope_tables(0, idx.shape[1], x.dtype), model.layer_masks(idx.shape[1], x.dtype)
    for i in blocks:
        out[f"block {i}"] = lambda b=model.blocks[i], r=ropes[i], m=masks[i]: b(x, r, m, carry=[])
    return out


def time_components(model: Transformer, idx: torch.Tensor, warmup: int, repeat: int,
                    on_call: Callable[[], None] | None = None) -> ComponentTimes:
    """Attention sub-layer, FFN sub-layer and a whole block of block 0, and the final norm + LM head."""
    calls = component_calls(model, idx)
    with torch.inference_mode():
        return ComponentTimes(**{name: time_calls(calls[name], idx.device, warmup, repeat, on_call)
                                 for name in COMPONENTS})


def time_forward(model, idx: torch.Tensor, warmup: int, repeat: int,
                 on_call: Callable[[], None] | None = None) -> Timing:
    with torch.inference_mode():
        return time_calls(lambda: model(idx), idx.device, warmup, repeat, on_call)


# ---------- a whole benchmark run ----------


@dataclass(frozen=True)
class BenchRow:
    """One (batch, seq) point of a benchmark: everything the table and the JSON show."""

    seq: int
    forward: Timing  # the model actually run (n_layer_run blocks)
    forward_flops: int  # analytic, full-square convention, at full depth
    forward_seconds: float  # median at full depth (extrapolated when n_layer_run < n_layer)
    components: ComponentTimes
    attention_flops: int  # one block's attention sub-layer (projections + scores)
    ffn_flops: int  # one block's FFN sub-layer
    peak_memory_bytes: int | None
    warmup_calls: int = 0  # of the forward pass, before its timed calls
    round_medians: tuple[float, ...] = ()  # the forward pass's median in each interleaved round
    round_spread: float | None = None  # (slowest - fastest round median) / median; None for one round
    # a smaller copy's extrapolation: (layers missing, median seconds of one block) per kind of block
    kind_block_medians: tuple[tuple[int, float], ...] = ()


def extrapolate(forward_median: float, block_median: float, n_run: int, n_full: int) -> float:
    """Full-depth time from a model truncated to n_run blocks: add the missing blocks at the median
    time of one block timed in isolation."""
    return forward_median + (n_full - n_run) * block_median


def extrapolate_kinds(forward_median: float, missing: list[tuple[int, float]]) -> float:
    """Full-depth time from a smaller copy (Architecture.shrunk): add each kind of block's missing layers
    at that kind's median time, timed in isolation: (layers missing, seconds a block) per kind. A copy of
    DeepSeek-V3 at 2 blocks misses 2 dense and 57 MoE layers, each at its own time."""
    return forward_median + sum(n * seconds for n, seconds in missing)


def kind_blocks(arch_run, arch_full) -> list[tuple[int, int]]:
    """(index of the run model's first block of that kind, layers of it missing from the run) for each kind
    of block of the full model's output stack; index 0 for a kind the run lacks (a copy shorter than the
    kinds: its layers are timed as block 0)."""
    first: dict = {}
    for i, block in enumerate(arch_run.output.layers()):
        first.setdefault(block, i)
    run = dict(arch_run.output.kinds())
    return [(first.get(block, 0), n - run.get(block, 0)) for block, n in arch_full.output.kinds()]
