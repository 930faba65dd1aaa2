"""Hugging Face config.json files: each supported model_type mapped onto ModelConfig, and bad files refused."""

import json

import pytest
from deepseek_configs import DEEPSEEK_FILES
from hub_dense import DENSE
from hub_moe import GPT_OSS_120B, QWEN3_30B_A3B

from tfcalc.config import ConfigError
from tfcalc.count.model import params as count
from tfcalc.hf_config import SUPPORTED_MODEL_TYPES
from tfcalc.measure.params import measure_params
from tfcalc.presets import load

# Shaped like the files on the Hugging Face Hub (keys that change no count left in, to be ignored).
GPT2 = {
    "architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "activation_function": "gelu_new",
    "n_ctx": 1024, "n_embd": 768, "n_head": 12, "n_inner": None, "n_layer": 12, "n_positions": 1024,
    "layer_norm_epsilon": 1e-05, "vocab_size": 50257, "resid_pdrop": 0.1, "bos_token_id": 50256,
}
LLAMA3_8B = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "attention_bias": False, "attention_dropout": 0.0,
    "bos_token_id": 128000, "eos_token_id": 128001, "hidden_act": "silu", "hidden_size": 4096,
    "initializer_range": 0.02, "intermediate_size": 14336, "max_position_embeddings": 8192,
    "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8, "pretraining_tp": 1,
    "rms_norm_eps": 1e-05, "rope_scaling": None, "rope_theta": 500000.0, "tie_word_embeddings": False,
    "torch_dtype": "bfloat16", "transformers_version": "4.40.0.dev0", "use_cache": True, "vocab_size": 128256,
}
MISTRAL_7B = {
    "architectures": ["MistralForCausalLM"], "model_type": "mistral", "hidden_act": "silu", "hidden_size": 4096,
    "intermediate_size": 14336, "max_position_embeddings": 32768, "num_attention_heads": 32,
    "num_hidden_layers": 32, "num_key_value_heads": 8, "rms_norm_eps": 1e-05, "rope_theta": 10000.0,
    "sliding_window": 4096, "tie_word_embeddings": False, "vocab_size": 32000,
}
MIXTRAL_8X7B = {
    **MISTRAL_7B, "architectures": ["MixtralForCausalLM"], "model_type": "mixtral", "rope_theta": 1e6,
    "sliding_window": None, "num_local_experts": 8, "num_experts_per_tok": 2, "output_router_logits": False,
    "router_aux_loss_coef": 0.02,
}
BERT_BASE = {
    "architectures": ["BertForMaskedLM"], "model_type": "bert", "attention_probs_dropout_prob": 0.1,
    "hidden_act": "gelu", "hidden_size": 768, "initializer_range": 0.02, "intermediate_size": 3072,
    "layer_norm_eps": 1e-12, "max_position_embeddings": 512, "num_attention_heads": 12,
    "num_hidden_layers": 12, "pad_token_id": 0, "position_embedding_type": "absolute", "type_vocab_size": 2,
    "vocab_size": 30522,
}
# The files of the new presets' models (Hugging Face Hub, as published), and of models without a preset.
QWEN2_7B = {
    "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_act": "silu", "hidden_size": 3584,
    "intermediate_size": 18944, "max_position_embeddings": 131072, "max_window_layers": 28, "num_attention_heads": 28,
    "num_hidden_layers": 28, "num_key_value_heads": 4, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0,
    "sliding_window": 131072, "tie_word_embeddings": False, "torch_dtype": "bfloat16", "use_sliding_window": False,
    "vocab_size": 152064,
}
GEMMA2_9B = {
    "architectures": ["Gemma2ForCausalLM"], "model_type": "gemma2", "attention_bias": False,
    "attn_logit_softcapping": 50.0,
    "cache_implementation": "hybrid", "final_logit_softcapping": 30.0, "head_dim": 256,
    "hidden_act": "gelu_pytorch_tanh", "hidden_activation": "gelu_pytorch_tanh", "hidden_size": 3584,
    "intermediate_size": 14336, "max_position_embeddings": 8192, "num_attention_heads": 16, "num_hidden_layers": 42,
    "num_key_value_heads": 8, "query_pre_attn_scalar": 256, "rms_norm_eps": 1e-06, "rope_theta": 10000.0,
    "sliding_window": 4096, "sliding_window_size": 4096, "torch_dtype": "float32", "vocab_size": 256000,
}
PHI3_MINI = {
    "architectures": ["Phi3ForCausalLM"], "model_type": "phi3", "attention_bias": False, "hidden_act": "silu",
    "hidden_size": 3072, "intermediate_size": 8192, "max_position_embeddings": 4096, "num_attention_heads": 32,
    "num_hidden_layers": 32, "num_key_value_heads": 32, "original_max_position_embeddings": 4096, "rms_norm_eps": 1e-05,
    "rope_scaling": None, "rope_theta": 10000.0, "sliding_window": 2047, "tie_word_embeddings": False,
    "torch_dtype": "bfloat16", "vocab_size": 32064,
}
PYTHIA_1_4B = {
    "architectures": ["GPTNeoXForCausalLM"], "model_type": "gpt_neox", "hidden_act": "gelu", "hidden_size": 2048,
    "intermediate_size": 8192, "layer_norm_eps": 1e-05, "max_position_embeddings": 2048, "num_attention_heads": 16,
    "num_hidden_layers": 24, "rotary_emb_base": 10000, "rotary_pct": 0.25, "tie_word_embeddings": False,
    "torch_dtype": "float16", "use_parallel_residual": True, "vocab_size": 50304,
}
FALCON_7B = {
    "alibi": False, "apply_residual_connection_post_layernorm": False, "architectures": ["FalconForCausalLM"],
    "model_type": "falcon", "bias": False, "hidden_size": 4544, "layer_norm_epsilon": 1e-05, "multi_query": True,
    "new_decoder_architecture": False, "num_attention_heads": 71, "num_hidden_layers": 32, "parallel_attn": True,
    "torch_dtype": "bfloat16", "vocab_size": 65024,
}
T5_BASE = {
    "architectures": ["T5ForConditionalGeneration"], "model_type": "t5", "d_ff": 3072, "d_kv": 64, "d_model": 768,
    "decoder_start_token_id": 0, "dropout_rate": 0.1, "layer_norm_epsilon": 1e-06, "n_positions": 512, "num_heads": 12,
    "num_layers": 12, "relative_attention_num_buckets": 32, "vocab_size": 32128,
}
QWEN15_MOE = {
    "architectures": ["Qwen2MoeForCausalLM"], "model_type": "qwen2_moe", "decoder_sparse_step": 1, "hidden_act": "silu",
    "hidden_size": 2048, "intermediate_size": 5632, "max_position_embeddings": 8192, "max_window_layers": 21,
    "moe_intermediate_size": 1408, "norm_topk_prob": False, "num_attention_heads": 16, "num_experts": 60,
    "num_experts_per_tok": 4, "num_hidden_layers": 24, "num_key_value_heads": 16, "rms_norm_eps": 1e-06,
    "rope_theta": 1000000.0, "shared_expert_intermediate_size": 5632, "sliding_window": 32768,
    "tie_word_embeddings": False, "torch_dtype": "bfloat16", "use_sliding_window": False, "vocab_size": 151936,
}
QWEN3_8B = {
    "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "attention_bias": False, "head_dim": 128,
    "hidden_act": "silu", "hidden_size": 4096, "intermediate_size": 12288, "max_position_embeddings": 40960,
    "max_window_layers": 36, "num_attention_heads": 32, "num_hidden_layers": 36, "num_key_value_heads": 8,
    "rms_norm_eps": 1e-06, "rope_scaling": None, "rope_theta": 1000000, "sliding_window": None,
    "tie_word_embeddings": False, "torch_dtype": "bfloat16", "use_sliding_window": False, "vocab_size": 151936,
}
GEMMA_7B = {
    "architectures": ["GemmaForCausalLM"], "model_type": "gemma", "attention_bias": False, "head_dim": 256,
    "hidden_act": "gelu", "hidden_size": 3072, "intermediate_size": 24576, "max_position_embeddings": 8192,
    "num_attention_heads": 16, "num_hidden_layers": 28, "num_key_value_heads": 16, "rms_norm_eps": 1e-06,
    "rope_scaling": None, "rope_theta": 10000.0, "torch_dtype": "bfloat16", "vocab_size": 256000,
}
OPT_1_3B = {
    "activation_function": "relu", "architectures": ["OPTForCausalLM"], "model_type": "opt",
    "do_layer_norm_before": True,
    "ffn_dim": 8192, "hidden_size": 2048, "max_position_embeddings": 2048, "num_attention_heads": 32,
    "num_hidden_layers": 24, "torch_dtype": "float16", "vocab_size": 50272, "word_embed_proj_dim": 2048,
}
HUB = {"gpt2": (GPT2, "gpt2"), "llama": (LLAMA3_8B, "llama3-8b"), "mistral": (MISTRAL_7B, "mistral-7b"),
       "mixtral": (MIXTRAL_8X7B, "mixtral-8x7b"), "bert": ({**BERT_BASE, "architectures": ["BertModel"]}, "bert-base"),
       "qwen2": (QWEN2_7B, "qwen2-7b"), "gemma2": (GEMMA2_9B, "gemma-2-9b"), "phi3": (PHI3_MINI, "phi-3-mini"),
       "gpt_neox": (PYTHIA_1_4B, "pythia-1.4b"), "falcon": (FALCON_7B, "falcon-7b"), "t5": (T5_BASE, "t5-base"),
       "gpt_oss": (GPT_OSS_120B, "gpt-oss-120b"), "qwen3_moe": (QWEN3_30B_A3B, "qwen3-30b-a3b")}
# Published totals of models without a preset: Qwen1.5-MoE-A2.7B (model card: 14.3B, 2.7B activated),
# Qwen3-8B (model card: 8.2B, 6.95B without embeddings), Gemma 7B (Gemma Team 2024, Table 2: 7,751,248,896
# non-embedding; the checkpoint's vocabulary is 256,000, not the table's 256,128), OPT-1.3B
# (Zhang et al. 2022, Table 1: 1.3B); exact figures from transformers (test_hf_reference.py).
NO_PRESET = {"qwen2_moe": QWEN15_MOE, "qwen3": QWEN3_8B, "gemma": GEMMA_7B, "opt": OPT_1_3B,
             **DENSE}  # issue 22's dense types: tests/hub_dense.py, their totals in tests/test_hf_dense.py


def _write(tmp_path, data, name="config.json", folder="model"):
    path = tmp_path / folder / name
    path.parent.mkdir(exist_ok=True)
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return str(path)


def test_every_supported_type_is_tested():
    from test_bailing_hybrid import TESTED_TYPES as BAILING  # issue 30's Ling 3 hybrids
    from test_deepseek_v4_family import TESTED_TYPES as V4  # issue 30's DeepSeek-V4
    from test_deepseek_v32 import TESTED_TYPES as SPARSE  # issue 30's DeepSeek Sparse Attention
    from test_gemma3n import TESTED_TYPES as GEMMA3N  # issue 30's Gemma 3n
    from test_gemma4 import TESTED_TYPES as GEMMA4  # issue 30's Gemma 4
    from test_hf_moe_more import TESTED_TYPES as MORE_MOE  # issue 30's MoE families with no new mixer
    from test_hf_patterns import TESTED_TYPES  # issue 22's per-layer families, tested there
    from test_kimi_k25 import TESTED_TYPES as KIMI_K25  # issue 30's Kimi K2.5
    from test_kimi_linear import TESTED_TYPES as KIMI_LINEAR  # issue 30's Kimi Linear
    from test_longcat_flash import TESTED_TYPES as LONGCAT  # issue 30's LongCat-Flash
    from test_minimax import TESTED_TYPES as MINIMAX  # issue 30's lightning-attention hybrid
    from test_olmo_hybrid import TESTED_TYPES as OLMO_HYBRID  # issue 30's OLMo-Hybrid
    from test_qwen3_next import TESTED_TYPES as HYBRID  # issue 30's gated-DeltaNet hybrids

    lfm2 = {"lfm2", "lfm2_moe"}  # tests/test_hf_lfm2.py
    tested = set(HUB) | set(NO_PRESET) | set(DEEPSEEK_FILES) | TESTED_TYPES | lfm2 | HYBRID | SPARSE | MORE_MOE
    tested |= KIMI_K25 | OLMO_HYBRID | KIMI_LINEAR | MINIMAX | V4 | GEMMA4 | GEMMA3N | BAILING | LONGCAT
    assert tested == set(SUPPORTED_MODEL_TYPES)


@pytest.mark.parametrize("model_type", list(HUB))
def test_hub_config_counts_as_the_preset(tmp_path, model_type):
    data, preset = HUB[model_type]
    cfg = load(_write(tmp_path, data))
    assert count.breakdown(cfg) == count.breakdown(load(preset))
    assert cfg.name == "model" and "model_type " + model_type in cfg.source
    assert measure_params(cfg)[0] == count.total(cfg)  # meta build: analytic == empirical


def test_llama3_8b_config_json_is_8_030_261_248(tmp_path):
    cfg = load(_write(tmp_path, LLAMA3_8B, folder="Meta-Llama-3-8B"))
    assert count.total(cfg) == 8_030_261_248 and cfg.name == "Meta-Llama-3-8B"
    assert (cfg.kv_heads, cfg.rope_theta, cfg.max_seq_len, cfg.norm_eps) == (8, 500000.0, 8192, 1e-5)


def test_mixtral_config_json_total_and_active(tmp_path):
    cfg = load(_write(tmp_path, MIXTRAL_8X7B))
    assert (cfg.n_expert, cfg.n_expert_active) == (8, 2)
    assert count.total(cfg) == 46_702_792_704 and count.active_total(cfg) == 12_879_925_248


def test_mistral_sliding_window_is_read(tmp_path):
    assert load(_write(tmp_path, MISTRAL_7B)).sliding_window == 4096
    assert load(_write(tmp_path, {**MISTRAL_7B, "sliding_window": None}, folder="v02")).sliding_window is None
    assert load(_write(tmp_path, MIXTRAL_8X7B, folder="mixtral")).sliding_window is None
    assert load(_write(tmp_path, LLAMA3_8B, folder="llama")).sliding_window is None


def test_bert_architectures_pick_the_head(tmp_path):
    cfg = load(_write(tmp_path, {**BERT_BASE, "architectures": ["BertModel"]}))
    assert cfg.arch == "encoder" and cfg.pooler and not cfg.lm_head and count.total(cfg) == 109_482_240
    # BertForMaskedLM: no pooler; the MLM head's transform (d·d + d), LayerNorm (2d) and vocabulary bias
    mlm = load(_write(tmp_path, BERT_BASE))
    assert not mlm.pooler and mlm.lm_head_transform and mlm.lm_head_bias and mlm.tie_embeddings
    assert count.total(mlm) == 109_482_240 - (768 * 768 + 768) + (768 * 768 + 768) + 2 * 768 + 30522


@pytest.mark.parametrize(
    "data, expected",
    [
        (QWEN15_MOE, (14_315_784_192, "14.3B")), (QWEN3_8B, (8_190_735_360, "8.2B")),
        (GEMMA_7B, (8_537_680_896, "8.5B")), (OPT_1_3B, (1_315_758_080, "1.3B")),
    ],
    ids=["qwen2_moe", "qwen3", "gemma", "opt"],
)
def test_published_sizes_of_models_without_a_preset(tmp_path, data, expected):
    cfg = load(_write(tmp_path, data))
    total, named = expected
    decimals = len(named.split(".")[1]) - 1  # the published rounding: "14.3B" has one decimal
    assert count.total(cfg) == total and f"{total / 1e9:.{decimals}f}B" == named
    if cfg.n_expert:  # Qwen1.5-MoE-A2.7B: "2.7B activated"
        assert f"{count.active_total(cfg) / 1e9:.1f}" == "2.7"
    if data is QWEN3_8B:
        assert f"{(total - 2 * 151936 * 4096) / 1e9:.2f}" == "6.95"
    if data is GEMMA_7B:  # Gemma Team 2024, Table 2, non-embedding parameters
        assert total - 256000 * 3072 == 7_751_248_896


@pytest.mark.parametrize(
    "model_type, data",
    [
        ("gpt2", dict(n_layer=2, n_embd=32, n_head=4, n_positions=16, vocab_size=61, n_inner=48,
                      activation_function="relu", tie_word_embeddings=False)),
        ("llama", dict(num_hidden_layers=2, hidden_size=32, num_attention_heads=4, num_key_value_heads=2,
                       head_dim=12, intermediate_size=40, vocab_size=61, attention_bias=True, mlp_bias=True,
                       tie_word_embeddings=True)),
        ("mistral", dict(num_hidden_layers=1, hidden_size=32, num_attention_heads=8, num_key_value_heads=1,
                         intermediate_size=24, vocab_size=50)),
        ("mixtral", dict(num_hidden_layers=2, hidden_size=16, num_attention_heads=2, num_key_value_heads=2,
                         intermediate_size=24, vocab_size=30, num_local_experts=3, num_experts_per_tok=1)),
        ("bert", dict(num_hidden_layers=2, hidden_size=32, num_attention_heads=4, intermediate_size=64,
                      vocab_size=61, max_position_embeddings=16, type_vocab_size=3, hidden_act="gelu_new")),
    ],
)
def test_tiny_configs_of_each_type_build_and_agree(tmp_path, model_type, data):
    cfg = load(_write(tmp_path, {"model_type": model_type, **data}, name="tiny.json"))
    assert cfg.name == "tiny"
    total, measured = measure_params(cfg)
    assert measured == count.breakdown(cfg) and total == count.total(cfg)


def test_tiny_llama_fields_map_as_named(tmp_path):
    cfg = load(_write(tmp_path, {"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 32,
                                 "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 12,
                                 "intermediate_size": 40, "vocab_size": 61, "attention_bias": True}))
    assert (cfg.n_layer, cfg.d_model, cfg.n_head, cfg.kv_heads, cfg.head_dim, cfg.ffn_dim) == (2, 32, 4, 2, 12, 40)
    assert cfg.attn_bias and not cfg.ffn_bias and not cfg.tie_embeddings and cfg.gated_ffn
    assert (cfg.max_seq_len, cfg.norm_eps, cfg.rope_theta) == (2048, 1e-6, 10000.0)  # LlamaConfig defaults


def test_gpt2_n_inner_null_is_four_times_n_embd(tmp_path):
    assert load(_write(tmp_path, GPT2)).ffn_dim == 4 * 768


def test_rope_theta_nested_in_rope_parameters(tmp_path):
    data = {k: v for k, v in LLAMA3_8B.items() if k != "rope_theta"}
    data["rope_parameters"] = {"rope_type": "default", "rope_theta": 500000.0}
    assert load(_write(tmp_path, data)).rope_theta == 500000.0


def test_set_overrides_apply_to_config_json(tmp_path):
    cfg = load(_write(tmp_path, LLAMA3_8B), ["n_layer=2"])
    assert cfg.n_layer == 2 and cfg.vocab_size == 128256


@pytest.mark.parametrize(
    "content, message",
    [
        ({**GPT2, "model_type": "mpt"},
         "model_type 'mpt' is not supported (supported: apertus, bailing_hybrid, bert, "),
        ({k: v for k, v in LLAMA3_8B.items() if k != "hidden_size"},
         "missing required field 'hidden_size' (model_type llama)"),
        ({k: v for k, v in MIXTRAL_8X7B.items() if k != "num_local_experts"},
         "missing required field 'num_local_experts'"),
        ({**GPT2, "n_positions": None}, "missing required field 'n_positions'"),
        ({**BERT_BASE, "hidden_size": "768"}, "'hidden_size': field 'd_model' must be an integer; got '768' (str)"),
        ({**BERT_BASE, "position_embedding_type": "relative_key"},
         "'position_embedding_type' 'relative_key' is not supported"),
        ({**GPT2, "activation_function": "quick_gelu"}, "'activation_function' 'quick_gelu' is not an activation"),
        ({k: v for k, v in GPT2.items() if k != "model_type"}, "no 'model_type' field"),
        ({**LLAMA3_8B, "num_key_value_heads": 5}, "must be a multiple of n_kv_head (5)"),
        ({**LLAMA3_8B, "hidden_size": 512, "num_attention_heads": 12, "num_key_value_heads": 12, "head_dim": 48},
         "'hidden_size' (512) is not a multiple of 'num_attention_heads' (12): transformers refuses"),
        ({**FALCON_7B, "alibi": True}, "'alibi': True is not supported"),
        ({**FALCON_7B, "multi_query": "yes"}, "'multi_query' must be true or false; got 'yes' (str)"),
        ({**OPT_1_3B, "word_embed_proj_dim": -512}, "'word_embed_proj_dim' must be positive; got -512"),
        ({**QWEN15_MOE, "mlp_only_layers": [1, 24]}, "'mlp_only_layers' names layer 24: the layers are 0 .. 23"),
        ({**QWEN3_30B_A3B, "mlp_only_layers": "0"}, "'mlp_only_layers' must be a list of layer numbers"),
        ({**GPT_OSS_120B, "quantization_config": {"quant_method": "gptq"}}, "quant_method 'gptq' is not supported"),
        ({**GPT_OSS_120B, "quantization_config": {"quant_method": "mxfp4", "modules_to_not_convert": [
            "model.layers.*.mlp.experts"]}}, "keeps the experts unquantized"),
        ({**GPT_OSS_120B, "hidden_act": "gelu"}, "swiglu_limit and swiglu_alpha clamp a SwiGLU"),
        ({**GEMMA2_9B, "layer_types": ["full_attention"] * 2 + ["sliding_attention"] * 39},
         "'layer_types' lists 41 layers; 'num_hidden_layers' is 42"),
        ({**GEMMA_7B, "use_bidirectional_attention": True}, "'use_bidirectional_attention': True is not supported"),
        ({**BERT_BASE, "architectures": ["BertModel"], "is_decoder": "yes"}, "'is_decoder' must be true or false"),
        ({**LLAMA3_8B, "architectures": ["LlamaForSequenceClassification"]},
         "'architectures' 'LlamaForSequenceClassification' is not supported (supported: LlamaForCausalLM, LlamaModel)"),
        ({**LLAMA3_8B, "torch_dtype": "int8"}, "'torch_dtype' 'int8' is not one of float32, bfloat16, float16"),
        ({**T5_BASE, "num_heads": "12"}, "'num_heads': field 'n_head' must be an integer"),
        ({**GEMMA2_9B, "query_pre_attn_scalar": "big"}, "'query_pre_attn_scalar' must be a number"),
        ("{\"model_type\": \"gpt2\",", "not valid JSON at line 1"),
        ("[1, 2]", "expected a JSON object of config fields, got a list"),
        ("", "not valid JSON"),
    ],
    ids=["unsupported-type", "missing-field", "missing-experts", "null-required", "wrong-type", "relative-positions",
         "unknown-activation", "no-model-type", "indivisible-kv", "hf-refuses-heads", "falcon-alibi",
         "flag-type", "opt-projection", "moe-dense-layers", "qwen3-moe-dense-not-list", "oss-other-quant",
         "oss-experts-unquantized", "oss-not-swiglu", "layer-types-length",
         "gemma-bidirectional", "bertmodel-decoder", "unsupported-head", "bad-dtype", "t5-type", "number-type",
         "malformed", "not-an-object", "empty"],
)
def test_bad_config_json_is_one_line_naming_the_file_and_key(tmp_path, cli, content, message):
    path = _write(tmp_path, content)
    with pytest.raises(ConfigError) as info:
        load(path)
    assert message in str(info.value) and "config.json" in str(info.value) and "\n" not in str(info.value)
    r = cli("params", path)
    assert r.code == 2 and r.out == "" and r.err.count("\n") == 1 and message in r.err


def test_missing_json_file(tmp_path):
    with pytest.raises(ConfigError, match="no such file"):
        load(str(tmp_path / "config.json"))


def test_what_the_new_types_map_to(tmp_path):
    gemma2 = load(_write(tmp_path, GEMMA2_9B, folder="g2"))
    assert (gemma2.sliding_window, gemma2.full_attention_every, gemma2.attn_scale) == (4096, 2, 1 / 16)
    got = (gemma2.attn_softcap, gemma2.logit_softcap, gemma2.norm_placement, gemma2.dtype)
    assert got == (50.0, 30.0, "sandwich", "fp32")
    assert [gemma2.layer_window(i) for i in range(3)] == [4096, None, 4096]  # Gemma2Config: layer 0 windowed
    phi3 = load(_write(tmp_path, PHI3_MINI, folder="p3"))
    assert phi3.sliding_window == 2047 and phi3.full_attention_every is None and phi3.dtype == "bf16"
    qwen2 = load(_write(tmp_path, QWEN2_7B, folder="q2"))
    assert qwen2.sliding_window is None and qwen2.attn_bias and not qwen2.o_bias  # use_sliding_window false
    pythia = load(_write(tmp_path, PYTHIA_1_4B, folder="py"))
    assert (pythia.rope_fraction, pythia.rope_dim, pythia.parallel_block) == (0.25, 32, "two_norms")
    falcon = load(_write(tmp_path, FALCON_7B, folder="f"))
    assert (falcon.kv_heads, falcon.parallel_block, falcon.tie_embeddings) == (1, "shared_norm", True)
    t5 = load(_write(tmp_path, T5_BASE, folder="t5"))
    assert (t5.arch, t5.pos_encoding, t5.rel_buckets, t5.attn_scale, t5.encoder_layers) == (
        "encoder-decoder", "relative", 32, 1.0, 12)
    base = load(_write(tmp_path, {**QWEN3_8B, "architectures": ["Qwen3Model"]}, folder="q3"))
    assert not base.lm_head and base.qk_norm and count.total(base) == 8_190_735_360 - 151936 * 4096


def test_one_registry_names_every_family_module_and_loads_it_lazily():
    """tfcalc.hf_config.REGISTRY is the one table: each row's module and function exist, each family module
    under tfcalc/hf_config/ is named by a row, and reading the package imports no family module until a file
    of its type is read (a fresh interpreter: the test process has imported them all by now)."""
    import importlib
    import subprocess
    import sys
    from pathlib import Path

    from tfcalc.hf_config import REGISTRY

    shared = {"__init__", "reader", "llama_like", "layers", "layer_pattern", "quantization", "rope_scaling",
              "names"}
    folder = Path(importlib.import_module("tfcalc.hf_config").__file__).parent
    families = {p.stem for p in folder.glob("*.py")} - shared
    assert families == {module for module, _ in REGISTRY.values()}
    for model_type, (module, function) in REGISTRY.items():
        assert callable(getattr(importlib.import_module(f"tfcalc.hf_config.{module}"), function)), model_type
    code = ("import sys, tfcalc.hf_config as h; "
            "print(sorted(m for m in sys.modules if m.startswith('tfcalc.hf_config.')))")
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert loaded.strip() == "['tfcalc.hf_config.layer_pattern', 'tfcalc.hf_config.reader']"
