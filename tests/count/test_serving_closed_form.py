"""The decode steps summed in closed form (tfcalc.count.serving.static.decode_totals) against the plain sum over
every step, the definition: random configs (sliding windows and their kinks, encoder-decoders, MoE),
ceilings on both sides of the ridge, so that rows turn compute-bound part of the way."""

from __future__ import annotations

import time

import pytest
from conftest import configs, tiny
from hypothesis import HealthCheck, given, settings, strategies as st

from tfcalc.count.model import quant
from tfcalc.count.serving import static as serving
from tfcalc.count.serving.roofline import Ceilings, decode_step
from tfcalc.presets import load
from tfcalc.workload import Workload

BF16 = quant.plain("bf16")


def stepwise(cfg, batch, seq, gen, c, src=None):
    steps = [decode_step(cfg, batch, seq + j, BF16, "bf16", src_seq=src) for j in range(1, gen)]
    seconds = sum(s.time_s(c) for s in steps)
    return (seconds / len(steps), sum(s.bytes_per_token for s in steps) / len(steps),
            "compute" if sum(s.compute_s(c) for s in steps) >= sum(s.memory_s(c) for s in steps) else "memory")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cfg=configs(), batch=st.integers(1, 9), seq=st.integers(1, 30), gen=st.integers(2, 70),
       ridge=st.sampled_from([0.01, 0.5, 3.0, 40.0, 1e4]))
def test_closed_form_equals_the_sum_over_every_step(cfg, batch, seq, gen, ridge):
    if cfg.arch == "encoder" or not cfg.lm_head:
        return
    c = Ceilings(ridge * 1e12, 1e12, "test")
    src = 5 if cfg.arch == "encoder-decoder" else None
    est = serving.estimate(cfg, Workload(batch=batch, seq=seq, gen=gen, src_seq=src), BF16, c)
    per_token, per_byte, bound = stepwise(cfg, batch, seq, gen, c, src)
    assert est.decode_s_per_token == pytest.approx(per_token, rel=1e-9)
    assert est.bytes_per_token == pytest.approx(per_byte, rel=1e-12)
    assert est.bound == bound


@pytest.mark.parametrize("window", [None, 7, 40])
def test_a_window_inside_the_run_is_a_kink_handled_exactly(window):
    cfg = tiny(sliding_window=window, max_seq_len=4096, full_attention_every=2 if window == 7 else None)
    c = Ceilings(3e12, 1e12, "test")
    est = serving.estimate(cfg, Workload(batch=3, seq=2, gen=200), BF16, c)
    assert est.decode_s_per_token == pytest.approx(stepwise(cfg, 3, 2, 200, c)[0], rel=1e-12)


def test_a_million_decode_steps_take_no_time():
    cfg, c = load("gpt2"), Ceilings(989e12, 3.35e12, "h100")
    start = time.monotonic()
    est = serving.estimate(cfg, Workload(seq=1024, gen=1_000_000), BF16, c)
    assert time.monotonic() - start < 2
    # memory-bound throughout at batch 1: the mean step reads the weights and the mean context's KV cache
    mean_context = 1024 + 1_000_000 / 2
    kv = 2 * cfg.n_layer * cfg.d_model * 2 * mean_context
    assert est.bytes_per_token == pytest.approx(est.first_decode_step.weight_bytes + kv, rel=1e-9)
