"""The train of whole prompts (tfcalc.count.serving.lockstep, "Whole prompts") measured with real threads on this CPU:
an engine thread that, as TensorRT-LLM's executor loop does, takes the requests that have come in at the start of
each step and then runs it without waiting for more (a prompt step whole, one prompt a step, beside the decode
tokens; else a decode step), and C client threads that each send their next request when their last token comes, as
genai-perf's concurrency mode does. The step durations are given (sleeps): what is measured is whether requests sent
at a step's end miss the step that began then (the late join of lockstep's step 1) and whether the users, started
together, stay one step apart -- TTFT near 2P for all but one user a round, against the schedule's prediction.
Structural bounds only (2 shared cores: thread wake-ups take ms)."""

from __future__ import annotations

import queue
import statistics
import threading
import time

import pytest

from tfcalc.count.serving import lockstep

P, TAU, USERS, OUT, ROUNDS = 0.06, 0.01, 4, 12, 6  # prompt step, decode step (s), users, output tokens, rounds


def _serve() -> list[tuple[int, float]]:
    """(round, TTFT) of every request, measured on the host clock."""
    inbox: queue.Queue = queue.Queue()
    done = [threading.Event() for _ in range(USERS)]
    ttfts: list[tuple[int, float]] = []
    stop = threading.Event()

    def client(u: int) -> None:
        for r in range(ROUNDS):
            sent = time.perf_counter()
            first = threading.Event()
            inbox.put((u, sent, first))
            first.wait()
            ttfts.append((r, first.at - sent))  # type: ignore[attr-defined]
            done[u].wait()
            done[u].clear()
        # the client leaves after its last round

    def engine() -> None:
        waiting, running = [], {}  # running: user -> tokens left
        while not stop.is_set():
            while True:  # what has come in by the step's start; the step then runs without waiting for more
                try:
                    waiting.append(inbox.get_nowait())
                except queue.Empty:
                    break
            if not waiting and not running:
                time.sleep(0.0005)
                continue
            prompt = waiting.pop(0) if waiting else None  # whole prompts, one a step (I ≤ B − n < 2I)
            time.sleep(P if prompt else TAU)
            end = time.perf_counter()
            for u in list(running):  # every sequence in flight decodes one token a step
                running[u] -= 1
                if not running[u]:
                    del running[u]
                    done[u].set()
            if prompt:
                u, _, first = prompt
                first.at = end
                first.set()
                running[u] = OUT - 1

    threads = [threading.Thread(target=client, args=(u,)) for u in range(USERS)]
    server = threading.Thread(target=engine, daemon=True)
    server.start()
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    stop.set()
    return ttfts


def test_users_started_together_stay_a_train():
    """After the first round, every round has one user whose prompt came during a decode step (TTFT near τ + P) and
    C − 1 who waited out their predecessor's prompt step (near 2P), as the schedule predicts (lockstep.simulate with
    the same step times: mean P + ((C − 1)·P + τ)/C). The random-phase view would put most of them near P."""
    ttfts = _serve()
    later = [t for r, t in ttfts if r >= 1]
    assert len(later) == USERS * (ROUNDS - 1)
    long = sum(t > 1.6 * P for t in later)
    assert long >= (USERS - 1) * (ROUNDS - 1) * 0.8  # C − 1 a round wait a whole prompt step
    predicted = lockstep.simulate(USERS, 100, OUT, 150, USERS, lambda n: TAU, lambda n, s, c: P, P, delay=0.0005,
                                  split=False)
    assert statistics.mean(later) == pytest.approx(predicted.ttft_s, rel=0.1)  # here: 107.8 ms against 107.5
