"""Closed-loop load (``infer --concurrency C --mean-input I --mean-output O``): C users, each sending its next request
the moment the previous one's last token arrives, no think time -- the load of genai-perf / AIPerf's concurrency mode
(Perf Analyzer's "N requests always outstanding", docs.nvidia.com/deeplearning/triton-inference-server, "Inference
Load Modes", Concurrency Mode; the NIM benchmarking guide's figures), of vLLM's ``benchmark_serving.py
--max-concurrency C`` at the default infinite request rate (an asyncio.Semaphore(C) held around the whole streamed
request, released after its last token: vllm-project/vllm PR 9390) and of SGLang's bench_serving --max-concurrency.
Under fixed lengths (``--lengths fixed``, the default) the loop is priced by its deterministic schedule instead
(tfcalc.count.serving.lockstep: users who finish together stay together); what follows is ``--lengths random``, the
users' phases random, and the fallback past the schedule's step limit.
Pure arithmetic on the server of tfcalc.count.serving.continuous (its Engine: the decode step τ(n), a prompt's cost
t_p(n) and, chunked, its hold S(n) on the steps' prompt budget).

A closed queueing network of C customers and two stations: the prompt budget (first come, first served, a prompt
holding it S(n); unchunked, the GPU for t_p) and the decode phase (every sequence in flight advances one token a step:
no queue, O − 1 steps). Solved by mean-value analysis with Schweitzer's approximation (Schweitzer 1979; Lazowska et
al. 1984, "Quantitative System Performance", sec. 6.4.2): a request arriving sees the others as the whole population
shows them, scaled by f = (C − 1)/C (at C = 1 it sees nobody; as C grows, everyone).

1. N, the mean decode batch, is the unknown; C − N requests are in their prefill phase (waiting or chunked).
2. A prompt rides on the others' decode steps, n = f·N of them: it costs t_p(n) and takes own(n) -- unchunked t_p,
   chunked t_p(n) + k·min(n, 1)·τ(n) (its k chunks each in a step that decodes n; continuous.py, step 5).
3. TTFT = own(n) + W + the runtime's fixed work per request. A request arrives when another's last token comes, at a
   step's end, beside the others finishing at the same step's end (X·ITL of them a step, the mean of them ahead of
   it half of those: X·ITL/2) and the prompts still waiting from before (X·W, Little's law); whatever of its own
   step it shares with prompts already scheduled there is in own(n). Each prompt ahead holds the budget S(n)
   (unchunked: the GPU for t_p), so W = f·X·(W + ITL/2)·S(n): W = f·X·S·ITL / (2(1 − f·X·S)). Under chunked prefill
   the prompts of one step's end are packed into the steps' room together (vLLM V1's scheduler): the ones that fit
   beside each other start in the same step, and only the room the ones ahead hold, S(n) each, delays the rest. No
   queue of whole prefill phases: a prompt in its last step when another arrives is done by then. With no decode
   (O = 1) the prompts run one after another: W = f·C·S.
4. A sequence's decode phase D = (O − 1)·τ(N) + f·N·t_p(n): its O − 1 steps and the others' prompts that run while
   it decodes (X·D·f of them, X = N/D by Little's law; at C = 1 none: the next request waits for this one's end).
   ITL = D / (O − 1).
5. Little's law over the loop: X = C / (TTFT + D) requests/s, and N = X·D: the N with C·D/(TTFT + D) = N (bisection,
   the smallest root in (0, C)). N stays within the KV cache's bound, B − 1 under chunked prefill, and BATCH_LIMIT:
   past it N is that bound, X = N/D and the rest wait, TTFT = C/X − D.
6. Throughput: X·O output and X·I prompt tokens per second; C = X × (TTFT + (O − 1)·ITL) holds by construction.

At C = 1: TTFT = t_p(0) + the fixed work, the prompt alone (a chunk alone pays the weights: the static prefill when
I ≤ B), ITL = τ(1), X = 1 / (TTFT + (O − 1)·τ(1)) (the prefill yields the first token, O − 1 decode steps the rest).
As C grows, X rises to the open-loop capacity (continuous.py, step 4): f·X·S(n) → 1 where the budget binds, N/D
at the memory's bound where that does. The server admits every user's request its memory holds, so past the
throughput's peak the decode batch grows to that bound and serves a little less (llama3-8b, 512 in and 256 out on an
H100: 40.8 requests/s at 512 users, 39.1 from 1,024 at the KV cache's 813 sequences; the open loop's capacity, its
peak, 40.5). Against simulations of both schedulers with C users (tests/count/test_closed_loop.py, llama2-7b and
Llama 3 70B FP8 on H100s): throughput and ITL within 2 %; TTFT within 7 % under chunked prefill up to 64 users, and
unchunked within 4 % up to 16 (1.29 at 64 users of 512 in and 64 out, 1.9 at 256: near saturation the wait's
1/(1 − f·X·S) runs ahead of a loop whose queue C bounds).
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Optional

from tfcalc.config import ModelConfig
from tfcalc.count.model.quant import WeightFormat
from tfcalc.count.serving import chunked, lockstep
from tfcalc.count.serving.continuous import Engine, SteadyState, Traffic, check, first_root, max_rate, with_prefix
from tfcalc.count.serving.roofline import Ceilings
from tfcalc.count.serving.serving_tp import TensorParallel
from tfcalc.count.serving.static import BATCH_LIMIT
from tfcalc.errors import InputError

USERS_LIMIT = BATCH_LIMIT  # 1,048,576 users at most


def check_users(users: object) -> None:
    if isinstance(users, bool) or not isinstance(users, int) or not 1 <= users <= USERS_LIMIT:
        raise InputError(f"--concurrency must be a whole number of users from 1 to {USERS_LIMIT:,} (each sends its "
                         f"next request when the last one ends); got {str(users)[:40]!r}")


class Loop:
    """Steps 2-4 at a decode batch N for one server (``e``: continuous.Engine) and C users."""

    def __init__(self, e: Engine, users: float, mean_output: int, request_s: float):
        self.e, self.c, self.out, self.request = e, users, mean_output, request_s
        self.f = max(0.0, (users - 1) / users)  # under a group's share C/D below one user: nobody else seen

    def seen(self, big_n: float) -> float:
        return self.f * big_n

    def own(self, n: float) -> float:
        e = self.e
        if e.chunked is None:
            return e.prefill_s
        return e.own_prompt_s(n) + e.chunked.steps(n) * min(n, 1.0) * e.tau(n)

    def hold(self, n: float) -> float:
        return self.e.prefill_s if self.e.chunked is None else self.e.chunked.service(n)

    def ttft(self, big_n: float) -> float:
        """Step 3 at a decode batch N (X = N/D, ITL = D/(O − 1) by step 4 and Little's law)."""
        n, hold, d = self.seen(big_n), self.hold(self.seen(big_n)), self.decode(big_n)
        if not d:  # nothing decodes: the prompts one after another, each waiting for the others'
            return self.own(n) + self.f * self.c * hold + self.request
        x, itl = big_n / d, d / (self.out - 1)
        load = self.f * x * hold
        wait = self.f * x * itl / 2 * hold / (1 - load) if load < 1 else float("inf")
        return self.own(n) + wait + self.request

    def decode(self, big_n: float) -> float:
        if self.out == 1:
            return 0.0
        return (self.out - 1) * self.e.tau(big_n) + self.f * big_n * self.e.prompt_s(self.seen(big_n))

    def gap(self, big_n: float) -> float:
        """Step 5's C·D/(TTFT + D) − N."""
        d = self.decode(big_n)
        return self.c * d / (self.ttft(big_n) + d) - big_n


def closed_loop(cfg: ModelConfig, fmt: WeightFormat, kv_dtype: str, c: Ceilings, users: int, mean_input: int,
                mean_output: int, memory: Optional[int] = None, tp: Optional[TensorParallel] = None,
                prefill_chunk: Optional[int] = None, lengths: str = "fixed", split: bool = True,
                cached_prefix: int = 0) -> SteadyState:
    """The SteadyState of continuous.py, its traffic's rate the throughput X in requests/s, ``users`` C, and
    ``max_rate`` the open-loop capacity beside. ``lengths`` 'fixed' (every request I and O exactly): the deterministic
    schedule (tfcalc.count.serving.lockstep), the mean-value analysis where that passes its step limit; 'random':
    steps 1-6 of the module docstring. ``split`` False: whole prompts in the budget (tfcalc.count.serving.chunked,
    TensorRT-LLM without chunked context). ``cached_prefix``: N tokens of every prompt cached (serving.prefix)."""
    check_users(users)
    traffic = Traffic(1.0, mean_input, mean_output, cached_prefix)
    check(traffic)
    lockstep.check_lengths(lengths)
    if prefill_chunk is not None:
        chunked.check_budget(prefill_chunk)
    e = Engine(cfg, fmt, kv_dtype, c, traffic, memory, tp, prefill_chunk, split)
    mean = replace(solve(e, users, mean_input, mean_output), lengths=lengths, method="mean-value analysis",
                   whole=not split and e.chunked is not None)
    mean = with_prefix(mean, e, cached_prefix)
    if lengths == "random" or mean.limit is not None:
        return mean
    s, why = lockstep.schedule(e, users, mean_input, mean_output)
    if s is None:
        return replace(mean, method=why)
    big_n = s.decode_batch
    t_p = e.prompt_s(max(0.0, (users - 1) / users) * big_n)  # a prompt's cost beside the others decoding (step 2)
    tau = e.tau(big_n) if big_n > 0 else e.step_s(1)
    return replace(mean, traffic=Traffic(s.rate, mean_input, mean_output), prefill_s=t_p, prefill_share=s.rate * t_p,
                   concurrency=big_n, decode_step_s=tau, ttft_s=s.ttft_s,
                   itl_s=s.itl_s if mean_output > 1 else tau, kv_cache_bytes=e.kv_bytes(big_n), method=why,
                   ttft_p50_s=s.ttft_p50_s, ttft_p99_s=s.ttft_p99_s)


def solve(e: Engine, users: float, mean_input: int, mean_output: int) -> SteadyState:
    """Steps 1-6 for a server ``e`` (continuous.Engine, or one attention-DP group's: ep_continuous) and C users."""
    c = e.c
    request = c.perf.request_s if c.perf is not None else 0.0
    loop = Loop(e, users, mean_output, request)
    cap_n = e.max_concurrency()
    bound = min(float(users), float(BATCH_LIMIT), math.inf if cap_n is None else float(cap_n))
    if e.chunked is not None:
        bound = min(bound, float(e.chunked.max_decode))
    capacity = max_rate(e, Traffic(1.0, mean_input, mean_output), math.inf if cap_n is None else float(cap_n))
    if cap_n is not None and cap_n < 1:  # not one sequence's KV cache beside the weights
        t_p = e.prompt_s(0.0)
        return SteadyState(Traffic(0.0, mean_input, mean_output), t_p, 0.0, None, None, None, None, None, cap_n,
                           capacity, "memory", request, e.budget, None, users)
    if mean_output == 1:  # nothing decodes: the prompts alone, one after another
        big_n, clamped = 0.0, False
    elif loop.gap(bound) > 0:  # the root lies past the bound: N at the bound, the rest wait
        big_n, clamped = bound, True
    else:
        big_n, clamped = first_root(loop.gap, bound), False
    d = loop.decode(big_n)
    if clamped:
        x = big_n / d
        ttft = users / x - d
    else:
        ttft = loop.ttft(big_n)
        x = users / (ttft + d)
    n = loop.seen(big_n)
    t_p = e.prompt_s(n)
    tau = e.tau(big_n) if big_n > 0 else e.step_s(1)
    itl = d / (mean_output - 1) if mean_output > 1 else tau
    steps = None if e.chunked is None else e.chunked.steps(n)
    return SteadyState(Traffic(x, mean_input, mean_output), t_p, x * t_p, big_n, tau, ttft, itl, e.kv_bytes(big_n),
                       cap_n, capacity, None, request, e.budget, steps, users)
