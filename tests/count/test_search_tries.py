"""What the search varies where it applies (tfcalc.count.training.search_space): HSDP and FSDP without resharding on
the ZeRO-3 layouts that fit; offload only where nothing fits without it; FP8 never on its own."""

import dataclasses

import pytest

from tfcalc.count.training.layout import Layout
from tfcalc.count.training.plan import fewest_gpus, search
from tfcalc.count.training.search_space import FIXED, SearchSpace, fsdp_variants
from tfcalc.count.training.steptime import Hardware
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


# ---------- ZeRO-1/2: a call per bucket ----------


def test_flat_zero_reduce_scatters_and_gathers_a_call_per_bucket():
    """Megatron-Core's buckets of max(40M, 1M × dp) parameters for ZeRO-1 (per step), DeepSpeed's 5e8
    elements for ZeRO-2 (per micro-batch); the bytes are the flat buffer's whatever the buckets."""
    from tfcalc.count.training.comm import step_collectives
    from tfcalc.count.training.rank_memory import rank_memory

    cfg = load("llama2-70b")
    psi = 68_976_648_192
    for zero, dp, bucket in ((1, 8, 40_000_000), (1, 64, 64_000_000), (2, 8, 500_000_000)):
        L = Layout(dp=dp, zero=zero, seq=4096, global_batch=4 * dp)  # m = 4 micro-batches
        mem = rank_memory(cfg, L)
        by = {(c.cause, c.op): c for c in step_collectives(cfg, L, mem.stage, mem.params)}
        flat = dp * -(-psi // dp)
        buckets = -(-flat // bucket)
        rs, ag = by["dp_grads", "reduce_scatter"], by["zero_params", "all_gather"]
        assert rs.calls == (1 if zero == 1 else 4) * buckets and ag.calls == buckets
        assert rs.payload_bytes == (1 if zero == 1 else 4) * 2 * flat and ag.payload_bytes == 2 * flat
    assert buckets == 138  # ZeRO-2: ⌈68,976,648,192 / 5e8⌉
