"""`infer --rate --measure`: continuous batching served for real on this CPU with a tiny model. The
scheduler's invariants (every request prefilled once, one token per sequence per decode step, no more in
flight than slots), the seeded arrivals, the time budget, the refusal before allocating, the JSON beside
the prediction, and one-line errors. Each run well under 5 s; no timing thresholds."""

from __future__ import annotations

import statistics

import pytest
import torch
from conftest import assert_one_line_error, tiny

from tfcalc.errors import InputError
from tfcalc.measure import continuous as measured
from tfcalc.measure.continuous import ContinuousPlan, arrivals, run_continuous
from tfcalc.measure.fit import Limit
from tfcalc.report import resolve
from tfcalc.report.infer import build_infer
from tfcalc.report.infer_options import InferOptions

CFG = tiny(pos_encoding="rope", vocab_size=64, max_seq_len=64, tie_embeddings=False)  # untied: tokens follow attention
TINY = ("--set", "n_layer=1", "--set", "d_model=32", "--set", "n_head=4", "--set", "vocab_size=64",
        "--set", "max_seq_len=64", "--set", "pos_encoding=rope")


def _plan(**changes) -> ContinuousPlan:
    fields = dict(cfg=CFG, device="cpu", dtype="fp32", rate=400.0, mean_input=6, mean_output=5, requests=24,
                  max_time=20.0)
    fields.update(changes)
    return ContinuousPlan(**fields)


@pytest.fixture
def wide_weights(monkeypatch):
    """Weights of std 0.5 (not 0.02): a tiny random model's greedy tokens then depend on its whole context,
    so a request given another's cache or token would show in its tokens."""
    build = measured.build_model

    def built(*args, **kwargs):
        model = build(*args, **kwargs)
        gen = torch.Generator().manual_seed(5)
        with torch.no_grad():
            for name, p in model.named_parameters():
                if "norm" not in name and p.dim() > 1:
                    p.copy_(0.5 * torch.randn(p.shape, generator=gen))
        return model

    monkeypatch.setattr(measured, "build_model", built)


@pytest.mark.parametrize("rate,requests", [(400.0, 24), (5e4, 12), (20.0, 6)])
def test_every_request_is_served_as_the_scheduler_says(rate, requests, wide_weights):
    plan = _plan(rate=rate, requests=requests)
    run = run_continuous(plan)
    assert not run.stopped and run.completed == requests and len(run.prefill_s) == requests
    assert all(len(t) == plan.mean_output for t in run.token_times)  # the prefill's token, then O - 1 steps
    # one token per sequence in flight per decode step: the steps' batches add up to every request's O - 1
    assert sum(n for n, _ in run.decode_steps) == requests * (plan.mean_output - 1)
    assert all(1 <= n <= plan.rows for n, _ in run.decode_steps)
    for a, t in zip(run.arrivals, run.token_times, strict=True):
        assert a <= t[0] and list(t) == sorted(t)  # no token before its request arrived, in order
    # greedy: each request's tokens are its prompt's decoded alone, whoever it shared the decode steps with
    assert run.exact is True and run.checked == min(4, requests)


def test_arrivals_are_seeded_poisson():
    plan = _plan(requests=20_000, rate=50.0)
    when = arrivals(plan)
    gaps = [b - a for a, b in zip((0.0,) + when[:-1], when, strict=True)]
    assert arrivals(plan) == when and arrivals(_plan(requests=20_000, rate=50.0, seed=1)) != when
    assert statistics.fmean(gaps) == pytest.approx(1 / 50, rel=0.03)  # exponential gaps of mean 1 / R
    assert statistics.pstdev(gaps) == pytest.approx(1 / 50, rel=0.05)  # an exponential's sd equals its mean


def test_the_time_budget_stops_the_run():
    run = run_continuous(_plan(rate=2.0, requests=50, max_time=0.3))  # arrivals ~0.5 s apart
    assert run.stopped and run.completed < 50


def test_what_does_not_fit_is_refused_before_allocating(monkeypatch):
    def no_build(*args, **kwargs):
        raise AssertionError("built the model")

    monkeypatch.setattr("tfcalc.measure.fit.tightest_limit", lambda *a: Limit(10_000, "free memory on cpu"))
    monkeypatch.setattr(measured, "build_model", no_build)
    with pytest.raises(InputError, match="not running continuous batching"):
        run_continuous(_plan())


def test_measured_json_beside_the_prediction():
    o = InferOptions(batches=(1,), seq=None, gen=256, dtype="fp32", measure=True, warmup=0, repeat=1,
                     matmul_size=16, copy_bytes=2**16, rate=50.0, mean_input=6, mean_output=4, requests=10)
    r = build_infer(resolve("gpt2", [x for x in TINY if x != "--set"]), o).to_json()
    c, m = r["continuous"], r["continuous"]["measured"]
    assert r["batch"] == 1 and r["seq"] == 6 and r["gen"] == 4 and r["measured"] is True  # the static row as timed
    assert m["completed"] == m["served"] == m["requests"] == 10 and m["prefills"] == 10 and not m["stopped_at_budget"]
    assert m["predicted"]["ttft_s"] == c["ttft_s"] and m["predicted"]["decode_batch"] == c["concurrency"]
    if c["over_capacity"]:  # the prediction at ceilings measured on a busy host may say so: no ratio then
        assert c["ttft_s"] is None and m["ratio"]["ttft"] is None
    else:
        assert m["ratio"]["ttft"] == pytest.approx(c["ttft_s"] / m["ttft_s"]["mean"])
    assert m["ttft_s"]["median"] <= m["ttft_s"]["p90"] and m["itl_s"]["mean"] > 0
    assert m["output_tokens_per_s"] == pytest.approx(10 * 4 / m["span_s"])
    assert m["decode_steps"] * m["decode_batch_mean"] == pytest.approx(10 * 3)
    assert m["exact"] is True and m["checked_requests"] == 4
    # what the steps read: every slot, each the bucket of the longest row in flight (at least 16, at most the
    # cache's I + O = 10 positions: 10), not the rows' own live positions (6 + 1 .. 6 + 3)
    assert m["decode_rows"] == 10 and m["kv_span"] == {"min": 10, "mean": 10, "max": 10}
    assert 7 <= m["kv_live_mean"] <= 9
    from tfcalc.count.model.quant import plain
    from tfcalc.count.serving.roofline import Ceilings, decode_step
    from tfcalc.presets import load

    cfg = load("gpt2", [x for x in TINY if x != "--set"])
    step = decode_step(cfg, 10, 10, plain("fp32"), "fp32")  # 10 rows, 10 positions each: the step as run
    assert m["decode_step_read_bytes"] == step.bytes
    assert m["ratio"]["decode_step_as_run"] == pytest.approx(m["predicted"]["decode_step_as_run_s"]
                                                             / m["decode_step_s"]["mean"])
    ceilings = Ceilings(r["matmul_ceiling_flops_per_s"], r["bandwidth_ceiling_bytes_per_s"], "measured")
    assert m["predicted"]["decode_step_as_run_s"] >= step.time_s(ceilings)  # the roofline, and per-step costs


def test_the_span_follows_the_longest_row_in_flight():
    """Rows of very different lengths (tfcalc.model.slots): the span every row reads is the bucket of the
    longest row in flight, its new position included, and it falls back when that row leaves."""
    from tfcalc.model import build_model
    from tfcalc.model.slots import SlotCache, decode_rows

    model = build_model(CFG, "cpu")
    slots = SlotCache(model, rows=3, max_tokens=64)
    with torch.inference_mode():
        slots.admit(torch.zeros(1, 3, dtype=torch.long), model)
        assert slots.span == 16  # 4 live positions: the smallest bucket
        slots.admit(torch.zeros(1, 40, dtype=torch.long), model)
        assert slots.span == 64  # 41 live: the bucket of the longest row, for the 4-position row too
        decode_rows(model, torch.zeros(2, 1, dtype=torch.long), slots)
        slots.release(1)
        assert slots.lengths == [4] and slots.span == 16


@pytest.mark.parametrize("rate", ["300", "1e9"])  # 1e9: over capacity on a CPU, whose memory no table knows
def test_measured_table_on_screen(cli, rate):
    r = cli("infer", "gpt2", *TINY, "--measure", "--rate", rate, "--mean-input", "6", "--mean-output", "3",
            "--requests", "6", "--warmup", "0", "--repeat", "1", "--copy-size", "64KiB")
    assert r.code == 0, r.err
    assert "Continuous batching measured on cpu: 6 of 6 requests served" in r.out and "inter-token" in r.out
    assert "Over capacity" in r.out or rate != "1e9"  # at 300 it depends on the ceilings this host measures


@pytest.mark.parametrize("args,message", [
    (("--requests", "5"), "--requests belongs to a measured continuous-batching run"),
    (("--rate", "5", "--mean-input", "4", "--mean-output", "4", "--max-time", "3"),
     "--max-time belongs to a measured continuous-batching run"),
    (("--rate", "5", "--mean-input", "4", "--mean-output", "4", "--measure", "--requests", "0"),
     "--requests must be between 1 and 100,000"),
    (("--rate", "5", "--mean-input", "4", "--mean-output", "4", "--measure", "--max-time", "0"),
     "--max-time must be a positive number"),
    (("--rate", "5", "--mean-input", "4", "--mean-output", "4", "--measure", "--max-time", "nan"),
     "--max-time must be a positive number"),
    (("--rate", "5", "--mean-input", "4", "--mean-output", "1", "--measure"), "--mean-output 2 or more"),
    (("--rate", "5", "--mean-input", "4", "--mean-output", "4", "--measure", "--tp", "2"), "not measured"),
    (("--rate", "5", "--mean-input", "4", "--mean-output", "4", "--measure", "--set", "pos_encoding=relative"),
     "relative position biases are not built"),
    (("--rate", "5", "--mean-input", "60", "--mean-output", "8", "--measure"), "at most 64 tokens"),
])
def test_hostile_measured_rate(cli, args, message):
    assert_one_line_error(cli("infer", "gpt2", *TINY, *args), message)


def test_a_windowed_model_is_served_its_rows_at_their_own_positions(wide_weights):
    """The slots' step reads each row's ring at that row's positions (tfcalc.model.slots): a window of 4
    smaller than every request's 6 + 5 tokens runs, one token per sequence per step."""
    plan = _plan(cfg=tiny(pos_encoding="rope", vocab_size=64, max_seq_len=64, sliding_window=4), requests=8)
    run = run_continuous(plan)
    assert not run.stopped and run.completed == 8
    assert sum(n for n, _ in run.decode_steps) == 8 * (plan.mean_output - 1)


def test_the_cli_refuses_before_anything_runs(cli, monkeypatch):
    monkeypatch.setattr("tfcalc.measure.fit.tightest_limit", lambda *a: Limit(10_000, "free memory on cpu"))
    assert_one_line_error(cli("infer", "gpt2", *TINY, "--measure", "--rate", "5", "--mean-input", "6",
                              "--mean-output", "4", "--requests", "9"), "not running continuous batching")


def test_the_python_api_takes_requests_and_max_time():
    import tfcalc

    r = tfcalc.infer("gpt2", measure=True, warmup=0, repeat=1, copy_bytes=2**16, rate=300.0, mean_input=6,
                     mean_output=3, requests=5, max_time=30.0, n_layer=1, d_model=32, n_head=4, vocab_size=64,
                     max_seq_len=64).to_json()
    m = r["continuous"]["measured"]
    assert m["requests"] == m["completed"] == 5 and m["time_budget_s"] == 30.0


@pytest.mark.parametrize("users,requests", [(1, 5), (3, 12), (40, 8)])
def test_a_closed_loop_of_users(users, requests, wide_weights):
    """--concurrency C --measure: C requests at the start, each later one arriving when an earlier one's last token
    came (the j-th to end brings request C + j), never more than C in flight; every request served whole."""
    plan = _plan(users=users, requests=requests)
    run = run_continuous(plan)
    assert not run.stopped and run.completed == requests and plan.rows == min(users, requests)
    first = min(users, requests)
    assert run.arrivals[:first] == (0.0,) * first
    ends = sorted(t[-1] for t in run.token_times)
    assert list(run.arrivals[first:]) == ends[:requests - first]
    assert all(n <= min(users, requests) for n, _ in run.decode_steps)
    assert sum(n for n, _ in run.decode_steps) == requests * (plan.mean_output - 1)
    if users == 1:  # one at a time: nothing waits, a prompt never beside another sequence
        assert all(n == 1 for n, _ in run.decode_steps)


def test_measured_closed_loop_beside_its_prediction():
    o = InferOptions(batches=(1,), seq=None, gen=256, dtype="fp32", measure=True, warmup=0, repeat=1,
                     matmul_size=16, copy_bytes=2**16, concurrency=3, mean_input=6, mean_output=4, requests=9)
    r = build_infer(resolve("gpt2", [x for x in TINY if x != "--set"]), o).to_json()
    c, m = r["continuous"], r["continuous"]["measured"]
    assert c["users"] == 3 and m["arrivals"].startswith("closed loop of 3 users")
    assert m["completed"] == 9 and m["slots"] == 3
    assert m["predicted"]["output_tokens_per_s"] == pytest.approx(c["rate_per_s"] * 4)
    assert m["ratio"]["ttft"] == pytest.approx(c["ttft_s"] / m["ttft_s"]["mean"])
