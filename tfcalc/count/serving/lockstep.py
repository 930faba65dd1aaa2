"""A closed loop of C users with fixed lengths (``infer --concurrency C --lengths fixed``, the default): every request
exactly I prompt and O output tokens, as genai-perf / AIPerf send them with a fixed output length (``--output-tokens-
stddev 0``, its default; the NIM benchmarking guide's runs) and vLLM's ``benchmark_serving.py --dataset-name random``
at ``--random-range-ratio 0`` with ``--ignore-eos``. Priced by the deterministic schedule itself: an event simulation
of the engine's steps through tfcalc's own step times (tfcalc.count.serving.continuous.Engine), not by the mean-value
analysis of closed_loop.py, which assumes the users' phases random.

Why it differs: with fixed lengths a user's round is a fixed number of steps (its prompt's, then O − 1 decode steps),
whatever they last, so the phases the users fall into at the start stay: a user whose prompt had to wait for another's
prompt step finishes one step after it and, its next prompt missing the step under way, waits again -- a convoy, each
round, of users queued behind each other's prompts. The random-phase view spreads those prompts over the round and
misses the queue. Llama 3 70B FP8 at TP 2, 5,000 in and 500 out on H100s (tfcalc's default 8,192-token steps): TTFT
749 / 1,182 / 1,350 ms at 5 / 25 / 50 users against the mean view's 374 / 392 / 425; throughput and ITL within 3 %.
The convoy needs the late join of step 1: a prompt allowed into the very step that began as its user's last token
came (test_closed_loop's harness without ``late``) slips into the gaps and the queue dissolves over tens of rounds.

Whole prompts (``--context-chunking off``, TensorRT-LLM without chunked context; chunked.py, last paragraph) with a
budget that admits one prompt a step (I ≤ B − n < 2I): the C prompts sent at t = 0 run one a step, so the users
leave one step apart and stay so -- a train. User k's prompt runs in step p_k = p_1 + k − 1 and its last token ends
step p_k + O − 1; its next prompt reaches the engine during step p_k + O and runs in p_k + O + 1: every user's round is
O + 1 steps, the train's order and spacing are kept. Step p_k + O is user k − 1's prompt step (p_(k−1) + O + 1), so
every user but the first waits out a whole prompt step before its own; the first waits out a decode step. With a
prompt step P (beside the C − 1 others decoding) and a decode step τ (of the C − 1), the fixed work per request
shorter than τ: TTFT, from the request's send at a step's end, 2P for C − 1 users and τ + P for one, mean
P + ((C − 1)·P + τ)/C; a round lasts C·P + (O + 1 − C)·τ (C ≤ O), X = C over it (tests/count/test_whole_prompts.py,
by hand). A measured TTFT near 2P at
many users is this train: NIM's Llama 3.3 70B, 5,000 in, at C = 50, 835 ms beside 407 ms at C = 1. Llama 3 70B FP8
at TP 2 as above: 671 / 734 / 751 ms at 5 / 25 / 50 users (P = 0.37 s), throughput and ITL as under chunking; the
budget's chunking packs 1.64 prompts a step instead and splits one of them over two steps, which is the longer
queue above.

The schedule (the same scheduler as continuous.py and chunked.py, one engine step at a time):
1. At t = 0 all C users send their first request (genai-perf starts C requests at once); a user whose last token
   comes at a step's end sends the next one at that instant. It reaches the engine the runtime's fixed work per
   request later (the performance model's request_s: streaming the last token, the client's next request,
   tokenizing) and joins the waiting prompts, first come, first served, at the first step boundary after that: never
   in the step that began as its last token came (the engine does not wait for it: vLLM V1's EngineCore schedules the
   next step at once, the new request comes through its input queue).
2. Chunked prefill (budget B, chunked.py step 4): a step decodes one token for each of the n sequences in flight and
   packs the waiting prompts in order into the B − n tokens left (the one partly done first), each prompt
   started only while the KV cache holds it beside the others admitted (``cap``, the Engine's bound, and B − 1).
   Its seconds: T(n, first chunk) (chunked.ChunkedPrefill.step_s: the mixed step, the weights read once; at n = 0
   the chunk alone) plus, for every further chunk, T(max(n, 1), chunk) − τ(max(n, 1)), what it adds to a step; no
   chunk: τ(n). A prompt whose last chunk ran yields its first token at the step's end and decodes from the next.
   Whole prompts (``--context-chunking off``): the waiting prompts whole, in order, while B − n has room for a whole
   one; the first that does not fit and all behind it wait for a later step (TensorRT-LLM's micro-batch scheduler
   stops at it), priced as above with every piece a whole prompt.
   Unchunked: a waiting prompt, when the cache admits it, is a step of its own, t_p, ahead of any decoding (vLLM V0);
   otherwise the step decodes the n in flight, τ(n).
3. A sequence's last (O-th) token comes at the end of its (O − 1)-th decode step; its user sends the next request then.
   Steps in which nothing can be admitted and nobody finishes are identical: they are taken in one jump to the next
   finish, so the cost grows with the rounds' prompts and finishes, not with O.
4. Measured after the first round (every user's first request): from the C-th completion on, ROUNDS more rounds of C
   completions. Throughput X = completions / time; TTFT of the prompts that began decoding in the window (mean,
   p50, p99); ITL = the sequences' decode time over the tokens they decoded, Σ n·Δt / Σ n over the decode steps (a
   prefill step between two tokens counts in the gap); the decode batch, Σ n·Δt / window.
Little's law then holds as measured, not by construction: C ≈ X·(TTFT + (O − 1)·ITL) (tests/count/test_lockstep.py).

At C = 1 the schedule is the prompt alone and O − 1 steps at batch 1: the static estimate's figures. Cost: a few
steps per prompt chunk and per finishing group a round; past STEP_LIMIT simulated steps (about C·I/B per round, huge
C) the loop falls back to the mean-value analysis, and the result says so (``method``)."""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from functools import lru_cache
from typing import Callable, Optional

from tfcalc.errors import InputError

LENGTHS = ("fixed", "random")  # --lengths: every request I and O exactly; or varied (the mean-value analysis)
ROUNDS = 8  # rounds of C completions measured after the first
STEP_LIMIT = 60_000  # simulated steps (jumps counted once) before the mean-value analysis stands in


def check_lengths(lengths: object) -> None:
    if lengths not in LENGTHS:
        raise InputError(f"--lengths must be one of {', '.join(LENGTHS)} (fixed: every request exactly --mean-input "
                         f"and --mean-output tokens; random: lengths that vary); got {str(lengths)[:40]!r}")


@dataclass(frozen=True)
class Schedule:
    rate: float  # requests/s
    ttft_s: float  # mean, without the runtime's fixed work per request
    ttft_p50_s: float
    ttft_p99_s: float
    itl_s: float
    decode_batch: float  # time-mean sequences decoding
    steps: int  # simulated steps (jumps once)


def _percentile(records: list[tuple[float, int]], q: float) -> float:
    """The q-quantile of values each held by a count (the lower value at a tie: numpy's 'lower' method)."""
    records = sorted(records)
    total = sum(k for _, k in records)
    rank, seen = q * (total - 1), 0
    for value, k in records:
        seen += k
        if seen > rank:
            return value
    return records[-1][0]


class _Loop:
    """The state of step 1-3's schedule; ``decode(n)``: τ(n); ``chunk(n, start, size)``: a step of n decode tokens and
    one chunk (n = 0: the chunk alone); ``prefill``: an unchunked prompt's step."""

    def __init__(self, users: int, inp: int, out: int, budget: Optional[int], cap: int,
                 decode: Callable[[int], float], chunk: Callable[[int, int, int], float], prefill: float,
                 delay: float = 0.0, split: bool = True):
        self.inp, self.out, self.budget, self.cap, self.delay, self.split = inp, out, budget, cap, delay, split
        self.decode, self.chunk, self.prefill = decode, chunk, prefill
        self.now, self.step, self.running, self.partial = 0.0, 0, 0, 0  # partial: the head prompt's tokens done
        self.ends: dict[int, int] = {}  # decode step index -> sequences that emit their last token there
        self.waiting = deque([[0.0, users, -1]])  # [sent, prompts, steps begun by then], first come, first served
        self.done = 0
        self.window = False
        self.ttfts: list[tuple[float, int]] = []
        self.seq_time = self.tokens = self.steps = 0.0

    def _join(self, sent: float, k: int) -> None:
        """k prompts' first tokens at now: they decode from the next step (O − 1 steps), or are done at O = 1."""
        if self.window:
            self.ttfts.append((self.now - sent, k))
        if self.out == 1:
            self._finish(k)
        else:
            self.running += k
            self.ends[self.step + self.out - 1] = self.ends.get(self.step + self.out - 1, 0) + k

    def _finish(self, k: int) -> None:
        self.done += k
        self.waiting.append([self.now, k, self.steps])

    def _advance(self, dt: float, decoded: int, repeat: int = 1) -> None:
        """``repeat`` steps of dt each; ``decoded`` sequences each emit a token a step (the rest stall: prefill)."""
        self.now += dt * repeat
        self.steps += 1
        if self.window:
            self.seq_time += self.running * dt * repeat
            self.tokens += decoded * repeat

    def _ready(self, head: list) -> bool:
        """At the engine (``delay`` after it was sent), and not sent at the instant the step now starting began: a
        request ending at a step's end is answered after the next step is under way (step 1)."""
        return head[0] + self.delay <= self.now and head[2] < self.steps

    def _decode_until_event(self) -> None:
        """Decode steps alone until the next finish or the step in which the next prompt reaches the engine (step
        3's jump); nothing in flight: idle until that prompt comes."""
        n = self.running
        if not n:
            self.now = max(self.now, self.waiting[0][0] + self.delay)
            self.steps += 1
            return
        tau, repeat = self.decode(n), min(self.ends) - self.step
        if self.waiting and self._admissible():
            wait = self.waiting[0][0] + self.delay - self.now
            repeat = 1 if wait <= 0 else min(repeat, max(1, math.ceil(wait / tau)))
        self._advance(tau, n, repeat)
        self.step += repeat
        self._retire()

    def _retire(self) -> None:
        k = self.ends.pop(self.step, 0)
        if k:
            self.running -= k
            self._finish(k)

    def _admissible(self) -> int:
        """Fresh prompts the cache admits now (the partly done head is admitted already)."""
        return max(0, self.cap - self.running - (1 if self.partial else 0))

    def unchunked(self) -> None:
        if self.waiting and self._admissible() and self._ready(self.waiting[0]):
            head = self.waiting[0]
            k = min(head[1], self._admissible())  # prefills first, whole, one after another
            for _ in range(k):
                self._advance(self.prefill, 0)
                self._join(head[0], 1)
            head[1] -= k
            if not head[1]:
                self.waiting.popleft()
            return
        self._decode_until_event()

    def chunked(self) -> None:
        n, budget = self.running, self.budget
        room, fresh = budget - n, self._admissible()
        if (room < (1 if self.split else self.inp) or not self.waiting
                or (not self.partial and not (fresh and self._ready(self.waiting[0])))):
            self._decode_until_event()
            return
        pieces, joined = [], []  # (start, size, prompts); (arrival, prompts) finishing their prefill in this step
        while self.waiting and room > 0:
            head = self.waiting[0]
            if self.partial:
                size = min(self.inp - self.partial, room)
                pieces.append((self.partial, size, 1))
                room -= size
                self.partial += size
                if self.partial < self.inp:
                    break
                self.partial = 0
                joined.append((head[0], 1))
                self._pop(head, 1)
                continue
            if not fresh or not self._ready(head):
                break
            whole = min(head[1], room // self.inp, fresh)
            if whole:
                pieces.append((0, self.inp, whole))
                joined.append((head[0], whole))
                room -= whole * self.inp
                fresh -= whole
                self._pop(head, whole)
                continue
            if not self.split:  # whole prompts only: the first that does not fit waits for the next step
                break
            pieces.append((0, room, 1))  # a part of the next prompt fills the step
            self.partial, fresh, room = room, fresh - 1, 0
        self._advance(self._price(n, pieces), n)
        self.step += 1
        self._retire()
        for arrival, k in joined:
            self._join(arrival, k)

    def _pop(self, head: list, k: int) -> None:
        head[1] -= k
        if not head[1]:
            self.waiting.popleft()

    def _price(self, n: int, pieces: list[tuple[int, int, int]]) -> float:
        """Step 2's seconds: the first chunk with the decode tokens, each further one what it adds to a step."""
        (s0, c0, k0), base = pieces[0], max(n, 1)
        extra = [(s0, c0, k0 - 1)] + pieces[1:]
        tau = self.decode(base)
        return self.chunk(n, s0, c0) + sum(k * (self.chunk(base, s, c) - tau) for s, c, k in extra if k)


def simulate(users: int, inp: int, out: int, budget: Optional[int], cap: int, decode: Callable[[int], float],
             chunk: Callable[[int, int, int], float], prefill: float, delay: float = 0.0, rounds: int = ROUNDS,
             step_limit: int = STEP_LIMIT, split: bool = True) -> Optional[Schedule]:
    """Steps 1-4 of the module docstring; ``budget`` None: unchunked (``prefill`` each prompt's step); ``cap`` the
    sequences the KV cache admits at once (≥ 1). None when the schedule passes ``step_limit`` simulated steps."""
    loop = _Loop(users, inp, out, budget, cap, decode, chunk, prefill, delay, split)
    run = loop.unchunked if budget is None else loop.chunked
    while loop.done < users:
        run()
        if loop.steps > step_limit:
            return None
    loop.window, start, first = True, loop.now, loop.done
    while loop.done < users * (1 + rounds):
        run()
        if loop.steps > step_limit:
            return None
    span = loop.now - start
    measured = sum(k for _, k in loop.ttfts)
    ttft = sum(v * k for v, k in loop.ttfts) / measured
    itl = loop.seq_time / loop.tokens if loop.tokens else decode(1)
    return Schedule((loop.done - first) / span, ttft, _percentile(loop.ttfts, 0.5), _percentile(loop.ttfts, 0.99),
                    itl, loop.seq_time / span, int(loop.steps))


def schedule(e, users: int, inp: int, out: int) -> tuple[Optional[Schedule], str]:
    """The schedule of a server ``e`` (continuous.Engine) for C users, or None and why the mean view stands in. A
    cached prefix of P tokens (tfcalc.count.serving.prefix): each prompt is its I − P uncached tokens, in the budget
    and in its chunks, each chunk priced from its position P + s."""
    cap_n = e.max_concurrency()
    cap = min(users, math.inf if cap_n is None else cap_n)
    if e.chunked is not None:
        cap = min(cap, e.chunked.max_decode)
    if cap < 1:
        return None, "no sequence fits"
    chunk = None if e.chunked is None else lru_cache(maxsize=None)(e.chunked.step_s)  # a round's steps recur
    request = e.c.perf.request_s if e.c.perf is not None else 0.0
    split = e.chunked is None or e.chunked.split
    hit = getattr(e, "cached", 0)  # a cached prefix of P: a prompt's I − P tokens from P (serving.prefix, step 2)
    if hit and chunk is not None:
        whole_chunk = chunk

        def chunk(n: int, start: int, size: int) -> float:
            return whole_chunk(n, hit + start, size)
    done = simulate(users, inp - hit, out, e.budget, int(cap), e.step_s, chunk, e.prefill_s, request,
                    step_limit=STEP_LIMIT, split=split)
    if done is None:
        return None, (f"the schedule of {users:,} users passes {STEP_LIMIT:,} engine steps: the mean-value analysis "
                      "of random phases stands in")
    return done, "schedule"
