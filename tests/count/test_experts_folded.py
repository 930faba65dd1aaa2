"""Experts folded over TP × CP × DP (``--etp``; tfcalc.count.training.experts_folded): per-rank states, the
all-to-all and the expert-TP gathers, each against a hand derivation; the legacy grid's figures where folding
adds nothing; every hostile layout in one line.

The tiny mixture (TINY below): 2 layers, d_model h = 64, 4 heads and 2 KV heads of 16, 8 experts of hidden
width f = 32 (gated), top-2, vocabulary 128, untied. Its tensors, as stored (tfcalc.count.training.shard):
token embedding 128 × 64 (hidden-split under TP), per layer two norms of 64, fused QKV (4·16 + 2·2·16) × 64 =
128 × 64 (rows split), O 64 × 64 (columns split), router 8 × 64 (whole), per expert gate+up 64 × 64 and down
64 × 32 = 6,144; the final norm 64 and the LM head 128 × 64 (vocabulary split).

TP rank 0 of tp 2, without the experts: embedding 4,096 + LM head 4,096 + final norm 64 + 2 layers ×
(64 + 64 + 4,096 + 2,048 + 512) = 21,824 parameters. Experts: 6,144 × (8 / E) per layer, halved again by ETP 2.
"""

import dataclasses
import time

import pytest

from tfcalc.count.model.flops import matmul_entries
from tfcalc.count.training import rank_memory as rm
from tfcalc.count.training.experts_folded import expert_data_ranks, resolve_fold
from tfcalc.count.training.layout import check_layout
from tfcalc.count.training.micro_batch_time import tp_shape
from tfcalc.count.training.plan import make_plan
from tfcalc.count.training.steptime import Hardware, group_in_node, group_nodes
from tfcalc.errors import InputError
from tfcalc.presets import load
from tfcalc.workload import Layout

H100 = Hardware(989e12, 80 * 10**9, 450e9, 50e9, 8)
TINY_SET = ["n_layer=2", "d_model=64", "n_head=4", "n_kv_head=2", "d_head=16", "d_ff=32", "n_expert=8",
            "n_expert_active=2", "vocab_size=128", "max_seq_len=256"]
DENSE_TP2 = 4096 + 4096 + 64 + 2 * (64 + 64 + 4096 + 2048 + 512)  # 21,824 (module docstring)
EXPERT = 64 * 64 + 64 * 32  # 6,144 per expert


def tiny():
    return load("mixtral-8x7b", TINY_SET)


def layout(**changes) -> Layout:
    fields = dict(tp=2, pp=1, dp=2, seq=128, global_batch=4, micro_batch=1, sequence_parallel=True, etp=1)
    fields.update(changes)
    return Layout(**fields)


def by(plan, cause, op):
    (c,) = [c for c in plan.collectives if (c.cause, c.op) == (cause, op)]
    return c


def test_the_hand_count_of_the_dense_share_holds_on_the_unfolded_plan():
    """The docstring's 21,824 is what the plan counts for TP rank 0 at tp 2 without the routed experts."""
    cfg = tiny()
    psi = rm.stage_params(cfg, layout(etp=None, sequence_parallel=False), 0)
    assert psi - rm.stage_expert_params(cfg, layout(etp=None, sequence_parallel=False), 0) == DENSE_TP2
    assert rm.stage_expert_params(cfg, layout(etp=None, sequence_parallel=False), 0) == 2 * 8 * EXPERT


@pytest.mark.parametrize("ep, etp, experts_per_layer, edp", [
    (4, 1, 2 * EXPERT, 1),       # EP 4 = TP 2 × DP 2: 2 experts whole, each held once
    (2, 2, 4 * EXPERT // 2, 1),  # 4 experts, each split over 2 ETP ranks
    (2, 1, 4 * EXPERT, 2),       # 4 experts whole, replicated over 2 ranks
    (1, 2, 8 * EXPERT // 2, 2),  # every expert, split 2 ways, replicated over 2
])
def test_per_rank_expert_states_by_hand(ep, etp, experts_per_layer, edp):
    """Ψ = 21,824 + 2 layers × the rank's experts; ZeRO-0 holds 2 + 2 + 12 bytes each; the distributed optimizer
    (ZeRO-1) splits the dense 12 bytes over dp = 2 and the experts' over EDP = tp·dp / (EP·ETP)."""
    cfg = tiny()
    L = layout(ep=ep, etp=etp)
    check_layout(cfg, L)
    assert expert_data_ranks(L) == edp
    experts = 2 * experts_per_layer
    psi, w, g, o = rm.model_states(cfg, L, 0)
    assert psi == DENSE_TP2 + experts
    assert (w, g, o) == (2 * psi, 2 * psi, 12 * psi)
    z1 = rm.model_states(cfg, dataclasses.replace(L, zero=1), 0)
    assert z1 == (psi, 2 * psi, 2 * psi, 12 * (DENSE_TP2 // 2 + experts // edp))
    z3 = rm.model_states(cfg, dataclasses.replace(L, zero=3), 0)[1]  # FSDP2: every tensor's dim-0 rows over its group
    assert z3 == 2 * (DENSE_TP2 // 2 + experts // edp)


def test_the_all_to_all_and_expert_tp_gathers_by_hand():
    """EP 2 × ETP 2 on tp 2 × dp 2, SP, m = 4 / (2 × 1) = 2 micro-batches. A rank routes T_r = 128 / 2 = 64
    tokens, k = 2 copies each, h = 64, bf16 (e = 2). Per MoE layer and micro-batch: 4 all-to-alls of
    64·2·64·2 = 16,384 bytes (65,536), and over ETP 2 all-gathers and 2 reduce-scatters of ETP × 16,384 = 32,768
    bytes each (65,536 per op); 2 layers × 2 micro-batches: 262,144 bytes per op. The counts: 8 int64 per
    layer and micro-batch = 64 × 4 = 256 bytes."""
    plan = make_plan(tiny(), layout(ep=2, etp=2), H100, None)
    a2a = by(plan, "ep_tokens", "all_to_all")
    assert (a2a.group, a2a.group_size, a2a.payload_bytes, a2a.calls) == ("ep", 2, 262_144, 2 * 2 * 4)
    assert a2a.sent_bytes == 262_144 // 2  # (E − 1)/E leaves the rank
    assert by(plan, "ep_counts", "all_to_all").payload_bytes == 256
    for op in ("all_gather", "reduce_scatter"):
        c = by(plan, "etp_tokens", op)
        assert (c.group, c.group_size, c.payload_bytes, c.calls) == ("etp", 2, 262_144, 2 * 2 * 2)
        assert c.sent_bytes == 131_072


def test_ep_over_tp_and_dp_sends_a_shard_not_a_copy():
    """EP 4 = TP 2 × DP 2: each rank's 64 tokens, 4 × 64·2·64·2 per layer and micro-batch, 2 × 2 of them:
    262,144 bytes; no ETP collective; the experts' gradients are not reduced (EDP 1); the routers' 2 × 512
    gradients are partial over TP (each routes its shard) and all-reduced with the norms' (5 × 64)."""
    plan = make_plan(tiny(), layout(ep=4), H100, None)
    assert by(plan, "ep_tokens", "all_to_all").payload_bytes == 262_144
    assert not [c for c in plan.collectives if c.cause in ("etp_tokens", "expert_grads")]
    assert by(plan, "tp_norm_grads", "all_reduce").payload_bytes == 2 * (2 * 512 + 5 * 64)
    assert by(plan, "dp_grads", "all_reduce").payload_bytes == 2 * DENSE_TP2  # the dense tensors over dp 2


def test_expert_grads_reduce_over_the_expert_data_parallel_group():
    """EP 2, ETP 1 on tp 2 × dp 2: EDP 2. ZeRO-1 reduce-scatters the 2 layers × 4 experts × 6,144 = 49,152
    expert parameters' bf16 gradients over those 2 ranks, and the dense 21,824 over dp 2."""
    plan = make_plan(tiny(), layout(ep=2, zero=1), H100, None)
    rs = by(plan, "expert_grads", "reduce_scatter")
    assert (rs.group, rs.group_size, rs.payload_bytes) == ("edp", 2, 2 * 49_152)
    assert by(plan, "dp_grads", "reduce_scatter").payload_bytes == 2 * DENSE_TP2


def test_expert_flops_per_rank_are_one_tp_th_of_the_replicated_experts():
    """Folded, a rank multiplies its shard's routed rows (T·k / tp), ETP-gathered (× etp) at 1/etp of the width:
    the grouped GEMM's FLOPs, 2·rows·k·n·count, are 1/tp of the legacy grid's (every TP rank all T·k rows)."""
    cfg = tiny()
    for e in (e for e in matmul_entries(cfg, 1, 128) if e.component.startswith("expert_")):
        legacy = tp_shape(e, 2, 4)
        for etp, local in ((1, 4), (2, 4)):
            m, k, n, count = tp_shape(e, 2, local, (2, etp))
            assert 2 * 2 * m * k * n * count == 2 * legacy[0] * legacy[1] * legacy[2] * legacy[3]


def test_the_folded_step_is_faster_than_replicated_experts_and_slower_than_nothing():
    """Same GPUs, tp 2 × dp 4, EP 4: the legacy grid runs every TP rank's experts on all tokens; folded they
    run on the shard (half the expert FLOPs, half the all-to-all bytes)."""
    cfg = load("qwen3-30b-a3b")
    base = Layout(tp=2, dp=4, ep=4, seq=4096, global_batch=32, micro_batch=1)
    legacy = make_plan(cfg, base, H100, None)
    fold = make_plan(cfg, dataclasses.replace(base, etp=1, sequence_parallel=True), H100, None)
    assert by(fold, "ep_tokens", "all_to_all").payload_bytes * 2 == by(legacy, "ep_tokens", "all_to_all").payload_bytes
    assert fold.step.overlap_s < legacy.step.overlap_s


def test_qwen3_235b_ep_32_over_tp_2_dp_16_can_be_said():
    """Megatron's "EP 32 = TP 2 × DP 16" (moe/README.md, MoE Parallel Folding): 128 experts / 32 = 4 a rank,
    each 3 × 4,096 × 1,536 (gate, up, down), 94 layers; each expert held once (EDP 1)."""
    cfg = load("qwen3-235b-a22b")
    L = resolve_fold(True, Layout(tp=2, dp=16, ep=32, seq=4096, global_batch=64, sequence_parallel=True))
    assert L.etp == 1 and expert_data_ranks(L) == 1
    check_layout(cfg, L)
    assert rm.stage_expert_params(cfg, L, 0) == 94 * 4 * 3 * 4096 * 1536
    plan = make_plan(cfg, L, H100, None)
    assert by(plan, "ep_tokens", "all_to_all").group_size == 32


def test_groups_follow_the_expert_rank_order():
    """etp-ep-edp (Megatron-Core's expert grid): EP 16 × ETP 2 spans 32 consecutive ranks (4 nodes of 8) with
    4 EP ranks a node (2 apart); the ETP pair is adjacent; EDP strides 32."""
    L = layout(tp=4, dp=16, ep=16, etp=2)
    assert not group_in_node("ep", L, 8) and group_nodes("ep", L, 8, 16) == 4
    assert group_in_node("etp", L, 8)
    assert group_nodes("edp", L, 8, expert_data_ranks(L)) == 2


def test_folding_is_implied_only_where_the_legacy_grid_cannot_say_it():
    moe = True
    assert resolve_fold(moe, layout(etp=None, sequence_parallel=False, tp=1, dp=4, ep=2)).etp is None
    assert resolve_fold(moe, layout(etp=None, sequence_parallel=False, tp=2, dp=2, ep=4)).etp == 1
    assert resolve_fold(moe, layout(etp=None, sequence_parallel=False, tp=2, dp=2, ep=3)).etp is None
    assert resolve_fold(moe, layout(etp=None, tp=2, dp=2, ep=2)).etp == 1  # --sp with experts
    assert resolve_fold(False, layout(etp=None, tp=2, dp=2)).etp is None  # a dense model keeps its SP


def test_at_tp_1_folding_changes_no_figure():
    """tp 1, EP within DP: the folded grid is the legacy one (EP ranks adjacent, EDP = dp / EP)."""
    cfg = tiny()
    old = make_plan(cfg, layout(tp=1, dp=4, ep=2, etp=None, sequence_parallel=False, zero=1, global_batch=8), H100,
                    None)
    new = make_plan(cfg, dataclasses.replace(old.layout, etp=1), H100, None)
    assert old.memory == new.memory
    assert [dataclasses.astuple(c) for c in old.collectives] == [dataclasses.astuple(c) for c in new.collectives]
    assert old.step.overlap_s == pytest.approx(new.step.overlap_s, rel=1e-12)


@pytest.mark.parametrize("changes, message", [
    (dict(etp=0), "--etp must be a positive integer"),
    (dict(etp=-2), "--etp must be a positive integer"),
    (dict(etp=True), "--etp must be a positive integer"),
    (dict(etp=1.5), "--etp must be a positive integer"),
    (dict(ep=4, etp=2), "--ep 4 × --etp 2 = 8 must divide tp × cp × dp = 4"),
    (dict(etp=3), "must divide tp × cp × dp = 4"),
    (dict(ep=3), "does not divide the 8 routed experts"),
    (dict(tp=1, dp=64, ep=1, etp=64, sequence_parallel=False, global_batch=64),
     "does not divide the experts' hidden width (32)"),
    (dict(ep=2, sequence_parallel=False), "need --sp"),
    (dict(ep=2, zero=3, hsdp=2, dp=4, global_batch=8), "--hsdp with experts folded"),
])
def test_hostile_folded_layouts_are_one_line(changes, message):
    with pytest.raises(InputError, match=None) as err:
        check_layout(tiny(), layout(**changes))
    assert message in str(err.value) and "\n" not in str(err.value)


def test_etp_on_a_dense_model_is_one_line():
    with pytest.raises(InputError, match="is dense"):
        check_layout(load("gpt2"), Layout(tp=2, dp=2, seq=128, global_batch=4, sequence_parallel=True, etp=1))


def test_sp_with_replicated_experts_still_asks_for_folding():
    with pytest.raises(InputError, match="give --etp"):
        check_layout(tiny(), layout(etp=None))


# The legacy grid's figures as tfcalc computed them before folding existed (main at 5baff0a, H100 hardware above):
# the model states (Ψ, weights, grads, optimizer bytes) and each collective's payload. Folding must move none.
LEGACY = [
    ('mixtral-8x7b', {'tp': 1, 'dp': 8, 'ep': 4, 'seq': 4096, 'global_batch': 16, 'zero': 1},
     (12879925248, 25759850496, 25759850496, 70054189056),
     {'dp_grads_reduce_scatter': 3211272192,
      'zero_params_all_gather': 3211272192,
      'expert_grads_reduce_scatter': 22548578304,
      'expert_params_all_gather': 22548578304,
      'ep_counts_all_to_all': 4096,
      'ep_tokens_all_to_all': 17179869184}),
    ('mixtral-8x7b', {'tp': 2, 'dp': 4, 'ep': 2, 'seq': 4096, 'global_batch': 16, 'zero': 3},
     (23352053760, 22950316032, 22950316032, 137701896192),
     {'zero_params_all_gather': 11806998528,
      'dp_grads_reduce_scatter': 6427803648,
      'expert_params_all_gather': 360777252864,
      'expert_grads_reduce_scatter': 180388626432,
      'tp_activations_all_reduce': 8724152320,
      'tp_activations_all_gather': 134217728,
      'tp_loss_all_reduce': 196608,
      'ep_counts_all_to_all': 8192,
      'ep_tokens_all_to_all': 34359738368}),
    ('qwen3-30b-a3b', {'tp': 2, 'dp': 8, 'ep': 8, 'seq': 4096, 'global_batch': 32, 'zero': 1, 'pp': 2},
     (2200410112, 4400820224, 4400820224, 22325978112),
     {'dp_grads_reduce_scatter': 776941568,
      'zero_params_all_gather': 776941568,
      'tp_activations_all_reduce': 3221225472,
      'tp_activations_all_gather': 67108864,
      'ep_counts_all_to_all': 98304,
      'ep_tokens_all_to_all': 32221414643}),
    ('deepseek-v3', {'tp': 2, 'dp': 64, 'ep': 64, 'pp': 8, 'seq': 4096, 'global_batch': 1024, 'zero': 1},
     (2409234432, 4818468864, 4818468864, 17098924032),
     {'dp_grads_reduce_scatter': 1999896576,
      'zero_params_all_gather': 1999896576,
      'tp_activations_all_reduce': 30064771072,
      'ep_counts_all_to_all': 262144,
      'ep_tokens_all_to_all': 316436966300}),
    ('deepseek-v3', {'tp': 1,
 'dp': 32,
 'ep': 32,
 'pp': 16,
 'seq': 4096,
 'global_batch': 512,
 'zero': 1,
 'ep_dispatch': 'deepep',
 'compute_dtype': 'fp8'},
     (2341273600, 4682547200, 4682547200, 17260929024),
     {'dp_grads_reduce_scatter': 1863974912,
      'zero_params_all_gather': 1863974912,
      'ep_counts_all_to_all': 131072,
      'ep_tokens_all_to_all': 92604413543}),
    ('qwen3-30b-a3b', {'tp': 1, 'dp': 8, 'seq': 4096, 'global_batch': 32, 'zero': 2},
     (30532122624, 61064245248, 7633030656, 45798183936),
     {'dp_grads_reduce_scatter': 244256980992, 'zero_params_all_gather': 61064245248}),
    ('qwen3-30b-a3b', {'tp': 4, 'dp': 2, 'cp': 2, 'seq': 8192, 'global_batch': 16, 'zero': 1},
     (29385897984, 58771795968, 58771795968, 88157693952),
     {'dp_grads_reduce_scatter': 58771795968,
      'zero_params_all_gather': 58771795968,
      'tp_activations_all_reduce': 13019119616,
      'tp_activations_all_gather': 134217728,
      'tp_loss_all_reduce': 393216}),
    ('llama2-7b', {'tp': 2, 'dp': 4, 'seq': 4096, 'global_batch': 32, 'zero': 1, 'sequence_parallel': True},
     (3369340928, 6738681856, 6738681856, 10108022784),
     {'dp_grads_reduce_scatter': 6738681856,
      'zero_params_all_gather': 6738681856,
      'tp_activations_all_gather': 35165044736,
      'tp_activations_reduce_scatter': 34628173824,
      'tp_loss_all_reduce': 393216,
      'tp_norm_grads_all_reduce': 532480}),
    ('mixtral-8x7b', {'tp': 2, 'dp': 8, 'ep': 8, 'seq': 4096, 'global_batch': 64, 'zero': 0, 'overlap': ('ep',)},
     (6440620032, 12881240064, 12881240064, 77287440384),
     {'dp_grads_all_reduce': 1606950912,
      'tp_activations_all_reduce': 17448304640,
      'tp_activations_all_gather': 268435456,
      'tp_loss_all_reduce': 393216,
      'ep_counts_all_to_all': 16384,
      'ep_tokens_all_to_all': 78536544841}),
]


@pytest.mark.parametrize("name, fields, states, payloads", LEGACY, ids=[f"{n}-{i}" for i, (n, *_) in enumerate(LEGACY)])
def test_the_legacy_grid_figures_are_unchanged(name, fields, states, payloads):
    cfg = load(name)
    plan = make_plan(cfg, Layout(micro_batch=1, **fields), H100, None)
    assert (plan.memory.params, plan.memory.weights, plan.memory.grads, plan.memory.optimizer) == states
    assert {c.key: c.payload_bytes for c in plan.collectives if c.key in payloads} == payloads




def test_a_folded_search_over_16384_gpus_is_fast():
    """`plan --gpus 16384 --etp 1` (the experts folded, SP tried for them; the legacy grid's memory bound is
    not used): Qwen3-30B-A3B under the issue's 2 s, with the margin and the warm caches of the dense search's
    test (tests/count/test_pipeline_schedules.py)."""
    import tfcalc

    tfcalc.plan("qwen3-30b-a3b", gpus=64, seq=4096, etp=1)
    start = time.process_time()
    r = tfcalc.plan("qwen3-30b-a3b", gpus=16384, seq=4096, etp=1)
    assert time.process_time() - start < 2.0 * 0.75
    layouts = [p.layout for p in r.candidates]
    assert layouts and all(L.etp == 1 for L in layouts)
    assert all(L.sequence_parallel for L in layouts if L.tp > 1)


def test_context_parallel_ranks_fold_into_the_expert_grid():
    """tp 1 × cp 2 × dp 2, EP 4 (the legacy grid has no EP under CP: folding is implied, ETP 1, EDP 1). A rank
    routes its s/C = 64 positions: 4 × 64·2·64·2 bytes per layer and micro-batch, m = 4 / 2 = 2, 2 layers."""
    cfg = tiny()
    L = resolve_fold(True, layout(tp=1, cp=2, dp=2, ep=4, etp=None, sequence_parallel=False))
    assert L.etp == 1 and expert_data_ranks(L) == 1
    plan = make_plan(cfg, L, H100, None)
    assert by(plan, "ep_tokens", "all_to_all").payload_bytes == 2 * 2 * 4 * 64 * 2 * 64 * 2
    # the dense tensors whole at tp 1 (8,192 + 8,192 + 64 + 2 × (64 + 64 + 8,192 + 4,096 + 512) = 42,304) reduce
    # over dp·cp = 4 ranks in bf16; the experts' not at all (EDP 1)
    dp = by(plan, "dp_grads", "all_reduce")
    assert (dp.group_size, dp.payload_bytes) == (4, 2 * 42_304)
    assert not [c for c in plan.collectives if c.cause == "expert_grads"]
