"""FLOPs: hand-derived figures, the crossover, training and decode, and measured (FlopCounterMode) == analytic."""

import functools

import pytest
import torch
from conftest import configs, tiny
from hypothesis import HealthCheck, assume, given, settings, strategies as st
from torch.utils.flop_counter import FlopCounterMode

from tfcalc.config import ConfigError
from tfcalc.count.model import flops as count
from tfcalc.measure import flops as measure
from tfcalc.model import build_model
from tfcalc.presets import load, preset_names
from tfcalc.workload import Workload

# ---------- analytic, by hand ----------


def test_gpt2_forward_by_hand():
    # GPT-2 small at B = 1, T = 1024 (the figures): d = 768, 12 blocks, V = 50257.
    cfg, T, d, L, V = load("gpt2"), 1024, 768, 12, 50257
    b = count.breakdown(cfg, Workload(batch=1, seq=T))
    totals = b.totals()
    linear_in_blocks = L * 2 * T * d * (3 * d + d + 4 * d + 4 * d)  # qkv, out, up, down
    assert totals["attention_proj"] + totals["ffn"] == linear_in_blocks == 173_946_175_488
    assert totals["attention_scores"] == L * 4 * T * T * d == 38_654_705_664
    assert totals["lm_head"] == 2 * T * d * V == 79_047_426_048
    assert totals["embeddings"] == 0
    assert b.forward == count.forward_flops(cfg, Workload(batch=1, seq=T)) == 291_648_307_200


def test_causal_pairs_by_brute_force():
    for keys in range(1, 12):
        for queries in range(1, keys + 1):
            offset = keys - queries  # query i sits at position offset + i and sees positions 0 .. offset + i
            pairs = sum(1 for i in range(queries) for j in range(keys) if j <= offset + i)
            assert count.causal_pairs(queries, keys) == pairs


def test_causal_counts_only_the_unmasked_half():
    cfg, B, T = tiny(), 3, 9
    full = count.attention_score_flops(cfg, Workload(batch=B, seq=T))
    causal = count.attention_score_flops(cfg, Workload(batch=B, seq=T), causal=True)
    assert full == 4 * B * T * T * cfg.q_dim
    assert causal == 4 * B * cfg.q_dim * (T * (T + 1) // 2)
    assert count.forward_flops(cfg, Workload(batch=B, seq=T)) - count.forward_flops_causal(
        cfg, Workload(batch=B, seq=T)
    ) == cfg.n_layer * (full - causal)


def test_gqa_shrinks_k_and_v_projections_only():
    mha = count.breakdown(tiny(n_head=8), Workload(batch=2, seq=5)).components()
    gqa = count.breakdown(tiny(n_head=8, n_kv_head=2), Workload(batch=2, seq=5)).components()
    assert gqa["attn_k"] * 4 == mha["attn_k"] and gqa["attn_v"] * 4 == mha["attn_v"]
    for same in ("attn_q", "attn_o", "attn_qk", "attn_av", "ffn_up", "ffn_down", "lm_head"):
        assert gqa[same] == mha[same], same


def test_gated_ffn_has_three_matrices_and_explicit_d_head_widens_attention():
    gated = count.breakdown(tiny(gated_ffn=True, d_ff=40), Workload(batch=1, seq=4)).per_layer()
    assert gated["ffn"] == 3 * 2 * 4 * 32 * 40
    wide = count.breakdown(tiny(d_head=16), Workload(batch=1, seq=4)).per_layer()  # q = 4 * 16 = 64 != d_model = 32
    assert wide["attention_proj"] == 2 * 4 * 32 * (64 + 2 * 64) + 2 * 4 * 64 * 32
    assert wide["attention_scores"] == 4 * 4 * 4 * 64


def test_sublayer_helpers_add_up_to_the_forward():
    for name in ("gpt2", "llama2-70b", "gpt3-xl"):
        cfg = load(name)
        B, T = 2, 37
        blocks = cfg.n_layer * (
            count.attention_flops(cfg, Workload(batch=B, seq=T)) + count.ffn_flops(cfg, Workload(batch=B, seq=T))
        )
        assert blocks + count.lm_head_flops(cfg, Workload(batch=B, seq=T)) == count.forward_flops(
            cfg, Workload(batch=B, seq=T)
        )
        parts = count.attention_proj_flops(cfg, Workload(batch=B, seq=T)) + count.attention_score_flops(
            cfg, Workload(batch=B, seq=T)
        )
        assert count.attention_flops(cfg, Workload(batch=B, seq=T)) == parts


def test_per_token_is_exact_and_linear_in_batch():
    cfg = load("llama2-7b")
    one, four = count.breakdown(cfg, Workload(batch=1, seq=333)), count.breakdown(cfg, Workload(batch=4, seq=333))
    assert four.forward == 4 * one.forward and four.forward_causal == 4 * one.forward_causal
    assert one.per_token(one.forward) * 333 == one.forward
    assert four.per_token(four.forward_causal) == one.per_token(one.forward_causal)


def test_non_matmul_is_separate_from_the_forward():
    relu, gelu = tiny(activation="relu"), tiny(activation="gelu_tanh")
    assert count.forward_flops(relu, Workload(batch=2, seq=8)) == count.forward_flops(gelu, Workload(batch=2, seq=8))
    nm_relu, nm_gelu = (
        count.non_matmul_flops(relu, Workload(batch=2, seq=8)),
        count.non_matmul_flops(gelu, Workload(batch=2, seq=8)),
    )
    assert nm_gelu["activation"] - nm_relu["activation"] == (9 - 1) * 2 * 8 * relu.ffn_dim * relu.n_layer
    assert nm_relu["softmax"] == 5 * 2 * relu.n_head * 8 * 8 * relu.n_layer
    rope = count.non_matmul_flops(tiny(pos_encoding="rope", n_kv_head=2), Workload(batch=1, seq=8))
    assert rope["rope"] == 3 * 8 * (32 + 16) * 2 and "positions" not in rope


def test_bad_sizes_are_refused():
    with pytest.raises(ValueError):
        count.forward_flops(tiny(), Workload(batch=1, seq=0))
    with pytest.raises(ValueError):
        count.breakdown(tiny(), Workload(batch=-1, seq=4))


# ---------- crossover ----------


def test_gpt3_crossover_is_4d_and_2d():
    cfg = load("gpt3")
    assert count.crossover_seq(cfg) == count.Crossover(scores_vs_ffn=4 * 12288, attention_vs_ffn=2 * 12288)
    assert count.crossover_seq(cfg) == count.Crossover(49_152, 24_576)
    assert count.crossover_seq(cfg, causal=True) == count.Crossover(98_303, 49_151)


def _smallest(predicate, start: int = 1, limit: int = 10**6) -> int:
    t = start
    while not predicate(t):
        t += 1
        assert t < limit, "no crossover found by search"
    return t


def _reaches_ffn(cfg, sublayer, causal: bool, t: int) -> bool:
    """Whether the attention sublayer's FLOPs at T = t have reached the FFN's (one sequence)."""
    return sublayer(cfg, Workload(batch=1, seq=t), causal) >= count.ffn_flops(cfg, Workload(batch=1, seq=t))


@settings(max_examples=60, deadline=None)
@given(configs())
def test_crossover_is_the_smallest_seq_by_search(cfg):
    # the crossover is that of full attention and a dropless MoE (its docstring): a window bounds the causal
    # scores (they may never reach the FFN), a capacity makes the FFN a step function of T
    assume(cfg.sliding_window is None and cfg.expert_capacity_factor is None)
    for causal in (False, True):
        x = count.crossover_seq(cfg, causal=causal)
        pairs = ((x.scores_vs_ffn, count.attention_score_flops), (x.attention_vs_ffn, count.attention_flops))
        for found, sublayer in pairs:
            reached = functools.partial(_reaches_ffn, cfg, sublayer, causal)
            if found is None:  # a sliding window's (or chunk's) causal scores grow like W·T: they may never catch up
                span = cfg.sliding_window or cfg.attention_chunk_size
                assert causal and span and not any(reached(t) for t in range(1, 50 * span + 50))
            else:
                assert found == _smallest(reached)


@pytest.mark.parametrize("name", ["gemma-2-9b", "mistral-7b", "phi-3-mini"])
def test_windowed_causal_crossover_against_the_layers_flops(name):
    """Sliding windows, every layer windowed (Mistral, Phi-3: the scores grow like W·T and may never
    catch up) or every other one (Gemma 2): the causal crossover is the first T at which the mean over
    the layers of attention_score_flops (each layer's unmasked pairs, its own window) reaches the FFN's,
    searched here step by step from the far side and sampled below it."""
    cfg = load(name)
    x = count.crossover_seq(cfg, causal=True)
    pairs = ((x.scores_vs_ffn, count.attention_score_flops), (x.attention_vs_ffn, count.attention_flops))
    for found, sublayer in pairs:
        reached = functools.partial(_reaches_ffn, cfg, sublayer, True)
        if found is None:
            assert cfg.full_attention_every is None and not any(reached(t) for t in range(1, 10**6, 9973))
            continue
        assert reached(found) and not reached(found - 1)
        assert not any(reached(t) for t in range(1, found, 997))
        assert all(reached(t) for t in range(found, 4 * found, 4999))
    if name == "gemma-2-9b":  # half the layers full: later than full attention's 2·(3·d·f/(2q))−1 everywhere
        assert x.scores_vs_ffn > 2 * count.crossover_seq(cfg).scores_vs_ffn - 1


def test_llama2_70b_crossover_is_gqa_aware():
    # q = 8192, k = 1024, f = 28672, gated (3 matrices): 3·d·f/(2q) and d·(3f − 2q − 2k)/(2q).
    cfg = load("llama2-70b")
    assert count.crossover_seq(cfg) == count.Crossover(3 * 28672 // 2, (3 * 28672 - 2 * 8192 - 2 * 1024) // 2)


# ---------- training, the formulas, decode ----------


def test_training_is_three_or_four_forwards():
    cfg = load("gpt2")
    fwd = count.forward_flops(cfg, Workload(batch=2, seq=100))
    assert count.training_flops(cfg, Workload(batch=2, seq=100)) == 3 * fwd
    assert count.training_flops(cfg, Workload(batch=2, seq=100), recompute=True) == 4 * fwd
    assert count.training_flops(cfg, Workload(batch=2, seq=100), causal=True) == 3 * count.forward_flops_causal(
        cfg, Workload(batch=2, seq=100)
    )


def test_n_as_each_source_defines_it():
    gpt2, llama = load("gpt2"), load("llama2-7b")
    assert count.kaplan_params(gpt2) == 85_056_000  # 124,439,808 less V·d and 1024·d
    assert count.palm_params(gpt2) == 124_439_808 - 1024 * 768  # nanoGPT's get_num_params(): tied wte stays
    assert count.kaplan_params(llama) == 6_738_415_616 - 2 * 32000 * 4096
    assert count.palm_params(llama) == 6_738_415_616 - 32000 * 4096  # torchtitan: untied tok_embeddings go


def _formulas(cfg, B, T):
    return {f.key: f for f in count.standard_formulas(cfg, B, T)}


def test_megatron_formula_is_exact_for_gpt_shapes_and_palm_close():
    for name, T in (("gpt2", 1024), ("gpt3", 2048), ("gpt3-small", 77)):
        cfg = load(name)
        exact = count.training_flops(cfg, Workload(batch=3, seq=T))
        f = _formulas(cfg, 3, T)
        assert f["korthikanti"].training_flops == exact  # q = d, f = 4d, MHA, ungated: term for term
        assert abs(f["palm"].rel_error(exact)) < 1e-3  # N also carries biases and norms: +0.09% for GPT-2


def test_chinchilla_adds_the_embedding_matmul_and_softmax_to_the_exact_count():
    cfg, B, T = load("gpt2"), 2, 64
    fwd = count.forward_flops(cfg, Workload(batch=B, seq=T))
    embed, softmax = 2 * T * cfg.vocab_size * cfg.d_model, 3 * cfg.n_head * T * T * cfg.n_layer
    assert _formulas(cfg, B, T)["chinchilla"].training_flops == 3 * (fwd + B * (embed + softmax))


def test_kaplan_counts_half_the_score_square():
    # Table 1's 2·n_layer·n_ctx·d_attn per token is the causal count, up to T vs T + 1.
    cfg, B, T = load("gpt3"), 1, 2048
    f = _formulas(cfg, B, T)
    attention_term = f["kaplan_table1"].training_flops - f["kaplan_6nd"].training_flops
    causal_scores = count.attention_score_flops(cfg, Workload(batch=B, seq=T), causal=True) * cfg.n_layer * 3
    assert attention_term == 3 * 2 * cfg.n_layer * T * cfg.q_dim * B * T
    assert abs(attention_term / causal_scores - 1) < 1 / T
    # 6ND misses the LM head and the scores: -40% for GPT-2 at its context, -3% for GPT-3 175B.
    assert -0.41 < f["kaplan_6nd"].rel_error(count.training_flops(cfg, Workload(batch=B, seq=T))) < -0.03 + 0.001
    gpt2 = load("gpt2")
    assert (
        _formulas(gpt2, 1, 1024)["kaplan_6nd"].rel_error(count.training_flops(gpt2, Workload(batch=1, seq=1024)))
        < -0.40
    )


def test_decode_is_one_token_against_t_keys():
    cfg, B, T = load("llama2-70b"), 2, 4096
    one_token = count.forward_flops(cfg, Workload(batch=B, seq=1))  # T = 1: one key
    assert count.decode_flops(cfg, Workload(batch=B, seq=T)) == one_token + cfg.n_layer * 4 * B * cfg.q_dim * (T - 1)
    # Full-square prefill does, per token, what one decode step at the full context does.
    assert count.forward_flops(cfg, Workload(batch=B, seq=T)) == T * count.decode_flops(cfg, Workload(batch=B, seq=T))
    assert count.forward_flops_causal(cfg, Workload(batch=B, seq=T)) < T * count.decode_flops(
        cfg, Workload(batch=B, seq=T)
    )


# ---------- measured == analytic ----------


def _assert_measured_matches(cfg, B, T, device, src_seq=None):
    m = measure.measure_flops(cfg, Workload(batch=B, seq=T, src_seq=src_seq), device)
    b = count.breakdown(cfg, Workload(batch=B, seq=T, src_seq=src_seq))
    assert m.total == b.forward
    assert m.groups == dict({g: n for g, n in b.totals().items() if g != "embeddings" or n}, other=0)
    return m


@pytest.mark.parametrize("name", preset_names())
@pytest.mark.parametrize("B, T", [(1, 7), (2, 16)], ids=["B1-T7", "B2-T16"])
def test_every_preset_measured_on_meta_equals_analytic(name, B, T):
    _assert_measured_matches(load(name), B, T, "meta")


def test_gpt3_175b_at_its_context_on_meta():
    m = _assert_measured_matches(load("gpt3"), 1, 2048, "meta")
    assert m.total == 734_804_261_732_352 and m.device == "meta"


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(configs(), st.integers(1, 3), st.data(), st.sampled_from(["cpu", "meta"]))
def test_random_configs_measured_equal_analytic(cfg, B, data, device):
    T = data.draw(st.integers(1, cfg.max_seq_len), label="seq")
    has_source = cfg.arch == "encoder-decoder" or cfg.cross_attention
    src_seq = data.draw(st.integers(1, cfg.max_seq_len), label="src_seq") if has_source else None
    _assert_measured_matches(cfg, B, T, device, src_seq)


def test_cpu_attention_needs_our_formula_and_gets_it():
    # PyTorch 2.13 dispatches SDPA on the CPU to one op with no registered formula: plain
    # FlopCounterMode counts the attention scores as 0. If this fails, PyTorch registered one.
    cfg, B, T = tiny(n_head=4, n_kv_head=2), 2, 11
    model, idx = build_model(cfg, "cpu"), torch.zeros(B, T, dtype=torch.long)
    with torch.no_grad(), FlopCounterMode(display=False) as plain:
        model(idx)
    scores = cfg.n_layer * count.attention_score_flops(cfg, Workload(batch=B, seq=T))
    assert plain.get_total_flops() == count.forward_flops(cfg, Workload(batch=B, seq=T)) - scores
    m = _assert_measured_matches(cfg, B, T, "cpu")  # GQA: q heads × the full T² square
    assert m.by_module["attn.scores"] == scores == cfg.n_layer * 4 * B * T * T * cfg.q_dim


def test_meta_decomposes_sdpa_and_counts_it_without_our_formula():
    cfg, B, T = tiny(n_head=4, n_kv_head=1), 1, 13
    model, idx = build_model(cfg, "meta"), torch.zeros(B, T, dtype=torch.long, device="meta")
    with torch.no_grad(), FlopCounterMode(display=False) as plain:
        model(idx)
    assert plain.get_total_flops() == count.forward_flops(cfg, Workload(batch=B, seq=T))


@pytest.mark.parametrize("device", ["meta", "cpu"])
def test_measured_training_is_three_forwards_except_flash_recompute(device):
    for cfg in (tiny(n_kv_head=2), tiny(pos_encoding="alibi")):
        B, T = 2, 9
        m = measure.measure_flops(cfg, Workload(batch=B, seq=T), device, training=True)
        expected = count.training_flops(cfg, Workload(batch=B, seq=T))
        if device == "cpu" and cfg.pos_encoding != "alibi":
            # The CPU flash-attention backward recomputes Q·Kᵀ (PyTorch's formula: 5 score matmuls, not 4).
            expected += cfg.n_layer * count.attention_score_flops(cfg, Workload(batch=B, seq=T)) // 2
        assert m.training_total == expected, (device, cfg.pos_encoding)


def test_measuring_beyond_a_position_table_is_refused():
    with pytest.raises(ConfigError, match="exceeds the model's context of 1024 learned positions"):
        measure.measure_flops(load("gpt2"), Workload(batch=1, seq=1025))
    with pytest.raises(ConfigError, match="RoPE"):
        measure.check_measurable(load("llama2-7b"), Workload(batch=1, seq=4097), "meta")
    alibi = tiny(pos_encoding="alibi", max_seq_len=4)
    _assert_measured_matches(alibi, 1, 9, "meta")  # ALiBi has no table: any length runs


def test_large_models_are_not_allocated_on_a_real_device():
    with pytest.raises(ConfigError, match="measure on meta"):
        measure.check_measurable(load("gpt3"), Workload(batch=1, seq=2048), "cpu")
    measure.check_measurable(load("gpt2"), Workload(batch=1, seq=1024), "cpu")
