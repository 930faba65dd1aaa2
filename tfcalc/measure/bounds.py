"""The largest count a user may give a measured run: one bound per flag, checked before anything runs.

Counts of work (timed calls, decode steps, requests) and the sizes of the ceilings' buffers have no natural
limit in their type: `bench decode --repeat 1000000000` is a valid integer and times for weeks without a
word (issue 33). Each is bounded by the largest value a run of about a day could use, stated here with the
reasoning and named in the flag's --help (tfcalc.cli.options). A value past its bound is refused in one
line naming the flag, before a model is built or a rank starts. Plain `bench` is bounded in time too by
--min-time; its counts have the same bounds. Pure Python (no torch).

- --repeat 100,000: timed calls. The median and the p10/p90 of 10,000 calls are as steady as of 100,000;
  a forward pass of 0.9 s (a 7B model at a short prompt on a GPU, a small one on a CPU) timed 100,000 times
  takes a day.
- --warmup 10,000: untimed calls; a clock or a cache settles in tens.
- --steps 1,000,000: decode steps after a prompt (one token each). A million tokens is past all but the
  longest contexts (Llama 4 Scout's 10M), and at 86 ms a step -- a 7B model on a server CPU -- a day.
- --gen 1,000,000 with --measure (infer): the tokens generated, each a timed decode step after the first,
  as --steps; a model whose state does not grow with the context (a state-space or linear-attention
  model) has no position table or cache to stop it sooner. An estimate (no --measure) is arithmetic, unbounded.
- --requests 100,000: requests a measured continuous-batching run serves (its --max-time stops it sooner).
- --max-time 86,400: seconds of measured serving, a day.
- --rounds 1,000: interleaved rounds of bench's timed calls; each holds at least one call.
- --matmul-size 32,768: n of the n×n matmul that measures the FLOP/s ceiling: three fp32 matrices of
  4 GiB each, 2·n³ = 7·10¹³ FLOPs a call (0.1 s on an H100, 12 minutes at a CPU's 100 GFLOP/s); a GEMM
  reaches its peak from n = 4,096 on every device tfcalc knows.
- --copy-size 64 GiB: the buffer that measures the bandwidth ceiling (copied, so twice that allocated).
  The bandwidth is flat from a few times the last-level cache (hundreds of MiB); 64 GiB is past every
  device's memory but the largest.
"""

from __future__ import annotations

from tfcalc.errors import InputError, shown

DAY_S = 86_400
GiB = 2**30
# flag -> (the largest value, the reason in a few words for the refusal and --help)
BOUNDS: dict[str, tuple[int, str]] = {
    "--repeat": (100_000, "a 0.9 s call timed that often takes a day"),
    "--warmup": (10_000, "a device settles in tens of calls"),
    "--steps": (1_000_000, "a million tokens; at 86 ms a step, a day"),
    "--gen": (1_000_000, "a million tokens timed; at 86 ms a step, a day"),
    "--requests": (100_000, "a day of serving at a request a second"),
    "--max-time": (DAY_S, "a day"),
    "--rounds": (1_000, "each round holds at least one timed call"),
    "--matmul-size": (32_768, "three 4 GiB fp32 matrices; every device reaches its peak far below"),
    "--copy-size": (64 * GiB, "the bandwidth is flat from a few hundred MiB"),
}


def largest(flag: str) -> int:
    return BOUNDS[flag][0]


def help_bound(flag: str, unit: str = "") -> str:
    """'at most 100,000' (or '64 GiB' for sizes in bytes), for a flag's --help."""
    most = largest(flag)
    shown = f"{most // GiB} GiB" if unit == "bytes" else f"{most:,}{unit}"
    return f"at most {shown}, what a run of a day could use"


def check_seconds(flag: str, value) -> float:
    """A positive, finite number of seconds up to the flag's bound (--max-time), or InputError naming it."""
    most, why = BOUNDS[flag]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= most:
        raise InputError(f"{flag} must be a positive number of seconds, at most {most:,} ({why}); got {shown(value)}")
    return value


def check(flag: str, value, low: int = 1) -> int:
    """value, or InputError in one line naming flag when it is not a whole number from low to its bound."""
    most, why = BOUNDS[flag]
    if isinstance(value, bool) or not isinstance(value, int):
        raise InputError(f"{flag} must be a whole number; got {shown(value)}")
    if low <= value <= most:
        return value
    if flag == "--copy-size":
        from tfcalc.units import nbytes

        got = (nbytes(value) if 0 <= value < 2**80 else f"{value:,} bytes" if value.bit_length() < 64
               else f"a {len(str(value))}-digit number of bytes")
        raise InputError(f"{flag} must be between {low} byte and {most // GiB} GiB ({why}); got {got}")
    got = f"{value:,}" if value.bit_length() < 64 else f"a {len(str(value))}-digit number"
    raise InputError(f"{flag} must be between {low:,} and {most:,} ({why}); got {got}")
