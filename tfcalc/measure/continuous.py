"""Continuous batching run for real (``infer MODEL --rate R --mean-input I --mean-output O --measure``): a
server loop on the device, fed a seeded Poisson stream of requests, timed on the host's clock.

The loop is the scheduler tfcalc.count.serving.continuous predicts (Orca's iteration-level scheduling, vLLM's
default of prefills first and whole, Kwon et al. 2023, sec. 4.2): each iteration either prefills one
waiting request at batch 1 into a free slot of the cache (tfcalc.model.slots; its first token comes from
the prefill), or, when none waits, runs one decode step for every sequence in flight
(tfcalc.model.slots.decode_rows); a sequence with its O tokens leaves at once. Idle, the loop sleeps until
the next arrival. Every request has exactly I prompt tokens (random ids) and O output tokens, the lengths
the prediction assumes (its means); arrivals are exponential gaps of mean 1/R from random.Random(seed), or under
``--concurrency C`` a closed loop (tfcalc.count.serving.closed_loop): C requests at the start, and each request
that ends brings the next at the end of the iteration that made its last token.

Each iteration ends with a synchronize and a read of the host clock (tfcalc.measure.bench.HostClock), as a
server that streams its tokens does: a token's time is the end of the iteration that made it. TTFT = the
first token's time less the arrival; inter-token latency = the gaps between a request's tokens; throughput =
output tokens ÷ (last token's time − first arrival). The slots: as many as there are requests, at most
MAX_ROWS; a request that finds them all in flight waits (as vLLM's waiting queue when its KV cache is full).
A decode step runs over every slot whatever the occupancy (the fixed-shape step of tfcalc.model.slots: the
same ops and shapes as rows join and leave, nothing read back to the host), so its time is that of all the
slots' tokens over the longest row's bucket: the weights read once as before, plus the free rows' FLOPs and
key reads (each free row parked at position 0). Each step is still recorded with the sequences in flight
(``decode_steps``: (sequences, seconds)), and tokens, throughput and latencies count only their tokens: the
figures mean the work of the rows in flight, done at the price of the fixed shape. What each step read is
recorded beside (``decode_reads``: (span, mean live positions of the rows in flight)): every slot reads the
span, the bucket of the longest row in flight (SlotCache.span), where a paged server's rows would read
their own live positions; tfcalc.report.continuous_measured prices the step at that span.
The run stops at the time budget (max_time), saying how many requests it served. After it (untimed), the
last CHECKED requests served whole have their tokens checked against their prompts decoded alone
(tfcalc.model.generate): greedy, batching with other sequences must not change them.

Refused before anything is allocated: a model the slots do not run (tfcalc.model.slots.check_slots), and a
run whose weights and slots' KV cache do not fit the tightest of free memory, rlimit and cgroup
(tfcalc.measure.fit).
"""

from __future__ import annotations

import random
import time
from collections import deque
from dataclasses import dataclass, replace
from typing import Callable, Optional

import torch

from tfcalc.config import ModelConfig
from tfcalc.count.model import memory as count_memory
from tfcalc.measure import bench
from tfcalc.measure.device import resolve_device, torch_dtype
from tfcalc.measure.fit import require_fits
from tfcalc.model import build_model, generate, next_token
from tfcalc.model.cache import check_decodable
from tfcalc.model.slots import SlotCache, check_slots, decode_rows
from tfcalc.workload import Workload

MAX_ROWS = 256  # slots at most: beyond, requests wait for one (the run is bounded by its time budget anyway)
CHECKED = 4  # requests whose tokens are checked against their prompt decoded alone, after the run


@dataclass(frozen=True, kw_only=True)
class ContinuousPlan:
    cfg: ModelConfig
    device: str
    dtype: str
    rate: float  # requests per second
    mean_input: int
    mean_output: int
    requests: int
    max_time: float  # seconds of serving at most
    seed: int = 0
    warmup: bool = True
    users: Optional[int] = None  # --concurrency C: a closed loop of C users (rate unused); None: Poisson at rate

    @property
    def rows(self) -> int:
        return min(self.requests, MAX_ROWS, self.users or MAX_ROWS)


@dataclass(frozen=True)
class ContinuousRun:
    arrivals: tuple[float, ...]  # seconds from the start, per request
    token_times: tuple[tuple[float, ...], ...]  # per request: each output token's time (empty: never served)
    prefill_s: tuple[float, ...]  # each prefill's seconds
    decode_steps: tuple[tuple[int, float], ...]  # (sequences, seconds) per decode iteration
    rows: int
    cache_bytes: int
    stopped: bool  # the time budget ran out first
    mean_output: int
    exact: Optional[bool] = None  # the last CHECKED requests' tokens equal their prompts decoded alone
    checked: int = 0
    # per decode iteration: (the slots every row read, the mean positions the rows in flight attend to)
    decode_reads: tuple[tuple[int, float], ...] = ()

    @property
    def completed(self) -> int:
        return sum(len(t) >= self.mean_output for t in self.token_times)

    @property
    def served(self) -> list[int]:
        """Requests that got their first token."""
        return [i for i, t in enumerate(self.token_times) if t]

    @property
    def span_s(self) -> float:
        """First arrival to the last token."""
        last = max((t[-1] for t in self.token_times if t), default=self.arrivals[0])
        return max(last - self.arrivals[0], 1e-12)


def estimate_bytes(plan: ContinuousPlan) -> int:
    """Weights, the slots' KV cache (rows × (I + O) positions), a prefill's working set, and a decode step's
    over every row."""
    cfg, dtype, positions = plan.cfg, plan.dtype, plan.mean_input + plan.mean_output
    kv = count_memory.kv_cache_bytes(cfg, Workload(batch=plan.rows, seq=positions, dtype=dtype))
    work = max(count_memory.forward_working_set(cfg, Workload(batch=1, seq=plan.mean_input, dtype=dtype)),
               count_memory.forward_working_set(cfg, Workload(batch=plan.rows, seq=1, dtype=dtype)))
    return count_memory.weights_bytes(cfg, dtype) + kv + work


def check_plan(plan: ContinuousPlan) -> None:
    """Every refusal that needs no device."""
    torch_dtype(plan.dtype)
    check_slots(plan.cfg, "--rate --measure")
    check_decodable(plan.cfg, plan.mean_input + plan.mean_output)


def require_fit(plan: ContinuousPlan) -> None:
    """Refused, before anything is allocated, when the weights and the slots do not fit (tfcalc.measure.fit)."""
    require_fits(estimate_bytes(plan), plan.device,
                 f"continuous batching of {plan.cfg.name} ({plan.rows} slots of {plan.mean_input} + "
                 f"{plan.mean_output} positions, {plan.dtype})", "fewer --requests, or a smaller --mean-input or "
                 "--mean-output")


def arrivals(plan: ContinuousPlan) -> tuple[float, ...]:
    """Poisson arrivals: exponential gaps of mean 1 / rate, seeded. A closed loop: its C users' first requests at
    the start, the others not yet known (infinity: each comes when a request ends, _serve)."""
    if plan.users is not None:
        first = min(plan.users, plan.requests)
        return (0.0,) * first + (float("inf"),) * (plan.requests - first)
    rng, t, out = random.Random(plan.seed), 0.0, []
    for _ in range(plan.requests):
        t += rng.expovariate(plan.rate)
        out.append(t)
    return tuple(out)


class _Server:
    """The loop of the module docstring on one model and its slots."""

    def __init__(self, model, plan: ContinuousPlan, dev: torch.device):
        self.model, self.plan, self.dev = model, plan, dev
        self.cache = SlotCache(model, plan.rows, plan.mean_input + plan.mean_output)
        self.last = torch.zeros(plan.rows, 1, dtype=torch.long, device=dev)  # each row's pending token
        self.owner: list[int] = []  # request per row in flight
        self.gen = torch.Generator(device=dev).manual_seed(plan.seed + 1)
        self.made: list[tuple[list[int], torch.Tensor]] = []  # (requests, their new tokens) per iteration
        self.reads: list[tuple[int, float]] = []  # per decode step: its span, the rows in flight's mean live length
        self.prompts: dict[int, torch.Tensor] = {}  # every request's prompt, for the check after the run

    def prefill(self, i: int) -> None:
        prompt = torch.randint(0, self.plan.cfg.vocab_size, (1, self.plan.mean_input), device=self.dev,
                               generator=self.gen)
        if i >= 0:
            self.prompts[i] = prompt
        r = self.cache.n
        self.last[r] = next_token(self.cache.admit(prompt, self.model))[0]
        self.owner.append(i)
        self.made.append(([i], self.last[r:r + 1].clone()))

    def decode(self) -> None:
        n = self.cache.n
        self.reads.append((self.cache.span, sum(self.cache.lengths) / n + 1))  # host-known: nothing read back
        # every slot, in flight or free: the fixed-shape step (tfcalc.model.slots); a free row's token is unused
        self.last.copy_(next_token(decode_rows(self.model, self.last, self.cache)))
        self.made.append((list(self.owner), self.last[:n].clone()))

    def tokens(self, requests: int) -> list[list[int]]:
        """Each request's tokens, read back after the run (the loop never waits for them)."""
        out: list[list[int]] = [[] for _ in range(requests)]
        for owners, made in self.made:
            for i, token in zip(owners, made[:, 0].tolist(), strict=True):
                if i >= 0:
                    out[i].append(token)
        return out

    def checked(self, tokens: list[list[int]]) -> list[int]:
        """The last CHECKED requests served whole: the ones that joined a batch under way, were moved into
        freed slots and sat beside longer sequences (the first ones decode at the batch's longest context)."""
        return [i for i in sorted(self.prompts) if len(tokens[i]) == self.plan.mean_output][-CHECKED:]

    def exact(self, tokens: list[list[int]]) -> Optional[bool]:
        """Whether the checked requests got their prompt's greedy tokens decoded alone (tfcalc.model.generate):
        batching with others must not change them. None: none served whole."""
        checked = self.checked(tokens)
        if not checked:
            return None
        alone = [generate(self.model, self.prompts[i], self.plan.mean_output)[0].tolist() for i in checked]
        return all(tokens[i] == a for i, a in zip(checked, alone, strict=True))

    def leave(self, done: Callable[[int], bool]) -> int:
        """Rows whose request has its tokens leave (the last row moving into each); how many left."""
        left = 0
        for r in reversed(range(self.cache.n)):
            if done(self.owner[r]):
                last = self.cache.n - 1
                self.cache.release(r)
                self.last[r] = self.last[last]
                self.owner[r] = self.owner[last]
                self.owner.pop()
                left += 1
        return left


def _serve(server: _Server, plan: ContinuousPlan, on_call: Optional[Callable[[], None]]) -> ContinuousRun:
    host = bench.HostClock(server.dev)
    when = list(arrivals(plan))
    closed = plan.users is not None
    times: list[list[float]] = [[] for _ in when]
    prefills: list[float] = []
    steps: list[tuple[int, float]] = []
    waiting: deque[int] = deque()
    arrived = finished = 0
    stopped = False
    done = lambda i: len(times[i]) >= plan.mean_output  # noqa: E731
    t0 = host.mark()
    while finished < plan.requests:
        now = host.mark() - t0
        if now > plan.max_time:
            stopped = True
            break
        while arrived < plan.requests and when[arrived] <= now:
            waiting.append(arrived)
            arrived += 1
        if waiting and server.cache.n < plan.rows:  # prefills first, one per iteration
            i = waiting.popleft()
            server.prefill(i)
            end = host.mark() - t0
            prefills.append(end - now)
            times[i].append(end)
        elif server.cache.n:
            n = server.cache.n
            server.decode()
            end = host.mark() - t0
            steps.append((n, end - now))
            for i in server.owner:
                times[i].append(end)
        else:  # idle until the next arrival
            time.sleep(max(0.0, min(when[arrived], plan.max_time) - now))
            continue
        left = server.leave(done)
        if closed:  # each user's next request the moment its last token came (no think time): request C + j
            for k in range(plan.users + finished, min(plan.requests, plan.users + finished + left)):  # after the
                when[k] = end  # j-th to end
        finished += left
        for _ in range(left):
            if on_call:
                on_call()
    timed = server.reads[len(server.reads) - len(steps):]  # the warm-up's steps left out
    return ContinuousRun(tuple(when), tuple(tuple(t) for t in times), tuple(prefills), tuple(steps), plan.rows,
                         server.cache.nbytes, stopped, plan.mean_output, decode_reads=tuple(timed))


def run_continuous(plan: ContinuousPlan, on_call: Optional[Callable[[], None]] = None) -> ContinuousRun:
    """Refuse what cannot run or fit, build the model and its slots, warm up, then serve."""
    check_plan(plan)
    require_fit(plan)
    dev = resolve_device(plan.device).torch()
    torch.manual_seed(0)
    model = build_model(plan.cfg, dev, torch_dtype(plan.dtype)).eval()
    with torch.inference_mode():
        server = _Server(model, plan, dev)
        if plan.warmup:  # a prefill and decode steps untimed: kernels chosen, first allocations made
            server.prefill(-1)
            for _ in range(min(2, plan.mean_output - 1)):
                server.decode()
            server.leave(lambda i: True)
        run = _serve(server, plan, on_call)
        tokens = server.tokens(plan.requests)
        return replace(run, exact=server.exact(tokens), checked=len(server.checked(tokens)))
