"""Sharding variants of a plan (issue 20, tfcalc.count.training.sharding, experts_parallel): expert parallelism, an fp32
gradient buffer, HSDP, FSDP without resharding after forward -- each against a hand derivation or a published
table, and each variant's hostile values."""

import dataclasses

import pytest

from tfcalc.count.training import rank_memory as rm
from tfcalc.count.training.layout import Layout, check_layout
from tfcalc.count.training.plan import make_plan, search
from tfcalc.count.training.steptime import Hardware
from tfcalc.errors import InputError
from tfcalc.presets import load

H100 = Hardware(989e12, 80 * 10**9, 450e9, 50e9, 8)
PSI_7B = 6_738_415_616


def layout(**changes) -> Layout:
    fields = dict(tp=1, pp=1, dp=1, seq=4096, global_batch=8, micro_batch=1)
    fields.update(changes)
    return Layout(**fields)


def by(plan, cause, op):
    (c,) = [c for c in plan.collectives if (c.cause, c.op) == (cause, op)]
    return c


# ---------- --grad-dtype fp32: Megatron Core's distributed-optimizer table ----------


@pytest.mark.parametrize("zero, per_param_times_8", [(0, 18 * 8), (1, 6 * 8 + 12)])
def test_fp32_grads_beside_bf16_weights_are_megatrons_18_and_6_plus_12_over_d(zero, per_param_times_8):
    """docs.nvidia.com/megatron-core/developer-guide/latest/distrib_optimizer.html: "float16 param, fp32 grads":
    18 bytes per parameter, 6 + 12/d with the distributed optimizer; d = 8 here, Ψ divisible by 8."""
    cfg = load("llama2-7b")
    psi, w, g, o = rm.model_states(cfg, layout(dp=8, zero=zero, grad_dtype="fp32"), 0)
    assert psi == PSI_7B and g == 4 * PSI_7B
    assert 8 * (w + g + o) == per_param_times_8 * PSI_7B


def test_fp32_grads_are_reduced_in_fp32_and_gathered_in_bf16():
    cfg = load("llama2-7b")
    ddp = make_plan(cfg, layout(dp=8, grad_dtype="fp32"), H100, None)
    assert by(ddp, "dp_grads", "all_reduce").payload_bytes == 4 * PSI_7B
    z1 = make_plan(cfg, layout(dp=8, zero=1, grad_dtype="fp32"), H100, None)
    assert by(z1, "dp_grads", "reduce_scatter").payload_bytes == 4 * PSI_7B
    assert by(z1, "zero_params", "all_gather").payload_bytes == 2 * PSI_7B


# ---------- --ep E ----------

MIXTRAL_EXPERT_PARAMS = 32 * 8 * 3 * 4096 * 14336  # 32 layers × 8 experts × (gate, up, down) of 4096 × 14336


@pytest.mark.parametrize("ep", [2, 4, 8])
def test_ep_splits_the_routed_experts_and_nothing_else(ep):
    cfg = load("mixtral-8x7b")
    whole = rm.model_states(cfg, layout(dp=8), 0)[0]
    psi, w, g, o = rm.model_states(cfg, layout(dp=8, ep=ep), 0)
    assert psi == whole - MIXTRAL_EXPERT_PARAMS + MIXTRAL_EXPERT_PARAMS // ep
    assert (w, g, o) == (2 * psi, 2 * psi, 12 * psi)
    # ZeRO-1: the dense states over dp, the experts' over dp/ep -- in all the same share as without EP
    z1 = rm.model_states(cfg, layout(dp=8, ep=ep, zero=1), 0)[3]
    assert z1 == 12 * ((whole - MIXTRAL_EXPERT_PARAMS) // 8 + MIXTRAL_EXPERT_PARAMS // ep // (8 // ep))


def test_ep_all_to_all_bytes_by_hand():
    """Per MoE layer and micro-batch: dispatch and combine forward, their gradients backward, each T·k·h·e bytes
    (T = 1 × 4096 tokens, k = 2, h = 4096, bf16); and one exchange of n_expert int64 counts."""
    cfg = load("mixtral-8x7b")
    L = layout(dp=8, ep=4, global_batch=16)  # m = 2 micro-batches
    plan = make_plan(cfg, L, H100, None)
    tokens = by(plan, "ep_tokens", "all_to_all")
    assert (tokens.group, tokens.group_size, tokens.calls) == ("ep", 4, 2 * 32 * 4)
    assert tokens.payload_bytes == 2 * 32 * 4 * (4096 * 2 * 4096 * 2)
    assert tokens.sent_bytes == tokens.payload_bytes * 3 // 4
    counts = by(plan, "ep_counts", "all_to_all")
    assert (counts.payload_bytes, counts.calls) == (2 * 32 * 8 * 8, 2 * 32)
    # expert gradients reduced over the dp/ep = 2 ranks holding the same experts, the rest over all 8
    assert by(plan, "expert_grads", "all_reduce").group_size == 2
    assert by(plan, "dp_grads", "all_reduce").group_size == 8
    # α-β on NVLink (4 ranks in a node), not overlapped: m·(m+p−1)/m = 1 here
    a2a = sum(c.calls * 3 * H100.perf.link_latency_s["nvlink"] + c.sent_bytes / (450e9 * 0.8)
              for c in (tokens, counts))
    assert plan.step.comm_s["ep"] == pytest.approx(a2a)
    assert plan.step.exposed_s["ep"] == pytest.approx(a2a)


def test_ep_equal_to_dp_leaves_the_experts_no_gradient_reduction():
    plan = make_plan(load("mixtral-8x7b"), layout(dp=8, ep=8), H100, None)
    assert not [c for c in plan.collectives if c.cause.startswith("expert_")]


def test_ep_runs_larger_expert_gemms_no_slower():
    """Each rank's n_expert/ep experts take ep × the rows: the same FLOPs in fewer, larger GEMMs."""
    cfg = load("mixtral-8x7b")
    one, eight = (make_plan(cfg, layout(dp=8, ep=ep), H100, None).step for ep in (1, 8))
    assert eight.executed_flops == one.executed_flops
    assert eight.compute_s <= one.compute_s


def test_ep_zero3_shards_experts_over_their_replicas():
    cfg = load("mixtral-8x7b")
    plan = make_plan(cfg, layout(dp=8, ep=2, zero=3), H100, None)
    gathers = by(plan, "expert_params", "all_gather")
    assert gathers.group_size == 4
    # m = 1: 2 gathers per MoE block (resharded after forward), each gathering the rank's experts, bf16
    assert gathers.calls == 2 * 32
    assert gathers.payload_bytes == 2 * 2 * MIXTRAL_EXPERT_PARAMS // 2


def test_search_of_a_mixture_uses_expert_parallelism():
    cfg = load("mixtral-8x7b")
    base = layout(seq=4096, global_batch=512)
    plans = search(cfg, 64, base, H100, None)
    assert plans and any(p.layout.ep > 1 for p in plans)
    assert all(p.layout.ep == 1 for p in search(load("llama2-7b"), 16, base, H100, None))


@pytest.mark.parametrize("preset, changes, message", [
    ("llama2-7b", dict(dp=8, ep=2), "dense"),
    ("mixtral-8x7b", dict(dp=6, ep=3, global_batch=6), "does not divide the 8 routed experts"),
    ("mixtral-8x7b", dict(dp=2, ep=4), "ep must divide dp"),
    ("mixtral-8x7b", dict(dp=8, ep=0), "--ep must be a positive integer"),
    ("mixtral-8x7b", dict(dp=8, ep=True), "--ep must be a positive integer"),
    ("mixtral-8x7b", dict(dp=8, ep=2, zero=3, hsdp=2), "not modelled"),
    ("llama2-7b", dict(dp=8, grad_dtype="fp16"), "--grad-dtype must be fp32"),
    ("llama2-7b", dict(dp=8, grad_dtype="fp32", dtype="fp32"), "fp32 gradients already"),
    ("llama2-7b", dict(dp=8, hsdp=2), "needs --zero 3"),
    ("llama2-7b", dict(dp=8, hsdp=3, zero=3), "must divide dp"),
    ("llama2-7b", dict(dp=8, hsdp=8, zero=3), "plain FSDP"),
    ("llama2-7b", dict(dp=8, hsdp=0, zero=3), "--hsdp must be a positive integer"),
    ("llama2-7b", dict(dp=8, reshard_after_forward=False), "needs --zero 3"),
    ("llama2-7b", dict(dp=8, reshard_after_forward="no", zero=3), "True or False"),
])
def test_hostile_sharding(preset, changes, message):
    with pytest.raises(InputError, match=message.replace("(", r"\(").replace("[", r"\[")):
        check_layout(load(preset), layout(**changes))


# ---------- --hsdp R and --no-reshard-after-forward ----------


def test_hsdp_holds_what_fsdp_over_r_ranks_holds_and_all_reduces_the_shard_across_replicas():
    cfg = load("llama2-7b")
    hsdp = make_plan(cfg, layout(dp=8, zero=3, hsdp=2), H100, None)
    fsdp2 = make_plan(cfg, layout(dp=2, zero=3, global_batch=2), H100, None)  # the same m = 1
    assert dataclasses.astuple(hsdp.memory) == dataclasses.astuple(fsdp2.memory)
    for cause, op in (("zero_params", "all_gather"), ("dp_grads", "reduce_scatter")):
        mine, theirs = by(hsdp, cause, op), by(fsdp2, cause, op)
        assert (mine.group, mine.group_size) == ("dp_shard", 2)
        assert (mine.payload_bytes, mine.calls) == (theirs.payload_bytes, theirs.calls)
    across = by(hsdp, "dp_grads", "all_reduce")
    assert (across.group, across.group_size) == ("dp_replicate", 4)
    assert across.payload_bytes == by(fsdp2, "dp_grads", "reduce_scatter").payload_bytes // 2  # one rank's shard
    assert across.calls == by(fsdp2, "dp_grads", "reduce_scatter").calls


def test_no_reshard_after_forward_gathers_each_block_once_and_keeps_the_stage_gathered():
    cfg = load("llama2-7b")  # 32 blocks and the root; m = 1
    again = make_plan(cfg, layout(dp=8, zero=3), H100, None)
    kept = make_plan(cfg, layout(dp=8, zero=3, reshard_after_forward=False), H100, None)
    assert by(again, "zero_params", "all_gather").calls == 2 * 32 + 1
    assert by(kept, "zero_params", "all_gather").calls == 32 + 1
    root = 2 * 32000 * 4096 + 4096  # embedding, head, final norm: gathered once either way
    shard_bytes = (by(again, "zero_params", "all_gather").payload_bytes - 2 * root) // 2  # one pass over the blocks
    assert by(kept, "zero_params", "all_gather").payload_bytes == shard_bytes + 2 * root
    assert kept.memory.gathered == 2 * PSI_7B > again.memory.gathered
    assert by(kept, "dp_grads", "reduce_scatter") == by(again, "dp_grads", "reduce_scatter")


def test_ep_zero3_gathers_the_experts_as_a_unit_of_their_own():
    """FSDP2 units under EP: a block's dense tensors, and its routed experts (EP rank 0's 4 of 8) apart;
    2 × the largest unit is gathered at once: here the experts, 4 × 3 × 4096 × 14336, bf16."""
    cfg = load("mixtral-8x7b")
    plan = make_plan(cfg, layout(dp=8, ep=2, zero=3), H100, None)
    assert plan.memory.gathered == 2 * 2 * (4 * 3 * 4096 * 14336)
    whole = make_plan(cfg, layout(dp=8, zero=3), H100, None)  # without EP: one unit per block, all 8 experts
    assert whole.memory.gathered == 2 * 2 * (8 * 3 * 4096 * 14336 + 6144 * 4096 + 4096 * 4096 + 2 * 4096 + 8 * 4096)


def test_the_auto_search_floor_stays_below_an_expert_parallel_layout():
    """--gpus auto stops at once when no layout can fit (tfcalc.count.training.plan.rank_floor): with expert parallelism
    the floor must count the experts split, or it would refuse MoE models that fit. Mixtral with 64 experts: one
    block's experts are 11.3B parameters (22.5 GB whole), one expert over 64 EP ranks 0.18B."""
    from tfcalc.config import replace
    from tfcalc.count.training.plan import rank_floor

    cfg = replace(load("mixtral-8x7b"), n_expert=64)
    base = layout(seq=4096, global_batch=64, recompute="full")
    # one block per stage, one expert of it per rank: a few GB, below the 22.5 GB of one block's experts whole
    ep = make_plan(cfg, layout(pp=32, dp=64, ep=64, seq=4096, global_batch=64, recompute="full"), H100, None)
    assert ep.fits and rank_floor(cfg, base, 8) <= ep.memory.total < 2 * 64 * 3 * 4096 * 14336
