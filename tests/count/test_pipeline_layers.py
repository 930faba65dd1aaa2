"""--pp-layers (count.training.shard.stage_ranges, count.training.layout_pipeline, count.training.plan.pipeline_stages):
each pipeline stage's blocks given, as Megatron-LM's --decoder-first-pipeline-num-layers /
--decoder-last-pipeline-num-layers and torchtitan's manual stage split (DeepSeek-V3's 61 layers).

The small example, by hand: 5 blocks over pp 2 as 3,2 (the even split's own) and as 2,3 and 4,1 and 1,4.
Stage 0 holds blocks [0, n₀) and the embedding, stage 1 blocks [n₀, 5), the final norm and the head. One
micro-batch's forward + backward on a stage is n·τ_b, plus τ_h on the last (the head's GEMMs and its loss;
the embedding's lookup has no matmul: memory traffic, spread over the blocks' non-matmul time), with τ_b and
τ_h the same for every split. Under 1F1B the step is paced by the slowest stage: compute = m × max over
stages, and stage i keeps min(p − i, m) micro-batches' activations in flight (Narayanan et al. 2021, sec.
2.2.1): stage 0 two, stage 1 one.
Weights (GPT-2 shaped, d 32, d_ff 4d, biases, vocabulary 61, 64 learned positions, untied): a block is
12d² + 13d parameters (two LayerNorms 4d, QKV 3d² + 3d, O d² + d, FFN 8d² + 5d), the embedding 61d + 64d,
the last stage's final LayerNorm 2d and head 61d.
"""

import dataclasses
import json

import pytest
from conftest import assert_one_line_error, tiny

import tfcalc
from tfcalc.count.training import rank_memory as rm
from tfcalc.count.training.layout import Layout, check_layout
from tfcalc.count.training.plan import make_plan, pipeline_stages
from tfcalc.count.training.rank_activations import head_parts, layer_bytes
from tfcalc.count.training.shard import stage_block_counts, stage_ranges
from tfcalc.count.training.steptime import Hardware, micro_batch_at
from tfcalc.errors import InputError

H100 = Hardware(989e12, 80 * 10**9, 450e9, 50e9, 8)
CFG = tiny(n_layer=5, max_seq_len=64, tie_embeddings=False)
D = 32


def layout(split=(3, 2), **changes) -> Layout:
    fields = dict(tp=1, pp=2, dp=1, seq=64, global_batch=8, micro_batch=1, pp_layers=split)
    fields.update(changes)
    return Layout(**fields)


def test_the_placement():
    assert stage_ranges(5, 2, 0, 1, (3, 2)) == [range(0, 3)]
    assert stage_ranges(5, 2, 1, 1, (3, 2)) == [range(3, 5)]
    assert stage_block_counts(61, 8, 1, (7, 8, 8, 8, 8, 8, 8, 6)) == (7, 8, 8, 8, 8, 8, 8, 6)
    assert stage_ranges(61, 8, 7, 1, (7, 8, 8, 8, 8, 8, 8, 6)) == [range(55, 61)]


@pytest.mark.parametrize("split", [(3, 2), (2, 3), (4, 1), (1, 4)])
def test_stage_times_by_hand(split):
    t = micro_batch_at(CFG, layout(), H100)
    block, head = t.block_matmul_s + t.block_other_s, t.head_matmul_s + t.head_other_s
    assert block > 0 and head > 0
    stages = pipeline_stages(CFG, layout(split), H100)
    assert [s["layers"] for s in stages] == list(split)
    assert stages[0]["micro_batch_s"] == pytest.approx(split[0] * block)
    assert stages[1]["micro_batch_s"] == pytest.approx(split[1] * block + head)
    plan = make_plan(CFG, layout(split), H100, None)
    # the slowest stage paces the step: m = 8 micro-batches of it
    assert plan.step.compute_s == pytest.approx(8 * max(split[0] * block, split[1] * block + head))


def test_moving_a_block_moves_its_time():
    """Independent of τ: stage 0 of 4,1 minus stage 0 of 3,2 is one block's time, which stage 1 loses."""
    a, b = (pipeline_stages(CFG, layout(s), H100) for s in ((3, 2), (4, 1)))
    assert b[0]["micro_batch_s"] - a[0]["micro_batch_s"] == pytest.approx(a[1]["micro_batch_s"] - b[1]["micro_batch_s"])


@pytest.mark.parametrize("split", [(3, 2), (1, 4)])
def test_stage_memory_by_hand(split):
    L = layout(split)
    per_block = 12 * D * D + 13 * D
    assert rm.stage_params(CFG, L, 0) == split[0] * per_block + 61 * D + 64 * D
    assert rm.stage_params(CFG, L, 1) == split[1] * per_block + 2 * D + 61 * D
    acts = rm.layout_activations(CFG, L)
    block = layer_bytes(acts, L, acts.per_layer)
    first = head_parts(acts, L, True, False)[0]
    last = head_parts(acts, L, False, True)[1]
    loss = acts.loss_gradients
    # 1F1B: stage 0 keeps p − 0 = 2 micro-batches in flight, stage 1 one
    assert rm.stage_activations(CFG, L, 0, split[0]) == 2 * (split[0] * block + first)
    assert rm.stage_activations(CFG, L, 1, split[1]) == split[1] * block + last + loss
    stages = pipeline_stages(CFG, L, H100)
    assert [s["total_bytes"] for s in stages] == [rm.stage_memory(CFG, L, s).total for s in range(2)]
    assert make_plan(CFG, L, H100, None).memory.total == max(s["total_bytes"] for s in stages)  # the largest shown


@pytest.mark.parametrize("model, pp", [("gpt2", 4), ("gpt2", 5), ("llama2-7b", 3)])
def test_the_even_split_given_reproduces_the_default(model, pp):
    args = ["--pp", str(pp), "--tp", "1", "--dp", "2", "--global-batch", "32", "--json"]
    plain = tfcalc.plan(model, pp=pp, tp=1, dp=2, global_batch=32).to_json()
    base, extra = divmod(tfcalc.presets.load(model).n_layer, pp)
    split = [base + (s < extra) for s in range(pp)]
    given = tfcalc.plan(model, pp=pp, tp=1, dp=2, global_batch=32, pp_layers=split).to_json()
    assert given["layout"].pop("pp_layers") == split and plain["layout"].pop("pp_layers") == []
    assert json.dumps(given, sort_keys=True) == json.dumps(plain, sort_keys=True), args


def test_an_uneven_split_is_paced_by_its_slowest_stage():
    even = tfcalc.plan("gpt2", pp=2, tp=1, dp=1, global_batch=16).to_json()
    skew = tfcalc.plan("gpt2", pp=2, tp=1, dp=1, global_batch=16, pp_layers="8,4").to_json()
    assert [s["layers"] for s in skew["pipeline_stages"]] == [8, 4]
    slow = max(s["micro_batch_s"] for s in skew["pipeline_stages"])
    assert skew["step"]["compute_s"] == pytest.approx(16 * slow)
    assert skew["step"]["compute_s"] > even["step"]["compute_s"]
    assert skew["per_rank"]["total_bytes"] == max(s["total_bytes"] for s in skew["pipeline_stages"])


@pytest.mark.parametrize("split, message", [
    ((3, 3), "sums to 6, but"),
    ((5, 0), "--pp-layers' counts must be a positive integer; got 0"),
    ((2, 2, 1), "gives 3 stage counts for pp 2"),
    ((6, -1), "must be a positive integer; got -1"),
])
def test_bad_splits_are_one_line(split, message):
    with pytest.raises(InputError, match=message):
        check_layout(CFG, layout(split))


def test_not_with_interleaving_or_counted_ends():
    with pytest.raises(InputError, match="does not take --schedule interleaved"):
        check_layout(CFG, dataclasses.replace(layout(), schedule="interleaved", virtual_stages=2, global_batch=8))
    with pytest.raises(InputError, match="leave out --pp-split-counts"):
        check_layout(CFG, layout(pp_split_counts=("embedding",)))


@pytest.mark.parametrize("args, message", [
    (["--pp", "2", "--pp-layers", "6,5"], "sums to 11, but gpt2 has 12 blocks"),
    (["--pp", "2", "--pp-layers", "12,0"], "must be a positive integer; got 0"),
    (["--pp", "3", "--pp-layers", "6,6"], "gives 2 stage counts for pp 3"),
    (["--tp", "2", "--pp-layers", "6,6"], "it needs --pp"),
    (["--gpus", "4", "--pp-layers", "6,6"], "it needs --pp"),
    (["--pp", "2", "--pp-layers", "6,x"], "takes comma-separated block counts"),
    (["--pp", "2", "--pp-layers", "6,6", "--schedule", "interleaved"], "does not take --schedule interleaved"),
])
def test_cli_refusals(cli, args, message):
    assert_one_line_error(cli("plan", "gpt2", *args), message)


def test_cli_json_and_table(cli):
    j = cli("plan", "gpt2", "--pp", "2", "--pp-layers", "7,5", "--global-batch", "8", "--json").json()
    assert j["layout"]["pp_layers"] == [7, 5]
    assert [s["layers"] for s in j["pipeline_stages"]] == [7, 5]
    out = cli("plan", "gpt2", "--pp", "2", "--pp-layers", "7,5", "--global-batch", "8").out
    assert "blocks per stage 7/5 as given" in " ".join(out.split())  # the table's cell, its wrapping undone


def test_deepseek_v3_61_layers():
    j = tfcalc.plan("deepseek-v3", pp=8, tp=8, dp=1, ep=1, global_batch=64,
                    pp_layers=(7, 8, 8, 8, 8, 8, 8, 6)).to_json()
    assert [s["layers"] for s in j["pipeline_stages"]] == [7, 8, 8, 8, 8, 8, 8, 6]
    with pytest.raises(InputError, match="sums to 64, but deepseek-v3 has 61 blocks"):
        tfcalc.plan("deepseek-v3", pp=8, tp=8, dp=1, global_batch=64, pp_layers=(8,) * 8)
