"""The published config.json files of DeepSeek-V3, Kimi K2 and DeepSeek-V2-Lite, written out (keys that change
no count left in, to be ignored), for the tests that hold tfcalc against transformers and the published sizes.

- DeepSeek-V3: https://huggingface.co/deepseek-ai/DeepSeek-V3/blob/main/config.json
- Kimi K2: https://huggingface.co/moonshotai/Kimi-K2-Instruct/blob/main/config.json
- DeepSeek-V2-Lite: https://huggingface.co/deepseek-ai/DeepSeek-V2-Lite/blob/main/config.json
"""

from hypothesis import assume, strategies as st

from tfcalc.config import ModelConfig
from tfcalc.errors import InputError

FP8 = {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8", "weight_block_size": [128, 128]}
DEEPSEEK_V3 = {
    "architectures": ["DeepseekV3ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
    "aux_loss_alpha": 0.001, "bos_token_id": 0, "eos_token_id": 1, "ep_size": 1, "first_k_dense_replace": 3,
    "hidden_act": "silu", "hidden_size": 7168, "initializer_range": 0.02, "intermediate_size": 18432,
    "kv_lora_rank": 512, "max_position_embeddings": 163840, "model_type": "deepseek_v3", "moe_intermediate_size": 2048,
    "moe_layer_freq": 1, "n_group": 8, "n_routed_experts": 256, "n_shared_experts": 1, "norm_topk_prob": True,
    "num_attention_heads": 128, "num_experts_per_tok": 8, "num_hidden_layers": 61, "num_key_value_heads": 128,
    "num_nextn_predict_layers": 1, "pretraining_tp": 1, "q_lora_rank": 1536, "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64, "quantization_config": FP8, "rms_norm_eps": 1e-06,
    "rope_scaling": {"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 1.0, "mscale_all_dim": 1.0,
                     "original_max_position_embeddings": 4096, "type": "yarn"},
    "rope_theta": 10000, "routed_scaling_factor": 2.5, "scoring_func": "sigmoid", "seq_aux": True,
    "tie_word_embeddings": False, "topk_group": 4, "topk_method": "noaux_tc", "torch_dtype": "bfloat16",
    "transformers_version": "4.33.1", "use_cache": True, "v_head_dim": 128, "vocab_size": 129280,
}
KIMI_K2 = {
    **DEEPSEEK_V3, "model_type": "kimi_k2", "bos_token_id": 163584, "eos_token_id": 163585, "first_k_dense_replace": 1,
    "max_position_embeddings": 131072, "n_group": 1, "n_routed_experts": 384, "num_attention_heads": 64,
    "num_key_value_heads": 64, "num_nextn_predict_layers": 0, "routed_scaling_factor": 2.827, "topk_group": 1,
    "rope_scaling": {"beta_fast": 1.0, "beta_slow": 1.0, "factor": 32.0, "mscale": 1.0, "mscale_all_dim": 1.0,
                     "original_max_position_embeddings": 4096, "type": "yarn"},
    "rope_theta": 50000.0, "transformers_version": "4.48.3", "vocab_size": 163840,
}
DEEPSEEK_V2_LITE = {
    "architectures": ["DeepseekV2ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
    "aux_loss_alpha": 0.001, "bos_token_id": 100000, "eos_token_id": 100001, "first_k_dense_replace": 1,
    "hidden_act": "silu", "hidden_size": 2048, "initializer_range": 0.02, "intermediate_size": 10944,
    "kv_lora_rank": 512, "max_position_embeddings": 163840, "model_type": "deepseek_v2", "moe_intermediate_size": 1408,
    "moe_layer_freq": 1, "n_group": 1, "n_routed_experts": 64, "n_shared_experts": 2, "norm_topk_prob": False,
    "num_attention_heads": 16, "num_experts_per_tok": 6, "num_hidden_layers": 27, "num_key_value_heads": 16,
    "pretraining_tp": 1, "q_lora_rank": None, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "rms_norm_eps": 1e-06,
    "rope_scaling": {"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 0.707, "mscale_all_dim": 0.707,
                     "original_max_position_embeddings": 4096, "type": "yarn"},
    "rope_theta": 10000, "routed_scaling_factor": 1.0, "scoring_func": "softmax", "seq_aux": True,
    "tie_word_embeddings": False, "topk_group": 1, "topk_method": "greedy", "torch_dtype": "bfloat16",
    "transformers_version": "4.33.1", "use_cache": True, "v_head_dim": 128, "vocab_size": 102400,
}
# model_type -> (config.json, the preset of the same shapes or None)
DEEPSEEK_FILES = {"deepseek_v3": (DEEPSEEK_V3, "deepseek-v3"), "kimi_k2": (KIMI_K2, "kimi-k2"),
                  "deepseek_v2": (DEEPSEEK_V2_LITE, None)}


def _hf(**changes) -> str:
    import json

    fields = dict(model_type="deepseek_v3", num_hidden_layers=2, hidden_size=32, num_attention_heads=4,
                  intermediate_size=64, moe_intermediate_size=16, n_routed_experts=8, num_experts_per_tok=2,
                  n_group=4, topk_group=2, first_k_dense_replace=1, kv_lora_rank=12, q_lora_rank=16,
                  qk_nope_head_dim=8, qk_rope_head_dim=4, v_head_dim=8, vocab_size=61)
    fields.update(changes)
    return json.dumps(fields)


# hostile files (tests/cli/hostile.py writes them) and rows of the hostile-input table (tests/cli/test_hostile.py)
HOSTILE_FILES = {
    "ds_groups/config.json": _hf(n_group=3),
    "ds_topk_group/config.json": _hf(topk_group=5),
    "ds_freq/config.json": _hf(moe_layer_freq=2),
    "ds_kv_heads/config.json": _hf(num_key_value_heads=2),
    "ds_lora/config.json": _hf(kv_lora_rank=64),
    "ds_scoring/config.json": _hf(scoring_func="softmax"),
    "ds_rope/config.json": _hf(rope_scaling={"type": "dynamic", "factor": 2.0}),
    "ds_yarn/config.json": _hf(rope_scaling={"type": "yarn", "factor": 4.0}),
    "ds_rope_list/config.json": _hf(rope_scaling=["yarn"]),
    "ds2_norm/config.json": _hf(model_type="deepseek_v2", norm_topk_prob=True),
}
HOSTILE = [
    ("ds-kv-lora-past-width", ["params", "deepseek-v3", "--set", "kv_lora_rank=10000", "--no-measure"], 2,
     "field 'kv_lora_rank' (10000) must be at most d_model (7168)"),
    ("ds-groups-not-dividing", ["params", "deepseek-v3", "--set", "router_groups=7", "--no-measure"], 2,
     "must divide n_expert (256)"),
    ("ds-topk-groups-past-groups", ["flops", "deepseek-v3", "--set", "router_topk_groups=9"], 2,
     "must be at most router_groups (8)"),
    ("ds-too-few-experts-kept", ["memory", "deepseek-v3", "--set", "router_topk_groups=1", "--set",
                                 "n_expert_active=64"], 2, "fewer than n_expert_active (64)"),
    ("ds-latent-without-dims", ["params", "gpt2", "--set", "kv_lora_rank=64", "--no-measure"], 2,
     "latent attention (kv_lora_rank) needs qk_nope_head_dim"),
    ("ds-yarn-without-factor", ["params", "deepseek-v3", "--set", "rope_scaling_factor=null", "--no-measure"], 2,
     "rope_scaling yarn needs rope_scaling_factor"),
    ("ds-odd-rope", ["infer", "deepseek-v3", "--set", "qk_rope_head_dim=63"], 2, "qk_rope_head_dim must be even"),
    ("ds-groups-on-dense", ["params", "gpt2", "--set", "router_groups=2", "--no-measure"], 2,
     "apply to a mixture of experts only"),
    ("ds-mtp-negative", ["params", "deepseek-v3", "--set", "mtp_layers=-1", "--no-measure"], 2,
     "field 'mtp_layers' must be 0 or more"),
    ("ds-hf-groups", ["params", "{d}/ds_groups/config.json"], 2, "must divide n_expert (8)"),
    ("ds-hf-topk-group", ["params", "{d}/ds_topk_group/config.json"], 2, "must be at most router_groups (4)"),
    ("ds-hf-moe-layer-freq", ["params", "{d}/ds_freq/config.json"], 2, "'moe_layer_freq' 2 is not supported"),
    ("ds-hf-kv-heads", ["params", "{d}/ds_kv_heads/config.json"], 2, "'num_key_value_heads' 2 is not supported"),
    ("ds-hf-kv-lora-past-width", ["flops", "{d}/ds_lora/config.json"], 2, "'kv_lora_rank' (64) must be at most"),
    ("ds-hf-scoring", ["params", "{d}/ds_scoring/config.json"], 2, "'scoring_func' 'softmax' is not supported"),
    ("ds-hf-rope-dynamic", ["params", "{d}/ds_rope/config.json"], 2, "type 'dynamic' is not supported"),
    ("ds-hf-yarn-no-length", ["params", "{d}/ds_yarn/config.json"], 2, "'original_max_position_embeddings'"),
    ("ds-hf-rope-list", ["params", "{d}/ds_rope_list/config.json"], 2, "'rope_scaling' must be an object"),
    ("ds-hf-v2-norm-topk", ["params", "{d}/ds2_norm/config.json"], 2, "'norm_topk_prob' true is not supported"),
]


@st.composite
def latent_configs(draw):
    """Small random DeepSeek-shaped models: latent attention with or without a compressed Q, dense-first
    layers, grouped sigmoid or softmax routing, YaRN or not, attention biases or not."""
    heads, d = draw(st.integers(1, 4)), draw(st.sampled_from([16, 24, 32]))
    groups = draw(st.sampled_from([1, 2, 4]))
    experts = groups * draw(st.integers(2, 3))
    n_layer = draw(st.integers(1, 4))
    sigmoid = draw(st.booleans())
    fields = dict(
        n_layer=n_layer, d_model=d, n_head=heads, vocab_size=37, max_seq_len=12, pos_encoding="rope", norm="rmsnorm",
        activation="silu", gated_ffn=True, ffn_bias=False, attn_bias=draw(st.booleans()), tie_embeddings=False,
        kv_lora_rank=draw(st.integers(2, d)), q_lora_rank=draw(st.none() | st.integers(2, d)),
        qk_nope_head_dim=draw(st.integers(0, 6)), qk_rope_head_dim=draw(st.sampled_from([2, 4])),
        v_head_dim=draw(st.integers(1, 7)), d_ff=draw(st.integers(4, 12)), n_expert=experts,
        n_expert_active=draw(st.integers(1, 2)), router_scoring="sigmoid" if sigmoid else "softmax",
        router_score_bias=sigmoid, router_groups=groups, router_topk_groups=draw(st.integers(1, groups)),
        routed_scaling=draw(st.sampled_from([1.0, 2.5])), shared_expert_d_ff=draw(st.none() | st.integers(4, 12)),
        first_dense_layers=draw(st.none() | st.integers(1, n_layer)), dense_d_ff=20,
        attn_head_gate=draw(st.none() | st.just(True)),  # Ling 3's head gate (bailing_hybrid)
    )
    if fields["first_dense_layers"] is None or fields["first_dense_layers"] >= n_layer:
        fields.update(first_dense_layers=None, dense_d_ff=None)
    if draw(st.booleans()):
        fields.update(rope_scaling="yarn", rope_scaling_factor=4.0, rope_original_max_seq_len=4,
                      yarn_mscale_all_dim=1.0)
    try:
        return ModelConfig(**fields)
    except InputError:
        assume(False)
