"""plan --optimizer muon (tfcalc.count.training.muon_plan): the states against the hand count 12·(Ψ−M) + 8·M and
the single-GPU `memory --training` figure, the Newton-Schulz FLOPs per ZeRO stage, the gather, Adam unchanged by
default, and Moonlight's published overhead (arXiv 2502.16982, sec. 2.3: 1-3 % of the forward-backward)."""

import pytest

from tfcalc.count.model import muon
from tfcalc.count.model.training_memory import training_state
from tfcalc.count.perf.hardware import perf_spec
from tfcalc.count.training.layout import Layout
from tfcalc.count.training.plan import make_plan, plan_muon_step
from tfcalc.count.training.steptime import Hardware
from tfcalc.errors import InputError
from tfcalc.presets import load

H100 = Hardware(989e12, 80 * 10**9, 450e9, 50e9, 8, perf=perf_spec("h100-sxm"))
CFG = load("llama2-7b")
PSI = 6_738_415_616
M = 32 * (4 * 4096 * 4096 + 3 * 4096 * 11008)  # Q, K, V, O; gate, up, down: every hidden matrix of the 32 blocks


def _layout(zero=0, dp=8, tp=1, optimizer="muon"):
    return Layout(tp=tp, pp=1, dp=dp, zero=zero, seq=4096, global_batch=64, micro_batch=1, optimizer=optimizer)


def test_states_at_zero0_equal_the_single_gpu_memory():
    """ZeRO-0: 12 bytes a parameter (fp32 master + AdamW m, v) less 4 for each matrix element, as memory --training."""
    mem = make_plan(CFG, _layout(), H100, None).memory
    assert muon.matrix_params(CFG) == M
    assert mem.optimizer == 12 * PSI - 4 * M
    s = training_state(CFG, "bf16", "muon")
    assert mem.optimizer == s.optimizer_state + s.master_weights


def test_adam_is_the_default_and_unchanged():
    adam = make_plan(CFG, _layout(optimizer="adam"), H100, None)
    default = make_plan(CFG, Layout(tp=1, pp=1, dp=8, seq=4096, global_batch=64, micro_batch=1), H100, None)
    assert adam == default and adam.memory.optimizer == 12 * PSI


@pytest.mark.parametrize("zero, part", [(0, 1), (1, 1 / 8), (2, 1 / 8), (3, 1)])
def test_newton_schulz_per_zero_stage(zero, part):
    """DDP: every rank all its matrices; ZeRO-1/2 (Moonlight's partition): 1/N of them; FSDP: all, redundantly.
    Per block 5·(4m²n + 2m³): the fused QKV 4096 × 12288, O 4096², [gate | up] 4096 × 22016, down 4096 × 11008."""
    p = make_plan(CFG, _layout(zero), H100, None)
    per_block = sum(5 * (4 * 4096**2 * n + 2 * 4096**3) for n in (12288, 4096, 22016, 11008))
    m = plan_muon_step(CFG, p.layout, p.memory, H100)
    assert m.ns_flops == pytest.approx(32 * per_block * part, rel=1e-12)
    assert m.gather_bytes == (0 if zero == 0 else 2 * M)  # the matrices in bf16, over the 8 DP ranks
    assert p.step.optimizer_s == pytest.approx(m.ns_s + m.gather_s + m.elementwise_s)


def test_tensor_parallel_gathers_the_shards_too():
    """TP 2: each rank holds M/2 of the matrices; it all-gathers them over DP (2·M/2) and over TP (2·M)."""
    p = make_plan(CFG, _layout(1, dp=4, tp=2), H100, None)
    m = plan_muon_step(CFG, p.layout, p.memory, H100)
    assert m.gather_bytes == 2 * M // 2 + 2 * M


def test_moonlight_overhead():
    """Moonlight, sec. 2.3: Distributed Muon's extra latency (the gather and Newton-Schulz) is 1-3 % of the
    forward-backward, as they report it. Llama 2 7B, DP 64 over 8 nodes, ZeRO-1, 4M tokens: 1.3 % here (12 ms of
    Newton-Schulz and a 63 ms bf16 all-gather of the matrices over 5.8 s of compute)."""
    L = Layout(tp=1, pp=1, dp=64, zero=1, seq=4096, global_batch=1024, micro_batch=1, optimizer="muon")
    p = make_plan(CFG, L, H100, None)
    m = plan_muon_step(CFG, L, p.memory, H100)
    assert 0.01 < (m.ns_s + m.gather_s) / p.step.compute_s < 0.03
    assert m.ns_flops / p.step.model_flops * 64 < 0.01  # the FLOPs alone: well under 1 % of the step's


def test_bad_optimizer_is_one_line():
    with pytest.raises(InputError, match="--optimizer must be adam or muon"):
        make_plan(CFG, _layout(optimizer="lion"), H100, None)


@pytest.mark.parametrize("preset,seq,batch,gpus", [("llama2-7b", 4096, 64, [1, 8, 16]),
                                                   ("mixtral-8x7b", 32768, 16, [8, 32])])
def test_the_search_bound_stays_under_muons_memory(preset, seq, batch, gpus):
    """The search prunes on a lower bound of a rank's memory (tfcalc.count.training.search_bound): under Muon it
    counts 4 bytes less a parameter, which must keep it under every layout's Muon memory (the bound with Adam's
    bytes would exceed them, and prune layouts that fit)."""
    from tfcalc.count.training.layout import candidate_layouts
    from tfcalc.count.training.rank_memory import rank_memory
    from tfcalc.count.training.search_bound import ShapeBound
    from tfcalc.count.training.search_space import SearchSpace, schedules

    cfg = load(preset)
    start = Layout(seq=seq, global_batch=batch, micro_batch=1, optimizer="muon")
    bound = ShapeBound(cfg, start, H100.memory_bytes, 8)
    checked = 0
    for n in gpus:
        for layout in candidate_layouts(cfg, n, start, 8):
            L = next(schedules(cfg, layout, SearchSpace()))
            assert bound.bytes(L.tp, L.pp, L.cp, L.dp) <= rank_memory(cfg, L).total, L.describe()
            checked += 1
    assert checked > 10


def test_experts_gather_over_their_own_group():
    """Mixtral 8x7B at DP 8, EP 4, ZeRO-1: per block the dense matrices are QKV 6144 × 4096, O 4096² and the router
    8 × 4096 (41,975,808), each expert [w1 | w3] 28672 × 4096 and w2 4096 × 14336 (176,160,768), 2 experts a rank.
    The dense ones gather over the 8 DP ranks, the experts' over their EDP group of 8 / 4 = 2; Newton-Schulz on 1/8
    of the dense and 1/2 of the rank's experts."""
    cfg = load("mixtral-8x7b")
    L = Layout(tp=1, pp=1, dp=8, ep=4, zero=1, seq=4096, global_batch=64, micro_batch=1, optimizer="muon")
    p = make_plan(cfg, L, H100, None)
    m = plan_muon_step(cfg, L, p.memory, H100)
    dense, experts = 32 * 41_975_808, 32 * 2 * 176_160_768
    assert m.gather_bytes == 2 * dense + 2 * experts
    ns = (32 * (muon.ns_flops(6144, 4096) + muon.ns_flops(4096, 4096) + muon.ns_flops(8, 4096)) / 8
          + 32 * 2 * (muon.ns_flops(28672, 4096) + muon.ns_flops(4096, 14336)) / 2)
    assert m.ns_flops == pytest.approx(ns, rel=1e-12)
