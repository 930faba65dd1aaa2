"""Property-based, as tests/test_config_fuzz.py, for issue 30's per-layer-embedding (Gemma 3n, Gemma 4) and dense
local/global families (OLMo 3, EXAONE 4, Seed-OSS, Apertus): configs drawn at small sizes with their layer
patterns (layer_types, sliding_window_pattern as a number or letters), windows, K/V sharing (num_kv_shared_layers),
per-layer inputs, global heads and the experts block, biases, tied heads and RoPE scaling varied; each held by
tests/config_draws.check: parameters equal to transformers 5.24's on meta, the generation state equal to its cache
after 64 tokens, or a refusal in one line."""

from __future__ import annotations

import pytest
from config_draws import FUZZ, B, attention, base, check, pattern, put, rope
from hypothesis import given, strategies as st

pytestmark = pytest.mark.filterwarnings("ignore")
pytest.importorskip("transformers")
LOCAL = ["sliding_attention", "full_attention"]


def local_global(draw, d: dict, n: int) -> None:
    put(draw, d, "layer_types", st.just(pattern(draw, n, LOCAL, ("sliding_attention", "full_attention"))))
    put(draw, d, "sliding_window", st.sampled_from([4, 16, 128]))


@st.composite
def gemma3n(draw):
    d = base(draw, "gemma3n_text", "Gemma3nForCausalLM", layers=(2, 6))
    n = d["num_hidden_layers"]
    attention(draw, d)
    d.setdefault("head_dim", 16)
    kinds = pattern(draw, n, LOCAL, ("sliding_attention", "full_attention"))
    d["layer_types"] = kinds
    first = max(i for i, k in enumerate(kinds) if kinds.index(k) == i) + 1  # each kind before the shared ones
    d["num_kv_shared_layers"] = draw(st.integers(0, n - first))
    put(draw, d, "sliding_window", st.sampled_from([4, 16]))
    put(draw, d, "intermediate_size", st.sampled_from([48, [48] * n]))
    put(draw, d, "activation_sparsity_pattern", st.sampled_from([[0.0] * n, [0.95] + [0.0] * (n - 1)]))
    d.update(vocab_size_per_layer_input=draw(st.sampled_from([32, 96])),
             hidden_size_per_layer_input=draw(st.sampled_from([4, 8])))
    put(draw, d, "laurel_rank", st.sampled_from([4, 8]))
    put(draw, d, "altup_num_inputs", st.sampled_from([2, 4]))
    return d


@st.composite
def gemma4(draw):
    d = base(draw, "gemma4_text", "Gemma4ForCausalLM", layers=(2, 6))
    n = d["num_hidden_layers"]
    attention(draw, d)
    kinds = pattern(draw, n, LOCAL, ("sliding_attention", "full_attention"))
    d["layer_types"] = kinds
    first = max(i for i, k in enumerate(kinds) if kinds.index(k) == i) + 1
    put(draw, d, "num_kv_shared_layers", st.integers(0, n - first))
    put(draw, d, "sliding_window", st.sampled_from([4, 16]))
    put(draw, d, "global_head_dim", st.sampled_from([16, 32]))
    put(draw, d, "attention_k_eq_v", B)
    put(draw, d, "num_global_key_value_heads", st.sampled_from([1]))
    put(draw, d, "hidden_size_per_layer_input", st.sampled_from([0, 8]))
    if d.get("hidden_size_per_layer_input") == 0:  # Gemma4ForCausalLM's forward slices the absent per-layer inputs
        d["num_kv_shared_layers"] = 0  # of K/V-shared layers (modeling_gemma4.py): it runs no such model
    d["vocab_size_per_layer_input"] = 96
    put(draw, d, "use_double_wide_mlp", B)
    if draw(B):
        d.update(enable_moe_block=True, num_experts=4, top_k_experts=2, moe_intermediate_size=16)
    put(draw, d, "attention_bias", B)
    put(draw, d, "final_logit_softcapping", st.sampled_from([None, 30.0]))
    return d


@st.composite
def olmo3(draw):
    d = base(draw, "olmo3", "Olmo3ForCausalLM")
    attention(draw, d, head_dim=None)
    local_global(draw, d, d["num_hidden_layers"])
    put(draw, d, "attention_bias", B)
    rope(draw, d, ("default", "yarn", "linear", "llama3"))
    return d


@st.composite
def exaone4(draw):
    d = base(draw, "exaone4", "Exaone4ForCausalLM")
    n = d["num_hidden_layers"]
    attention(draw, d, head_dim=None)
    form = draw(st.sampled_from(["list", "int", None]))  # letters ("LLLG"): Exaone4Config takes the modulo of a str
    if form == "list":
        d["layer_types"] = pattern(draw, n, LOCAL)
    elif form == "int":
        d["sliding_window_pattern"] = draw(st.sampled_from([2, 4]))
    put(draw, d, "sliding_window", st.sampled_from([4, 16]))
    rope(draw, d, ("default", "llama3", "yarn"))
    return d


@st.composite
def seed_oss(draw):
    d = base(draw, "seed_oss", "SeedOssForCausalLM")
    attention(draw, d)
    for key in ("attention_bias", "attention_out_bias", "mlp_bias"):
        put(draw, d, key, B)
    rope(draw, d)
    return d


@st.composite
def apertus(draw):
    d = base(draw, "apertus", "ApertusForCausalLM")
    attention(draw, d)
    put(draw, d, "attention_bias", B)
    put(draw, d, "hidden_act", st.sampled_from(["xielu", "silu"]))
    rope(draw, d, ("default", "llama3", "yarn", "linear"))
    return d


FAMILIES = {"gemma3n": gemma3n(), "gemma4": gemma4(), "olmo3": olmo3(), "exaone4": exaone4(),
            "seed_oss": seed_oss(), "apertus": apertus()}


@pytest.mark.parametrize("family", list(FAMILIES))
def test_drawn_configs_count_as_transformers_builds_them(family):
    @FUZZ
    @given(FAMILIES[family])
    def run(data):
        check(data)

    run()
