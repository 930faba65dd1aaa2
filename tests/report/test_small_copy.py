"""The small copy `plan --measure` runs of a large preset (tfcalc.report.small_copy), without starting a rank:
every preset's copy is a valid config under MEASURE_PARAMS whose real module (on meta) holds exactly what the
count says, with every kind of layer of the preset (latent attention, dense-then-MoE, windows, chunks, NoPE,
shared experts, sinks); and every layout of `plan --measure --nproc 2` on it either is run or refused in one
line (InputError), never a traceback from a config rule (deepseek-v3's 512-wide KV compression in a 32-wide
copy, llama-4-scout's nope_every 4 in 2 layers, once). The runs themselves: tests/measure/test_small_copy_runs.py."""


import pytest
import torch

from tfcalc.count.model.params import total
from tfcalc.count.training.layout import Layout
from tfcalc.count.training.plan import make_plan
from tfcalc.count.training.steptime import Hardware
from tfcalc.errors import InputError
from tfcalc.measure.params import measured_total
from tfcalc.model import build_model
from tfcalc.presets import load, preset_names
from tfcalc.report.plan_check import MEASURE_PARAMS, measured_run
from tfcalc.report.small_copy import small_copy

HW = Hardware(1e12, 10**12, 1e9, 1e9, 8)
# the presets with more than one kind of layer or a mixture of experts (what the small copy must keep)
MIXED = [n for n in preset_names() if load(n).n_expert or len({b for _, b, _ in load(n).architecture.kinds()}) > 1]

def features(cfg) -> set[tuple]:
    """What kinds of layer the model has: the attention's class, window, chunk, RoPE, temperature and sinks;
    the FFN's class and whether it has a shared expert."""
    out = set()
    for _, b, _ in cfg.architecture.kinds():
        a, f = b.attention, b.ffn
        out.add((type(a).__name__, getattr(a, "window", None) is not None, getattr(a, "chunk", None) is not None,
                 getattr(a, "rope_theta", 1) is None, getattr(a, "temperature", None) is not None,
                 getattr(a, "sinks", False), type(f).__name__, getattr(f, "shared", None) is not None))
    return out

def test_the_mixed_presets_are_the_ones_issue_20_names():
    assert {"deepseek-v3", "kimi-k2", "llama-4-scout", "mixtral-8x7b", "qwen3-30b-a3b", "gpt-oss-20b",
            "gemma-3-27b"} <= set(MIXED)

@pytest.mark.parametrize("preset", MIXED, ids=MIXED)
@pytest.mark.parametrize("blocks", [2, 4])
def test_small_copy_keeps_every_kind_of_layer(preset, blocks):
    cfg = load(preset)
    small = small_copy(cfg, 1, blocks)
    assert small.n_layer == blocks and total(small) < MEASURE_PARAMS
    # every kind, where the copy has a block for each (Nemotron-3's M, E and * layers are three kinds)
    kinds = len({b for _, b, _ in cfg.architecture.kinds()})
    assert features(small) == features(cfg) if kinds <= blocks else features(small) < features(cfg)
    assert (small.kv_lora_rank is None) == (cfg.kv_lora_rank is None)
    if cfg.n_expert:
        assert small.n_expert <= cfg.n_expert and small.n_expert % 2 == 0 and small.n_expert_active <= 4
    # the real module holds what the count says, parameter for parameter
    assert measured_total(build_model(small, torch.device("meta"))) == total(small)

def test_small_copy_keeps_widths_apart_and_windows_shorter_than_the_context():
    small = small_copy(load("deepseek-v3"), 1)
    assert (small.d_ff, small.shared_expert_d_ff, small.dense_d_ff) == (88, 176, 264)
    assert small.kv_lora_rank < small.q_lora_rank <= small.d_model
    assert (small.n_expert, small.n_expert_active, small.router_groups, small.router_topk_groups) == (16, 4, 8, 4)
    scout = small_copy(load("llama-4-scout"), 2)
    assert scout.attention_chunk_size < scout.max_seq_len and scout.attn_temperature_floor < scout.max_seq_len
    assert [b.attention.rope_theta is None for b in scout.architecture.stacks[0].layers()] == [False, True]

def test_small_copy_keeps_the_depth_pattern_of_an_explicit_layer_pattern():
    """A layer_pattern model: its copy's kinds are the pattern's, in its order (hand-read: "full*3, nope,
    local_nope" at 3 blocks keeps one full layer, then the two others; at 5 the whole pattern)."""
    cfg = load("llama2-7b", ["n_layer=5", "layer_pattern=full*3, nope, local_nope", "sliding_window=4096"])
    for blocks, kinds in ((3, ["rope", "nope", "local_nope"]), (5, ["rope"] * 3 + ["nope", "local_nope"])):
        small = small_copy(cfg, 1, blocks)
        seen = [("local_" if b.attention.window else "") + ("rope" if b.attention.rope_theta else "nope")
                for b in small.architecture.output.layers()]
        assert seen == kinds and small.n_layer == blocks

@pytest.mark.parametrize("preset", MIXED, ids=MIXED)
@pytest.mark.parametrize("layout", [dict(dp=2), dict(dp=2, zero=3), dict(dp=2, zero=2), dict(dp=2, zero=1),
                                    dict(tp=2), dict(pp=2), dict(dp=2, ep=2)],
                         ids=["ddp", "zero3", "zero2", "zero1", "tp", "pp", "ep"])
def test_every_layout_runs_or_is_refused_in_one_line(preset, layout):
    planned = Layout(**{**dict(tp=1, pp=1, dp=1, seq=4096, global_batch=8 * layout.get("dp", 1), micro_batch=1),
                        **layout})
    try:
        cfg, ran, small = measured_run(load(preset), planned, 2)
        make_plan(cfg, ran, HW, 0.4)
    except InputError as e:
        assert "\n" not in str(e) and ("planned, not run" in str(e) or "dense (no mixture" in str(e)), str(e)
        return
    assert small and ran.tp * ran.pp * ran.dp == 2

@pytest.mark.parametrize("preset", ["deepseek-v3", "llama-4-scout", "kimi-k2", "gpt-oss-120b", "qwen3-235b-a22b"])
def test_the_named_presets_run_data_parallel_fsdp_and_pipeline(preset):
    for layout in (dict(dp=2), dict(dp=2, zero=3), dict(pp=2)):
        planned = Layout(**{**dict(tp=1, pp=1, dp=1, seq=4096, global_batch=16, micro_batch=1), **layout})
        cfg, ran, _ = measured_run(load(preset), planned, 2)
        assert ran.pp == layout.get("pp", 1) and cfg.n_layer == 2


def test_the_small_copy_has_a_block_of_every_kind_however_many_kinds():
    """Three kinds (Llama 4 Maverick's layout: MoE every second layer, NoPE every fourth, chunks elsewhere:
    chunked dense, chunked MoE, NoPE MoE): the copy `plan --measure` runs has 3 blocks, one of each, in
    the model's order, not the 2 a layout alone would give."""
    cfg = load("llama-4-scout", ["moe_every=2", "dense_d_ff=16384"])
    planned = Layout(tp=1, pp=1, dp=2, seq=4096, global_batch=16, micro_batch=1)
    small, _, _ = measured_run(cfg, planned, 2)
    kinds = [(b.attention.rope_theta is None, b.is_moe) for b in small.architecture.output.layers()]
    assert kinds == [(False, False), (False, True), (True, True)]
