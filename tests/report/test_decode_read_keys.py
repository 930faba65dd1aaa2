"""The predicted decode roofline of a measured run counts the keys its steps actually read (issue 29: "the
roofline counts the keys the step actually read"): tfcalc's step attends over a bucket of its cache (the live
length rounded up to a power of two, at least 16, at most the cache: tfcalc.model.cache), so the prediction of
that run prices each step at its bucket (``predicted.keys`` "read"), the live context's figures beside it
(``*_live``). The reference: the key lengths the real model's SDPA calls receive, recorded op by op by a
TorchDispatchMode over the real steps."""

from __future__ import annotations

import pytest
import torch
from conftest import tiny
from torch.utils._python_dispatch import TorchDispatchMode

from tfcalc.count.model import quant
from tfcalc.count.serving import static as serving
from tfcalc.count.serving.roofline import Ceilings, read_span
from tfcalc.model import build_model, next_token
from tfcalc.workload import Workload

ROPE = dict(pos_encoding="rope", norm="rmsnorm", norm_bias=False, gated_ffn=True, activation="silu")


@pytest.mark.parametrize("live, slots, span", [(1, 100, 16), (16, 100, 16), (17, 100, 32), (33, 40, 40),
                                               (5, 8, 8), (65, 1000, 128)])
def test_the_span_read_by_hand(live, slots, span):
    """The next power of two at or above the live length, at least 16, at most the cache's slots."""
    assert read_span(live, slots) == span


def _recorded_keys(cfg, prompt: int, steps: int, slots: int) -> list[list[int]]:
    """Per decode step, the key length of each SDPA call of the real model (one per layer)."""
    seen: list[list[int]] = []

    class Keys(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if "scaled_dot_product" in func.overloadpacket.__name__:
                seen[-1].append(args[1].shape[2])
            return func(*args, **(kwargs or {}))

    torch.manual_seed(0)
    model = build_model(cfg, "cpu")
    cache = model.new_cache(1, slots)
    with torch.inference_mode():
        token = next_token(model.prefill(torch.randint(0, cfg.vocab_size, (1, prompt)), cache))
        for _ in range(steps):
            seen.append([])
            with Keys():
                token = next_token(model.decode(token, cache))
    return seen


def test_a_step_is_priced_at_the_keys_its_sdpa_calls_read():
    """Two layers, one full, one a window of 8 (a ring of 8 slots); fp32; prompt 20, then 6 steps at live
    contexts 21..26 in a cache of 64 slots: the full layer reads a bucket of 32, the windowed one its ring of 8
    (recorded). Per step and layer the KV read is keys · (k + v) · 4 bytes, k = v = 2 heads · 8 = 16: the
    predicted read-minus-live bytes per token are the mean over the steps of Σ_layers (recorded keys − the
    live keys, min(live, W)) · 32 · 4."""
    cfg = tiny(n_layer=2, max_seq_len=64, n_head=4, n_kv_head=2, sliding_window=8, full_attention_every=2, **ROPE)
    prompt, steps, slots, W = 20, 6, 64, 8
    keys = _recorded_keys(cfg, prompt, steps, slots)
    assert sorted(keys[0]) == [8, 32] and all(k == keys[0] for k in keys)  # same spans over the steps
    extra = sum(sum(k) - sum(min(prompt + j + 1, span) for span in (W, slots))
                for j, k in enumerate(keys)) * (16 + 16) * 4 / steps
    c = Ceilings(1e12, 1e11, "test")
    w, fmt = Workload(batch=1, seq=prompt, gen=steps + 1, dtype="fp32"), quant.plain("fp32")
    live = serving.estimate(cfg, w, fmt, c)
    read = serving.estimate(cfg, w, fmt, c, span=lambda n: read_span(n, slots))
    assert (live.keys, read.keys) == ("live", "read")
    assert read.bytes_per_token - live.bytes_per_token == extra == (32 * 6 - (21 + 26) * 3) * 32 * 4 / 6
    assert read.decode_s_per_token > live.decode_s_per_token
    assert read.first_decode_step.context == 32 and live.first_decode_step.context == 21


def test_span_runs_sum_as_step_by_step():
    """The bucketed totals (constant runs per span) equal the steps summed one by one, across bucket edges."""
    cfg = tiny(n_layer=2, max_seq_len=200, **ROPE)
    c, fmt = Ceilings(1e9, 1e10, "test"), quant.plain("fp32")
    w = Workload(batch=3, seq=10, gen=120, dtype="fp32")
    read = serving.estimate(cfg, w, fmt, c, span=lambda n: read_span(n, 200))
    steps = [serving.decode_step(cfg, 3, read_span(n, 200), fmt, "fp32") for n in range(11, 130)]
    assert read.bytes_per_token == pytest.approx(sum(s.weight_bytes + s.kv_bytes for s in steps) / 3 / 119, rel=1e-12)
    assert read.decode_s_per_token == pytest.approx(sum(s.time_s(c) for s in steps) / 119, rel=1e-12)


def test_bench_decode_json_names_both(cli):
    """A measured run: its prediction at the keys read, equal to the bytes its steps read (measure.decode), and
    the live context's beside it; the ratio against the measured time at both."""
    d = cli("bench", "decode", "gpt2", "--set", "n_layer=1", "--set", "d_model=48", "--set", "vocab_size=64",
            "--set", "max_seq_len=64", "--steps", "3", "--seq", "8", "--warmup", "1", "--repeat", "1",
            "--copy-size", "1MiB", "--json").json()
    d = d[0] if isinstance(d, list) else d
    p = d["predicted"]
    assert p["keys"] == "read" and p["bytes_per_token"] == p["bytes_per_token_read"] == d["bytes_per_token_read"]
    assert p["bytes_per_token_live"] == d["bytes_per_token"] < p["bytes_per_token_read"]  # 11 keys read, 9..11 live
    assert d["kv_span_min"] == d["kv_span_max"] == 11  # the cache holds 8 + 3: its bucket is capped there
    assert d["ratio"]["decode"] == pytest.approx(p["decode_s_per_token_read"] / d["decode_s_per_token"])
    assert d["ratio"]["decode_live"] == pytest.approx(p["decode_s_per_token_live"] / d["decode_s_per_token"])


def test_infer_json_names_the_keys_tfcalcs_runtime_reads(cli):
    """`tfcalc infer llama2-7b --seq 100 --gen 50`: the decode steps at live contexts 101..149 in a cache of
    100 + 50 - 1 = 149 slots (tfcalc.model.generate) read a bucket of 128 keys (contexts 101..128) or of 149
    (129..149, capped at the cache): Σ (128 − L) over 101..128 = 378 and Σ (149 − L) over 129..149 = 210, 588
    keys more over 49 steps = 12 a step, each key 2 · 32 layers · 4096 · 2 bytes (bf16 K and V) = 524,288:
    6,291,456 bytes per token more than the live context's figure, which stays the headline (``keys`` "live")."""
    d = cli("infer", "llama2-7b", "--seq", "100", "--gen", "50", "--json").json()
    d = d[0] if isinstance(d, list) else d
    p = d["predicted"]
    assert p["keys"] == "live" and p["bytes_per_token"] == p["bytes_per_token_live"] == d["bytes_per_token"]
    assert p["bytes_per_token_read"] - p["bytes_per_token_live"] == 12 * 2 * 32 * 4096 * 2 == 6_291_456
    assert p["decode_s_per_token_read"] > p["decode_s_per_token_live"] == d["decode_s_per_token"]
