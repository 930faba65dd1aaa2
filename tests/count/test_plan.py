"""Parallel plans, the arithmetic (tfcalc.count.training.shard, layout, rank_memory, comm, steptime, plan): the
hand-worked figures of ZeRO, Megatron and Korthikanti et al., the conventions, the search, hostile layouts."""

import dataclasses
import math

import pytest
from conftest import tiny

from tfcalc.count.model.flops import training_flops
from tfcalc.count.model.params import total
from tfcalc.count.perf.slowest_rank import expected_max, sigma
from tfcalc.count.training import comm, rank_memory as rm, shard
from tfcalc.count.training.layout import Layout, check_layout, resolve_degrees
from tfcalc.count.training.plan import fewest_gpus, make_plan, search
from tfcalc.count.training.steptime import (
    Hardware,
    bubble_fraction,
    chinchilla_tokens,
    collective_seconds,
    parse_count,
    training_run,
)
from tfcalc.errors import InputError
from tfcalc.presets import load
from tfcalc.workload import Workload

H100 = Hardware(989e12, 80 * 10**9, 450e9, 50e9, 8)  # the test's own numbers, not the device table
PSI_7B = 6_738_415_616


def layout(**changes) -> Layout:
    fields = dict(tp=1, pp=1, dp=1, seq=4096, global_batch=8, micro_batch=1)
    fields.update(changes)
    return Layout(**fields)


# ---------- ZeRO, hand-worked (Rajbhandari et al. 2020, sec. 3.1; reference.md) ----------


@pytest.mark.parametrize("zero, expected", [(0, 107_814_649_856), (1, 37_061_285_888), (2, 25_269_058_560),
                                            (3, 13_476_831_232)])
def test_llama2_7b_model_states_on_8_ranks(zero, expected):
    cfg = load("llama2-7b")
    assert total(cfg) == PSI_7B
    psi, w, g, o = rm.model_states(cfg, layout(dp=8, zero=zero), 0)
    assert psi == PSI_7B
    assert w + g + o == expected
    assert expected == {0: 16 * PSI_7B, 1: 4 * PSI_7B + 12 * PSI_7B // 8, 2: 2 * PSI_7B + 14 * PSI_7B // 8,
                        3: 16 * PSI_7B // 8}[zero]


def test_fp32_states_are_16_bytes_split_4_4_8():
    cfg = load("llama2-7b")
    psi, w, g, o = rm.model_states(cfg, layout(dtype="fp32"), 0)
    assert (w, g, o) == (4 * psi, 4 * psi, 8 * psi)


def test_ddp_ring_all_reduce_sends_2psi_n_minus_1_over_n_elements():
    cfg, n = load("llama2-7b"), 8
    (c,) = make_plan(cfg, layout(dp=n, zero=0), H100, 0.4).collectives
    assert (c.cause, c.op, c.group_size, c.calls) == ("dp_grads", "all_reduce", n, None)
    assert c.payload_bytes == 2 * PSI_7B  # bf16 gradients
    assert c.sent_bytes == 2 * (2 * PSI_7B * (n - 1) // n)  # 2Ψ(N−1)/N elements of 2 bytes


def test_zero3_sends_3psi_less_the_root_that_fsdp2_gathers_once():
    cfg, n = load("llama2-7b"), 8
    plan = make_plan(cfg, layout(dp=n, zero=3), H100, 0.4)
    root = sum(t.numel for t in shard.module_tensors(cfg) if not t.per_block)
    sent = plan.comm_bytes
    assert sent["zero_params_all_gather"] + sent["dp_grads_reduce_scatter"] == 2 * (3 * PSI_7B - root) * (n - 1) // n
    assert plan.comm_bytes["total"] == sum(c.sent_bytes for c in plan.collectives)


def test_fsdp_pads_each_tensor_to_whole_rows():
    assert shard.fsdp_shard((61, 32), 2) == 31 * 32  # torch.chunk: 31 and 30 rows, both padded to 31
    assert shard.fsdp_shard((5,), 4) == 2
    assert [shard.chunk_rows(61, 2, r) for r in range(2)] == [31, 30]
    assert [shard.chunk_rows(5, 4, r) for r in range(4)] == [2, 2, 1, 0]


# ---------- tensor parallelism ----------


def test_tp_splits_everything_but_norms_and_row_parallel_biases():
    cfg = load("llama2-7b")  # no biases: only the norms stay whole
    norms = (2 * cfg.n_layer + 1) * cfg.d_model
    assert rm.stage_params(cfg, layout(tp=8), 0) == (PSI_7B - norms) // 8 + norms


def test_tp_needs_whole_heads_and_even_ffn():
    with pytest.raises(InputError, match="n_head"):
        check_layout(load("gpt2"), layout(tp=5, seq=1024))
    with pytest.raises(InputError, match="n_kv_head"):
        check_layout(load("llama2-70b"), layout(tp=16))  # 8 KV heads
    with pytest.raises(InputError, match="d_ff"):
        check_layout(tiny(n_head=4, d_ff=6), layout(tp=4, seq=16))


def test_megatron_tp_all_reduces_four_times_per_layer():
    cfg = load("llama2-7b")
    L = layout(tp=8, global_batch=1)
    X = 2 * 4096 * cfg.d_model  # one micro-batch's hidden states, bf16
    keys = {c.key: c for c in comm.tp_collectives(cfg, L, 0)}
    assert keys["tp_activations_all_reduce"].calls == 4 * cfg.n_layer + 1  # + the head's input gradient
    assert keys["tp_activations_all_reduce"].payload_bytes == (4 * cfg.n_layer + 1) * X
    assert keys["tp_activations_all_reduce"].sent_bytes == 2 * 7 * (4 * cfg.n_layer + 1) * X // 8
    assert keys["tp_activations_all_gather"].payload_bytes == X  # the hidden-split embedding's lookups
    assert keys["tp_loss_all_reduce"].payload_bytes == 3 * 4 * 4096  # max, sum of exp, target: fp32 per token
    sp = {c.key: c for c in comm.tp_collectives(cfg, dataclasses.replace(L, sequence_parallel=True), 0)}
    # sequence parallel: each all-reduce becomes an all-gather and a reduce-scatter of the same bytes
    assert sp["tp_activations_reduce_scatter"].sent_bytes + sp["tp_activations_all_gather"].sent_bytes == (
        keys["tp_activations_all_reduce"].sent_bytes + keys["tp_activations_all_gather"].sent_bytes
        + 7 * X // 8)  # + block 0's input gradient, gathered
    assert sp["tp_norm_grads_all_reduce"].calls == 2 * cfg.n_layer + 1
    tied = {c.key: c for c in comm.tp_collectives(load("gpt2"), layout(tp=4, seq=1024, global_batch=1), 0)}
    assert tied["tp_activations_all_reduce"].calls == 4 * 12 + 2  # a vocabulary-parallel embedding all-reduces
    assert "tp_activations_all_gather" not in tied


# ---------- activations (Korthikanti et al. 2022) ----------


@pytest.mark.parametrize("t", [1, 2, 8])
def test_korthikanti_per_layer(t):
    """Korthikanti et al. 2022, Table 2, per layer (16-bit, dropout, scores kept): sbh(10 + 24/t + 5as/(ht))
    with TP, sbh/t·(34 + 5as/h) with SP, 34sbh/t selective, 2sbh full; the plan keeps, beside them, the two
    LayerNorms' fp32 statistics the paper leaves out (8 bytes per token each). b = 2: at b = 1 the math
    path's V is a view that keeps the whole fused QKV output (tests/count/test_memory.py)."""
    cfg = load("gpt3")
    s, b, h, a = 2048, 2, cfg.d_model, cfg.n_head
    stats = 2 * 8 * s * b
    L = layout(tp=t, seq=s, global_batch=b, micro_batch=b, attention="math", dropout=True)

    def per_layer(L):  # a middle stage of one layer, one micro-batch in flight (global batch = micro-batch)
        return rm.stage_activations(cfg, dataclasses.replace(L, pp=cfg.n_layer), 1, 1)

    assert per_layer(L) == s * b * h * 10 + s * b * h * 24 // t + 5 * a * s * s * b // t + stats
    if t > 1:
        sp = dataclasses.replace(L, sequence_parallel=True)
        assert per_layer(sp) == s * b * h * 34 // t + 5 * a * s * s * b // t + stats // t
        selective = dataclasses.replace(sp, recompute="selective")
        assert per_layer(selective) == s * b * h * 34 // t + stats // t
    full = dataclasses.replace(L, recompute="full")
    whole = rm.stage_activations(cfg, dataclasses.replace(full, pp=cfg.n_layer), 1, 1)
    rebuilt = per_layer(L)  # one block rebuilt at a time in the backward pass
    assert whole == 2 * s * b * h + rebuilt


def test_first_pipeline_stage_holds_l_layers_in_flight():
    """1F1B: stage 0 of p keeps p micro-batches of its L/p layers -- L layers' worth (Korthikanti et al.
    2022, sec. 4.2.3); the last stage one micro-batch, plus the head and the loss gradients."""
    cfg = load("gpt3")  # 96 layers, no embedding norm: the first stage keeps nothing outside its blocks
    for p in (2, 4, 8):
        L = layout(pp=p, seq=2048, global_batch=64)
        one = rm.stage_activations(cfg, dataclasses.replace(L, pp=96), 1, 1) // 64  # min(96 - 1, m = 64) in flight
        assert rm.stage_activations(cfg, L, 0, cfg.n_layer // p) == cfg.n_layer * one
        acts = rm.layout_activations(cfg, L)
        last = rm.stage_activations(cfg, L, p - 1, cfg.n_layer // p)
        assert last == cfg.n_layer // p * one + sum(acts.head.values()) + acts.loss_gradients


def test_bubble():
    assert bubble_fraction(1, 8) == 0
    assert bubble_fraction(4, 8) == 3 / 11
    plan = make_plan(load("llama2-7b"), layout(pp=4, global_batch=8), H100, 0.5)
    assert plan.step.pipelined_s == pytest.approx(plan.step.compute_s * 11 / 8)


# ---------- step time and training time ----------


def test_step_time_adds_or_overlaps_communication():
    cfg = load("llama2-7b")
    plan = make_plan(cfg, layout(tp=2, dp=4, zero=1, global_batch=64), H100, None)
    st, m = plan.step, 64 // 4
    assert st.basis == "physics" and st.overlap_s == st.physics_s
    # the slowest of the 8 GPUs' matmuls, in both (tfcalc.count.perf.slowest_rank)
    assert st.slowest_rank_s == pytest.approx(st.matmul_s * sigma(0.08) * expected_max(8))
    assert st.no_overlap_s == pytest.approx(st.pipelined_s + sum(st.comm_s.values()) + st.optimizer_s
                                            + st.slowest_rank_s)
    # TP on every micro-batch's critical path; DP reduction hidden behind the last micro-batch's backward
    # pass (ZeRO-1 accumulates the others), all but what overflows that window and the last 25 MiB bucket
    assert st.exposed_s["tp"] == st.comm_s["tp"]
    assert 0 < st.exposed_s["dp"] <= st.comm_s["dp"]
    # and the compute under the hidden reduction pays for NCCL's SMs (steptime step 5)
    # (and the optimizer step after it: tfcalc.count.perf.optimizer)
    # and in HBM (tfcalc.count.training.overlap_costs: ZeRO-1's flat buffers need no FSDP2 copies)
    assert st.overlap_s == pytest.approx(st.pipelined_s + sum(st.exposed_s.values()) + st.contention_s
                                         + st.hbm_contention_s + st.optimizer_s + st.slowest_rank_s)
    assert st.contention_s > 0 and st.hbm_contention_s > 0 and st.fsdp_copy_s == 0
    assert st.overlap_s < st.no_overlap_s
    assert st.model_flops == training_flops(cfg, Workload(batch=64, seq=4096))
    assert st.compute_s > m * st.matmul_s / m  # the matmuls and the rest
    assert st.mfu == pytest.approx(st.model_flops / (st.overlap_s * 989e12 * 8))


def test_mfu_states_the_end_to_end_mfu():
    """--mfu X: the step time at which model FLOPs / (time × peak × GPUs) is X, whatever the bubble and
    communication (issue 20: `--mfu 0.4` printed 25.8 % for Llama 3 405B)."""
    cfg = load("llama2-7b")
    L = layout(tp=8, pp=4, dp=2, global_batch=64)
    st = make_plan(cfg, L, H100, 0.43).step
    assert st.basis == "mfu" and st.mfu == pytest.approx(0.43)
    assert st.overlap_s == pytest.approx(st.model_flops / (0.43 * 989e12 * 64))
    assert st.physics_s == make_plan(cfg, L, H100, None).step.overlap_s  # the model's own prediction kept beside


def test_tp_across_nodes_uses_the_network():
    """Per collective, NCCL's cost model (tfcalc.count.perf.collectives.nccl_call) on the blocks' TP
    (sequence-parallel) all-gathers and reduce-scatters of 31.5 MB a call: across 2 nodes (16 ranks, 8 a
    node) ring Simple, 8.4 µs + 14 NVLink steps of 3.4 µs + 1 network step of 9.6 µs, the bytes sent over
    the bus of the 8 NICs a node's 8 ranks drive, min(8 × 50 GB/s × 0.9, NVLink's 450 GB/s × 0.8) = 360 GB/s
    (steptime.group_bus_bytes_per_s); inside one node of 16, ring LL128 (NVLink only), 10 µs + 15 steps of
    1.9 µs, the bytes over 0.92 of NVLink's (450 GB/s × 0.8)."""
    cfg, L = load("llama2-7b"), layout(tp=16, global_batch=8, sequence_parallel=True)
    wide = dataclasses.replace(H100, gpus_per_node=16)
    across = min(8 * 50e9 * 0.9, 450e9 * 0.8)
    for hw, latency_us, bus in ((H100, 8.4 + 14 * 3.4 + 9.6, across), (wide, 10 + 15 * 1.9, 450e9 * 0.8 * 0.92)):
        plan = make_plan(cfg, L, hw, None)
        acts = [c for c in plan.collectives if c.cause == "tp_activations"]
        assert acts and all(c.op in ("all_gather", "reduce_scatter") for c in acts)
        for c in acts:
            assert collective_seconds(c, L, hw) == pytest.approx(c.calls * latency_us * 1e-6 + c.sent_bytes / bus)
        assert plan.step.comm_s["tp"] == pytest.approx(sum(collective_seconds(c, L, hw) for c in plan.collectives
                                                          if c.group == "tp"))


def test_tokens_and_chinchilla():
    assert parse_count("2T") == 2 * 10**12
    assert parse_count("1.4e12") == 1_400_000_000_000
    assert parse_count("300b") == 300 * 10**9
    for bad in ("", "2X", "-1T", "0"):
        with pytest.raises(InputError):
            parse_count(bad)
    L = layout(dp=8, global_batch=1024)
    run = training_run(2 * 10**12, PSI_7B, L, 10.0)
    assert run.steps == math.ceil(2e12 / (1024 * 4096))
    assert run.gpu_hours == pytest.approx(run.steps * 10 * 8 / 3600)
    assert run.chinchilla_tokens == chinchilla_tokens(PSI_7B)
    # Hoffmann et al. 2022, Table 3 at its rows, between them linear in log(parameters): not a flat 20
    assert chinchilla_tokens(10**9) == 20_200_000_000 and chinchilla_tokens(67 * 10**9) == 1_500_000_000_000
    assert chinchilla_tokens(10**8) == 2 * 10**9 and chinchilla_tokens(10**14) == 2_162 * 10**12
    r = (math.log(7e9) - math.log(1e9)) / (math.log(10e9) - math.log(1e9))
    assert chinchilla_tokens(7 * 10**9) == round(7e9 * (20.2 + (20.51 - 20.2) * r))


# ---------- search ----------


def test_search_lists_fitting_layouts_fastest_first():
    cfg = load("llama2-70b")
    plans = search(cfg, 64, layout(global_batch=512), H100, 0.4)
    assert plans and all(p.fits and p.layout.gpus == 64 for p in plans)
    times = [p.step.overlap_s for p in plans]
    assert times == sorted(times)
    assert all(p.layout.tp <= 8 for p in plans)


def test_gpus_auto_finds_the_fewest():
    cfg = load("llama2-13b")
    base = layout(global_batch=64)
    n, plans = fewest_gpus(cfg, base, H100, 0.4)
    assert plans and all(p.layout.gpus == n for p in plans)
    smaller = [g for g in (1, 2, 4, 8, 16, 24) if g < n]
    assert all(not search(cfg, g, base, H100, 0.4) for g in smaller)


def test_nothing_fits_however_many_gpus():
    """Data parallelism shrinks split states, not activations nor whole or gathered weights: the floor
    says so at once instead of searching to the limit."""
    small = dataclasses.replace(H100, memory_bytes=5 * 10**8)  # below the floor, 0.88 GB (flash activations)
    with pytest.raises(InputError, match="no number of GPUs fits gpt3-175b"):
        fewest_gpus(load("gpt3"), layout(seq=2048, global_batch=2048), small, 0.4)
    with pytest.raises(InputError, match="no number of GPUs fits"):
        fewest_gpus(load("llama2-70b"), layout(micro_batch=512, global_batch=1024), H100, 0.4)


def test_nothing_fits_up_to_the_limit():
    with pytest.raises(InputError, match="no layout of up to 16 GPUs"):
        fewest_gpus(load("gpt3"), layout(seq=2048, global_batch=8), H100, 0.4, limit=16)


def test_gpus_auto_starts_at_the_state_bound():
    from tfcalc.count.training.plan import min_gpus

    assert min_gpus(load("gpt3"), layout(seq=2048), H100) == math.ceil(16 * total(load("gpt3")) / 80e9)


# ---------- hostile layouts ----------


@pytest.mark.parametrize("changes, message", [
    (dict(pp=33), "more pipeline stages"),
    (dict(zero=2), "dp is 1"),
    (dict(zero=4, dp=2), "--zero"),
    (dict(sequence_parallel=True), "tp > 1"),
    (dict(tp=2, seq=4095, sequence_parallel=True, global_batch=8), "divisible by tp"),
    (dict(dp=3, global_batch=8), "multiple of dp"),
    (dict(seq=8192), "at most 4096"),
    (dict(recompute="some"), "--recompute"),
    (dict(dtype="int8"), "inference format"),
    (dict(tp=0), "positive"),
])
def test_impossible_layouts(changes, message):
    with pytest.raises(InputError, match=message):
        check_layout(load("llama2-7b"), layout(**changes))


def test_gpus_must_equal_the_product():
    assert resolve_degrees(64, 8, 2, None) == (8, 2, 4)
    assert resolve_degrees(None, 2, None, 4) == (2, 1, 4)
    with pytest.raises(InputError, match="must equal"):
        resolve_degrees(64, 8, 2, 2)
    with pytest.raises(InputError, match="not a multiple"):
        resolve_degrees(12, 8, 1, None)


@pytest.mark.parametrize("preset", ["mixtral", "transformer-base"])
def test_moe_and_encoder_decoder_are_planned(preset):
    """Once refused; now planned (tests/count/test_plan_architecture.py checks what they hold)."""
    plan = make_plan(load(preset), layout(seq=64), H100, 0.4)
    assert plan.memory.params == total(load(preset))


@pytest.mark.parametrize("preset,seq", [("gpt2", 1024), ("llama2-70b", 4096), ("deepseek-v3", 4096),
                                        ("gemma-3-27b", 8192), ("llama-4-scout", 8192), ("mixtral-8x7b", 32768),
                                        ("t5-base", 512), ("gpt-oss-120b", 131072)])
def test_the_floor_at_the_most_stages_is_the_least_of_every_pp(preset, seq):
    """rank_floor prices one pp per tp (the most stages); the exhaustive minimum over every pp agrees."""
    from tfcalc.count.training.layout import divisors
    from tfcalc.count.training.plan import rank_floor, stage_floor
    from tfcalc.count.training.shard import total_blocks, tp_split_widths

    cfg = load(preset)
    base = Layout(seq=seq, global_batch=1, micro_batch=1)
    widths = math.gcd(*(n for _, n in tp_split_widths(cfg)))
    every = [f for tp in divisors(widths) if tp <= 8 for pp in range(1, total_blocks(cfg) + 1)
             if (f := stage_floor(cfg, base, tp, pp)) is not None]
    assert rank_floor(cfg, base, 8) == min(every)
