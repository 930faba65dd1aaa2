"""A closed loop of C users (tfcalc.count.serving.closed_loop, `infer --concurrency C`): against its derivation -- one
prefill alone and O − 1 batch-1 decode steps at C = 1 (the static estimate's), the open-loop capacity as C grows,
Little's law -- against a discrete-event simulation of the same scheduler with C users, and the hostile cases."""

from __future__ import annotations

import random
from functools import lru_cache

import pytest
from conftest import assert_one_line_error

import tfcalc
from tfcalc.count.model.quant import plain, weight_format
from tfcalc.count.serving import closed_loop, continuous
from tfcalc.errors import InputError
from tfcalc.presets import load
from tfcalc.report.infer import datasheet_ceilings
from tfcalc.report.serving_tp import tensor_parallel

BF16 = plain("bf16")


def simulate(e: continuous.Engine, users: int, out: int, requests: int, seed: int = 7):
    """The unchunked scheduler (prefills first and whole, one at a time; otherwise one decode step for every sequence
    in flight), C users each resubmitting when its last token comes. Output lengths uniform over O ± O/2 (mean O):
    equal lengths would keep users who started together finishing together for ever, queueing their prompts behind
    each other, which a served loop's jitter breaks up. Returns the throughput in requests/s, the mean time to first
    token (without the runtime's fixed work) and the mean gap between a sequence's tokens, after the first C
    requests (the start-up)."""
    rng = random.Random(seed)
    waiting = [0.0] * users  # arrival times of the prompts waiting, first come first served
    now, running, done, ttfts, gaps, start = 0.0, [], 0, [], [], None
    while done < requests:
        if waiting:
            arrived = waiting.pop(0)
            now += e.prefill_s
            if done >= users:
                ttfts.append(now - arrived)
            if out > 1:
                running.append([rng.randint(out // 2, out + out // 2) - 1, now])
            else:
                done += 1
                waiting.append(now)
        else:
            now += e.step_s(len(running))
            for seq in running:
                if done >= users:
                    gaps.append(now - seq[1])
                seq[0] -= 1
                seq[1] = now
            finished = [s for s in running if s[0] == 0]
            running = [s for s in running if s[0] > 0]
            for _ in finished:
                done += 1
                if done == users:
                    start = now
                waiting.append(now)  # the user's next request, at once
    return (done - users) / (now - start), sum(ttfts) / len(ttfts), sum(gaps) / len(gaps)


def simulate_chunked(e: continuous.Engine, users: int, inp: int, out: int, budget: int, requests: int,
                     seed: int = 7, spread: bool = True, late: bool = False):
    """The chunked scheduler (test_chunked_prefill.simulate_chunked's steps: every step decodes the sequences in
    flight and packs the waiting prompts first come first served into the rest of the budget) under a closed loop of
    C users, output lengths over O ± O/2 as above. Returns the throughput, mean TTFT and mean ITL after the first C
    requests. ``late``: a request sent at a step's end reaches the engine after the next step has begun (it waits
    for that step), as a served one does (count/serving/lockstep.py, step 1)."""
    rng = random.Random(seed)
    mixed = lru_cache(maxsize=None)(e.chunked.step_s)
    now, running, done, ttfts, gaps, start = 0.0, [], 0, [], [], 0.0
    waiting = [[0.0, 0] for _ in range(users)]  # (arrival, prompt tokens done)
    pending = []  # late: sent at the last step's end, at the engine once this step has begun
    while done < requests:
        n, room, picked = len(running), budget - len(running), []
        if not running and not any(req[1] for req in waiting) and pending and not waiting:
            waiting, pending = pending, []  # an idle engine takes them as they come
        for req in waiting:
            if room <= 0:
                break
            size = min(inp - req[1], room)
            picked.append((req, req[1], size))
            room -= size
        waiting, pending = waiting + pending, []
        step = mixed(n, *picked[0][1:]) if picked else e.step_s(n)
        step += sum(mixed(max(n, 1), s, size) - e.step_s(max(n, 1)) for _, s, size in picked[1:])
        now += step
        for seq in running:
            if done >= users:
                gaps.append(now - seq[1])
            seq[0] -= 1
            seq[1] = now
        finished = [s for s in running if s[0] <= 0]
        running = [s for s in running if s[0] > 0]
        for req, _, size in picked:
            req[1] += size
            if req[1] == inp:
                waiting.remove(req)
                if done >= users:
                    ttfts.append(now - req[0])
                running.append([(rng.randint(out // 2, out + out // 2) if spread else out) - 1, now])
        for _ in finished:
            done += 1
            if done == users:
                start = now
            (pending if late else waiting).append([now, 0])
    return (done - users) / (now - start), sum(ttfts) / len(ttfts), sum(gaps) / len(gaps)


@pytest.mark.parametrize("preset,fmt,tp,users,inp,out", [
    ("llama2-7b", "bf16", 1, 4, 512, 64), ("llama2-7b", "bf16", 1, 16, 512, 64), ("llama2-7b", "bf16", 1, 64, 512, 64),
    ("llama3-70b", "fp8", 2, 5, 5000, 500), ("llama3-70b", "fp8", 2, 50, 5000, 500)])
def test_matches_a_simulation_of_the_chunked_closed_loop(preset, fmt, tp, users, inp, out):
    """vLLM V1's scheduler (8,192 tokens a step) under C users: a 5,000-token prompt of Llama 3 70B fits a step's
    room, so the prompts of one step's end mostly start together and TTFT stays near one prompt's own steps."""
    form = weight_format(fmt, None)
    spec, c = datasheet_ceilings("h100-sxm", form)
    par = tensor_parallel(spec, c, tp) if tp > 1 else None
    e = continuous.Engine(load(preset), form, fmt, c, continuous.Traffic(1.0, inp, out), None, par, 8192)
    s = closed_loop.solve(e, users, inp, out)
    x, ttft, itl = simulate_chunked(e, users, inp, out, 8192, 1500 if out < 100 else 600)
    assert s.traffic.rate == pytest.approx(x, rel=0.02)
    assert s.itl_s == pytest.approx(itl, rel=0.02)
    assert s.ttft_s - s.request_s == pytest.approx(ttft, rel=0.1)


def test_equal_lengths_keep_users_together():
    """What the mean view leaves out: with every output exactly O tokens (genai-perf's fixed lengths, NIM's page),
    users whose requests end in the same step stay together and queue their prompts. Llama 3 70B FP8, TP 2, 5,000
    in and 500 out, 50 users: the simulation's TTFT 816 ms (NIM's page: 835), the random-phase mean view's 425."""
    form = weight_format("fp8", None)
    spec, c = datasheet_ceilings("h100-sxm", form)
    e = continuous.Engine(load("llama3-70b"), form, "fp8", c, continuous.Traffic(1.0, 5000, 500), None,
                          tensor_parallel(spec, c, 2), 8192)
    s = closed_loop.solve(e, 50, 5000, 500)
    x, ttft, _ = simulate_chunked(e, 50, 5000, 500, 8192, 400, spread=False)
    assert s.traffic.rate == pytest.approx(x, rel=0.02)  # the throughput holds either way
    assert ttft > 1.5 * (s.ttft_s - s.request_s)


@pytest.mark.parametrize("users,inp,out", [(4, 512, 64), (16, 512, 64), (64, 2048, 256), (16, 128, 512)])
def test_matches_a_simulation_of_the_closed_loop(users, inp, out):
    cfg = load("llama2-7b")
    _, c = datasheet_ceilings("h100-sxm", BF16)
    e = continuous.Engine(cfg, BF16, "bf16", c, continuous.Traffic(1.0, inp, out), None, None)
    s = closed_loop.closed_loop(cfg, BF16, "bf16", c, users, inp, out, lengths="random")  # the mean view
    x, ttft, itl = simulate(e, users, out, 3000)
    assert s.traffic.rate == pytest.approx(x, rel=0.02)
    assert s.itl_s == pytest.approx(itl, rel=0.02)
    assert s.ttft_s - s.request_s == pytest.approx(ttft, rel=0.05)  # the mean view of the prompts ahead


@pytest.mark.parametrize("chunk", [None, 0])
def test_one_user_is_one_request_at_a_time(chunk):
    """C = 1: TTFT the prefill alone (the prompt fits one chunk), then O − 1 decode steps at batch 1: the static
    estimate's batch-1 figures; throughput O / (prefill + (O − 1)·step)."""
    r = tfcalc.infer("llama2-7b", concurrency=1, mean_input=512, mean_output=128, device_spec="h100-sxm",
                     prefill_chunk=chunk).to_json()["continuous"]
    static = tfcalc.infer("llama2-7b", batch=1, seq=512, gen=128, device_spec="h100-sxm").estimates[0]
    assert r["users"] == 1 and r["ttft_s"] == pytest.approx(static.prefill_s, rel=1e-9)
    assert r["itl_s"] == pytest.approx(static.decode_s_per_token, rel=1e-3)
    assert r["output_tokens_per_s"] == pytest.approx(128 / (static.prefill_s + 127 * static.decode_s_per_token),
                                                     rel=1e-3)


@pytest.mark.parametrize("chunk", [None, 0])
def test_littles_law_and_saturation(chunk):
    """The mean view (random lengths): Little's law over the loop by construction (fixed lengths: test_lockstep)."""
    runs = [tfcalc.infer("llama3-8b", concurrency=c, mean_input=512, mean_output=256, prefill_chunk=chunk,
                         lengths="random").to_json()["continuous"] for c in (1, 8, 64, 512, 65536)]
    for c, r in zip((1, 8, 64, 512, 65536), runs, strict=True):
        assert c == pytest.approx(r["rate_per_s"] * r["e2e_s"], rel=1e-9)  # Little's law over the loop
        assert r["concurrency"] <= c and not r["over_capacity"]
    rates = [r["rate_per_s"] for r in runs]
    assert rates[:4] == sorted(rates[:4])  # more users, more served, up to the peak
    # the open loop's capacity; past the peak the admitted batch grows to the memory's bound and serves a few % less
    assert rates[-1] == pytest.approx(runs[-1]["max_rate_per_s"], rel=0.05)
    assert max(rates) <= runs[-1]["max_rate_per_s"] * 1.01
    assert runs[-1]["ttft_s"] > 10 * runs[0]["ttft_s"]  # the rest wait their turn


@pytest.mark.parametrize("lengths", ["random", "fixed"])
def test_memory_bounds_the_decode_batch(lengths):
    """The KV cache admits 16 sequences: the mean view's N at that bound; the schedule's decode batch just under it
    (a sequence admitted is decoding, but for the steps of its own prompt), Little's law as measured."""
    r = tfcalc.infer("llama3-8b", concurrency=2000, mean_input=3000, mean_output=2000, device_spec="l4",
                     lengths=lengths).to_json()["continuous"]
    exact = lengths == "random"
    assert r["concurrency"] == r["max_concurrency"] if exact else 0.97 < r["concurrency"] / r["max_concurrency"] < 1
    assert r["rate_per_s"] == pytest.approx(r["max_rate_per_s"], rel=0.02)
    assert 2000 == pytest.approx(r["rate_per_s"] * r["e2e_s"], rel=1e-9 if exact else 0.01)


@pytest.mark.parametrize("users", [0, -1, 2**20 + 1, True, 2.5, None])
def test_check_users(users):
    with pytest.raises(InputError, match="--concurrency must be a whole number of users"):
        closed_loop.check_users(users)


@pytest.mark.parametrize("args,message", [
    (("--concurrency", "0", "--mean-input", "10", "--mean-output", "10"), "--concurrency must be a whole number"),
    (("--concurrency", "-4", "--mean-input", "10", "--mean-output", "10"), "--concurrency must be a whole number"),
    (("--concurrency", "99999999999", "--mean-input", "10", "--mean-output", "10"), "from 1 to 1,048,576"),
    (("--concurrency", "4", "--mean-input", "10"), "--concurrency needs --mean-input I and --mean-output O"),
    (("--concurrency", "4", "--mean-input", "10", "--mean-output", "10", "--batch", "4"), "--batch is a static"),
    (("--concurrency", "4", "--mean-input", "10", "--mean-output", "10", "--rate", "2"), "--rate and --concurrency"),
    (("--concurrency", "4", "--mean-input", "10", "--mean-output", "10", "--measure", "--tp", "2"),
     "--concurrency with --measure --tp is not measured"),
    (("--concurrency", "4", "--mean-input", "10", "--mean-output", "1", "--measure"), "--mean-output 2 or more"),
    (("--concurrency", "4", "--mean-input", "10", "--mean-output", "10", "--prefill-chunk", "1"),
     "--prefill-chunk must be a whole number"),
])
def test_hostile_concurrency(cli, args, message):
    assert_one_line_error(cli("infer", "llama2-13b", *args), message)


def test_cli_table_and_json(cli):
    r = cli("infer", "llama3-8b", "--concurrency", "8", "--mean-input", "512", "--mean-output", "256")
    assert r.code == 0 and "8 users in a closed loop" in r.out
    j = cli("infer", "llama3-8b", "--concurrency", "8", "--mean-input", "512", "--mean-output", "256", "--json").json()
    assert j["continuous"]["users"] == 8 and j["continuous"]["arrivals"].startswith("closed loop")


def test_not_one_sequence_fits(cli):
    """A prompt whose KV cache alone passes the memory: nothing served, said so, --require-fit exits 1."""
    r = tfcalc.infer("llama3-8b", concurrency=100, mean_input=100_000, mean_output=100, device_spec="l4",
                     max_seq_len=131072).to_json()["continuous"]
    assert r["over_capacity"] and r["limit"] == "memory" and r["max_concurrency"] == 0 and r["ttft_s"] is None
    res = cli("infer", "llama3-8b", "--concurrency", "100", "--mean-input", "100000", "--mean-output", "100",
              "--device-spec", "l4", "--require-fit")
    assert res.code == 1 and "Not one sequence of 100,050 positions fits" in res.out
