"""Speculative decoding (tfcalc.count.serving.speculative, `infer --draft`): Leviathan et al.'s expected tokens
per round against a simulation of the acceptance process and the geometric sum, the verify step's
roofline against a decode step's, the speedup's parts, and the hostile cases."""

from __future__ import annotations

import random

import pytest
from conftest import assert_one_line_error

import tfcalc
from tfcalc.count.model import quant
from tfcalc.count.serving import speculative
from tfcalc.count.serving.roofline import decode_step, verify_step
from tfcalc.presets import load

BF16 = quant.plain("bf16")


@pytest.mark.parametrize("a,k", [(0.0, 4), (0.5, 1), (0.8, 4), (0.9, 7), (0.3, 3)])
def test_expected_tokens_equal_the_acceptance_process(a, k):
    """A round: draft tokens accepted one by one with probability A until the first rejection (or all k),
    then one token of the target's own. The mean of 200,000 seeded rounds, and 1 + A + ... + A^k."""
    rng = random.Random(20)
    total = 0
    for _ in range(200_000):
        accepted = 0
        while accepted < k and rng.random() < a:
            accepted += 1
        total += accepted + 1
    e = speculative.expected_tokens(a, k)
    assert e == pytest.approx(sum(a**i for i in range(k + 1)), rel=1e-12)
    assert e == pytest.approx(total / 200_000, rel=0.01)
    assert speculative.expected_tokens(0.8, 4) == pytest.approx(3.3616)  # (1 − 0.8^5) / 0.2


def test_verify_step_reads_the_weights_and_the_cache_once():
    """k + 1 tokens per sequence: the weight matmuls' FLOPs k + 1 times a decode step's, the weights and
    each sequence's cache read once, the logits of every position."""
    cfg = load("llama2-7b")
    one, five = decode_step(cfg, 2, 700, BF16, "bf16"), verify_step(cfg, 2, 5, 700, BF16, "bf16")
    a, b = {r.component: r for r in one.rows}, {r.component: r for r in five.rows}
    for name in ("attn_q", "ffn_up", "lm_head"):
        assert b[name].flops == 5 * a[name].flops and b[name].weight_bytes == a[name].weight_bytes
    assert b["attn_qk"].kv_bytes == a["attn_qk"].kv_bytes
    assert five.weight_bytes == one.weight_bytes


def test_round_and_speedup_from_their_parts():
    r = tfcalc.infer("llama2-13b", batch=1, seq=256, gen=128, device_spec="h100-sxm", draft="llama2-7b",
                     accept_rate=0.7, draft_tokens=3).to_json()
    s = r["speculative"]
    assert s["round_s"] == pytest.approx(3 * s["draft_step_s"] + s["verify_step_s"])
    assert s["decode_s_per_token"] == pytest.approx(s["round_s"] / s["expected_tokens_per_step"])
    assert s["speedup"] == pytest.approx(s["target_step_s"] / s["decode_s_per_token"])
    assert s["expected_tokens_per_step"] == pytest.approx(1 + 0.7 + 0.49 + 0.343)
    assert s["draft_weights_bytes"] == 13_476_831_232  # Llama 2 7B in bf16 (docs/serving.md)
    assert s["context"] == 256 + 64
    # the plain decode step at the middle context is the mean of the steps (affine in the context)
    assert s["target_step_s"] == pytest.approx(r["predicted"]["decode_s_per_token"], rel=1e-9)


def test_no_acceptance_is_slower_than_plain_decoding():
    s = tfcalc.infer("llama2-13b", batch=1, seq=256, gen=128, device_spec="h100-sxm", draft="llama2-7b",
                     accept_rate=0.0).to_json()["speculative"]
    assert s["expected_tokens_per_step"] == 1 and s["speedup"] < 1 and s["draft_tokens"] == 4


def test_no_draft_no_speculative_key_value():
    assert tfcalc.infer("gpt2", seq=64, gen=8).to_json()["speculative"] is None


@pytest.mark.parametrize("args,message", [
    (("--draft", "llama2-7b", "--accept-rate", "1"), "--accept-rate must be a number in [0, 1)"),
    (("--draft", "llama2-7b", "--accept-rate", "-0.1"), "--accept-rate must be a number in [0, 1)"),
    (("--draft", "llama2-7b", "--accept-rate", "nan"), "--accept-rate must be a number in [0, 1)"),
    (("--draft", "llama2-7b"), "--draft needs --accept-rate"),
    (("--accept-rate", "0.5"), "--accept-rate belongs to speculative decoding"),
    (("--draft-tokens", "3"), "--draft-tokens belongs to speculative decoding"),
    (("--draft", "llama2-7b", "--accept-rate", "0.5", "--draft-tokens", "0"), "--draft-tokens must be an integer"),
    (("--draft", "llama2-7b", "--accept-rate", "0.5", "--draft-tokens", "65"), "--draft-tokens must be an integer"),
    (("--draft", "no-such-model", "--accept-rate", "0.5"), "unknown preset"),
    (("--draft", "gpt2", "--accept-rate", "0.5"), "a draft must share the target's vocabulary"),
    (("--draft", "bert-base", "--accept-rate", "0.5"), "generates no tokens"),
    (("--draft", "llama2-7b", "--accept-rate", "0.5", "--measure", "--batch", "2"), "give --batch 1"),
])
def test_hostile_draft(cli, args, message):
    assert_one_line_error(cli("infer", "llama2-13b", "--seq", "16", "--gen", "4", *args), message)


def test_accept_rate_not_a_number_is_a_usage_error(cli):
    assert_one_line_error(cli("infer", "llama2-13b", "--draft", "llama2-7b", "--accept-rate", "most"),
                          "Invalid value for '--accept-rate'")


def test_speedup_is_leviathans_improvement_factor_at_batch_1():
    """Leviathan et al. 2023, Theorem 3.8: with c = t_draft / t_target and the verify step as long as a
    target step, the expected walltime improvement is (1 − A^(k+1)) / ((1 − A)(k·c + 1)). At batch 1 both
    steps read the same weights and cache (memory-bound), so the verify step costs a target step within a
    few per cent, and the speedup is the theorem's."""
    s = tfcalc.infer("llama2-70b", batch=1, seq=512, gen=256, device_spec="h100-sxm", tp=4, draft="llama2-7b",
                     accept_rate=0.8, draft_tokens=4).to_json()["speculative"]
    assert s["verify_step_s"] == pytest.approx(s["target_step_s"], rel=0.05)
    c = s["draft_step_s"] / s["target_step_s"]
    theorem = (1 - 0.8**5) / ((1 - 0.8) * (4 * c + 1))
    assert s["speedup"] == pytest.approx(theorem, rel=0.05)


def test_a_windowed_targets_rings_keep_k_spare_slots_under_speculation():
    """Mistral 7B (a window of 4,096, 32 layers of 8 KV heads of 128, bf16), 8,000 + 200 tokens, k = 3: the
    speculative run's target keeps min(8,203, 4,096 + 3) positions of K and V per layer
    (tfcalc.model.attention_state), the draft (Llama 2 7B, every position) 8,203; a plain decode's ring 4,096."""
    r = tfcalc.infer("mistral-7b", batch=2, seq=8000, gen=200, device_spec="h100-sxm", draft="llama2-7b",
                     accept_rate=0.6, draft_tokens=3).to_json()
    s = r["speculative"]
    assert s["kv_cache_bytes"] == 2 * 32 * 2 * 8 * 128 * (4096 + 3) * 2 and s["ring_spare_slots"] == 3
    assert r["kv_cache_bytes"] == 2 * 32 * 2 * 8 * 128 * 4096 * 2  # plain decoding: W slots
    assert s["draft_kv_cache_bytes"] == 2 * 32 * 2 * 32 * 128 * 8203 * 2
