"""Chunked prefill in continuous batching (tfcalc.count.serving.chunked, `infer --rate --prefill-chunk`): a mixed
step's FLOPs and weights against a hand derivation and transformers' parameter count, the chunks of a prompt,
the steady state against a discrete-event simulation of the chunked scheduler, capacity and latencies monotone
in the load, the unchunked scheduler as before, and the hostile budgets."""

from __future__ import annotations

from collections import deque
from functools import lru_cache

import pytest
import torch
from conftest import assert_one_line_error, configs
from hypothesis import HealthCheck, given, settings, strategies as st
from serving_sim import poisson_arrivals, token_step
from transformers import GPT2Config, GPT2LMHeadModel

import tfcalc
from tfcalc.architecture.attention import causal_pairs
from tfcalc.count.model.quant import plain, weight_format
from tfcalc.count.perf.inference import Overhead
from tfcalc.count.serving import chunked, continuous
from tfcalc.count.serving.roofline import Ceilings, decode_step
from tfcalc.count.serving.serving_tp import comm_seconds
from tfcalc.presets import load
from tfcalc.report.infer import datasheet_ceilings
from tfcalc.report.serving_tp import tensor_parallel

BF16 = plain("bf16")
D, LAYERS, HEADS, VOCAB, POSITIONS = 64, 2, 4, 1000, 512


def tiny():
    return load("gpt2", [f"n_layer={LAYERS}", f"d_model={D}", f"n_head={HEADS}", f"vocab_size={VOCAB}",
                         f"max_seq_len={POSITIONS}"])


def hf_parameters() -> int:
    """transformers' GPT-2 of the same shape: its parameters (the tied embedding once)."""
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(n_embd=D, n_layer=LAYERS, n_head=HEADS, vocab_size=VOCAB,
                                       n_positions=POSITIONS))
    return sum(p.numel() for p in model.parameters())


def hand_flops(n: int, context: int, start: int, size: int) -> int:
    """A mixed step of n decode tokens at ``context`` positions and a chunk of ``size`` prompt tokens at ``start``:
    - each layer's linears (Q, K, V, O: 4·d²; the MLP's up and down: 2·d·4d) over the n + size tokens, 2 FLOPs a
      multiply-add: 2·(n + size)·12·d² a layer;
    - the decode tokens' scores and attention·V: 2·2·d FLOPs per (query, key), n·context of them a layer;
    - the chunk's: its queries see the start cached positions and causally each other: size·start +
      size·(size + 1)/2 pairs a layer, again 2·2·d FLOPs each;
    - the LM head on the n decode tokens and the chunk's last position: 2·(n + 1)·d·V."""
    linears = 2 * (n + size) * 12 * D * D * LAYERS
    pairs = size * start + size * (size + 1) // 2
    attention = 4 * D * (n * context + pairs) * LAYERS
    return linears + attention + 2 * (n + 1) * D * VOCAB


@pytest.mark.parametrize("n,context,start,size", [(3, 20, 10, 6), (1, 5, 0, 40), (17, 300, 128, 64)])
def test_a_mixed_step_against_a_hand_derivation(n, context, start, size):
    cfg = tiny()
    decode = decode_step(cfg, n, context, BF16, "bf16")
    chunk = chunked.chunk_step(cfg, start, size, BF16, "bf16")
    mixed = chunked.mixed_step(cfg, decode, chunk)
    assert mixed.flops == hand_flops(n, context, start, size)
    assert causal_pairs(size, start + size) == size * start + size * (size + 1) // 2
    # the weights once, as transformers counts them (bf16: 2 bytes each), not once per part
    assert mixed.weight_bytes == decode.weight_bytes == chunk.weight_bytes == 2 * hf_parameters()
    # compute-bound ceilings (a slow peak, no performance model): the step takes its FLOPs over the peak
    slow = Ceilings(1e9, 1e30, "test")
    assert mixed.time_s(slow) == pytest.approx(hand_flops(n, context, start, size) / 1e9, rel=1e-12)
    # memory-bound ceilings: the mixed step saves exactly one read of the weights over the two steps apart
    fast = Ceilings(1e30, 1e9, "test")
    apart = decode.time_s(fast) + chunk.time_s(fast)
    assert apart - mixed.time_s(fast) == pytest.approx(2 * hf_parameters() / 1e9, rel=1e-9)


def test_a_prompts_seconds_beside_decode_tokens():
    """t_p(n): what the chunks add to the decode steps; at n = 0 the chunk runs alone and reads the weights."""
    cfg, slow = tiny(), Ceilings(1e9, 1e30, "test")
    t = continuous.Traffic(1.0, 40, 8)
    e = continuous.Engine(cfg, BF16, "bf16", slow, t, None, None, budget=16)
    assert chunked.chunks(40, 16, 3) == [(0, 13), (13, 13), (26, 13), (39, 1)]  # C = B − n, the last shorter
    assert chunked.chunks(40, 64, 3) == [(0, 40)]
    # compute-bound: each chunk adds its own FLOPs, the mixed step's less the decode step's (its linears over n
    # tokens, their n·context pairs a layer, n rows of the LM head)
    context = e.context
    decode = 2 * 3 * 12 * D * D * LAYERS + 4 * D * 3 * context * LAYERS + 2 * 3 * D * VOCAB
    assert decode_step(cfg, 3, context, BF16, "bf16").flops == decode
    added = sum(hand_flops(3, context, s, c) - decode for s, c in chunked.chunks(40, 16, 3))
    assert e.chunked.whole(3) == pytest.approx(added / 1e9, rel=1e-12)
    alone = sum(hand_flops(0, context, s, c) for s, c in chunked.chunks(40, 16, 0))
    assert e.chunked.whole(0) == pytest.approx(alone / 1e9, rel=1e-12)


def test_a_prompt_costs_at_least_its_flops_at_the_ceiling_wherever_the_batch_falls():
    """Step 3's mean: a GEMM's rows are padded to whole tiles and its tiles to whole waves, so what a chunk adds to
    one decode step jumps with n; averaged over where n falls, a compute-bound prompt costs at least its own matmul
    FLOPs at the best rate any GEMM reaches (the ceiling × the peak). Llama 3 70B FP8 on an H200, 128 tokens in:
    2·70.55e9·128 ≈ 18.1 TFLOP of weight matmuls over 1.45 PFLOP/s ≈ 12.4 ms; at N = 2,305 the step-wise cost at the
    one batch was 0.8 ms (the chunk's 128 rows filled the decode GEMM's last tile)."""
    cfg, fp8 = load("llama3-70b"), weight_format("fp8")
    _, c = datasheet_ceilings("h200", fp8)
    e = continuous.Engine(cfg, fp8, "fp8", c, continuous.Traffic(50.0, 128, 128), None, None, budget=8192)
    weights = 2 * 128 * (cfg.n_layer * (2 * 8192 * 8192 + 2 * 8192 * 1024 + 3 * 8192 * 28672))
    floor = weights / (c.flops_per_s * c.perf.fp8_ceiling)
    assert e.chunked.whole(2305) < floor / 10  # the jump at one batch
    for n in range(1500, 3000, 37):  # eight samples of a wave pattern that repeats over 33 tiles: within 2 %
        assert e.chunked.seconds(n) >= 0.98 * floor, n
    s, k = chunked.SPREAD, chunked.SAMPLES
    assert (s, k) == (1024, 8) and e.chunked.expected(2304) == pytest.approx(  # 18 gaps of 128
        sum(e.chunked.whole(2304 + 128 * (i - 4)) for i in range(k)) / k)
    assert e.chunked.expected(2305) == pytest.approx((127 * e.chunked.expected(2304) + e.chunked.expected(2432)) / 128)
    assert e.chunked.expected(1) == e.chunked.whole(1)  # one sequence: nothing to spread over


@lru_cache(maxsize=None)
def _engine(rate: float, inp: int, out: int, budget: int) -> continuous.Engine:
    _, c = datasheet_ceilings("h100-sxm", BF16)
    return continuous.Engine(load("llama2-7b"), BF16, "bf16", c, continuous.Traffic(rate, inp, out), None, None,
                             budget)


def simulate_chunked(e: continuous.Engine, rate: float, inp: int, out: int, budget: int, requests: int,
                     seed: int = 7):
    """The chunked scheduler, step by step: each step decodes every sequence in flight and fills the rest of the
    budget with the waiting prompts, first come first served, the first one possibly part-way (vLLM V1's
    scheduler); a prompt's last chunk yields its first token and the sequence joins the decoding. A step's time:
    the mixed step of the decode tokens and its first chunk, and what each further chunk adds to a decode step
    (the additivity the model assumes, priced by ChunkedPrefill.step_s; the step itself is tested by hand above).
    Returns the time-mean sequences decoding, the mean gap between a sequence's tokens and the mean time to first
    token (without the runtime's fixed work)."""
    arrivals = poisson_arrivals(rate, requests, seed)
    mixed = lru_cache(maxsize=None)(e.chunked.step_s)
    now, running, area, gaps, ttfts = 0.0, [], 0.0, [], []
    waiting: deque = deque()
    while arrivals or waiting or running:
        while arrivals and arrivals[0] <= now:
            waiting.append([arrivals.popleft(), 0])
        if not waiting and not running:
            now = arrivals[0]
            continue
        n, room, picked = len(running), budget - len(running), []
        for req in waiting:
            if room <= 0:
                break
            size = min(inp - req[1], room)
            picked.append((req, req[1], size))
            room -= size
        step = mixed(n, *picked[0][1:]) if picked else e.step_s(n)
        base = max(n, 1)
        step += sum(mixed(base, start, size) - e.step_s(base) for _, start, size in picked[1:])
        area += n * step
        now, running = token_step(running, now, step, gaps)
        for req, _, size in picked:
            req[1] += size
            if req[1] == inp:
                waiting.remove(req)
                ttfts.append(now - req[0])
                if out > 1:
                    running.append([out - 1, now])
    return area / now, sum(gaps) / len(gaps), sum(ttfts) / len(ttfts)


@pytest.mark.parametrize("rate,budget", [(4.0, 8192), (20.0, 8192), (20.0, 96)])
def test_steady_state_matches_a_simulation_of_the_chunked_scheduler(rate, budget):
    inp, out = 256, 48
    _, c = datasheet_ceilings("h100-sxm", BF16)
    state = continuous.steady_state(load("llama2-7b"), BF16, "bf16", c, continuous.Traffic(rate, inp, out),
                                    prefill_chunk=budget)
    n, itl, ttft = simulate_chunked(_engine(rate, inp, out, budget), rate, inp, out, budget, 4000)
    assert state.prefill_chunk == budget and state.prefill_steps == len(chunked.chunks(inp, budget, round(n)))
    assert state.concurrency == pytest.approx(n, rel=0.05)
    assert state.itl_s == pytest.approx(itl, rel=0.05)
    assert state.ttft_s - state.request_s == pytest.approx(ttft, rel=0.15)


@pytest.mark.parametrize("model,kw", [
    ("llama3-8b", dict(mean_input=512, mean_output=256)),
    ("llama3-8b", dict(mean_input=4000, mean_output=200)),
    ("llama2-13b", dict(mean_input=512, mean_output=256, device_spec="a100-80gb", tp=2)),
])
def test_load_raises_latency_up_to_a_capacity_above_the_unchunked(model, kw):
    top = tfcalc.infer(model, rate=1, **kw).to_json()["continuous"]["max_rate_per_s"]
    whole = tfcalc.infer(model, rate=1, prefill_chunk=0, **kw).to_json()["continuous"]["max_rate_per_s"]
    assert top > whole  # the prompts no longer read the weights again
    states = [tfcalc.infer(model, rate=top * f, **kw).to_json()["continuous"] for f in (0.05, 0.3, 0.6, 0.9, 0.99)]
    assert not any(s["over_capacity"] for s in states)
    for key in ("concurrency", "itl_s", "output_tokens_per_s", "kv_cache_bytes"):
        values = [s[key] for s in states]
        assert values == sorted(values) and values[0] < values[-1], key
    assert tfcalc.infer(model, rate=top * 1.01, **kw).to_json()["continuous"]["over_capacity"]


def test_the_budget_bounds_the_sequences_in_flight():
    """A budget of 64 tokens a step: at most 63 sequences decode beside a chunk; past that, 'budget'."""
    r = tfcalc.infer("llama3-8b", rate=1, mean_input=512, mean_output=512, prefill_chunk=64).to_json()["continuous"]
    top = r["max_rate_per_s"]
    below = tfcalc.infer("llama3-8b", rate=top * 0.99, mean_input=512, mean_output=512,
                         prefill_chunk=64).to_json()["continuous"]
    above = tfcalc.infer("llama3-8b", rate=top * 1.01, mean_input=512, mean_output=512,
                         prefill_chunk=64).to_json()["continuous"]
    assert below["concurrency"] <= 63 and above["limit"] == "budget"
    assert below["prefill_steps"] == len(chunked.chunks(512, 64, round(below["concurrency"])))


def test_unchunked_is_the_scheduler_of_before(cli):
    """--prefill-chunk 0: the figures of the whole-prompt scheduler (its simulation: tests/count/test_continuous.py),
    the same as steady_state without a budget; --measure prices tfcalc's own runtime, which prefills whole."""
    _, c = datasheet_ceilings("h100-sxm", BF16)
    t = continuous.Traffic(7.0, 512, 128)
    whole = continuous.steady_state(load("llama3-8b"), BF16, "bf16", c, t)  # no memory: capacity not compared
    r = cli("infer", "llama3-8b", "--rate", "7", "--mean-input", "512", "--mean-output", "128", "--json",
            "--prefill-chunk", "0").json()["continuous"]
    assert r["prefill_chunk"] is None and r["prefill_steps"] is None and "prefills first and whole" in r["scheduler"]
    assert (r["concurrency"], r["ttft_s"], r["itl_s"], r["prefill_s"], r["prefill_share"]) == (
        whole.concurrency, whole.ttft_s, whole.itl_s, whole.prefill_s, whole.prefill_share)
    default = cli("infer", "llama3-8b", "--rate", "7", "--mean-input", "512", "--mean-output", "128",
                  "--json").json()["continuous"]
    assert default["prefill_chunk"] == chunked.DEFAULT_BUDGET == 8192 and "chunked prefill" in default["scheduler"]
    assert default["prefill_s"] < whole.prefill_s  # a prompt beside decode tokens does not read the weights again
    t5 = cli("infer", "t5-base", "--rate", "2", "--mean-input", "64", "--mean-output", "16", "--json")
    assert t5.code == 0 and t5.json()["continuous"]["prefill_chunk"] is None  # an encoder-decoder: unchunked
    assert "prefills first and whole" in t5.json()["continuous"]["scheduler"]


@pytest.mark.parametrize("args,message", [
    (("--prefill-chunk", "1"), "--prefill-chunk must be a whole number of tokens per step from 2"),
    (("--prefill-chunk", "-5"), "--prefill-chunk must be a whole number"),
    (("--prefill-chunk", "2000000"), "--prefill-chunk must be a whole number"),
])
def test_hostile_budget(cli, args, message):
    assert_one_line_error(cli("infer", "llama2-13b", "--rate", "2", "--mean-input", "10", "--mean-output", "10",
                              *args), message)


def test_budget_without_rate_is_refused(cli):
    assert_one_line_error(cli("infer", "gpt2", "--prefill-chunk", "512"), "--prefill-chunk belongs to continuous")


def test_many_chunks_are_priced_from_evenly_spaced_ones():
    """A 32,000-token prompt in chunks of 512 − n: the sampled sum against every chunk priced one by one (a
    chunk's time is linear in its start but for the kink where its attention turns compute-bound)."""
    _, c = datasheet_ceilings("h100-sxm", BF16)
    e = continuous.Engine(load("llama3-8b"), BF16, "bf16", c, continuous.Traffic(1.0, 32000, 256), None, None, 512)
    for n in (0, 1, 100, 400):
        parts = chunked.chunks(32000, 512, n)
        assert len(parts) > chunked.SAMPLED
        exact = sum(e.chunked.step_s(n, s, k) - (e.step_s(n) if n else 0.0) for s, k in parts)
        assert e.chunked.whole(n) == pytest.approx(exact, rel=2e-3)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cfg=configs(), n=st.integers(1, 40), context=st.integers(1, 60), start=st.integers(0, 60),
       size=st.integers(1, 50), ridge=st.sampled_from([0.01, 1.0, 40.0, 1e4]))
def test_a_mixed_step_costs_between_its_decode_step_and_both_apart(cfg, n, context, start, size, ridge):
    """Per row, with a = the decode part's FLOP time, x its byte time, b and y the chunk's, w the weights read
    once: max(a + b, x + y − w/bw) lies between max(a, x) and max(a, x) + max(b, y), since w ≤ the chunk's bytes;
    so τ(n) ≤ T(n, chunk) ≤ τ(n) + T(0, chunk), on any model (random configs: windows, MoE, hybrids)."""
    if not chunked.applies(cfg) or cfg.architecture.kind == "encoder" or not cfg.architecture.head.lm_head:
        return
    c = Ceilings(ridge * 1e12, 1e12, "test")
    decode = decode_step(cfg, n, context, BF16, "bf16")
    chunk = chunked.chunk_step(cfg, start, size, BF16, "bf16")
    mixed = chunked.mixed_step(cfg, decode, chunk)
    assert decode.time_s(c) * (1 - 1e-12) <= mixed.time_s(c) <= (decode.time_s(c) + chunk.time_s(c)) * (1 + 1e-12)
    assert mixed.flops == decode.flops + chunk.flops
    weights = (decode.weight_bytes, chunk.weight_bytes)
    assert max(weights) <= mixed.weight_bytes <= sum(weights)


def test_tensor_parallel_collectives_run_once_over_both_parts():
    """Under --tp a mixed step's all-reduces carry the n + c tokens in one call each (NCCL's latency paid once),
    its all-gather the n + 1 sampled positions' logits: with a chunk of 1, exactly a decode step of n + 1."""
    spec, c = datasheet_ceilings("a100-80gb", BF16)
    tp = tensor_parallel(spec, c, 2)
    cfg = load("llama2-13b")
    one = chunked.mixed_comm_seconds(cfg, tp, 7, 1, 2)
    assert one == pytest.approx(comm_seconds(cfg, tp, 8, 1, 2, True), rel=1e-12)
    apart = comm_seconds(cfg, tp, 7, 1, 2, True) + comm_seconds(cfg, tp, 1, 300, 2, False)
    assert comm_seconds(cfg, tp, 307, 1, 2, True) > chunked.mixed_comm_seconds(cfg, tp, 7, 300, 2)
    assert chunked.mixed_comm_seconds(cfg, tp, 7, 300, 2) < apart  # the calls' latency once


def test_a_mixed_step_reads_the_experts_both_parts_touch():
    """Mixtral (8 experts, top 2): one decode token touches 2 experts a layer, one prompt token 2, the two
    together 8·(1 − (6/8)²) = 3.5 (uniform routing): the experts' bytes 1.75 times either part's."""
    cfg = load("mixtral-8x7b")
    decode, chunk = decode_step(cfg, 1, 10, BF16, "bf16"), chunked.chunk_step(cfg, 0, 1, BF16, "bf16")
    mixed = chunked.mixed_step(cfg, decode, chunk)
    experts = [(r, next(p for p in chunk.rows if p.label == r.label)) for r in mixed.rows
               if r.component.startswith("expert_ffn")]
    assert experts
    for merged, part in experts:
        assert merged.weight_bytes == round(part.weight_bytes * 3.5 / 2)


def test_a_mixed_steps_fixed_costs_once_and_its_traffic_twice():
    """The performance model's per-step costs of a mixed step: the kernels (and their time, dequantization, the
    host) of the larger part once; the elementwise traffic of both; the collectives given; no request's work."""
    d = Overhead(kernels=300, kernel_s=1.2e-3, dequant_s=1e-4, traffic_s=2e-5, comm_s=3e-4, request_s=0.0,
                 host_s=2e-3, launch="eager")
    p = Overhead(kernels=310, kernel_s=1.24e-3, dequant_s=1e-4, traffic_s=9e-4, comm_s=5e-4, request_s=2e-3,
                 host_s=1.9e-3, launch="eager")
    m = chunked.merge_overhead(d, p, 6e-4)
    assert (m.kernels, m.kernel_s, m.dequant_s, m.host_s) == (310, 1.24e-3, 1e-4, 2e-3)
    assert m.traffic_s == pytest.approx(9.2e-4) and m.comm_s == 6e-4 and m.request_s == 0.0
    assert chunked.merge_overhead(None, None) is None
