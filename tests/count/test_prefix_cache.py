"""Prefix caching (tfcalc.count.serving.prefix, `infer --cached-prefix N`): the prefill of the I − P uncached tokens
against a hand derivation and against FlopCounterMode on tfcalc's own runtime prefilling on top of a cached prefix
(its logits equal to the whole prompt's), the block-granular hit, the KV cache holding the prefix once (full
attention and a sliding window, by hand), the engine's steady state, closed loop, chunked prefill and --ep groups
with it, nothing changed without it, and the hostile inputs."""

from __future__ import annotations

import pytest
import torch
from conftest import assert_one_line_error, tiny

import tfcalc
from tfcalc import devices
from tfcalc.count.model.flops import matmul_entries
from tfcalc.count.model.quant import plain
from tfcalc.count.serving import chunked, continuous, prefix
from tfcalc.count.serving.roofline import prefill_step
from tfcalc.measure.flops import flop_counter
from tfcalc.model import build_model
from tfcalc.presets import load
from tfcalc.report.infer import datasheet_ceilings

BF16 = plain("bf16")
LLAMA_LIKE = dict(pos_encoding="rope", norm="rmsnorm", norm_bias=False, gated_ffn=True, activation="silu",
                  attn_bias=False, ffn_bias=False, tie_embeddings=False, n_head=8, n_kv_head=2, d_model=64,
                  d_ff=96, n_layer=2, vocab_size=101, max_seq_len=64)


def hand_prefill_flops(cfg, prompt: int, hit: int) -> int:
    """The prefill of a prompt of I tokens whose first P are cached (prefix.py, step 2), T = I − P rows computed:
    - per layer, Q and O projections 2·T·d·(H·h) each, K and V 2·T·d·(H_kv·h) each, the gated FFN's three
      2·T·d·d_ff;
    - attention: the T queries see the P cached keys and causally each other, T·P + T(T + 1)/2 pairs a head, Q·Kᵀ
      and attention·V 2·h FLOPs a pair each;
    - the LM head on the last position: 2·d·V."""
    d, h, heads, kv, ff = cfg.d_model, cfg.d_model // cfg.n_head, cfg.n_head, cfg.n_kv_head, cfg.d_ff
    t = prompt - hit
    linears = 2 * t * d * (2 * heads * h + 2 * kv * h) + 3 * 2 * t * d * ff
    pairs = t * hit + t * (t + 1) // 2
    attention = 2 * 2 * h * heads * pairs
    return cfg.n_layer * (linears + attention) + 2 * d * cfg.vocab_size


@pytest.mark.parametrize("prompt,hit", [(64, 0), (64, 16), (64, 48), (33, 32), (1000, 992)])
def test_the_prefill_computes_the_uncached_tokens_by_hand(prompt, hit):
    cfg = tiny(**{**LLAMA_LIKE, "max_seq_len": 1024})
    step = prefill_step(cfg, 1, prompt - hit, BF16, "bf16", start=hit)
    assert step.flops == hand_prefill_flops(cfg, prompt, hit)
    assert step.queries == prompt - hit and step.context == prompt


@pytest.mark.parametrize("changes", [LLAMA_LIKE, dict(n_layer=2, d_model=32, n_head=4, vocab_size=61, max_seq_len=64)],
                         ids=["llama-gqa", "gpt2"])
def test_flop_counter_on_the_runtime_prefilling_on_a_cached_prefix(changes):
    """tfcalc's runtime prefills P tokens, then computes the other I − P on top of that cache in one forward
    (Transformer.extend): its logits at the last position equal the whole prompt's prefill (the cache is reused, not
    recomputed), and FlopCounterMode counts exactly the matmuls of I − P queries over I keys: the rectangle convention
    (matmul_entries over I keys, every position's logits, as extend returns them) to the FLOP; the roofline's prefill
    step is that less the scores the causal kernels skip and the LM head on all but the last row."""
    cfg = tiny(**changes)
    prompt, hit = 32, 16  # I a power of two: the step reads the whole cache (its bucket is I)
    torch.manual_seed(0)
    model = build_model(cfg, "cpu", torch.float64)
    idx = torch.randint(0, cfg.vocab_size, (1, prompt), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        whole = model.prefill(idx, model.new_cache(1, prompt))
        cache = model.new_cache(1, prompt)
        model.prefill(idx[:, :hit], cache)
        with flop_counter() as counter:  # FlopCounterMode with CPU SDPA's formula (tfcalc.measure.flops)
            logits = model.extend(idx[:, hit:], cache)
    torch.testing.assert_close(logits[:, -1:], whole, rtol=1e-10, atol=1e-10)
    t = prompt - hit
    counted = counter.get_total_flops()
    assert counted == sum(e.total for e in matmul_entries(cfg, 1, t, prompt))
    h, heads = cfg.d_model // cfg.n_head, cfg.n_head
    skipped = cfg.n_layer * 2 * 2 * h * heads * (t * prompt - (t * hit + t * (t + 1) // 2))
    head_rows = 2 * (t - 1) * cfg.d_model * cfg.vocab_size
    assert prefill_step(cfg, 1, t, BF16, "bf16", start=hit).flops == counted - skipped - head_rows


@pytest.mark.parametrize("asked,hit", [(0, 0), (15, 0), (16, 16), (1540, 1536), (2047, 2032)])
def test_whole_blocks_of_16_hit(asked, hit):
    assert prefix.hit_tokens(asked) == hit


def engine(preset, inp, out, cached, budget=None, tp=None, memory=True):
    _, c = datasheet_ceilings("h100-sxm", BF16)
    mem = devices.usable_bytes(devices.resolve("h100-sxm")) if memory else None
    return continuous.Engine(load(preset), BF16, "bf16", c, continuous.Traffic(1.0, inp, out, cached), mem, tp,
                             budget)


def test_the_kv_cache_holds_the_prefix_once_by_hand():
    """Llama 3 8B, bf16: K and V of 32 layers × 8 KV heads × 128 = 131,072 bytes a position. I = 2,048, O = 256:
    L = 2,176 positions in flight; a prefix of 1,536 held once, 640 positions each sequence's own."""
    per_token = 2 * 32 * 8 * 128 * 2
    plain_e, e = engine("llama3-8b", 2048, 256, 0), engine("llama3-8b", 2048, 256, 1536)
    room = devices.usable_bytes(devices.resolve("h100-sxm")) - e.shard.weights
    assert e.shared == 1536 * per_token and plain_e.shared == 0
    assert e.kv_bytes(10) == 10 * 640 * per_token + 1536 * per_token
    assert plain_e.kv_bytes(10) == 10 * 2176 * per_token
    assert plain_e.max_concurrency() == room // (2176 * per_token)
    assert e.max_concurrency() == (room - 1536 * per_token) // (640 * per_token)
    assert e.max_concurrency() > 3 * plain_e.max_concurrency()


@pytest.mark.parametrize("inp,hit", [(4000, 2048), (4000, 96), (2000, 1024)])
def test_a_sliding_window_shares_what_it_still_holds(inp, hit):
    """Mistral 7B's window of W = 4,096, a ring of W slots a layer (tfcalc.count.model.memory): at the mean context
    L = I + 256 the prefix's positions still held are max(0, P − (L − W)), all P when L ≤ W (step 3)."""
    per_token = 2 * 32 * 8 * 128 * 2
    e = engine("mistral-7b", inp, 512, hit)
    ctx = inp + 256
    held = hit if ctx <= 4096 else max(0, hit - (ctx - 4096))
    assert e.shared == held * per_token
    assert e.kv_bytes(3) == 3 * (min(ctx, 4096) - held) * per_token + held * per_token


@pytest.mark.parametrize("budget", [None, 8192, 256])
def test_the_prompt_costs_its_uncached_chunks(budget):
    """The engine's prompt: unchunked, the prefill of I − P from P; chunked, chunks covering [P, I) only, each from
    its position (a budget of 256 beside nothing decoding: 512 / 256 = 2 chunks, at 1,536 and 1,792)."""
    e = engine("llama3-8b", 2048, 256, 1536, budget)
    if budget is None:
        assert e.prefill_s < engine("llama3-8b", 2048, 256, 0).prefill_s
        assert e.prefill_s > engine("llama3-8b", 512, 256, 0).prefill_s  # the same rows, but over 2,048 keys
        return
    assert e.chunked.prompt == 512 and e.chunked.start == 1536
    expected = [(1536, 256), (1792, 256)] if budget == 256 else [(1536, 512)]
    assert e.chunked.steps(0) == len(expected)
    assert e.chunked.seconds(0) == pytest.approx(sum(e.chunked.step_s(0, s, c) for s, c in expected), rel=1e-12)
    assert chunked.chunks(e.chunked.prompt, budget, 0) == [(s - 1536, c) for s, c in expected]


def test_one_user_sees_the_static_estimate_with_the_prefix():
    """C = 1 under the engine's schedule: the prefill of the uncached tokens, then O − 1 steps at batch 1, as the
    single-request estimate with the same cached prefix prices them."""
    for chunk in (None, 0):
        r = tfcalc.infer("llama2-7b", concurrency=1, mean_input=1024, mean_output=128, device_spec="h100-sxm",
                         prefill_chunk=chunk, cached_prefix=768).to_json()["continuous"]
        static = tfcalc.infer("llama2-7b", batch=1, seq=1024, gen=128, device_spec="h100-sxm", cached_prefix=768)
        alone = tfcalc.infer("llama2-7b", batch=1, seq=1024, gen=128, device_spec="h100-sxm")
        assert r["method"] == "schedule" and r["cached_tokens"] == 768
        assert r["ttft_s"] == pytest.approx(static.estimates[0].prefill_s, rel=1e-9)
        assert static.estimates[0].prefill_s < alone.estimates[0].prefill_s
        assert static.estimates[0].decode_s_per_token == alone.estimates[0].decode_s_per_token


@pytest.mark.parametrize("load", [dict(rate=12.0), dict(concurrency=64), dict(concurrency=64, lengths="random")])
def test_under_load_the_prefix_cuts_ttft_and_raises_capacity(load):
    base = dict(mean_input=2048, mean_output=256, device_spec="h100-sxm", **load)
    off = tfcalc.infer("llama3-8b", **base).to_json()["continuous"]
    on = tfcalc.infer("llama3-8b", cached_prefix=1536, **base).to_json()["continuous"]
    assert (on["cached_prefix"], on["cached_tokens"], on["prefix_kv_bytes"]) == (1536, 1536, 1536 * 131072)
    assert on["ttft_s"] < off["ttft_s"] and on["prefill_s"] < off["prefill_s"]
    assert on["max_rate_per_s"] > off["max_rate_per_s"] and on["max_concurrency"] > off["max_concurrency"]


def test_expert_parallel_groups_take_the_prefix():
    base = dict(rate=40.0, mean_input=4096, mean_output=256, ep=8, device_spec="h100-sxm")
    off = tfcalc.infer("qwen3-30b-a3b", **base).to_json()["continuous"]
    on = tfcalc.infer("qwen3-30b-a3b", cached_prefix=3072, **base).to_json()["continuous"]
    assert on["cached_tokens"] == 3072 and on["prefix_kv_bytes"] > 0
    assert on["prefill_s"] < off["prefill_s"] and on["max_concurrency"] > off["max_concurrency"]


@pytest.mark.parametrize("load", [dict(batch=4, seq=1024, gen=64), dict(rate=8.0, mean_input=1024, mean_output=64),
                                  dict(concurrency=16, mean_input=1024, mean_output=64)])
def test_nothing_changes_without_a_hit(load):
    """A prefix shorter than a block hits nothing: every figure as without the option (only the asked N is said)."""
    off = tfcalc.infer("llama2-7b", device_spec="h100-sxm", **load).to_json()
    on = tfcalc.infer("llama2-7b", device_spec="h100-sxm", cached_prefix=15, **load).to_json()
    assert on["cached_prefix"] == 15 and on["cached_tokens"] == 0 == off["cached_tokens"]
    if on["continuous"] is not None:
        assert on["continuous"].pop("cached_prefix") == 15
        off["continuous"].pop("cached_prefix")
    on.pop("cached_prefix"), off.pop("cached_prefix")
    assert on == off


def test_cli_json_and_table(cli):
    r = cli("infer", "llama3-8b", "--rate", "10", "--mean-input", "2048", "--mean-output", "256",
            "--cached-prefix", "1540")
    assert r.code == 0 and "Cached prefix: 1,540 tokens asked, 1,536 hit" in r.out.replace("\n", " ")
    single = cli("infer", "llama3-8b", "--seq", "2048", "--gen", "64", "--cached-prefix", "1536", "--json")
    assert single.code == 0 and '"cached_tokens": 1536' in single.out


@pytest.mark.parametrize("args,message", [
    (("--seq", "1024", "--cached-prefix", "-5"), "--cached-prefix must be a whole number of tokens, 0 or more"),
    (("--seq", "1024", "--cached-prefix", "1024"), "must be shorter than the prompt (--seq 1,024)"),
    (("--rate", "2", "--mean-input", "512", "--mean-output", "8", "--cached-prefix", "600"),
     "must be shorter than the prompt (--mean-input 512)"),
    (("--concurrency", "2", "--mean-input", "512", "--mean-output", "8", "--cached-prefix", "512"),
     "must be shorter than the prompt"),
    (("--seq", "64", "--gen", "4", "--cached-prefix", "32", "--measure"), "--cached-prefix and --measure"),
])
def test_hostile_cached_prefix(cli, args, message):
    assert_one_line_error(cli("infer", "llama2-7b", *args), message)


def test_whole_prompts_fit_the_budget_less_the_cached_prefix(cli):
    """--context-chunking off: a prompt runs whole in one step; the tokens it computes are I − P."""
    args = ("infer", "llama3-8b", "--rate", "4", "--mean-input", "3000", "--mean-output", "64", "--prefill-chunk",
            "2048", "--context-chunking", "off")
    assert_one_line_error(cli(*args), "--mean-input (3,000) must fit the step's budget")
    assert_one_line_error(cli(*args, "--cached-prefix", "512"),
                          "--mean-input less the cached prefix (2,488) must fit the step's budget")
    r = cli(*args, "--cached-prefix", "1024", "--json")
    assert r.code == 0 and '"context_chunking": "off"' in r.out and '"cached_tokens": 1024' in r.out


def test_expert_parallel_single_request_is_refused(cli):
    assert_one_line_error(cli("infer", "qwen3-30b-a3b", "--ep", "8", "--seq", "2048", "--cached-prefix", "1024"),
                          "the attention-DP groups take it under --rate or --concurrency")


def test_an_encoder_decoder_is_refused(cli):
    assert_one_line_error(cli("infer", "t5-base", "--seq", "256", "--cached-prefix", "64"),
                          "prefix caching is priced for decoder-only models")
