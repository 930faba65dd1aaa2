"""--pp-split-counts (count.training.shard.stage_ranges, count.training.layout_pipeline, count.training.search_space):
the embedding and/or the LM head counted as one block each when the blocks are divided over pp × V chunks
(Megatron-LM's --account-for-embedding/loss-in-pipeline-split; Llama 3, Dubey et al. 2024, sec. 3.3.2).

The small example, by hand: 6 blocks, pp 2, V 2, embedding and head counted. 6 + 2 = 8 "layers" in
pp × V = 4 chunks of c = 2; layer 0 is the embedding, layer 7 the head, block i is layer i + 1. Model chunk
k holds layers [2k, 2k + 2):
    chunk 0 = embedding + block 0,  chunk 1 = blocks 1, 2,  chunk 2 = blocks 3, 4,  chunk 3 = block 5 + head.
Rank i holds chunks i and i + 2 (Megatron's virtual pipeline): stage 0 = {E, 0} and {3, 4}, 3 blocks and the
embedding; stage 1 = {1, 2} and {5, H}, 3 blocks and the head. (Without counting them 6 blocks do not divide
over 4 chunks: no interleaving at all.)
Step, m = 4 micro-batches (global batch 4, micro-batch 1, dp 1): the interleaved bubble ((p − 1)/V) /
(m + (p − 1)/V) = 0.5 / 4.5 = 1/9 (1F1B's: 1/5), and the slowest stage is the last, its 3 blocks and the
head: compute = m × (3 blocks + head) of one micro-batch.
Memory of stage 0: weights of 3 blocks and the embedding. Activations: before its first backward rank 0
runs 2(p − 1) + (V − 1)·p = 4 warm-up chunk forwards and one more, 5, dealt to its chunks in groups of p
micro-batches: chunk 0 holds 2 + 1 = 3 micro-batches, chunk 1 holds 2 -- so 3 × (block 0 + the
embedding's terms) + 2 × (blocks 3 and 4) = 7 blocks' and 3 embeddings' terms of one micro-batch.
"""

import dataclasses
import re
import time

import pytest
from conftest import assert_one_line_error, tiny

import tfcalc
from tfcalc.count.perf import pipeline
from tfcalc.count.training import rank_memory as rm
from tfcalc.count.training.layout import Layout, check_layout
from tfcalc.count.training.micro_batch_time import micro_batch_time
from tfcalc.count.training.plan import make_plan, search
from tfcalc.count.training.rank_activations import head_parts, layer_bytes
from tfcalc.count.training.search_bound import ShapeBound
from tfcalc.count.training.search_space import SearchSpace, schedules, split_counts
from tfcalc.count.training.shard import stage_block_counts, stage_ranges
from tfcalc.count.training.steptime import Hardware, _alike
from tfcalc.errors import InputError

H100 = Hardware(989e12, 80 * 10**9, 450e9, 50e9, 8)
CFG = tiny(n_layer=6, max_seq_len=64, tie_embeddings=False, embedding_norm=True)  # the norm: terms of stage 0
BOTH = ("embedding", "head")


def layout(**changes) -> Layout:
    fields = dict(tp=1, pp=2, dp=1, seq=64, global_batch=4, micro_batch=1, schedule="interleaved", virtual_stages=2,
                  pp_split_counts=BOTH)
    fields.update(changes)
    return Layout(**fields)


def test_the_hand_placement():
    assert stage_ranges(6, 2, 0, 2, BOTH) == [range(0, 1), range(3, 5)]
    assert stage_ranges(6, 2, 1, 2, BOTH) == [range(1, 3), range(5, 6)]
    assert stage_block_counts(6, 2, 2, BOTH) == (3, 3)
    # only the embedding counted: 7 + 1 = 8 layers, chunk 0 = E + block 0; stage 0 one block fewer than stage 1
    assert stage_ranges(7, 2, 0, 2, ("embedding",)) == [range(0, 1), range(3, 5)]
    assert stage_ranges(7, 2, 1, 2, ("embedding",)) == [range(1, 3), range(5, 7)]
    # only the head: 7 + 1 = 8, chunk 3 = blocks 6 + H; the last stage one block fewer
    assert stage_block_counts(7, 2, 2, ("head",)) == (4, 3)
    # 1F1B (V 1) with both: 6 + 2 = 8 over 2 stages of 4 layers: E + 3 blocks, 3 blocks + H
    assert [stage_ranges(6, 2, s, 1, BOTH) for s in range(2)] == [[range(0, 3)], [range(3, 6)]]


def test_llama3_405b_placement():
    """126 blocks + 2 = 128 = 16 stages × V 8 of one layer: "the first model chunk on the first stage has
    only the embedding, and the last model chunk on the last stage has only output projection and loss
    calculation" (Dubey et al. 2024, sec. 3.3.2)."""
    first, last = stage_ranges(126, 16, 0, 8, BOTH), stage_ranges(126, 16, 15, 8, BOTH)
    assert len(first[0]) == 0 and len(last[-1]) == 0
    assert [r.start for r in first[1:]] == [15 + 16 * v for v in range(7)]
    assert stage_block_counts(126, 16, 8, BOTH) == (7,) + (8,) * 14 + (7,)
    every = sorted(i for s in range(16) for r in stage_ranges(126, 16, s, 8, BOTH) for i in r)
    assert every == list(range(126))  # each block once


def test_bubble_and_the_slowest_stage():
    plan = make_plan(CFG, layout(), H100, None)
    st = plan.step
    assert st.bubble == pytest.approx(0.5 / 4.5)
    assert pipeline.bubble_fraction(dataclasses.replace(layout(), schedule="1f1b", virtual_stages=1)) == \
        pytest.approx(1 / 5)
    peak = H100.peak_flops_per_s * H100.perf.sustained_clock
    t = micro_batch_time(CFG, _alike(layout()), peak, H100.bandwidth_bytes_per_s * H100.perf.bandwidth_efficiency,
                         H100.perf)
    assert st.compute_s == pytest.approx(4 * (3 * (t.block_matmul_s + t.block_other_s) + t.head_matmul_s
                                              + t.head_other_s))
    assert st.pipelined_s == pytest.approx(st.compute_s * 4.5 / 4)


def test_stage_0_memory_by_hand():
    L = layout()
    # GPT-2-shaped, d 32, d_ff 4d, biases: two LayerNorms 4d, QKV 3d² + 3d, O d² + d, FFN 8d² + 5d
    d = 32
    per_block = 12 * d * d + 13 * d
    embedding = 61 * d + 64 * d + 2 * d  # tokens (vocabulary 61), learned positions (64), untied; their LayerNorm
    assert rm.stage_params(CFG, L, 0) == 3 * per_block + embedding
    acts = rm.layout_activations(CFG, L)
    block = layer_bytes(acts, L, acts.per_layer)
    emb = head_parts(acts, L, True, False)[0]
    assert emb > 0
    assert pipeline.chunk_micro_batches(L, 0) == [3, 2]
    assert rm.stage_activations(CFG, L, 0, 3) == 7 * block + 3 * emb
    mem = rm.rank_memory(CFG, L)
    shown = rm.model_states(CFG, L, mem.stage)
    assert mem.weights == shown[1]
    # the embedding counted: stage 0 one block fewer than without (6 blocks + E over 2 stages V 2 is not
    # divisible, so against 1F1B: E + 3 blocks either way; against 7 blocks below)
    seven = dataclasses.replace(CFG, n_layer=7)
    counted = rm.stage_params(seven, layout(pp_split_counts=("embedding",)), 0)
    plain = rm.stage_params(seven, layout(schedule="1f1b", virtual_stages=1, pp_split_counts=()), 0)
    assert plain - counted == per_block


def test_sends_are_the_chunk_boundaries():
    """Counting the ends moves blocks, not boundaries: still 2V − 1 sends per micro-batch on each end rank."""
    for stage in range(2):
        assert pipeline.sends_per_micro_batch(layout(), stage) == 3
    plan = make_plan(CFG, layout(), H100, None)
    sends = next(c for c in plan.collectives if c.cause == "pp_activations")
    assert sends.calls == 4 * 3


@pytest.mark.parametrize("changes, message", [
    (dict(pp_split_counts=("embedding",)), "6 blocks + embedding = 7 do not divide over 2 stages × V 2 = 4 chunks"),
    (dict(virtual_stages=3), "6 blocks + embedding + head = 8 do not divide over 2 stages × V 3 = 6 chunks"),
    (dict(schedule="1f1b", virtual_stages=1, pp_split_counts=("head",)), "6 blocks + head = 7 do not divide over 2 "
     "stages"),
    (dict(pp=1, schedule="1f1b", virtual_stages=1, global_batch=4), "needs pp > 1"),
    (dict(pp_split_counts=("embedding", "embedding")), "names each of embedding, head once"),
    (dict(pp_split_counts=("loss",)), "takes embedding, head"),
    (dict(pp_split_counts=("<b>x</b>",)), "got '<b>x</b>'"),
    (dict(pp_split_counts="embedding"), "must be a list of embedding and head"),
    (dict(pp_split_counts=(1,)), "must be a list of embedding and head"),
])
def test_refused_in_one_line(changes, message):
    with pytest.raises(InputError, match=re.escape(message)) as e:
        check_layout(CFG, layout(**changes))
    assert "\n" not in str(e.value)


def test_the_search_counts_the_ends_only_where_that_makes_interleaving_possible():
    assert split_counts(6, 2, 2, None) == BOTH
    assert split_counts(7, 2, 2, None) == ("head",)
    assert split_counts(8, 2, 2, None) == ()
    assert split_counts(5, 2, 2, None) is None
    assert split_counts(6, 2, 2, ("head",)) is None  # fixed by the request: as given, or not at all
    base = layout(schedule="1f1b", virtual_stages=1, pp_split_counts=())
    options = list(schedules(CFG, base, SearchSpace()))
    assert [(o.schedule, o.virtual_stages, o.pp_split_counts) for o in options] == [
        ("1f1b", 1, ()), ("interleaved", 2, BOTH), ("interleaved", 3, ()), ("interleaved", 4, BOTH)]  # 8/4, 6/6, 8/8
    plans = search(CFG, 2, dataclasses.replace(base, pp=1), H100, None, space=SearchSpace())
    assert any(p.layout.pp_split_counts == BOTH for p in plans)
    assert all(not p.layout.pp_split_counts for p in plans if p.layout.pp == 1)


def test_api_and_json():
    r = tfcalc.plan(CFG, pp=2, dp=1, seq=64, global_batch=4, schedule="interleaved", virtual_stages=2,
                    pp_split_counts="embedding,head", mfu=None)
    assert r.plan.layout.pp_split_counts == BOTH
    assert r.to_json()["layout"]["pp_split_counts"] == ["embedding", "head"]
    plain = tfcalc.plan(CFG, pp=2, dp=1, seq=64, global_batch=4, mfu=None)
    assert plain.to_json()["layout"]["pp_split_counts"] == []
    with pytest.raises(InputError, match="needs pp > 1"):
        tfcalc.plan(CFG, dp=1, seq=64, global_batch=4, pp_split_counts=["head"])
    with pytest.raises(InputError, match="empty item"):
        tfcalc.plan(CFG, pp=2, seq=64, global_batch=4, pp_split_counts="head,")


def test_cli(cli):
    ok = cli("plan", "gpt2", "--pp", "7", "--dp", "1", "--global-batch", "14", "--schedule", "interleaved",
             "--virtual-stages", "2", "--pp-split-counts", "embedding,head", "--json")
    assert ok.code == 0
    import json

    data = json.loads(ok.out)
    assert data["layout"]["pp_split_counts"] == ["embedding", "head"]
    for args, message in ((["--pp-split-counts", "embedding,head"], "12 blocks + embedding + head = 14 do not divide "
                           "over 2 stages × V 2 = 4 chunks"),
                          (["--pp-split-counts", "head,,embedding"], "empty item"),
                          (["--pp-split-counts", "none,head"], "none means no"),
                          (["--pp-split-counts", "head", "--pp-split-counts", "HEAD"], "once"),
                          (["--pp-split-counts", "[red]x[/red]"], "got '[red]x[/red]'")):
        bad = cli("plan", "gpt2", "--pp", "2", "--dp", "1", "--global-batch", "8", "--schedule", "interleaved", *args)
        assert_one_line_error(bad, message)
    for empty in ("", "none", "NONE"):  # nothing counted, as --overlap's rule reads them
        r = cli("plan", "gpt2", "--pp", "2", "--dp", "1", "--global-batch", "8", "--pp-split-counts", empty, "--json")
        assert r.code == 0 and json.loads(r.out)["layout"]["pp_split_counts"] == []
    one = cli("plan", "gpt2", "--dp", "1", "--global-batch", "8", "--pp-split-counts", "head")
    assert_one_line_error(one, "needs pp > 1")


LLAMA3_405B = dict(n_layer=126, d_model=16384, n_head=128, n_kv_head=8, d_ff=53248, vocab_size=128256,
                   max_seq_len=8192)


def test_search_of_llama3_405b_finds_metas_schedule_fast():
    """126 blocks divide over no pp × V of 16 stages; counting both ends the search finds Meta's layout of
    16,384 H100s (TP 8, PP 16, DP 128, interleaved, V 8; Dubey et al. 2024, Table 4 and sec. 3.3.2), in under
    2 s of CPU (issue 20's bound for a search over 16,384 GPUs)."""
    tfcalc.plan("gpt3", gpus=64)  # warm the imports
    start = time.process_time()
    r = tfcalc.plan("llama3-70b", gpus=16384, seq=8192, global_batch=2048, device_spec="h100-sxm", **LLAMA3_405B)
    assert time.process_time() - start < 2.0
    L = r.plan.layout
    assert (L.tp, L.pp, L.dp, L.schedule, L.virtual_stages, L.pp_split_counts) == \
        (8, 16, 128, "interleaved", 8, BOTH)


def test_the_search_bound_holds_with_the_ends_counted():
    """tfcalc.count.training.search_bound prices a shape's 1F1B layout: with --pp-split-counts fixed it is the split
    one (7 blocks + embedding over 2 stages: E + 3 blocks, 4 blocks + head -- stage 0, with 2 micro-batches
    in flight, one block lighter than without), and a pp the counted ends do not divide is not ruled out."""
    seven = dataclasses.replace(CFG, n_layer=7)
    base = layout(pp=1, schedule="1f1b", virtual_stages=1, pp_split_counts=("embedding",))
    bound = ShapeBound(seven, base, 10**12, 8)
    built = dataclasses.replace(base, pp=2)
    plain = dataclasses.replace(built, pp_split_counts=())
    assert rm.rank_memory(seven, built).total < rm.rank_memory(seven, plain).total
    assert bound.bytes(1, 2, 1, 1) <= rm.rank_memory(seven, built).total
    # the bound's closed-form stage parameters follow the split placement (stage 0: E + 3 blocks)
    assert [bound.stage_params(1, 2, s)[0] for s in range(2)] == [rm.stage_params(seven, built, s) for s in range(2)]
    assert ShapeBound(seven, base, 1, 8).fits(1, 3, 1, 1)  # 7 + 1 over 3 stages: no 1F1B layout to bound
    assert not ShapeBound(seven, base, 1, 8).fits(1, 2, 1, 1)
