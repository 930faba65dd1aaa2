"""Searches linear in the layer kinds and the stages, never in the layers (issue 33, cause 2): the closed forms
(tfcalc.count.training.stage_classes, sharding.greedy_rank0_grouped, shard.stage_ranges) equal the walks
they replace -- written here plainly, over every stage and every tensor -- and a pattern of 2**40 layers
plans as fast as one of 40."""

from __future__ import annotations

import time

import pytest
from hypothesis import given, settings, strategies as st

from tfcalc.count.training.shard import stage_blocks, stage_ranges
from tfcalc.count.training.sharding import greedy_rank0_elements, greedy_rank0_grouped
from tfcalc.count.training.stage_classes import priced_stages
from tfcalc.presets import load


def walked(cfg, pp: int, virtual: int = 1, counted: tuple[str, ...] = ()) -> tuple[int, ...]:
    """The definition: the ends, and every middle stage whose kinds no earlier one had, walking them all."""
    n = sum(s.n_layer for s in cfg.architecture.stacks)
    out, seen = [], set()
    for stage in range(pp):
        if 0 < stage < pp - 1:
            kinds = tuple((id(s), id(b), c) for r in stage_ranges(n, pp, stage, virtual, counted)
                          for s, b, c in cfg.architecture.kinds_in(r.start, r.stop))
            if kinds in seen:
                continue
            seen.add(kinds)
        out.append(stage)
    return tuple(out)


def pattern_model(pattern: str, n_layer: int):
    return load("gemma-3-27b", [f"n_layer={n_layer}", "full_attention_every=null", f"layer_pattern={pattern}"])


@pytest.mark.parametrize("pattern, n_layer", [("(local*5, full)*10, local*2", 62), ("local*3, (full, local)*7", 17),
                                              ("(local, local, full)*9, full*4", 31), ("full*20", 20)])
def test_priced_stages_equal_the_walk_over_every_stage(pattern, n_layer):
    cfg = pattern_model(pattern, n_layer)
    for pp in range(1, n_layer + 1):
        assert priced_stages(cfg, pp, 1) == walked(cfg, pp), pp
        for counted in (("embedding",), ("head",), ("embedding", "head")):
            if pp > 1 and (n_layer + len(counted)) % pp == 0:
                assert priced_stages(cfg, pp, 1, counted) == walked(cfg, pp, 1, counted), (pp, counted)


def test_priced_stages_of_presets_equal_the_walk():
    for preset, pps in [("llama-4-scout", range(1, 49)), ("deepseek-v3", (1, 2, 3, 4, 7, 8, 16, 61)),
                        ("gpt-oss-20b", range(1, 25)), ("qwen3-30b-a3b", (3, 5, 6, 16, 48))]:
        cfg = load(preset)
        for pp in pps:
            assert priced_stages(cfg, pp, 1) == walked(cfg, pp), (preset, pp)


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 500), st.integers(1, 500))
def test_stage_ranges_in_closed_form_equal_stage_blocks(n_layer, pp):
    pp = min(pp, n_layer)
    counts = stage_blocks(n_layer, pp)
    starts = [sum(counts[:s]) for s in range(pp)]
    assert [stage_ranges(n_layer, pp, s) for s in range(pp)] == \
        [[range(starts[s], starts[s] + counts[s])] for s in range(pp)]


@settings(max_examples=400, deadline=None)
@given(st.dictionaries(st.integers(0, 10**6), st.integers(1, 300), min_size=1, max_size=6), st.integers(1, 24))
def test_the_grouped_greedy_equals_the_greedy_over_every_tensor(groups, ranks):
    """ZeroRedundancyOptimizer's deal (greedy_rank0_elements over the list of every tensor) is the reference."""
    sizes = [n for n, c in groups.items() for _ in range(c)]
    assert greedy_rank0_grouped(groups, ranks) == greedy_rank0_elements(sizes, ranks)


def test_the_grouped_greedy_of_2_to_the_40_tensors_is_quick():
    start = time.monotonic()
    # equal ranks take equal shares: 2**40 / 1024 tensors each
    assert greedy_rank0_grouped({4096: 2**40}, 1024) == 4096 * 2**30
    # rank 0 takes the 1,000-element tensor; rank 1 the first 1,000 small ones (to 1,000); then they alternate,
    # rank 0 first on the tie: half the rest each
    assert greedy_rank0_grouped({1000: 1, 1: 2**40}, 2) == 1000 + (2**40 - 1000) // 2
    assert time.monotonic() - start < 2
    assert greedy_rank0_grouped({10**6: 1, 4096: 10**5}, 8) == greedy_rank0_elements([10**6] + [4096] * 10**5, 8)


def _plan_seconds(cli, n_layer: int, *extra: str) -> float:
    start = time.monotonic()
    r = cli("plan", "gemma-3-27b", "--set", f"n_layer={n_layer}", "--set", "full_attention_every=null",
            "--set", f"layer_pattern=(local, full)*{n_layer // 2}", "--seq", "1024", "--global-batch", "64", *extra)
    elapsed = time.monotonic() - start
    assert "Traceback" not in r.err and "internal error" not in r.err, r.err
    return elapsed


@pytest.mark.parametrize("extra", [(), ("--gpus", "auto"), ("--gpus", "64"), ("--gpus", "8", "--pp", "8")])
def test_a_pattern_of_2_to_the_40_layers_plans_as_fast_as_one_of_40(cli, extra):
    small = _plan_seconds(cli, 40, *extra)
    huge = _plan_seconds(cli, 2**40, *extra)
    assert huge < 5 * small + 5, (small, huge)


RUN = st.tuples(st.lists(st.sampled_from(["local", "full"]), min_size=1, max_size=4), st.integers(1, 9))


@settings(max_examples=300, deadline=None)
@given(st.lists(RUN, min_size=1, max_size=4), st.data())
def test_priced_stages_of_any_pattern_equal_the_walk(runs, data):
    """Patterns of runs (a group repeated, then others), every pp, the ends counted or not: the closed form's
    stages are the walk's."""
    pattern = ", ".join(f"({', '.join(group)})*{repeat}" for group, repeat in runs)
    n_layer = sum(len(group) * repeat for group, repeat in runs)
    cfg = pattern_model(pattern, n_layer)
    pp = data.draw(st.integers(1, n_layer))
    counted = data.draw(st.sampled_from([(), ("embedding",), ("head",), ("embedding", "head")]))
    if counted and (pp == 1 or (n_layer + len(counted)) % pp):
        counted = ()
    assert priced_stages(cfg, pp, 1, counted) == walked(cfg, pp, 1, counted), (pattern, pp, counted)
