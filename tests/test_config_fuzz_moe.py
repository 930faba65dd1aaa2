"""Property-based, as tests/test_config_fuzz.py, for issue 30's sparse-attention, MoE, per-layer-embedding and dense
families: configs drawn at small sizes, every structural key varied (latent attention's ranks, the indexer's
heads, dense-then-sparse layers in each form, shared experts and expert groups, MTP layers, windows and their
patterns, K/V sharing, biases, tied heads, RoPE scaling), each held by tests/config_draws.check: parameters equal to
what transformers 5.24 builds on meta, the generation state equal to its cache after 64 tokens, or a refusal
in one line."""

from __future__ import annotations

import pytest
from config_draws import FUZZ, B, attention, base, check, mla, moe, pattern, put, rope
from hypothesis import given, strategies as st

pytestmark = pytest.mark.filterwarnings("ignore")
pytest.importorskip("transformers")
GROUPS = ("n_group", "topk_group")


def dense_first(draw, d: dict, n: int, sparse="sparse") -> None:
    """The dense layers before the experts: first_k_dense_replace, an mlp_layer_types list, or neither."""
    form = draw(st.sampled_from(["first_k", "list", None]))
    if form == "first_k":
        d["first_k_dense_replace"] = draw(st.integers(0, n - 1))
    elif form == "list":
        d["mlp_layer_types"] = pattern(draw, n, ["dense", sparse], (sparse,))


def grouped(draw, d: dict) -> None:
    """n_group / topk_group always given (DeepSeek-V3's default of 8 groups needs 16 experts)."""
    g = draw(st.sampled_from([1, 2]))
    d.update(n_group=g, topk_group=draw(st.integers(1, g)))


@st.composite
def deepseek_v32(draw):
    kind = draw(st.sampled_from([("deepseek_v32", "DeepseekV32ForCausalLM"), ("glm_moe_dsa", "GlmMoeDsaForCausalLM")]))
    d = base(draw, *kind, layers=(1, 4))
    n = d["num_hidden_layers"]
    mla(draw, d, q_lora=False)
    d["q_lora_rank"] = 24  # DSA's indexer reads the compressed query: no null
    moe(draw, d, groups=None)
    grouped(draw, d)
    dense_first(draw, d, n)
    d.update(index_n_heads=draw(st.sampled_from([1, 2, 4])), index_head_dim=draw(st.sampled_from([16, 32])),
             index_topk=draw(st.sampled_from([4, 8])))
    if kind[0] == "glm_moe_dsa" and draw(B):
        d["indexer_types"] = ["full"] + draw(st.lists(st.sampled_from(["full", "shared"]), min_size=n - 1,
                                                      max_size=n - 1))
    put(draw, d, "num_nextn_predict_layers", st.sampled_from([0, 1]))
    put(draw, d, "attention_bias", B)
    rope(draw, d, ("default", "yarn"))
    return d


@st.composite
def deepseek_v4(draw):
    d = base(draw, "deepseek_v4", "DeepseekV4ForCausalLM", layers=(1, 4))
    n = d["num_hidden_layers"]
    d.pop("intermediate_size", None)
    d.update(num_attention_heads=draw(st.sampled_from([2, 4])), head_dim=32, q_lora_rank=16, o_groups=2,
             o_lora_rank=16, n_routed_experts=4, num_experts_per_tok=2, moe_intermediate_size=16,
             index_n_heads=2, index_head_dim=16, index_topk=4, sliding_window=8, qk_rope_head_dim=8)
    put(draw, d, "hc_mult", st.sampled_from([1, 2, 4]))
    put(draw, d, "n_shared_experts", st.sampled_from([0, 1]))
    put(draw, d, "layer_types", st.lists(st.sampled_from(["sliding_attention", "compressed_sparse_attention",
                                                          "heavily_compressed_attention"]), min_size=n, max_size=n))
    put(draw, d, "mlp_layer_types", st.lists(st.sampled_from(["hash_moe", "moe"]), min_size=n, max_size=n))
    put(draw, d, "compress_rates", st.sampled_from([{"compressed_sparse_attention": 4,
                                                     "heavily_compressed_attention": 16}]))
    put(draw, d, "num_nextn_predict_layers", st.sampled_from([0, 1]))
    return d


@st.composite
def longcat_flash(draw):
    d = base(draw, "longcat_flash", "LongcatFlashForCausalLM")
    d.pop("intermediate_size", None)
    d["num_layers"] = d.pop("num_hidden_layers")
    mla(draw, d, q_lora=False)
    d["q_lora_rank"] = 24  # LongcatFlashConfig takes no null
    d.update(ffn_hidden_size=48, expert_ffn_hidden_size=16, n_routed_experts=draw(st.sampled_from([4, 8])),
             zero_expert_num=draw(st.sampled_from([0, 2, 4])), moe_topk=draw(st.sampled_from([1, 2])))
    put(draw, d, "attention_bias", B)
    return d


@st.composite
def glm4_moe(draw):
    lite = draw(B)
    d = base(draw, "glm4_moe_lite" if lite else "glm4_moe", "Glm4MoeLiteForCausalLM" if lite else "Glm4MoeForCausalLM",
             layers=(1, 4))
    n = d["num_hidden_layers"]
    if lite:
        mla(draw, d)
        dense_first(draw, d, n)
    else:
        attention(draw, d)
        d.setdefault("head_dim", 16)  # 96 default heads do not divide 64
        put(draw, d, "first_k_dense_replace", st.integers(0, n - 1))
        put(draw, d, "use_qk_norm", B)
        put(draw, d, "attention_bias", B)
    moe(draw, d, groups=None)
    grouped(draw, d)
    put(draw, d, "num_nextn_predict_layers", st.sampled_from([0, 1]))
    rope(draw, d, ("default", "yarn"))
    return d


@st.composite
def minimax_m2(draw):
    d = base(draw, "minimax_m2", "MiniMaxM2ForCausalLM")
    attention(draw, d)
    d.update(num_local_experts=draw(st.sampled_from([4, 8])), num_experts_per_tok=2)
    put(draw, d, "use_qk_norm", B)
    put(draw, d, "rotary_dim", st.sampled_from([8, 16]))
    rope(draw, d)
    return d


@st.composite
def kimi_k25(draw):
    text = dict(model_type=draw(st.sampled_from(["kimi_k2", "deepseek_v3"])), vocab_size=96, hidden_size=32,
                intermediate_size=40, moe_intermediate_size=16, num_hidden_layers=draw(st.integers(1, 3)),
                kv_lora_rank=12, qk_nope_head_dim=8, qk_rope_head_dim=4, v_head_dim=6)
    text.update(num_attention_heads=draw(st.sampled_from([2, 4])), n_routed_experts=8, num_experts_per_tok=2)
    grouped(draw, text)
    text["q_lora_rank"] = draw(st.sampled_from([None, 20]))  # the default 1536 is wider than this model
    put(draw, text, "n_shared_experts", st.sampled_from([0, 1]))
    put(draw, text, "first_k_dense_replace", st.integers(0, 1))
    d = {"model_type": "kimi_k25", "architectures": ["Kimi_K25ForConditionalGeneration"], "text_config": text,
         "vision_config": dict(num_hidden_layers=2, hidden_size=16, intermediate_size=24, num_attention_heads=2,
                               pos_emb_height=4, pos_emb_width=4, patch_size=4)}
    put(draw, d, "tie_word_embeddings", B)
    return d


@st.composite
def mimo_v2_flash(draw):
    d = base(draw, "mimo_v2_flash", "MiMoV2FlashForCausalLM", layers=(1, 6))
    n = d["num_hidden_layers"]
    attention(draw, d, head_dim=(24, 48))  # a third of each (partial_rotary_factor 0.334) an even rotary width
    put(draw, d, "v_head_dim", st.sampled_from([8, 16]))
    put(draw, d, "layer_types", st.lists(st.sampled_from(["full_attention", "sliding_attention"]), min_size=n,
                                         max_size=n))
    put(draw, d, "mlp_layer_types", st.lists(st.sampled_from(["dense", "sparse"]), min_size=n, max_size=n))
    put(draw, d, "sliding_window", st.sampled_from([4, 9, 129]))
    moe(draw, d, shared=None, groups=None)
    grouped(draw, d)
    put(draw, d, "attention_bias", B)
    return d


@st.composite
def ernie4_5_moe(draw):
    d = base(draw, "ernie4_5_moe", "Ernie4_5_MoeForCausalLM", layers=(1, 6))
    n = d["num_hidden_layers"]
    attention(draw, d, head_dim=None)
    d.update(moe_num_experts=draw(st.sampled_from([4, 8])), moe_k=2, moe_intermediate_size=16)
    put(draw, d, "moe_num_shared_experts", st.sampled_from([0, 1, 2]))
    put(draw, d, "moe_layer_start_index", st.integers(0, n - 1))
    put(draw, d, "moe_layer_end_index", st.integers(0, n - 1))
    put(draw, d, "moe_layer_interval", st.sampled_from([1, 2]))
    put(draw, d, "use_bias", B)
    rope(draw, d)
    return d


FAMILIES = {"deepseek_v32": deepseek_v32(), "deepseek_v4": deepseek_v4(), "longcat_flash": longcat_flash(),
            "glm4_moe": glm4_moe(), "minimax_m2": minimax_m2(), "kimi_k25": kimi_k25(),
            "mimo_v2_flash": mimo_v2_flash(), "ernie4_5_moe": ernie4_5_moe()}
NO_META_FORWARD = {"longcat_flash", "deepseek_v4", "kimi_k25"}  # a forward reads routing back (.item, nonzero)
# what tfcalc states it does not count: DSA's sparse layers before dense ones; DeepseekV4 builds one shared expert
# whatever n_shared_experts says, its hash-routed layers first
REFUSALS = {"deepseek_v32": (r"'mlp_layer_types' .* is not supported: one of dense or sparse per layer",),
            "deepseek_v4": (r"'n_shared_experts' 0 is not supported", r"hash_moe layers after a moe layer"),
            # Glm4MoeLiteConfig reads no first_k_dense_replace (its first layer dense); ERNIE's biased attention,
            # dense MLPs and shared experts beside unbiased routed experts
            "glm4_moe": (r"'first_k_dense_replace' \d+ is not read by transformers' glm4_moe_lite",),
            "ernie4_5_moe": (r"'use_bias' true is not supported",)}


@pytest.mark.parametrize("family", list(FAMILIES))
def test_drawn_configs_count_as_transformers_builds_them(family):
    @FUZZ
    @given(FAMILIES[family])
    def run(data):
        check(data, None if family in NO_META_FORWARD else 64, REFUSALS.get(family, ()))

    run()
