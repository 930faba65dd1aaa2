"""Parameter counts: analytic == empirical (meta module) for every preset, and both == published figures."""

import pytest
from conftest import tiny

from tfcalc.count.model import params as count
from tfcalc.measure.params import measure_params
from tfcalc.presets import load, preset_names

PUBLISHED = {  # ../shared/reference.md
    "gpt2": 124_439_808,
    "llama2-7b": 6_738_415_616,
    "llama2-13b": 13_015_864_320,
    "llama2-70b": 68_976_648_192,
    "llama3-8b": 8_030_261_248,
    "llama3-70b": 70_553_706_496,
    "mistral-7b": 7_241_732_096,
    "mixtral-8x7b": 46_702_792_704,  # all experts; active per token in test_kinds
    "bert-base": 109_482_240,  # BertModel: embeddings, encoder, pooler (the "110M")
    "bert-large": 335_141_888,  # BertModel (the "340M")
    "gemma-2-9b": 917_504_000 + 8_324_201_984,  # Gemma Team 2024, Table 2: embedding + non-embedding
    "pythia-1.4b": 1_414_647_808,  # Biderman et al. 2023, Table 1
}
# Published as rounded figures only (exact counts: test_hf_reference.py, against transformers).
ROUNDED = {  # preset: (what the source prints, how far the exact count may lie from it)
    "phi-3-mini": (3.8e9, 0.05e9),  # Abdin et al. 2024, sec. 2: 3.8B
    "falcon-7b": (7e9, 0.5e9),  # Almazrouei et al. 2023: 7B
    "t5-base": (220e6, 5e6),  # Raffel et al. 2020, sec. 3.7: "about 220 million"
}


@pytest.mark.parametrize("name, published", ROUNDED.items(), ids=list(ROUNDED))
def test_rounded_published_sizes(name, published):
    value, rounding = published
    assert abs(count.total(load(name)) - value) <= rounding


def test_non_embedding_counts_as_published():
    pythia = load("pythia-1.4b")  # Biderman et al. 2023, Table 1: 1,208,602,624 non-embedding
    assert count.total(pythia) - 2 * pythia.vocab_size * pythia.d_model == 1_208_602_624


@pytest.mark.parametrize("name", preset_names())
def test_analytic_equals_empirical_component_by_component(name):
    cfg = load(name)
    total, measured = measure_params(cfg)
    assert measured == count.breakdown(cfg)
    assert total == count.total(cfg) == sum(measured.values())


@pytest.mark.parametrize("name, published", PUBLISHED.items(), ids=list(PUBLISHED))
def test_published_counts(name, published):
    cfg = load(name)
    assert count.total(cfg) == published
    assert measure_params(cfg)[0] == published


def test_gpt2_by_hand():
    # V*d + ctx*d + L*(12*d^2 + 13*d) + 2*d (final LayerNorm), head tied: Radford et al. 2019.
    V, ctx, L, d = 50257, 1024, 12, 768
    assert count.total(load("gpt2")) == V * d + ctx * d + L * (12 * d * d + 13 * d) + 2 * d


def test_gpt3_175b_is_174_6_billion_and_near_the_seeds_formula():
    cfg = load("gpt3")
    assert count.total(cfg) == 174_604_259_328
    assert count.seeds_approximation(cfg) == 12 * 96 * 12288**2 + 50257 * 12288
    assert abs(count.seeds_approximation(cfg) / count.total(cfg) - 1) < 0.001


def test_tied_head_counts_once_and_untied_adds_v_times_d():
    tied, untied = tiny(), tiny(tie_embeddings=False)
    assert count.total(untied) - count.total(tied) == 61 * 32
    assert count.breakdown(tied)["lm_head"] == 0
    assert measure_params(tied)[1]["lm_head"] == 0
    assert count.seeds_approximation(untied) - count.seeds_approximation(tied) == 61 * 32


def test_gqa_shrinks_k_and_v_only():
    mha, gqa = count.breakdown(tiny(n_head=8)), count.breakdown(tiny(n_head=8, n_kv_head=2))
    assert gqa["attn_q_weight"] == mha["attn_q_weight"] and gqa["attn_o_weight"] == mha["attn_o_weight"]
    assert gqa["attn_k_weight"] * 4 == mha["attn_k_weight"] and gqa["attn_v_bias"] * 4 == mha["attn_v_bias"]


def test_group_totals_sum_to_total():
    for name in ("gpt2", "llama2-70b"):
        cfg = load(name)
        assert sum(count.group_totals(cfg, count.breakdown(cfg)).values()) == count.total(cfg)


def test_width_note_for_the_inconsistent_gpt3_rows_and_gemma_2s_wide_attention():
    noted = {name for name in preset_names() if count.width_note(load(name))}
    # Gemma 2 9B is 16 heads of 256 = 4096 wide over d_model 3584 by design (Gemma Team 2024, Table 1), and
    # so are gpt-oss (64 heads of 64 over 2880, arXiv 2508.10925, sec. 2.1) and Qwen3-MoE (heads of 128: 4096
    # over 2048, 8192 over 4096; the config.json files' head_dim), and Gemma 3 27B (32 heads of 128 = 4096
    # over 5376, its config.json), and issue 30's Seed-OSS-36B (80 heads of 128 = 10,240 over 5120), GLM-4.5
    # (96 of 128 = 12,288 over 5120) and MiniMax-M2 (48 of 128 = 6144 over 3072), each its config.json's head_dim,
    # and Qwen3-Next-80B-A3B's gated attention layers (16 heads of 256 = 4096 over 2048), Nemotron-3-Nano-30B-A3B's
    # attention layers (32 of 128 = 4096 over 2688), Gemma 4 31B's local layers (32 of 256 = 8192 over 5376,
    # google-deepmind/gemma's Gemma4_31B), Qwen3.5-397B-A17B's gated attention layers (32 of 256 = 8192 over 4096)
    assert noted == {"gpt3-xl", "gpt3-13b", "gemma-2-9b", "gpt-oss-20b", "gpt-oss-120b", "qwen3-30b-a3b",
                     "qwen3-235b-a22b", "gemma-3-27b", "seed-oss-36b", "glm-4.5", "minimax-m2", "qwen3-next-80b-a3b",
                     "nemotron-3-nano-30b-a3b", "gemma-4-31b", "qwen3.5-397b-a17b"}
    note = count.width_note(load("gpt3-xl"))
    assert note.q_dim == 3072 and note.total_as_given == count.total(load("gpt3-xl"))
    # Reading d_head as 2048/24 makes attention 4*2048^2 + 4*2048 per layer, as in GPT-2: ~1.3B, the named size.
    d, L = 2048, 24
    as_gpt2 = 50257 * d + 2048 * d + L * (12 * d * d + 13 * d) + 2 * d
    assert note.total_attention_d_model_wide == as_gpt2
    assert abs(as_gpt2 / 1.3e9 - 1) < 0.02 < abs(note.total_as_given / 1.3e9 - 1)
    assert "+16.7% vs the named size" in note.text(24, 128)


def test_nominal_value():
    assert count.nominal_value("175B") == 175e9 and count.nominal_value("1.3B") == 1.3e9
    assert count.nominal_value("124M") == 124e6 and count.nominal_value(None) is None
