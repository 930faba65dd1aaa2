"""Fixed lengths under a closed loop (tfcalc.count.serving.lockstep, `infer --concurrency C --lengths fixed`): against
hand-worked schedules of two users, the discrete-event harness of test_closed_loop (equal lengths), Little's law,
C = 1's static figures, and the hostile cases."""

from __future__ import annotations

from dataclasses import replace
from functools import lru_cache

import pytest
from conftest import assert_one_line_error
from test_closed_loop import simulate_chunked

import tfcalc
from tfcalc.count.model.quant import plain, weight_format
from tfcalc.count.serving import closed_loop, continuous, lockstep
from tfcalc.errors import InputError
from tfcalc.presets import load
from tfcalc.report.infer import datasheet_ceilings
from tfcalc.report.serving_tp import tensor_parallel


def tau(n: int) -> float:
    return 1.0 + n  # a decode step of n sequences: 1 + n time units


def test_two_users_whole_prefills_by_hand():
    """Unchunked, prefill 10, τ(n) = 1 + n, O = 3, C = 2, both sent at 0. Prefills first and whole: A's [0, 10], B's
    [10, 20] (B waits for A's prefill: TTFT 20); two decode steps of both, τ(2) = 3 each: both end at 26 and send again,
    the same round for ever. TTFT 10 and 20 (mean 15, p50 10, p99 20); A's gaps 13 (B's prefill between its first and
    second token) and 3, B's 3 and 3: ITL (16 + 6)/4 = 5.5; X = 2 per 26; e2e 15 + 2 × 5.5 = 26 = C/X."""
    s = lockstep.simulate(2, 100, 3, None, 2, tau, None, 10.0)
    assert s.ttft_s == pytest.approx(15.0) and s.ttft_p50_s == 10.0 and s.ttft_p99_s == 20.0
    assert s.itl_s == pytest.approx(5.5) and s.rate == pytest.approx(2 / 26)
    assert s.decode_batch == pytest.approx((10 * 1 + 6 * 2) / 26)  # A alone in flight while B prefills, then both


def test_two_users_chunked_by_hand():
    """Chunked, B = 128 tokens a step, I = 100, O = 2, C = 2; a chunk of c tokens at n decoding: 10 + c/10 + n, τ(n) =
    1 + n. Step 1: A's 100 tokens and 28 of B's: 20 + (12.8 + 1 − 2) = 31.8 (A's first token); step 2: B's other 72
    beside A's decode, 18.2 (A done at 50, B's first token at 50: B waited for A's prefill). A's next prompt, sent at
    50, misses step 3 (under way as it comes): B's last token alone, τ(1) = 2, to 52. Then a period of 43: A's prompt
    alone, 20 (TTFT 22); B's prompt (sent at 52) beside A's last token, 21 (TTFT 41, A done); B's last token, 2 (B
    done). TTFT (22 + 41)/2 = 31.5; ITL: 21 and 2, 11.5; X = 2 per 43 = C/(TTFT + ITL) -- the users stay in phase."""
    def chunk(n: int, start: int, size: int) -> float:
        return 10 + size / 10 + n

    s = lockstep.simulate(2, 100, 2, 128, 2, tau, chunk, 0.0)
    assert s.ttft_s == pytest.approx(31.5) and s.itl_s == pytest.approx(11.5) and s.rate == pytest.approx(2 / 43)
    assert (s.ttft_p50_s, s.ttft_p99_s) == pytest.approx((22.0, 41.0)) and s.decode_batch == pytest.approx(23 / 43)
    first = lockstep._Loop(2, 100, 2, 128, 2, tau, chunk, 0.0)
    first.window = True  # the first round recorded
    first.chunked()
    first.chunked()
    assert first.ttfts == [(pytest.approx(31.8), 1), (pytest.approx(50.0), 1)]


def test_request_work_delays_the_prompt():
    """The runtime's fixed work per request (off the GPU) sits in the loop: a prompt reaches the engine d after it is
    sent. One user, prefill 10, τ(1) = 2, O = 3, d = 1: TTFT 11, then two steps: a request every 15."""
    s = lockstep.simulate(1, 100, 3, None, 1, tau, None, 10.0, 1.0)
    assert s.ttft_s == pytest.approx(11.0) and s.itl_s == pytest.approx(2.0) and s.rate == pytest.approx(1 / 15)


@pytest.mark.parametrize("preset,fmt,tp,users,inp,out", [
    ("llama2-7b", "bf16", 1, 16, 512, 64), ("llama2-7b", "bf16", 1, 64, 2048, 64),
    ("llama3-70b", "fp8", 2, 25, 5000, 500)])
def test_matches_the_harness_with_equal_lengths(preset, fmt, tp, users, inp, out):
    """test_closed_loop.simulate_chunked (every output O tokens) steps the same scheduler one step at a time, each
    sequence apart; the schedule jumps over steps that change nothing and groups users who move together. Same window
    (the first C requests the start-up, then 8 rounds): the same figures."""
    form = weight_format(fmt, None)
    spec, c = datasheet_ceilings("h100-sxm", form)
    par = tensor_parallel(spec, c, tp) if tp > 1 else None
    e = continuous.Engine(load(preset), form, fmt, c, continuous.Traffic(1.0, inp, out), None, par, 8192)
    s = lockstep.simulate(users, inp, out, 8192, users, e.step_s, lru_cache(None)(e.chunked.step_s), e.prefill_s)
    x, ttft, itl = simulate_chunked(e, users, inp, out, 8192, users * (1 + lockstep.ROUNDS), spread=False, late=True)
    assert (s.rate, s.ttft_s, s.itl_s) == pytest.approx((x, ttft, itl), rel=1e-9)


@pytest.mark.parametrize("chunk", [None, 0])
def test_one_user_is_the_static_estimate(chunk):
    """C = 1: the prompt alone (with the runtime's fixed work), then O − 1 steps at batch 1."""
    r = tfcalc.infer("llama2-7b", concurrency=1, mean_input=512, mean_output=128, device_spec="h100-sxm",
                     prefill_chunk=chunk).to_json()["continuous"]
    static = tfcalc.infer("llama2-7b", batch=1, seq=512, gen=128, device_spec="h100-sxm").estimates[0]
    assert r["method"] == "schedule" and r["lengths"] == "fixed"
    assert r["ttft_s"] == pytest.approx(static.prefill_s, rel=1e-9)
    assert r["ttft_p50_s"] == pytest.approx(r["ttft_s"], rel=1e-9) == r["ttft_p99_s"]
    assert r["itl_s"] == pytest.approx(static.decode_s_per_token, rel=1e-3)
    assert r["rate_per_s"] == pytest.approx(1 / (static.prefill_s + 127 * static.decode_s_per_token), rel=1e-3)


@pytest.mark.parametrize("chunk", [None, 0])
def test_littles_law_and_saturation(chunk):
    """Little's law as measured over the schedule's window (not by construction); throughput up to the capacity."""
    users = (1, 8, 64, 512, 4096)
    runs = [tfcalc.infer("llama3-8b", concurrency=c, mean_input=512, mean_output=256, prefill_chunk=chunk
                         ).to_json()["continuous"] for c in users]
    for c, r in zip(users, runs, strict=True):
        assert r["method"] == "schedule"
        assert c == pytest.approx(r["rate_per_s"] * r["e2e_s"], rel=0.01)
        assert r["ttft_p50_s"] <= r["ttft_p99_s"]
    rates = [r["rate_per_s"] for r in runs]
    assert rates[:4] == sorted(rates[:4])
    assert max(rates) <= runs[-1]["max_rate_per_s"] * 1.05  # at exact batches, not the tile-averaged prompt cost
    assert rates[-1] == pytest.approx(runs[-1]["max_rate_per_s"], rel=0.05)


def test_equal_lengths_queue_the_prompts():
    """Llama 3 70B FP8 at TP 2, 5,000 in and 500 out, 50 users: the users who end together queue their prompts; the
    mean view (random phases) sees half the wait; the throughput the same within a few %."""
    args = dict(dtype="fp8", kv_dtype="fp8", device_spec="h100-sxm", tp=2, concurrency=50, mean_input=5000,
                mean_output=500)
    fixed = tfcalc.infer("llama3-70b", **args).to_json()["continuous"]
    mean = tfcalc.infer("llama3-70b", lengths="random", **args).to_json()["continuous"]
    assert fixed["ttft_s"] > 1.5 * mean["ttft_s"] and fixed["ttft_p99_s"] > fixed["ttft_p50_s"]
    assert fixed["rate_per_s"] == pytest.approx(mean["rate_per_s"], rel=0.05)


def test_step_limit_falls_back(monkeypatch):
    """Past the step limit the mean-value analysis stands in, and says so."""
    assert lockstep.simulate(2, 100, 3, None, 2, tau, None, 10.0, step_limit=3) is None
    monkeypatch.setattr(lockstep, "STEP_LIMIT", 5)
    cfg = load("llama2-7b")
    _, c = datasheet_ceilings("h100-sxm", plain("bf16"))
    s = closed_loop.closed_loop(cfg, plain("bf16"), "bf16", c, 64, 512, 64)
    assert "mean-value analysis" in s.method and s.ttft_p50_s is None
    mean = closed_loop.closed_loop(cfg, plain("bf16"), "bf16", c, 64, 512, 64, lengths="random")
    assert replace(s, method=mean.method, lengths="random") == mean  # the mean view's figures, as they are


@pytest.mark.parametrize("lengths", ["", "uniform", None, 3])
def test_check_lengths(lengths):
    with pytest.raises(InputError, match="--lengths must be one of fixed, random"):
        lockstep.check_lengths(lengths)


@pytest.mark.parametrize("args,message", [
    (("--concurrency", "4", "--mean-input", "10", "--mean-output", "10", "--lengths", "zipf"), "--lengths must be"),
    (("--rate", "4", "--mean-input", "10", "--mean-output", "10", "--lengths", "fixed"), "give --concurrency C"),
    (("--lengths", "fixed",), "give --concurrency C"),
    (("--concurrency", "4", "--mean-input", "10", "--mean-output", "10", "--lengths", "fixed", "--ep", "2"),
     "--lengths fixed with --ep"),
])
def test_hostile_lengths(cli, args, message):
    assert_one_line_error(cli("infer", "qwen3-30b-a3b" if "--ep" in args else "llama2-13b", *args), message)


def test_cli_random_lengths(cli):
    j = cli("infer", "llama3-8b", "--concurrency", "8", "--mean-input", "512", "--mean-output", "256", "--lengths",
            "random", "--json").json()["continuous"]
    assert j["lengths"] == "random" and j["method"] == "mean-value analysis" and j["ttft_p50_s"] is None
    r = cli("infer", "llama3-8b", "--concurrency", "8", "--mean-input", "512", "--mean-output", "256")
    assert r.code == 0 and "Lengths fixed (--lengths)" in r.out
