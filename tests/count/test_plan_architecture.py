"""The plan folds over the same description as the parameter count (tfcalc.architecture): on one GPU it
holds exactly the parameters `params` counts, on every preset; MoE and encoder-decoders are planned; the
tensors of mixed layers land on the pipeline stages that hold those layers."""

from __future__ import annotations

import math

import pytest
from conftest import MIXTRAL_LIKE, assert_one_line_error, tiny

from tfcalc.count.model.params import total
from tfcalc.count.training import rank_memory as rm, shard
from tfcalc.count.training.layout import Layout, check_layout
from tfcalc.errors import InputError
from tfcalc.presets import load, preset_names


def layout(**changes) -> Layout:
    fields = dict(tp=1, pp=1, dp=1, seq=128, global_batch=2, micro_batch=1)
    fields.update(changes)
    return Layout(**fields)


@pytest.mark.parametrize("name", preset_names(), ids=str)
def test_plan_on_one_gpu_holds_what_params_counts(name):
    cfg = load(name)
    psi, weights, _, _ = rm.model_states(cfg, layout(seq=min(128, cfg.max_seq_len)), 0)
    assert psi == total(cfg)
    assert weights == 2 * total(cfg)  # bf16


@pytest.mark.parametrize("name, params", [
    ("qwen2-7b", 7_615_616_512),  # Q/K/V biases, no O bias (modeling_qwen2.py): the plan held 28·3584 more
    ("gemma-2-9b", 9_241_705_984),  # sandwich post-norms, 2·42·3584 the plan missed
    ("falcon-7b", 6_921_720_704),  # one shared norm per block: the plan counted an FFN norm 2·32·4544 too many
], ids=["qwen2-o-bias", "gemma2-post-norms", "falcon-shared-norm"])
def test_the_three_drifts_are_gone(name, params):
    assert rm.stage_params(load(name), layout(), 0) == total(load(name)) == params


def test_mixtral_is_planned_with_its_experts_whole_on_every_tp_rank():
    """Mixtral under tp 2: attention and the untied embedding and head split in halves, each of the 32·8
    experts (3·4096·14336 each) and the routers whole: per rank Ψ = experts + routers + norms + half the rest."""
    cfg = load("mixtral-8x7b")
    psi = rm.stage_params(cfg, layout(tp=2), 0)
    experts = 32 * 8 * 3 * 4096 * 14336
    routers, norms = 32 * 8 * 4096, (2 * 32 + 1) * 4096
    assert psi == experts + routers + norms + (total(cfg) - experts - routers - norms) // 2
    experts_split = {t.tp_split for t in shard.module_tensors(cfg) if t.name.startswith("expert_ffn")}
    assert experts_split == {None}


def test_encoder_decoders_are_planned_with_both_stacks():
    cfg = load("t5-base")
    assert shard.total_blocks(cfg) == 24
    assert rm.stage_params(cfg, layout(dp=2, zero=3, global_batch=4), 0) == total(cfg)
    with pytest.raises(InputError, match="plans cover it with pp 1"):
        check_layout(cfg, layout(pp=2))
    with pytest.raises(InputError, match="has cross-attention: sequence parallelism"):
        check_layout(cfg, layout(tp=2, sequence_parallel=True))


def test_t5_base_under_tp_2_by_hand():
    """t5-base (Raffel et al. 2020: 12 + 12 blocks, d = 768, 12 heads of 64, d_ff 3072, a tied 32,128-row
    table), tp 2. Split in halves: each encoder block's Q, K, V, O (4·768²) and FFN (2·768·3072), 7,077,888;
    each decoder block's the same and its cross-attention's Q, [K | V], O (4·768²), 9,437,184; the tied
    table, vocabulary-split, 24,674,304: 222,855,168 in all. Whole on each rank: the norms, (12·2 + 1 +
    12·3 + 1)·768 = 47,616, and the two relative-bias tables, 2·32·12 = 768. Ψ per rank = 111,427,584 +
    48,384 = 111,475,968 (total 222,903,552).

    Collectives per micro-batch (Megatron's f and g, bf16, X = 2·b·s·768 bytes): an all-reduce each way
    per split sub-layer, 12·2 + 12·3 = 60, so 120; one more per decoder block for its K/V input's
    gradient, 12; the LM head's input gradient, 1; the tied table's partial lookups, once per stack, 2:
    135 all-reduces of X."""
    cfg = load("t5-base")
    L = layout(tp=2, seq=512, global_batch=4, micro_batch=2)
    assert total(cfg) == 222_903_552
    assert rm.stage_params(cfg, L, 0) == 111_475_968
    from tfcalc.count.training.comm import tp_collectives

    X = 2 * 2 * 512 * 768
    ops = {(c.op, c.cause): (c.payload_bytes, c.calls) for c in tp_collectives(cfg, L, 0)}
    assert ops[("all_reduce", "tp_activations")] == (2 * 135 * X, 2 * 135)  # m = 2 micro-batches
    assert {op for op, _ in ops} == {"all_reduce"}


def test_mixed_layers_land_on_their_stages():
    """4 layers, the first dense (d_ff 48), then 3 MoE of 4 experts of width 16, over 2 stages: stage 0 holds
    the dense FFN and one MoE layer, stage 1 two MoE layers; the ZeRO-3 gather holds the largest block."""
    cfg = tiny(n_layer=4, first_dense_layers=1, dense_d_ff=48, d_ff=16, **MIXTRAL_LIKE)
    held = [{t.name: n for t, n in shard.stage_tensors(cfg, 2, s)} for s in (0, 1)]
    assert held[0]["ffn_up_weight"] == 1 and "ffn_up_weight" not in held[1]
    assert held[0]["expert_ffn_up_weight"] == 4 and held[1]["expert_ffn_up_weight"] == 8
    moe_block = max(sum(t.copies * math.prod(t.shape) for t in unit) for unit, _ in shard.units(cfg))
    assert rm.gathered_bytes(cfg, layout(dp=2, zero=3, global_batch=4)) == 2 * 2 * max(
        moe_block, sum(t.numel for t in shard.module_tensors(cfg) if not t.per_block))


def test_sequence_parallel_with_replicated_experts_is_refused():
    with pytest.raises(InputError, match="sequence parallelism around replicated experts"):
        check_layout(tiny(**MIXTRAL_LIKE), layout(tp=2, sequence_parallel=True, seq=16))


def test_plan_covers_mixtral_and_says_the_experts_are_replicated(cli):
    r = cli("plan", "mixtral", "--tp", "2", "--seq", "2048", "--json")
    assert r.code == 0, r.err
    assert any("experts are replicated" in n for n in r.json()["notes"])
    table = cli("plan", "mixtral", "--tp", "2", "--seq", "2048")
    assert "Assumed: experts are replicated" in table.out
    r = cli("plan", "t5-base", "--tp", "2", "--seq", "512", "--json")
    assert r.code == 0 and r.json()["layout"]["tp"] == 2, r.err
    assert_one_line_error(cli("plan", "t5-base", "--tp", "2", "--sequence-parallel"),
                          "has cross-attention: sequence parallelism")
