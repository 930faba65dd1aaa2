"""Hugging Face config.json files: each supported model_type mapped onto ModelConfig, and bad files refused."""

import json

import pytest

from tfcalc.config import ConfigError
from tfcalc.count import params as count
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
HUB = {"gpt2": (GPT2, "gpt2"), "llama": (LLAMA3_8B, "llama3-8b"), "mistral": (MISTRAL_7B, "mistral-7b"),
       "mixtral": (MIXTRAL_8X7B, "mixtral-8x7b"), "bert": (BERT_BASE, "bert-base")}


def _write(tmp_path, data, name="config.json", folder="model"):
    path = tmp_path / folder / name
    path.parent.mkdir(exist_ok=True)
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return str(path)


def test_every_supported_type_is_tested():
    assert set(HUB) == set(SUPPORTED_MODEL_TYPES)


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


def test_bert_config_is_bertmodel(tmp_path):
    cfg = load(_write(tmp_path, BERT_BASE))
    assert cfg.arch == "encoder" and cfg.pooler and not cfg.lm_head and count.total(cfg) == 109_482_240


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
        ("mixtral", dict(num_hidden_layers=2, hidden_size=16, num_attention_heads=2, intermediate_size=24,
                         vocab_size=30, num_local_experts=3, num_experts_per_tok=1)),
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
        ({**GPT2, "model_type": "t5"}, "model_type 't5' is not supported (supported: bert, gpt2, llama, mistral, mixtral)"),
        ({k: v for k, v in LLAMA3_8B.items() if k != "hidden_size"}, "missing required field 'hidden_size' (model_type llama)"),
        ({k: v for k, v in MIXTRAL_8X7B.items() if k != "num_local_experts"}, "missing required field 'num_local_experts'"),
        ({**GPT2, "n_positions": None}, "missing required field 'n_positions'"),
        ({**BERT_BASE, "hidden_size": "768"}, "'hidden_size': field 'd_model' must be an integer; got '768' (str)"),
        ({**BERT_BASE, "position_embedding_type": "relative_key"}, "'position_embedding_type' 'relative_key' is not supported"),
        ({**GPT2, "activation_function": "quick_gelu"}, "'activation_function' 'quick_gelu' is not an activation"),
        ({k: v for k, v in GPT2.items() if k != "model_type"}, "no 'model_type' field"),
        ({**LLAMA3_8B, "num_key_value_heads": 5}, "must be a multiple of n_kv_head (5)"),
        ("{\"model_type\": \"gpt2\",", "not valid JSON at line 1"),
        ("[1, 2]", "expected a JSON object of config fields, got a list"),
        ("", "not valid JSON"),
    ],
    ids=["unsupported-type", "missing-field", "missing-experts", "null-required", "wrong-type", "relative-positions",
         "unknown-activation", "no-model-type", "indivisible-kv", "malformed", "not-an-object", "empty"],
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
