"""Continuous batching (``infer --rate R --mean-input I --mean-output O``): a server under a steady stream
of requests, in steady state. Pure arithmetic on the serving roofline (tfcalc.count.serving.static).

The scheduler: iteration-level scheduling (Yu et al. 2022, "Orca", OSDI, sec. 3): every iteration runs
one decode step for every sequence in flight, and a finished sequence leaves at once; new requests are
prefilled in iterations of their own, ahead of decoding (vLLM's default scheduler without chunked
prefill, Kwon et al. 2023, "PagedAttention", SOSP, sec. 4.2 and 5: waiting prompts are scheduled first),
one prompt of I tokens each; or, the default of ``infer --rate`` (``prefill_chunk``, vLLM V1's scheduler), chunked
prefill: every step decodes the sequences in flight and carries chunks of the waiting prompts in the rest of a
budget of B tokens, the weights read once for both (tfcalc.count.serving.chunked, and steps 1, 3 and 5 below as
it changes them). Requests arrive as a Poisson stream of R per second; each has I prompt tokens and yields O
tokens (the prefill the first, O − 1 decode steps the rest). The KV cache is paged: a sequence holds the
positions it has so far, on average I + O/2 over its life.

1. Prefill: t_p, one prompt's prefill at batch 1 on the GPU (its kernels, not the runtime's fixed work
   per request, which the host overlaps with other iterations); its share of the GPU's time ρ = R·t_p.
2. Decode: a step at batch n and context I + O/2 takes τ(n) (its rows, kernels, traffic, all-reduces
   under --tp; linear between whole batches). A sequence's O − 1 steps, stretched by the prefills
   between them, take D = (O − 1)·τ(N) / (1 − ρ).
3. Little's law (Little 1961): the sequences in flight N = R·D, a fixed point
   N = R·(O − 1)·τ(N) / (1 − ρ): the smallest N ≥ 0 that solves it (bisection). N is the mean decode batch.
4. Capacity: none when ρ ≥ 1 (prefills alone fill the GPU), when no N solves 3 (decode steps grow
   faster than they serve), or when the KV cache of N sequences (I + O/2 positions each) with the weights
   does not fit the memory. ``max_rate``: the largest R that fits all three (bisection on R).
5. Latencies (means): TTFT = W + u·τ(N)/2 + t_p + the runtime's fixed work per request, where
   W = ρ·t_p / (2(1 − ρ)) is the wait for the prefills ahead (M/D/1, Pollaczek-Khinchine) and τ(N)/2 the
   rest of a decode step under way on arrival, which an arrival finds with probability u = (1 − ρ)·min(N, 1),
   the share of time the GPU decodes (Poisson arrivals see time averages; below one sequence in flight the
   GPU idles); inter-token latency ITL = τ(N) / (1 − ρ) (a decode step
   and its share of the prefills: a prefill stalls every sequence for t_p when it runs). End to end:
   TTFT + (O − 1)·ITL.
6. Throughput: R·O output and R·I prompt tokens per second.

Chunked prefill changes three of the steps. 1: a prompt's cost t_p(N) is what its chunks add to the decode steps
they ride on (tfcalc.count.serving.chunked, step 3: the weights not read again beside N ≥ 1 decoding), so
ρ(N) = R·t_p(N) and step 3's fixed point is N = R·(O − 1)·τ(N) / (1 − ρ(N)). 4: N ≤ B − 1 and R·S(N) < 1 as
well (the limit 'budget': the decode tokens leave too little room for the prompts; S(N), the time a prompt holds
the steps' prompt budget, chunked step 4). 5: TTFT = W + (1 − R·S)·min(N, 1)·τ(N)/2 + k·min(N, 1)·τ(N) + t_p(N) +
the fixed work, W = R·S² / (2(1 − R·S)) (M/D/1 on the budget): the prompt's k chunks each ride on a step that
decodes the N in flight.
ITL = τ(N) / (1 − ρ(N)) as before: the steps per second, (1 − ρ)/τ, whichever steps the chunks are in.

A cached prefix (``Traffic.cached_prefix``, tfcalc.count.serving.prefix) changes two inputs and nothing else: the
prompt's step (1; chunked: its chunks) computes the I − P uncached tokens from position P, and the KV cache of N
sequences is N·(M(L) − s) + s, the prefix's s bytes once (4: the memory's bound on N grows so).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import cached_property, lru_cache
from typing import Callable, Optional

from tfcalc.config import ModelConfig
from tfcalc.count.model.quant import WeightFormat
from tfcalc.count.perf.inference import step_seconds
from tfcalc.count.serving import chunked, prefix
from tfcalc.count.serving.roofline import Ceilings, Step, decode_step, prefill_step
from tfcalc.count.serving.serving_tp import TensorParallel
from tfcalc.count.serving.static import BATCH_LIMIT, Sharding, step_overhead
from tfcalc.errors import InputError
from tfcalc.workload import Workload, decoder_source

ITERATIONS = 60  # bisection halvings: N and R to ~1e-18 of their range


@dataclass(frozen=True)
class Traffic:
    rate: float  # requests per second
    mean_input: int
    mean_output: int
    cached_prefix: int = 0  # N: tokens of each prompt whose KV is cached already (tfcalc.count.serving.prefix)


@dataclass(frozen=True)
class SteadyState:
    traffic: Traffic
    prefill_s: float  # t_p
    prefill_share: float  # ρ
    concurrency: Optional[float]  # N (None: over capacity)
    decode_step_s: Optional[float]  # τ(N)
    ttft_s: Optional[float]
    itl_s: Optional[float]
    kv_cache_bytes: Optional[int]  # of N sequences at I + O/2 positions (per GPU under --tp)
    max_concurrency: Optional[int]  # the KV cache's bound on N (None: no memory size)
    max_rate: float  # requests/s the server sustains (capacity)
    limit: Optional[str]  # None, or what the rate exceeds: 'prefill', 'decode', 'memory' or 'budget' (chunked)
    request_s: float
    prefill_chunk: Optional[int] = None  # chunked prefill's tokens per step B (None: prefills whole, alone)
    prefill_steps: Optional[int] = None  # chunked: the steps a prompt's chunks take (over capacity: beside N = 1)
    users: Optional[int] = None  # closed loop (tfcalc.count.serving.closed_loop): C users; None: Poisson arrivals
    lengths: Optional[str] = None  # closed loop: 'fixed' (every request I and O exactly) or 'random'
    method: Optional[str] = None  # closed loop: 'schedule' (count/serving/lockstep.py) or why the mean view stands in
    ttft_p50_s: Optional[float] = None  # closed loop, fixed lengths: the schedule's TTFT quantiles
    ttft_p99_s: Optional[float] = None
    whole: bool = False  # chunked: whole prompts in the budget (chunked.py's last paragraph; --context-chunking off)
    cached_prefix: int = 0  # --cached-prefix N (tfcalc.count.serving.prefix)
    cached_tokens: int = 0  # P: the tokens of it that hit, whole blocks (prefix, step 1)
    prefix_kv_bytes: int = 0  # s: the shared prefix's state, held once (prefix, step 3; per GPU under --tp)
    max_batch: Optional[int] = None  # the engine's cap on sequences in flight (--max-batch; serving/engine_caps.py)
    engine: Optional[dict] = None  # --max-batch trtllm-bench: the engine's settings as it computed them (JSON)
    pace: Optional[dict] = None  # attention DP: the groups' stall terms (count.serving.adp_pace, ep_continuous; JSON)

    @property
    def over_capacity(self) -> bool:
        return self.limit is not None

    @property
    def e2e_s(self) -> Optional[float]:
        if self.ttft_s is None or self.itl_s is None:
            return None
        return self.ttft_s + (self.traffic.mean_output - 1) * self.itl_s


def check(t: Traffic) -> None:
    r = t.rate
    if isinstance(r, bool) or not isinstance(r, (int, float)) or not (0 < r < math.inf):
        raise InputError(f"--rate must be a positive number of requests per second; got {str(r)[:40]!r}")
    for name, v in (("--mean-input", t.mean_input), ("--mean-output", t.mean_output)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise InputError(f"{name} must be a positive whole number of tokens; got {str(v)[:40]!r}")
    prefix.check(t.cached_prefix, t.mean_input)


class Engine:
    """The server's step times and memory for one model, format, device and TP (cached per batch)."""

    def __init__(self, cfg: ModelConfig, fmt: WeightFormat, kv_dtype: str, c: Ceilings, t: Traffic,
                 memory: Optional[int], tp: Optional[TensorParallel], budget: Optional[int] = None,
                 split: bool = True):
        self.cfg, self.fmt, self.kv, self.c, self.tp, self.memory = cfg, fmt, kv_dtype, c, tp, memory
        self.shard = Sharding(cfg, fmt, tp)
        self.context = t.mean_input + max(1, t.mean_output // 2)
        self.src = decoder_source(cfg, t.mean_input, None)
        pre = self.shard.step(self.prompt_step(t))
        self.prefill_s = step_seconds(pre.time_s(c), self.overhead(pre))
        self.decode_parts = lru_cache(maxsize=None)(self._decode_parts)
        self.step_s = lru_cache(maxsize=None)(self._step_s)
        self.budget = budget if budget is not None and chunked.applies(cfg) else None
        self.chunked = None if self.budget is None else chunked.ChunkedPrefill(
            self, t.mean_input - self.cached, self.budget, split, start=self.cached)

    def prompt_step(self, t: Traffic) -> Step:
        """A prompt's prefill, alone: its I − P uncached tokens from position P (tfcalc.count.serving.prefix, step 2;
        P = 0 without a cached prefix: the whole prompt). Sets ``cached``, P."""
        prefix.check(t.cached_prefix, t.mean_input)
        self.cached = prefix.hit_tokens(t.cached_prefix)
        self.prompt_tokens = t.mean_input - self.cached
        return prefill_step(self.cfg, 1, t.mean_input - self.cached, self.fmt, self.kv, src_seq=self.src,
                            start=self.cached)

    def prompts_s(self, k: int) -> float:
        """k prompts prefilled together in one step, alone (k = 1: t_p; disaggregated prefill's budget batches)."""
        pre = self.shard.step(prefill_step(self.cfg, k, self.prompt_tokens, self.fmt, self.kv, src_seq=self.src,
                                           start=self.cached))
        return step_seconds(pre.time_s(self.c), self.overhead(pre))

    def overhead(self, step: Step):
        """The performance model's per-step costs of one of this server's steps (None without one)."""
        return step_overhead(self.cfg, step, self.fmt, self.c, self.tp, self.src)

    def _decode_parts(self, n: int):
        step = self.shard.step(decode_step(self.cfg, n, self.context, self.fmt, self.kv, src_seq=self.src))
        return step, self.overhead(step)

    def _step_s(self, n: int) -> float:
        step, over = self.decode_parts(n)
        return step_seconds(step.time_s(self.c), over)

    def prompt_s(self, n: float) -> float:
        """A prompt's seconds on the GPU beside n sequences decoding: t_p unchunked, t_p(n) chunked."""
        return self.prefill_s if self.chunked is None else self.chunked.seconds(n)

    def own_prompt_s(self, n: float) -> float:
        """A prompt's own steps' seconds for its TTFT (step 5): t_p(n), here; an attention-DP group's leaves out the
        stall its prompts put on the other groups (ep_continuous), which its share ρ counts."""
        return self.prompt_s(n)

    def tau(self, n: float) -> float:
        """τ(n): linear between whole batches, τ(1) below one."""
        if n <= 1:
            return self.step_s(1)
        lo = int(n)
        return self.step_s(lo) + (n - lo) * (self.step_s(lo + 1) - self.step_s(lo))

    @property
    def workload(self) -> Workload:
        """One sequence at the mean context, in the model's dtype (a convolution's state) and the KV dtype."""
        return Workload(seq=self.context, dtype=self.fmt.dtype, kv_dtype=self.kv, src_seq=self.src)

    @cached_property
    def shared(self) -> int:
        """s: the cached prefix's state at the mean context, held once for all sequences (prefix, step 3)."""
        return prefix.shared_bytes(self.shard.state, self.workload, self.cached)

    def kv_bytes(self, n: float) -> int:
        """The KV cache of n sequences at the mean context: n·(M(L) − s) + s (prefix, step 3; s = 0 without one)."""
        s = self.shared
        per = self.shard.state(self.workload) - s
        return math.ceil(n * per) + (s if n > 0 else 0)

    def max_concurrency(self) -> Optional[int]:
        if self.memory is None:
            return None
        s = self.shared
        per = self.shard.state(self.workload) - s
        return max(0, (self.memory - self.shard.weights - s) // per) if per else BATCH_LIMIT


def _smallest_root(g: Callable[[float], float], hi: float) -> Optional[float]:
    """The smallest x in (0, hi] with g(x) ≤ 0 for g > 0 near 0 and at most one crossing; None if g(hi) > 0."""
    if g(hi) > 0:
        return None
    lo = 0.0
    x = 1.0
    while x < hi and g(x) > 0:  # doubling: the crossing is usually at a small N
        lo, x = x, 2 * x
    hi = min(x, hi)
    for _ in range(ITERATIONS):
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if g(mid) <= 0 else (mid, hi)
    return hi


def first_root(g: Callable[[float], float], hi: float) -> Optional[float]:
    """The smallest x in (0, hi] with g(x) ≤ 0, g > 0 near 0, found by doubling then bisection; None if none of
    1, 2, 4, ..., hi has g ≤ 0. Chunked prefill's g may turn positive again near the budget (a prompt's chunks
    shrink to the budget the decode tokens leave), so the first crossing is sought, not the last point's sign."""
    lo, x = 0.0, min(1.0, hi)
    while g(x) > 0:
        if x >= hi:
            return None
        lo, x = x, min(2 * x, hi)
    hi = x
    for _ in range(ITERATIONS):
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if g(mid) <= 0 else (mid, hi)
    return hi


def chunked_concurrency(e: Engine, t: Traffic, cap: float) -> tuple[Optional[float], Optional[str]]:
    """Step 3 under chunked prefill: every step decodes the N in flight and carries chunks of the waiting
    prompts; a prompt costs t_p(N) (tfcalc.count.serving.chunked), its share of the GPU ρ(N) = R·t_p(N), and
    N = R·(O − 1)·τ(N) / (1 − ρ(N)), solved as R·(O − 1)·τ(N) − N·(1 − ρ(N)) = 0. N ≤ B − 1: the decode
    tokens leave room in the budget for a prompt's chunk."""
    p, rate = e.chunked, t.rate
    if t.mean_output == 1:  # one token each: the prefill yields it, nothing decodes
        return (0.0, None) if rate * p.seconds(0) < 1 else (None, "prefill")

    def g(n: float) -> float:
        return rate * (t.mean_output - 1) * e.tau(n) - n * (1 - rate * p.seconds(n))

    bound = min(cap, float(p.max_decode), float(BATCH_LIMIT))
    n = first_root(g, max(bound, 1.0))
    if n is not None and n <= bound:
        return (n, None) if rate * p.service(n) < 1 else (None, "budget")
    low = p.seconds(1)  # what it runs into: the prompts alone; else the N the decode steps would need with the
    if rate * low >= 1:  # prompts at t_p(1) each, past the memory's bound or the budget's (the tighter one)
        return None, "prefill"
    free = first_root(lambda n: rate * (t.mean_output - 1) * e.tau(n) - n * (1 - rate * low), float(BATCH_LIMIT))
    if free is None or free <= min(cap, p.max_decode):  # not even there, or the prompts' cost grows with N
        return None, "decode"
    return None, "memory" if cap <= p.max_decode else "budget"


def concurrency(e: Engine, t: Traffic, cap: float) -> tuple[Optional[float], Optional[str]]:
    """Step 3's N, or (None, the limit it runs into)."""
    if e.chunked is not None:
        return chunked_concurrency(e, t, cap)
    rho = t.rate * e.prefill_s
    if rho >= 1:
        return None, "prefill"
    scale = t.rate * (t.mean_output - 1) / (1 - rho)
    if scale == 0:  # one token each: the prefill yields it, nothing decodes
        return 0.0, None
    n = _smallest_root(lambda n: scale * e.tau(n) - n, max(cap, 1.0) if cap != math.inf else float(BATCH_LIMIT))
    if n is None:
        return None, "memory" if cap < BATCH_LIMIT and _smallest_root(
            lambda n: scale * e.tau(n) - n, float(BATCH_LIMIT)) is not None else "decode"
    if n > cap:
        return None, "memory"
    return n, None


def steady_state(cfg: ModelConfig, fmt: WeightFormat, kv_dtype: str, c: Ceilings, t: Traffic,
                 memory: Optional[int] = None, tp: Optional[TensorParallel] = None,
                 prefill_chunk: Optional[int] = None, engine: Optional[Engine] = None,
                 split: bool = True, max_batch: Optional[int] = None) -> SteadyState:
    """Steps 1-6 of the module docstring; ``prefill_chunk``: chunked prefill with a budget of that many tokens
    per step (tfcalc.count.serving.chunked; decoder-only models), None: each prompt prefilled whole, alone.
    ``engine``: the server's steps priced otherwise (one attention-DP group's, tfcalc.count.serving.ep_continuous).
    ``max_batch``: the engine's cap on the sequences in flight (TensorRT-LLM's max_batch_size, vLLM's max_num_seqs;
    tfcalc.count.serving.engine_caps), step 4's bound N ≤ min(the KV cache's, max_batch): the limit 'batch' where
    the cap is the tighter; None: the KV cache's alone."""
    check(t)
    if prefill_chunk is not None:
        chunked.check_budget(prefill_chunk)
    e = engine or Engine(cfg, fmt, kv_dtype, c, t, memory, tp, prefill_chunk, split)
    return with_prefix(replace(_steady_state(e, t, max_batch), whole=e.chunked is not None and not e.chunked.split),
                       e, t.cached_prefix)


def with_prefix(state: SteadyState, e: Engine, cached_prefix: int) -> SteadyState:
    """The steady state with its cached prefix said (tfcalc.count.serving.prefix): N asked, P hit, s held once."""
    if not cached_prefix:
        return state
    return replace(state, cached_prefix=cached_prefix, cached_tokens=e.cached, prefix_kv_bytes=e.shared)


def capped(e: Engine, t: Traffic, cap: float, max_batch: Optional[int]) -> tuple[Optional[float], Optional[str]]:
    """Step 3's N under the KV cache's bound ``cap`` and the engine's ``max_batch``: the steady state's N where it is
    within max_batch; past it, over capacity with the limit 'batch' (the rate needs more sequences in flight than the
    engine admits). N is sought as without the cap, so that a cap can only take steady states away: the search for
    the first crossing probes N at doubling points up to its bound, and a step's time jumps with whole GEMM waves, so
    a search bounded at max_batch would probe other points and could find a crossing the uncapped one passes over."""
    n, limit = concurrency(e, t, cap)
    if max_batch is None or n is None or n <= max_batch:
        return n, limit
    return None, "batch"


def _steady_state(e: Engine, t: Traffic, max_batch: Optional[int] = None) -> SteadyState:
    c = e.c
    request = c.perf.request_s if c.perf is not None else 0.0
    cap_n = e.max_concurrency()
    cap = math.inf if cap_n is None else float(cap_n)
    n, limit = capped(e, t, cap, max_batch)
    rate = max_rate(e, t, cap, max_batch)
    if n is None:  # chunked: the prompt's cost beside one sequence decoding
        t_p = e.prompt_s(1.0)
        return SteadyState(t, t_p, t.rate * t_p, None, None, None, None, None, cap_n, rate, limit, request,
                           e.budget, None if e.chunked is None else e.chunked.steps(1.0), max_batch=max_batch)
    t_p = e.prompt_s(n)
    rho = t.rate * t_p
    tau = e.tau(n) if n > 0 else e.step_s(1)
    if e.chunked is None:
        steps, wait, idle, own = None, rho * t_p / (2 * (1 - rho)), 1 - rho, e.own_prompt_s(n)
    else:  # the prompts ahead hold the budget S(N) each (M/D/1); its own steps each carry the decode step too
        steps, s = e.chunked.steps(n), e.chunked.service(n)
        wait, idle = t.rate * s * s / (2 * (1 - t.rate * s)), 1 - t.rate * s
        own = e.own_prompt_s(n) + steps * min(n, 1.0) * tau
    ttft = wait + idle * min(n, 1.0) * tau / 2 + own + request
    return SteadyState(t, t_p, rho, n, tau, ttft, tau / (1 - rho), e.kv_bytes(n), cap_n, rate, None, request,
                       e.budget, steps, max_batch=max_batch)


def max_rate(e: Engine, t: Traffic, cap: float, max_batch: Optional[int] = None) -> float:
    """Step 4: the largest rate with a steady state (bisection; concurrency grows with the rate)."""
    def ok(r: float) -> bool:
        return capped(e, Traffic(r, t.mean_input, t.mean_output), cap, max_batch)[0] is not None

    hi = 1 / e.prefill_s
    if e.chunked is not None:  # t_p(N) beside decode tokens is below the prefill alone: seek the bound upwards
        hi = 1 / min(e.prompt_s(0.0), e.prompt_s(1.0))
        for _ in range(ITERATIONS):
            if not ok(hi):
                break
            hi *= 2
    lo = 0.0
    for _ in range(ITERATIONS):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if ok(mid) else (lo, mid)
    return lo


def rows_step(cfg: ModelConfig, fmt: WeightFormat, kv_dtype: str, rows: int, span: int) -> Step:
    """A decode step as tfcalc.model.slots runs it (the measured server, ``infer --rate --measure``): one token
    for every one of ``rows`` slots, in flight or free, each reading ``span`` positions of its cache (the
    bucket of the longest row in flight; min(span, W) in a window of W), the fixed shape of a contiguous cache
    without paged attention. The steady state's τ(N) above is the paged server's step instead: N sequences,
    each reading its own I + O/2 positions."""
    return decode_step(cfg, rows, span, fmt, kv_dtype, src_seq=decoder_source(cfg, span, None))


def rows_step_s(cfg: ModelConfig, fmt: WeightFormat, kv_dtype: str, c: Ceilings, rows: int, span: int) -> float:
    """``rows_step``'s seconds on the roofline, with the performance model's per-step costs."""
    step = rows_step(cfg, fmt, kv_dtype, rows, span)
    over = step_overhead(cfg, step, fmt, c, None, decoder_source(cfg, span, None))
    return step_seconds(step.time_s(c), over)
