"""Whole prompts in the step's token budget (`infer --context-chunking off`, TensorRT-LLM's in-flight batching without
chunked context; tfcalc.count.serving.chunked's last paragraph, lockstep's "Whole prompts"): the train of users one
step apart, worked by hand; the prompt's cost and hold; the NIM setup beside the chunked budget; hostile input."""

from __future__ import annotations

import pytest
from conftest import assert_one_line_error

import tfcalc
from tfcalc.count.serving import chunked, lockstep


def test_train_by_hand():
    """C = 4 users, I = 100, O = 20, B = 150 (one prompt a step beside ≤ 50 decode tokens), a prompt step P = 10 and a
    decode step τ = 1 whatever n, the fixed work d = 0.1 < τ. At t = 0 the four prompts run one a step: the users leave
    one step apart. User k's next prompt is sent as its last token ends step p_k + O − 1 and reaches the engine during
    step p_k + O, user k − 1's prompt step: it waits that step out (P) and runs its own (P): TTFT 2P = 20 for three
    users; the first user's prompt arrives during a decode step: τ + P = 11. Mean (11 + 3·20)/4 = 17.75, p50 and p99
    20. Each round is O + 1 = 21 steps, C = 4 of them prompt steps: 4·10 + 17·1 = 57 time units, X = 4/57."""
    s = lockstep.simulate(4, 100, 20, 150, 4, lambda n: 1.0, lambda n, start, size: 10.0, 10.0, delay=0.1,
                          split=False)
    assert s.ttft_s == pytest.approx(17.75) and s.ttft_p50_s == pytest.approx(20.0)
    assert s.ttft_p99_s == pytest.approx(20.0) and s.rate == pytest.approx(4 / 57)


def test_chunked_budget_splits_where_whole_waits():
    """The same users with the budget's chunking: the second prompt's first 50 tokens ride in the first step, so the
    prompts no longer run one a step -- the schedule differs from the train above (the whole-prompt rule matters)."""
    chunk = lambda n, start, size: 10.0 * size / 100  # noqa: E731 - a prompt step's cost by its tokens
    whole = lockstep.simulate(4, 100, 20, 150, 4, lambda n: 1.0, chunk, 10.0, delay=0.1, split=False)
    split = lockstep.simulate(4, 100, 20, 150, 4, lambda n: 1.0, chunk, 10.0, delay=0.1)
    assert whole.ttft_s == pytest.approx(17.75) and split.ttft_s != pytest.approx(whole.ttft_s)


def test_prompt_cost_and_hold_by_hand():
    """A whole prompt is one chunk (0, I) whatever n; its hold on the budget S(n) = min(n, 1)·τ(n)/⌊(B − n)/I⌋ + t_p(n):
    two prompts of 3,000 fit a step of 8,192 beside 100 decode tokens, one beside 2,200."""
    assert chunked.chunks(5000, 8192, 3000, split=False) == [(0, 5000)]
    assert chunked.chunks(5000, 8192, 3000) == [(0, 5000)] and len(chunked.chunks(5000, 8192, 4000)) == 2
    r = tfcalc.infer("llama3-8b", device_spec="h100-sxm", rate=1.0, mean_input=3000, mean_output=100,
                     context_chunking="off")
    assert r.to_json()["continuous"]["context_chunking"] == "off"

    class E:  # an engine with τ(n) = 1 + n/1000 and t_p(n) = 0.5
        def tau(self, n):
            return 1 + n / 1000

    p = chunked.ChunkedPrefill.__new__(chunked.ChunkedPrefill)
    p.e, p.prompt, p.budget, p.split = E(), 3000, 8192, False
    p.seconds = lambda n: 0.5
    assert p.service(100) == pytest.approx(1.1 / 2 + 0.5)
    assert p.service(2200) == pytest.approx(3.2 / 1 + 0.5)


def test_nim_setup_staggers_the_users():
    """Llama 3 70B FP8 at TP 2, 5,000 in and 500 out (NIM's Llama 3.3 70B rows): with whole prompts the users run as the
    train of test_train_by_hand, TTFT within a few % of P + ((C − 1)·P + τ)/C, P the prompt step beside C − 1 decoding;
    the budget's chunking queues more (1.64 prompts a step, one split over two steps); throughput within 2 %."""
    captured = {}
    schedule = lockstep.schedule

    def spy(e, *a):
        captured["e"] = e
        return schedule(e, *a)

    args = dict(dtype="fp8", kv_dtype="fp8", device_spec="h100-sxm", tp=2, mean_input=5000, mean_output=500)
    for users in (25, 50):
        lockstep.schedule = spy
        try:
            whole = tfcalc.infer("llama3-70b", concurrency=users, context_chunking="off", **args).to_json()
        finally:
            lockstep.schedule = schedule
        chunks = tfcalc.infer("llama3-70b", concurrency=users, **args).to_json()["continuous"]
        whole = whole["continuous"]
        e = captured["e"]
        big_p, tau = e.chunked.step_s(users - 1, 0, 5000), e.step_s(users - 1)
        assert whole["ttft_s"] == pytest.approx(big_p + ((users - 1) * big_p + tau) / users, rel=0.05)
        assert whole["ttft_s"] < 0.7 * chunks["ttft_s"]
        assert whole["rate_per_s"] == pytest.approx(chunks["rate_per_s"], rel=0.02)
        assert whole["context_chunking"] == "off" and chunks["context_chunking"] == "on"


@pytest.mark.parametrize("args,message", [
    (("--concurrency", "4", "--mean-input", "9000", "--mean-output", "10", "--context-chunking", "off"),
     "must fit the step's budget"),
    (("--rate", "4", "--mean-input", "900", "--mean-output", "10", "--context-chunking", "off", "--prefill-chunk",
      "512"), "must fit the step's budget"),
    (("--concurrency", "4", "--mean-input", "10", "--mean-output", "10", "--context-chunking", "maybe"),
     "--context-chunking must be on"),
    (("--concurrency", "4", "--mean-input", "10", "--mean-output", "10", "--context-chunking", "off",
      "--prefill-chunk", "0"), "--prefill-chunk 0 and --measure"),
    (("--context-chunking", "off"), "give --rate R"),
])
def test_hostile_chunking(cli, args, message):
    assert_one_line_error(cli("infer", "llama2-7b", "--device-spec", "h100-sxm", *args), message)


def test_default_is_unchanged():
    """on, the default, is the budget's chunking as before (vLLM V1's)."""
    args = dict(device_spec="h100-sxm", concurrency=8, mean_input=3000, mean_output=64)
    a = tfcalc.infer("llama3-8b", **args).to_json()["continuous"]
    b = tfcalc.infer("llama3-8b", context_chunking="on", **args).to_json()["continuous"]
    assert a == b and a["context_chunking"] == "on"




def test_expert_parallel_groups_take_whole_prompts():
    """Under --ep each attention-DP group's engine takes the prompts whole too (ep_continuous.Engine's budget): a prompt
    of 6,000 in a budget of 8,192 is one piece of one step, and the JSON and the scheduler line say so."""
    args = dict(dtype="fp8", kv_dtype="fp8", device_spec="h200", ep=2, rate=2.0, mean_input=6000, mean_output=100)
    off = tfcalc.infer("qwen3-30b-a3b", context_chunking="off", **args).to_json()["continuous"]
    on = tfcalc.infer("qwen3-30b-a3b", **args).to_json()["continuous"]
    assert off["context_chunking"] == "off" and off["prefill_steps"] == 1
    assert "without chunked context" in off["scheduler"]
    assert on["context_chunking"] == "on"
