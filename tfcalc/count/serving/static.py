"""Serving estimates on a roofline (tfcalc.count.serving.roofline): prefill latency, decode speed, what fits, and
the batch at which decoding stops being memory-bound. Pure arithmetic, no torch.

A request is ``seq`` prompt tokens then ``gen`` generated tokens per sequence, ``batch`` sequences at once:
- the prefill runs the prompt and yields the first new token (time to first token);
- each of the gen − 1 decode steps yields one more token per sequence; step j (1-based) feeds the token
  at position seq + j − 1 and attends to seq + j positions. ``decode_s_per_token`` is the mean predicted
  step time over those steps, ``decode_tokens_per_s`` its inverse per sequence, times the batch in total.
  The mean is exact but not summed step by step (``--gen 1000000`` built a million steps): each row's
  FLOPs and bytes are affine in the context between kinks (a sliding window's min(context, W)), so the
  steps are cut into affine runs (``_affine_runs``: a run whose ends and second point line up is affine)
  and each row's sum of max(FLOPs / peak, bytes / bandwidth) over a run is two arithmetic series, split
  where the row turns compute-bound (found by bisection). tests/count/test_serving_closed_form.py checks
  it against the step-by-step sum.
- Fit: weights + the KV cache of seq + gen positions (a sliding window caps them at W) must fit the
  device's memory. Activations, the CUDA context and allocator slack are not counted: the largest
  batch is an upper bound.
- Compute-bound batch: the smallest batch whose decode step at context ``seq`` takes longer for its FLOPs
  than for its bytes, both at the ceilings the predicted time uses (with the performance model: each
  matmul at its shape's achievable share of the peak, the achievable bandwidth; the nominal peak would
  call a step memory-bound that the prediction times as compute-bound). The KV cache grows with the
  batch as the FLOPs do, so for multi-head attention at a long context it may never come (None); the
  weight matmuls alone -- the figure usually quoted, about the ridge point for 16-bit weights -- turn
  compute-bound at ``weight_matmuls_compute_bound_batch``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable, Optional

from tfcalc.config import ModelConfig
from tfcalc.count.model.budget import largest_fitting
from tfcalc.count.model.memory import activation_element_bytes
from tfcalc.count.model.quant import WeightFormat, weights_bytes
from tfcalc.count.perf import moe_serving
from tfcalc.count.perf.inference import Overhead, overhead, quantized_weights, step_seconds
from tfcalc.count.serving.roofline import Ceilings, Step, decode_step, prefill_step
from tfcalc.count.serving.serving_tp import (
    TensorParallel,
    comm_seconds,
    kv_share,
    shard_step,
    state_bytes_per_gpu,
    weights_per_gpu,
)
from tfcalc.errors import InputError
from tfcalc.workload import Workload, decoder_source

BATCH_LIMIT = 2**20  # searches for a batch stop here


@dataclass(frozen=True)
class Estimate:
    """Predicted serving figures for one batch size."""

    batch: int
    seq: int
    gen: int
    prefill: Step
    prefill_s: float
    first_decode_step: Optional[Step]  # step 1 of the gen − 1 (None when gen == 1)
    decode_s_per_token: Optional[float]  # None when gen == 1 (no decode step)
    bytes_per_token: Optional[float]  # mean over the decode steps
    bound: Optional[str]  # of the decode steps together
    weight_bytes: int
    kv_cache_bytes: int  # at seq + gen positions
    fits: Optional[bool]  # None without a device memory size
    # the performance model's per-step costs beside the rows (kernels, dequantization, non-matmul traffic),
    # included in prefill_s and decode_s_per_token; None on the plain roofline (measured ceilings)
    prefill_overhead: Optional[Overhead] = None
    decode_overhead: Optional[Overhead] = None
    keys: str = "live"  # the keys a decode step is priced at: "live" (its context) or "read" (``estimate``'s span)

    @property
    def decode_tokens_per_s(self) -> Optional[float]:
        """Per sequence."""
        return None if self.decode_s_per_token is None else 1 / self.decode_s_per_token

    @property
    def decode_tokens_per_s_total(self) -> Optional[float]:
        return None if self.decode_s_per_token is None else self.batch / self.decode_s_per_token

    @property
    def total_s(self) -> float:
        """The whole request: prefill, then gen − 1 decode steps."""
        return self.prefill_s + (self.gen - 1) * (self.decode_s_per_token or 0.0)


def _check(seq: int, gen: int) -> None:
    for name, value in (("seq", seq), ("gen", gen)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise InputError(f"{name} must be a positive integer; got {value!r}")


def _row_values(row) -> tuple[int, int]:
    return row.flops, row.bytes


def _line_up(first: Step, second: Step, last: Step, n: int) -> bool:
    """Whether every row's FLOPs and bytes at the last of n steps are the first's plus (n − 1) slopes."""
    for r0, r1, rn in zip(first.rows, second.rows, last.rows, strict=True):
        for v0, v1, vn in zip(_row_values(r0), _row_values(r1), _row_values(rn), strict=True):
            if vn != v0 + (n - 1) * (v1 - v0):
                return False
    return True


def _affine_runs(step: Callable[[int], Step], lo: int, hi: int) -> list[tuple[Step, Step, int]]:
    """Cut the contexts lo..hi into runs where every row is affine: (first step, second step, length).
    A run is split in half until its ends and second point line up; kinks are few (one per window size),
    so this takes O(kinks · log(steps)) step evaluations."""
    runs, todo = [], [(lo, hi)]
    while todo:
        a, b = todo.pop()
        first = step(a)
        if a == b:
            runs.append((first, first, 1))
            continue
        second, last = step(a + 1), step(b)
        if b == a + 1 or _line_up(first, second, last, b - a + 1):
            runs.append((first, second, b - a + 1))
        else:
            mid = (a + b) // 2
            todo += [(mid + 1, b), (a, mid)]
    return runs


def _series(v0: int, dv: int, i0: int, i1: int) -> int:
    """Σ_{i=i0}^{i1} (v0 + dv·i), exactly."""
    count = i1 - i0 + 1
    return v0 * count + dv * (i0 + i1) * count // 2


def _run_peak(r0, r1, c: Ceilings) -> float:
    """The FLOP/s one row's matmul reaches over a run: the peak times its efficiency at the run's first step."""
    return c.rate(r0 if r0.flops else r1)


def _run_time(r0, r1, n: int, c: Ceilings) -> float:
    """Σ over the n steps of a run of one row's max(FLOPs / peak, bytes / bandwidth); the peak times the
    row's matmul efficiency, its first step's over the run (a decode step's GEMM shapes stay; its score
    products run at the fused kernel's constant efficiency)."""
    f0, b0 = r0.flops, r0.bytes
    df, db = r1.flops - f0, r1.bytes - b0
    peak = _run_peak(r0, r1, c)

    def compute_bound(i: int) -> bool:  # Row.bound's comparison at step i of the run
        return (f0 + df * i) / peak >= (b0 + db * i) / c.bytes_per_s

    first = compute_bound(0)
    split = n  # steps [0, split) are on the side of step 0, the rest on the other
    if compute_bound(n - 1) != first:  # an affine difference changes sign once at most: bisect for it
        lo, hi = 0, n - 1
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if compute_bound(mid) == first else (lo, mid)
        split = hi
    head, tail = (0, split - 1), (split, n - 1)
    compute_steps, memory_steps = (head, tail) if first else (tail, head)
    total = 0.0
    if compute_steps[1] >= compute_steps[0]:
        total += _series(f0, df, *compute_steps) / peak
    if memory_steps[1] >= memory_steps[0]:
        total += _series(b0, db, *memory_steps) / c.bytes_per_s
    return total


@dataclass(frozen=True)
class DecodeTotals:
    """Sums over the decode steps: predicted seconds, FLOPs, bytes, and weights + KV bytes."""

    seconds: float
    flops: int
    bytes: int
    weight_kv_bytes: int
    compute_s: float = 0.0  # the FLOPs alone, each row at its matmul's achievable share of the peak
    memory_s: float = 0.0  # the bytes alone, at the (achievable) bandwidth


def _span_runs(step: Callable[[int], Step], span: Callable[[int], int], lo: int, hi: int) -> list[tuple]:
    """The contexts lo..hi cut into runs of one span each (span nondecreasing in the context: a bucket), each
    run n steps of the same step at that span: (step, step, n); O(spans · log(steps)) evaluations."""
    runs, live = [], lo
    while live <= hi:
        s, a, b = span(live), live, hi
        while a < b:  # the last context of this span
            mid = (a + b + 1) // 2
            a, b = (mid, b) if span(mid) == s else (a, mid - 1)
        at = step(s)
        runs.append((at, at, a - live + 1))
        live = a + 1
    return runs


def decode_totals(step: Callable[[int], Step], lo: int, hi: int, c: Ceilings,
                  span: Optional[Callable[[int], int]] = None) -> DecodeTotals:
    """The decode steps at contexts lo..hi summed in closed form (see the module docstring); with ``span``,
    the step at context L priced over span(L) keys (the bucket tfcalc's runtime reads: constant runs)."""
    seconds, flops, nbytes, read, compute_s = 0.0, 0, 0, 0, 0.0
    for first, second, n in (_affine_runs(step, lo, hi) if span is None else _span_runs(step, span, lo, hi)):
        seconds += sum(_run_time(r0, r1, n, c) for r0, r1 in zip(first.rows, second.rows, strict=True))
        compute_s += sum(_series(r0.flops, r1.flops - r0.flops, 0, n - 1) / _run_peak(r0, r1, c)
                         for r0, r1 in zip(first.rows, second.rows, strict=True))
        flops += _series(first.flops, second.flops - first.flops, 0, n - 1)
        nbytes += _series(first.bytes, second.bytes - first.bytes, 0, n - 1)
        w0, w1 = first.weight_bytes + first.kv_bytes, second.weight_bytes + second.kv_bytes
        read += _series(w0, w1 - w0, 0, n - 1)
    return DecodeTotals(seconds, flops, nbytes, read, compute_s, nbytes / c.bytes_per_s)


def step_overhead(cfg: ModelConfig, step: Step, fmt: WeightFormat, c: Ceilings,
                  tp: Optional[TensorParallel] = None, src_seq: Optional[int] = None,
                  permute: bool = False) -> Optional[Overhead]:
    """The performance model's per-step costs (tfcalc.count.perf.inference) on one GPU, with tensor
    parallelism's all-reduces (tfcalc.count.serving.serving_tp); None without a performance model. ``permute``:
    expert parallelism's copy of the GPU's received rows into expert order (tfcalc.count.perf.moe_serving, step 1)."""
    if c.perf is None:
        return None
    fp32 = c.fp32_flops_per_s or c.flops_per_s / 16  # no fp32 rate: a sixteenth of the tensor rate (A100's)
    act = activation_element_bytes(fmt.compute_dtype)
    t = 1 if tp is None else tp.tp
    moe = [(block.ffn, layers) for _, block, layers in cfg.architecture.kinds() if block.is_moe]
    copy = None
    if permute and moe:  # the GEMM's input in FP8 under FP8 weights: the copy is the cast (moe_serving, step 1)
        copy = moe_serving.step_permute(step.rows, moe[0][0].dispatch_width, sum(n for _, n in moe), act,
                                        1 if fmt.compute_dtype == "fp8" else act)
    o = overhead(cfg, step.batch, step.queries, step.context, quantized_weights(step, fmt), fmt.dtype, act,
                 c.bytes_per_s, fp32, c.perf, t, copy)
    if t == 1:
        return o
    decode = step.phase == "decode"
    return replace(o, comm_s=comm_seconds(cfg, tp, step.batch, step.queries, act, decode, src_seq))


class Sharding:
    """One GPU's share of each step under ``tp`` (None or T = 1: the whole model on one GPU)."""

    def __init__(self, cfg: ModelConfig, fmt: WeightFormat, tp: Optional[TensorParallel]):
        self.cfg, self.tp = cfg, tp
        self.t = 1 if tp is None else tp.tp
        if self.t > 1:
            self.prefill_other = weights_per_gpu(cfg, fmt, self.t)["other"]
            per_gpu = weights_per_gpu(cfg, fmt, self.t, decode=True)
            self.decode_other, self.weights = per_gpu["other"], per_gpu["total"]
        else:
            self.weights = weights_bytes(cfg, fmt)

    def step(self, step: Step) -> Step:
        if self.t == 1:
            return step
        other = self.decode_other if step.phase == "decode" else self.prefill_other
        return shard_step(step, self.cfg, self.t, other)

    def kv(self, nbytes: int) -> int:
        f = kv_share(self.cfg, self.t)
        return nbytes * f.numerator // f.denominator

    def state(self, w: Workload, spare: int = 0) -> int:
        """The generation state one GPU holds at ``w`` (serving_tp.state_bytes_per_gpu: a hybrid's mixers each at
        their own share)."""
        return state_bytes_per_gpu(self.cfg, w, self.t, spare)


def estimate(cfg: ModelConfig, w: Workload, fmt: WeightFormat, ceilings: Ceilings,
             memory_bytes: Optional[int] = None, tp: Optional[TensorParallel] = None,
             span: Optional[Callable[[int], int]] = None, cached: int = 0) -> Estimate:
    """Prefill and decode of ``w.batch`` sequences: w.seq prompt tokens, w.gen new tokens each, the KV cache
    in w.kv (an encoder-decoder reads w.src_seq source tokens, default w.seq). Under ``tp`` every figure is
    one GPU's: its share of the rows, weights and KV cache, and the step's all-reduces. ``span``: the keys a
    decode step at a live context actually reads (tfcalc's runtime: its bucket, roofline.read_span), the
    decode figures priced so (``keys`` "read"); None: at the live context. ``cached``: the P tokens of each prompt
    whose KV is cached already (a prefix hit, tfcalc.count.serving.prefix): the prefill computes the w.seq − P others
    from position P (prefix, step 2); the decode and the KV cache as without."""
    batch, seq, gen, kv_dtype, src_seq = w.batch, w.seq, w.gen, w.kv, decoder_source(cfg, w.seq, w.src_seq)
    _check(seq, gen)
    shard = Sharding(cfg, fmt, tp)
    prefill = shard.step(prefill_step(cfg, batch, seq - cached, fmt, kv_dtype, src_seq=src_seq, start=cached))
    weights = shard.weights
    kv = shard.state(replace(w, src_seq=src_seq))
    first = decode_s = bytes_per_token = bound = decode_over = None
    if gen > 1:
        def step(context: int) -> Step:
            return shard.step(decode_step(cfg, batch, context, fmt, kv_dtype, src_seq=src_seq))

        first, n = step(seq + 1 if span is None else span(seq + 1)), gen - 1
        totals = decode_totals(step, seq + 1, seq + gen - 1, ceilings, span)
        decode_over = step_overhead(cfg, first, fmt, ceilings, tp, src_seq)
        decode_s = step_seconds(totals.seconds / n, decode_over)
        bytes_per_token = totals.weight_kv_bytes / batch / n
        bound = "compute" if totals.compute_s >= totals.memory_s else "memory"  # at the ceilings the time uses
    prefill_over = step_overhead(cfg, prefill, fmt, ceilings, tp, src_seq)
    if prefill_over is not None:  # the request's fixed work, once, before its first token
        prefill_over = replace(prefill_over, request_s=ceilings.perf.request_s)
    prefill_s = step_seconds(prefill.time_s(ceilings), prefill_over)
    return Estimate(batch, seq, gen, prefill, prefill_s, first, decode_s, bytes_per_token, bound,
                    weights, kv, None if memory_bytes is None else weights + kv <= memory_bytes,
                    prefill_over, decode_over, "live" if span is None else "read")


def max_batch(cfg: ModelConfig, w: Workload, fmt: WeightFormat, memory_bytes: int,
              tp: Optional[TensorParallel] = None) -> int:
    """The largest batch whose weights + KV cache (w.seq + w.gen positions) fit, on each GPU of ``tp``;
    0 if the weights do not."""
    shard, src_seq = Sharding(cfg, fmt, tp), decoder_source(cfg, w.seq, w.src_seq)
    def need(b: int) -> int:
        return shard.weights + shard.state(replace(w, batch=b, src_seq=src_seq))

    return largest_fitting(need, memory_bytes, BATCH_LIMIT)


def first_batch(reached: Callable[[int], bool]) -> Optional[int]:
    """The smallest batch in [1, BATCH_LIMIT] for which reached() holds (monotone in the batch), or None."""
    if not reached(BATCH_LIMIT):
        return None
    lo, hi = 0, 1  # reached(lo) is False (or lo = 0), search for the first True
    while not reached(hi):
        lo, hi = hi, min(2 * hi, BATCH_LIMIT)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if reached(mid) else (mid, hi)
    return hi


def compute_bound_batch(cfg: ModelConfig, w: Workload, fmt: WeightFormat, ceilings: Ceilings,
                        tp: Optional[TensorParallel] = None) -> Optional[int]:
    """The smallest batch whose whole decode step at the context w.seq is compute-bound, or None (never)."""
    src_seq, shard = decoder_source(cfg, w.seq, w.src_seq), Sharding(cfg, fmt, tp)
    return first_batch(lambda b: shard.step(decode_step(cfg, b, w.seq, fmt, w.kv, src_seq=src_seq)).bound(ceilings)
                        == "compute")


def weight_matmuls_compute_bound_batch(cfg: ModelConfig, w: Workload, fmt: WeightFormat,
                                       ceilings: Ceilings, tp: Optional[TensorParallel] = None) -> Optional[int]:
    """The smallest batch at which the matmuls with weights (projections, FFN, LM head; not the attention
    over the KV cache) take longer for their FLOPs than for their bytes, at the context w.seq."""
    src_seq, shard = decoder_source(cfg, w.seq, w.src_seq), Sharding(cfg, fmt, tp)

    def reached(b: int) -> bool:
        rows = [r for r in shard.step(decode_step(cfg, b, w.seq, fmt, w.kv, src_seq=src_seq)).rows
                if not r.mixing]
        return sum(r.compute_s(ceilings) for r in rows) >= sum(r.memory_s(ceilings) for r in rows)

    return first_batch(reached)
