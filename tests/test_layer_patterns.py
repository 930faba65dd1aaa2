"""Per-layer attention patterns of the flat front end (tfcalc.architecture.patterns): local layers through a
window or a chunk, a RoPE base of their own, NoPE layers, and the explicit layer list -- each checked
against a brute force or the real module, and every bad value refused in one line."""

from __future__ import annotations

import pytest
import torch
from conftest import assert_one_line_error, tiny

from tfcalc.architecture.patterns import PatternRun, parse
from tfcalc.count.model import flops as count_flops
from tfcalc.count.model.memory import kv_cache_bytes
from tfcalc.count.model.terms import causal_pairs
from tfcalc.errors import InputError
from tfcalc.measure.flops import measure_flops
from tfcalc.model import build_model
from tfcalc.workload import Workload

ROPE = dict(pos_encoding="rope")


def test_a_pattern_is_kept_as_runs():
    assert parse("(local*5, full)*10, local*2") == (
        PatternRun(("local",) * 5 + ("full",), 10), PatternRun(("local",), 2))
    assert parse("full, full, nope") == (PatternRun(("full",), 2), PatternRun(("nope",), 1))
    assert parse(" local_nope *3 ") == (PatternRun(("local_nope",), 3),)


def test_a_pattern_of_2_to_the_40_layers_costs_what_a_short_one_does():
    cfg = tiny(n_layer=2**40, **ROPE, sliding_window=4, layer_pattern=f"(local*5, full)*{2**40 // 6}, local*4")
    runs = cfg.architecture.output.runs
    assert [r.repeat for r in runs] == [2**40 // 6, 4] and cfg.architecture.output.n_layer == 2**40


def test_gemma3_as_a_list_equals_gemma3_as_a_period():
    """Gemma 3 27B's 62 layers: five local, one global, ten times, then two local -- the same layers as
    full_attention_every 6; the local ones rotate with the local base."""
    common = dict(n_layer=62, **ROPE, sliding_window=8, rope_theta=1e6, rope_local_theta=1e4)
    listed = tiny(**common, layer_pattern="(local*5, full)*10, local*2").architecture
    period = tiny(**common, full_attention_every=6).architecture
    assert list(listed.output.layers()) == list(period.output.layers())
    thetas = [(b.attention.window, b.attention.rope_theta) for b in period.output.layers()]
    assert thetas[:6] == [(8, 1e4)] * 5 + [(None, 1e6)] and thetas[-2:] == [(8, 1e4)] * 2


def test_llama4_layers_chunked_with_rope_global_without():
    """Llama 4: every 4th layer global and NoPE, the others chunked with RoPE; MoE on every 2nd layer."""
    cfg = tiny(n_layer=8, **ROPE, attention_chunk_size=4, full_attention_every=4, nope_every=4, n_expert=4,
               n_expert_active=1, moe_every=2)
    layers = [(b.attention.chunk, b.attention.rope_theta is not None, b.is_moe)
              for b in cfg.architecture.output.layers()]
    assert layers == [(4, True, False), (4, True, True), (4, True, False), (None, False, True)] * 2
    assert cfg.windowed_layers == 6


@pytest.mark.parametrize("chunk", [1, 2, 3, 5, 16])
def test_chunked_pairs_by_brute_force(chunk):
    for keys in range(0, 20):
        for queries in range(0, keys + 1):
            seen = sum(p % chunk + 1 for p in range(keys - queries, keys))
            assert causal_pairs(queries, keys, chunk=chunk) == seen


def test_a_chunked_layer_sees_its_own_chunk_only():
    """One block with chunks of 4: position 9 (chunk 2: positions 8..11) depends on tokens 8 and 9 only."""
    cfg = tiny(n_layer=1, max_seq_len=16, **ROPE, attention_chunk_size=4)
    model = build_model(cfg, "cpu")
    idx = torch.randint(0, cfg.vocab_size, (1, 12))
    with torch.inference_mode():
        base = model(idx)
        for j in range(12):
            changed = idx.clone()
            changed[0, j] = (idx[0, j] + 1) % cfg.vocab_size
            moved = not torch.allclose(model(changed)[0, 9], base[0, 9])
            assert moved == (j in (8, 9)), j


def test_nope_layers_take_no_rotary_table():
    cfg = tiny(n_layer=4, **ROPE, nope_every=2, sliding_window=4, full_attention_every=4, rope_local_theta=50.0)
    model = build_model(cfg, "cpu")
    assert model.layer_ropes == [0, None, 0, None] and model.ropes == [(50.0, cfg.head_dim)]


@pytest.mark.parametrize("changes", [
    dict(attention_chunk_size=3),
    dict(attention_chunk_size=3, full_attention_every=2, nope_every=2),
    dict(sliding_window=3, rope_local_theta=7.0, layer_pattern="local, full, nope, local_nope"),
], ids=["chunks", "llama4-like", "list"])
def test_flops_and_cache_of_patterns_equal_the_module(changes):
    cfg = tiny(n_layer=4, max_seq_len=16, **ROPE, **changes)
    measured = measure_flops(cfg, Workload(batch=2, seq=11), "cpu")
    assert measured.total == count_flops.forward_flops(cfg, Workload(batch=2, seq=11))
    cache = build_model(cfg, "meta").new_cache(2, 13)
    assert cache.nbytes == kv_cache_bytes(cfg, Workload(batch=2, seq=13, dtype="fp32"))


@pytest.mark.parametrize("changes, message", [
    (dict(layer_pattern="local*3"), "longer than the model (n_layer 2)"),
    (dict(layer_pattern="full"), "describes 1 layers, fewer than the model's 2"),
    (dict(layer_pattern="full, global"), "unknown layer kind 'global'"),
    (dict(layer_pattern="full,, full"), "an empty item between commas"),
    (dict(layer_pattern="(full, full"), "a '(' is never closed"),
    (dict(layer_pattern="full), full"), "a ')' closes no '('"),
    (dict(layer_pattern="full*0, full*2"), "at least 1"),
    (dict(layer_pattern="*2"), "'*n' repeats a kind or a group"),
    (dict(layer_pattern="full full"), "separated by commas"),
    (dict(layer_pattern=""), "layer_pattern is empty"),
    (dict(layer_pattern="full, ()"), "an empty group"),
    (dict(layer_pattern="full; full"), "cannot read"),
    (dict(layer_pattern="full*" + "9" * 500), "a repeat '*n' must be at most 1,099,511,627,776 (the most layers a "
     "model has); got a 500-digit number"),
    (dict(layer_pattern="(full, local)*" + "9" * 16), "a repeat '*n' must be at most 1,099,511,627,776 (the most "
     "layers a model has); got 9,999,999,999,999,999"),
    (dict(layer_pattern="full*" + "9" * 5000), "at most 1,000 characters"),
    (dict(layer_pattern="(" * 999), "nest more than 8 deep"),
    (dict(layer_pattern=f"(full, local)*{2**40}"), "longer than the model"),
    (dict(layer_pattern="(" * 400 + "full" + ")" * 400), "nest more than 8 deep"),
    (dict(layer_pattern="local, full"), "give sliding_window or attention_chunk_size"),
    (dict(layer_pattern="full, nope", pos_encoding="learned"), "applies to pos_encoding rope only"),
    (dict(layer_pattern="full*2", nope_every=2), "give layer_pattern or nope_every, not both"),
    (dict(layer_pattern=["full", "full"]), "must be a string or null"),
    (dict(attention_chunk_size=0), "'attention_chunk_size' must be positive"),
    (dict(attention_chunk_size=4, sliding_window=4), "not both"),
    (dict(attention_chunk_size=4, arch="encoder", lm_head=False, tie_embeddings=False), "an encoder attends both"),
    (dict(nope_every=1), "'nope_every' must be at least 2"),
    (dict(nope_every=3), "must be at most n_layer (2)"),
    (dict(nope_every=2, pos_encoding="alibi"), "applies to pos_encoding rope only"),
    (dict(rope_local_theta=1e4), "give sliding_window or attention_chunk_size too"),
    (dict(rope_local_theta=-1.0, sliding_window=4), "'rope_local_theta' must be positive"),
    (dict(rope_local_theta=float("nan"), sliding_window=4), "must be a number"),
    (dict(full_attention_every=2), "give sliding_window"),
], ids=lambda v: v if isinstance(v, str) else None)
def test_bad_patterns_are_one_line_errors(changes, message):
    fields = {**ROPE, **changes}
    with pytest.raises(InputError, match=None) as e:
        tiny(**fields)
    assert message in str(e.value) and "\n" not in str(e.value)


def test_set_keys_reach_the_patterns(cli):
    r = cli("params", "llama2-7b", "--set", "sliding_window=4096", "--set", "layer_pattern=(local*3, full)*8",
            "--set", "rope_local_theta=10000", "--json")
    assert r.code == 0, r.err
    bad = cli("params", "llama2-7b", "--set", "layer_pattern=(local*3, full)*9", "--set", "sliding_window=4096")
    assert_one_line_error(bad, "layer_pattern describes 36 layers, longer than the model (n_layer 32)")
    bad = cli("flops", "llama2-7b", "--set", "attention_chunk_size=-3")
    assert_one_line_error(bad, "'attention_chunk_size' must be positive")


@pytest.mark.parametrize("key, value, message", [
    ("qk_l2_norm", "maybe", "must be true or false"),
    ("qk_norm_over", "heads", "must be one of head, projection"),
    ("norm_placement", "after", "must be one of pre, post, sandwich, output"),
    ("attn_temperature_floor", "0", "'attn_temperature_floor' must be positive"),
    ("router_sigmoid_input", "true", "applies to a mixture of experts only"),
])
def test_new_set_keys_refuse_bad_values_in_one_line(cli, key, value, message):
    assert_one_line_error(cli("params", "llama2-7b", "--set", f"{key}={value}"), message)


@pytest.mark.parametrize("changes, message", [
    (dict(qk_norm_over="projection"), "set qk_norm true too"),
    (dict(qk_l2_norm=True, qk_norm=True), "without qk_norm"),
    (dict(qk_l2_norm=True, pos_encoding="learned"), "applies to pos_encoding rope"),
    (dict(attn_temperature_floor=8), "together, or neither"),
    (dict(attn_temperature_floor=8, attn_temperature_scale=0.1), "applies to NoPE layers"),
    (dict(norm_placement="output", parallel_block="two_norms"), "needs norm_placement pre"),
])
def test_llama4_and_olmo2_fields_against_each_other(changes, message):
    with pytest.raises(InputError) as e:
        tiny(**{**ROPE, **changes})
    assert message in str(e.value) and "\n" not in str(e.value)
