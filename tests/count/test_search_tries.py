"""What the search varies where it applies (tfcalc.count.search_space): HSDP and FSDP without resharding on
the ZeRO-3 layouts that fit; offload only where nothing fits without it; FP8 never on its own."""

import dataclasses

import pytest

from tfcalc.count.layout import Layout
from tfcalc.count.plan import fewest_gpus, search
from tfcalc.count.search_space import FIXED, SearchSpace, fsdp_variants
from tfcalc.count.steptime import Hardware
from tfcalc.errors import InputError
from tfcalc.presets import load

H100 = Hardware(989e12, 80 * 10**9, 450e9, 50e9, 8, pcie_bytes_per_s=64e9)
OPEN = SearchSpace()


def offloaded(L: Layout) -> bool:
    return L.offload_optimizer or L.offload_activations


def test_zero3_layouts_that_fit_are_tried_with_hsdp_and_without_resharding():
    cfg = load("llama2-13b")
    plans = search(cfg, 32, Layout(seq=4096, global_batch=256), H100, None, space=OPEN)
    layouts = {p.layout for p in plans}
    hsdp = [L for L in layouts if L.hsdp is not None]
    kept = [L for L in layouts if not L.reshard_after_forward]
    assert hsdp and kept
    for L in hsdp + kept:
        assert L.zero == 3
        twin = dataclasses.replace(L, hsdp=None, reshard_after_forward=True)
        assert twin in layouts  # a variant of a ZeRO-3 layout that fits, and holds more
        assert next(p for p in plans if p.layout == L).memory.total >= next(
            p for p in plans if p.layout == twin).memory.total
    # HSDP: shards within a node (8 GPUs / tp), replicas across nodes
    assert all(L.hsdp * L.tp == 8 and L.dp > L.hsdp for L in hsdp)
    assert not any(offloaded(L) or L.compute_dtype for L in layouts)  # something fits: no offload; FP8 never


def test_the_variants_only_where_the_request_leaves_them_open():
    L = Layout(dp=32, zero=3, seq=4096, global_batch=256)
    assert len(list(fsdp_variants(L, 8, OPEN))) == 3
    assert list(fsdp_variants(L, 8, FIXED)) == []
    assert list(fsdp_variants(dataclasses.replace(L, hsdp=4), 8, OPEN)) == []  # --hsdp given
    assert list(fsdp_variants(dataclasses.replace(L, zero=2), 8, OPEN)) == []
    assert list(fsdp_variants(dataclasses.replace(L, dp=8), 8, OPEN)) == [
        dataclasses.replace(L, dp=8, reshard_after_forward=False)]  # dp within a node: no HSDP


def test_offload_only_where_nothing_fits_on_the_gpus():
    cfg, base = load("llama2-70b"), Layout(seq=4096, global_batch=64)
    assert search(cfg, 8, base, H100, None, space=dataclasses.replace(OPEN, offload=False)) == []
    plans = search(cfg, 8, base, H100, None, space=OPEN)
    assert plans and all(offloaded(p.layout) for p in plans)
    assert not any(offloaded(p.layout) for p in search(cfg, 32, base, H100, None, space=OPEN))


def test_gpus_auto_offloads_only_when_no_count_fits_without():
    cfg, base = load("llama2-70b"), Layout(seq=4096, global_batch=64)
    n, plans = fewest_gpus(cfg, base, H100, None, limit=16, space=OPEN)
    assert n == 16 and not any(offloaded(p.layout) for p in plans)  # not the fewer GPUs offload would take
    n, plans = fewest_gpus(cfg, base, H100, None, limit=8, space=OPEN)
    assert n <= 8 and plans and all(offloaded(p.layout) for p in plans)
    with pytest.raises(InputError, match="no layout of up to 8 GPUs"):
        fewest_gpus(cfg, base, H100, None, limit=8, space=dataclasses.replace(OPEN, offload=False))
