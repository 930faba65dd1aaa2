"""Serving estimates on a roofline (tfcalc.count.roofline): prefill latency, decode speed, what fits, and
the batch at which decoding stops being memory-bound. Pure arithmetic, no torch.

A request is ``seq`` prompt tokens then ``gen`` generated tokens per sequence, ``batch`` sequences at once:
- the prefill runs the prompt and yields the first new token (time to first token);
- each of the gen − 1 decode steps yields one more token per sequence; step j (1-based) feeds the token
  at position seq + j − 1 and attends to seq + j positions. ``decode_s_per_token`` is the mean predicted
  step time over those steps (exact: every step is evaluated), ``decode_tokens_per_s`` its inverse
  per sequence, times the batch in total.
- Fit: weights + the KV cache of seq + gen positions (a sliding window caps them at W) must fit the
  device's memory. Activations, the CUDA context and allocator slack are not counted: the largest
  batch is an upper bound.
- Compute-bound batch: the smallest batch whose decode step at context ``seq`` takes longer for its FLOPs
  than for its bytes. The KV cache grows with the batch as the FLOPs do, so for multi-head attention at a
  long context it may never come (None); the weight matmuls alone -- the figure usually quoted, about
  the ridge point for 16-bit weights -- turn compute-bound at ``weight_matmuls_compute_bound_batch``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

from tfcalc.config import ModelConfig
from tfcalc.count.budget import largest_fitting
from tfcalc.count.memory import kv_cache_bytes
from tfcalc.count.quant import WeightFormat, weights_bytes
from tfcalc.count.roofline import SCORE_COMPONENTS, Ceilings, Step, decode_step, prefill_step
from tfcalc.errors import InputError

BATCH_LIMIT = 2**20  # searches for a batch stop here


@dataclass(frozen=True)
class Estimate:
    """Predicted serving figures for one batch size."""

    batch: int
    seq: int
    gen: int
    prefill: Step
    prefill_s: float
    decode_steps: tuple[Step, ...]  # gen − 1 steps
    decode_s_per_token: Optional[float]  # None when gen == 1 (no decode step)
    bytes_per_token: Optional[float]  # mean over the decode steps
    bound: Optional[str]  # of the decode steps together
    weight_bytes: int
    kv_cache_bytes: int  # at seq + gen positions
    fits: Optional[bool]  # None without a device memory size

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


def estimate(cfg: ModelConfig, batch: int, seq: int, gen: int, fmt: WeightFormat, kv_dtype: str,
             ceilings: Ceilings, memory_bytes: Optional[int] = None, src_seq: Optional[int] = None) -> Estimate:
    """Prefill and decode of ``batch`` sequences: seq prompt tokens, gen new tokens each."""
    _check(seq, gen)
    prefill = prefill_step(cfg, batch, seq, fmt, kv_dtype, src_seq)
    steps = tuple(decode_step(cfg, batch, seq + j, fmt, kv_dtype, src_seq) for j in range(1, gen))
    weights = weights_bytes(cfg, fmt)
    kv = kv_cache_bytes(cfg, batch, seq + gen, kv_dtype, src_seq)
    decode_s = bytes_per_token = bound = None
    if steps:
        decode_s = sum(s.time_s(ceilings) for s in steps) / len(steps)
        bytes_per_token = sum(s.bytes_per_token for s in steps) / len(steps)
        compute = sum(s.flops for s in steps) / ceilings.flops_per_s
        memory = sum(s.bytes for s in steps) / ceilings.bytes_per_s
        bound = "compute" if compute >= memory else "memory"
    return Estimate(batch, seq, gen, prefill, prefill.time_s(ceilings), steps, decode_s, bytes_per_token, bound,
                    weights, kv, None if memory_bytes is None else weights + kv <= memory_bytes)


def max_batch(cfg: ModelConfig, seq: int, gen: int, fmt: WeightFormat, kv_dtype: str, memory_bytes: int,
              src_seq: Optional[int] = None) -> int:
    """The largest batch whose weights + KV cache (seq + gen positions) fit; 0 if the weights do not."""
    weights = weights_bytes(cfg, fmt)
    return largest_fitting(lambda b: weights + kv_cache_bytes(cfg, b, seq + gen, kv_dtype, src_seq), memory_bytes,
                           BATCH_LIMIT)


def _first_batch(reached: Callable[[int], bool]) -> Optional[int]:
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


def compute_bound_batch(cfg: ModelConfig, context: int, fmt: WeightFormat, kv_dtype: str, ceilings: Ceilings,
                        src_seq: Optional[int] = None) -> Optional[int]:
    """The smallest batch whose whole decode step at this context is compute-bound, or None (never)."""
    return _first_batch(lambda b: decode_step(cfg, b, context, fmt, kv_dtype, src_seq).bound(ceilings) == "compute")


def weight_matmuls_compute_bound_batch(cfg: ModelConfig, context: int, fmt: WeightFormat, kv_dtype: str,
                                       ceilings: Ceilings, src_seq: Optional[int] = None) -> Optional[int]:
    """The smallest batch at which the matmuls with weights (projections, FFN, LM head; not the attention
    over the KV cache) take longer for their FLOPs than for their bytes."""
    def reached(b: int) -> bool:
        rows = [r for r in decode_step(cfg, b, context, fmt, kv_dtype, src_seq).rows
                if r.component not in SCORE_COMPONENTS]
        flops, nbytes = sum(r.flops for r in rows), sum(r.bytes for r in rows)
        return flops / ceilings.flops_per_s >= nbytes / ceilings.bytes_per_s

    return _first_batch(reached)
