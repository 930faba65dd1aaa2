"""Full-size configs of issue 22's per-layer families (Gemma 3, SmolLM3, OLMo 2, GLM-4) against transformers
built on meta: the model transformers builds from the same config.json has exactly the parameters tfcalc
counts; a vision-language checkpoint's language model is counted and its vision tower named beside."""

from __future__ import annotations

import json
import warnings

import pytest

from tfcalc.count.model import params as count
from tfcalc.presets import load

pytestmark = pytest.mark.filterwarnings("ignore")

# The keys that shape the counts, as the Hub's config.json of each model has them (other keys: defaults).
GEMMA3_27B_TEXT = {
    "head_dim": 128, "hidden_size": 5376, "intermediate_size": 21504, "model_type": "gemma3_text",
    "num_attention_heads": 32, "num_hidden_layers": 62, "num_key_value_heads": 16, "query_pre_attn_scalar": 168,
    "rope_scaling": {"factor": 8.0, "rope_type": "linear"}, "sliding_window": 1024,
}
GEMMA3_27B = {  # google/gemma-3-27b-it
    "architectures": ["Gemma3ForConditionalGeneration"], "model_type": "gemma3", "mm_tokens_per_image": 256,
    "text_config": GEMMA3_27B_TEXT, "torch_dtype": "bfloat16",
    "vision_config": {"hidden_size": 1152, "image_size": 896, "intermediate_size": 4304,
                      "model_type": "siglip_vision_model", "num_attention_heads": 16, "num_hidden_layers": 27,
                      "patch_size": 14, "vision_use_head": False},
}
GEMMA3_1B = {  # google/gemma-3-1b-it
    "architectures": ["Gemma3ForCausalLM"], "attention_bias": False, "attn_logit_softcapping": None,
    "final_logit_softcapping": None, "head_dim": 256, "hidden_activation": "gelu_pytorch_tanh", "hidden_size": 1152,
    "intermediate_size": 6912, "max_position_embeddings": 32768, "model_type": "gemma3_text",
    "num_attention_heads": 4, "num_hidden_layers": 26, "num_key_value_heads": 1, "query_pre_attn_scalar": 256,
    "rms_norm_eps": 1e-06, "rope_local_base_freq": 10000, "rope_scaling": None, "rope_theta": 1000000,
    "sliding_window": 512, "sliding_window_pattern": 6, "torch_dtype": "bfloat16", "vocab_size": 262144,
}
SMOLLM3_3B = {  # HuggingFaceTB/SmolLM3-3B
    "architectures": ["SmolLM3ForCausalLM"], "hidden_size": 2048, "intermediate_size": 11008,
    "max_position_embeddings": 65536, "model_type": "smollm3", "num_attention_heads": 16, "num_hidden_layers": 36,
    "num_key_value_heads": 4, "no_rope_layer_interval": 4, "rms_norm_eps": 1e-06, "rope_theta": 5000000.0,
    "tie_word_embeddings": True, "torch_dtype": "bfloat16", "use_sliding_window": False, "vocab_size": 128256,
}
OLMO2_7B = {  # allenai/OLMo-2-1124-7B
    "architectures": ["Olmo2ForCausalLM"], "attention_bias": False, "hidden_size": 4096, "intermediate_size": 11008,
    "max_position_embeddings": 4096, "model_type": "olmo2", "num_attention_heads": 32, "num_hidden_layers": 32,
    "num_key_value_heads": 32, "rms_norm_eps": 1e-06, "rope_theta": 500000, "tie_word_embeddings": False,
    "torch_dtype": "float32", "vocab_size": 100352,
}
GLM4_9B = {  # THUDM/GLM-4-9B-0414
    "architectures": ["Glm4ForCausalLM"], "attention_bias": True, "head_dim": 128, "hidden_size": 4096,
    "intermediate_size": 13696, "max_position_embeddings": 32768, "model_type": "glm4", "num_attention_heads": 32,
    "num_hidden_layers": 40, "num_key_value_heads": 2, "partial_rotary_factor": 0.5, "rms_norm_eps": 1e-05,
    "rope_theta": 10000.0, "tie_word_embeddings": False, "torch_dtype": "bfloat16", "vocab_size": 151552,
}
OLMO3_7B = {  # allenai/Olmo-3-7B-Instruct config.json (as rasbt/LLMs-from-scratch's Olmo 3 notebook copies it)
    "architectures": ["Olmo3ForCausalLM"], "attention_bias": False, "hidden_size": 4096, "intermediate_size": 11008,
    "layer_types": ["sliding_attention", "sliding_attention", "sliding_attention", "full_attention"] * 8,
    "max_position_embeddings": 65536, "model_type": "olmo3", "num_attention_heads": 32, "num_hidden_layers": 32,
    "num_key_value_heads": 32, "rms_norm_eps": 1e-06, "rope_theta": 500000, "sliding_window": 4096,
    "rope_scaling": {"attention_factor": 1.2079441541679836, "beta_fast": 32.0, "beta_slow": 1.0, "factor": 8.0,
                     "original_max_position_embeddings": 8192, "rope_type": "yarn"},
    "tie_word_embeddings": False, "torch_dtype": "bfloat16", "vocab_size": 100278,
}
EXAONE4_32B = {  # LGAI-EXAONE/EXAONE-4.0-32B config.json (Exaone4Config's docstring checkpoint)
    "architectures": ["Exaone4ForCausalLM"], "head_dim": 128, "hidden_act": "silu", "hidden_size": 5120,
    "intermediate_size": 27392, "layer_types": ["sliding_attention"] * 3 + ["full_attention"],
    "max_position_embeddings": 131072, "model_type": "exaone4", "num_attention_heads": 40, "num_hidden_layers": 64,
    "num_key_value_heads": 8, "rms_norm_eps": 1e-05, "rope_theta": 1000000.0, "sliding_window": 4096,
    "rope_scaling": {"factor": 16.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                     "original_max_position_embeddings": 8192, "rope_type": "llama3"},
    "sliding_window_pattern": "LLLG", "tie_word_embeddings": False, "torch_dtype": "bfloat16", "vocab_size": 102400,
}
EXAONE4_32B["layer_types"] = EXAONE4_32B["layer_types"] * 16
SEED_OSS_36B = {  # ByteDance-Seed/Seed-OSS-36B-Instruct config.json
    "architectures": ["SeedOssForCausalLM"], "attention_bias": True, "attention_out_bias": False, "head_dim": 128,
    "hidden_act": "silu", "hidden_size": 5120, "intermediate_size": 27648, "max_position_embeddings": 524288,
    "mlp_bias": False, "model_type": "seed_oss", "num_attention_heads": 80, "num_hidden_layers": 64,
    "num_key_value_heads": 8, "rms_norm_eps": 1e-06, "rope_scaling": {"rope_type": "default"}, "rope_theta": 10000000.0,
    "tie_word_embeddings": False, "torch_dtype": "bfloat16", "vocab_size": 155136,
}
GLM45_AIR = {  # zai-org/GLM-4.5-Air config.json
    "architectures": ["Glm4MoeForCausalLM"], "attention_bias": True, "first_k_dense_replace": 1, "head_dim": 128,
    "hidden_act": "silu", "hidden_size": 4096, "intermediate_size": 10944, "max_position_embeddings": 131072,
    "model_type": "glm4_moe", "moe_intermediate_size": 1408, "n_group": 1, "n_routed_experts": 128,
    "n_shared_experts": 1, "norm_topk_prob": True, "num_attention_heads": 96, "num_experts_per_tok": 8,
    "num_hidden_layers": 46, "num_key_value_heads": 8, "num_nextn_predict_layers": 1, "partial_rotary_factor": 0.5,
    "rms_norm_eps": 1e-05, "rope_scaling": None, "rope_theta": 1000000, "routed_scaling_factor": 1.0,
    "tie_word_embeddings": False, "topk_group": 1, "torch_dtype": "bfloat16", "use_qk_norm": False,
    "vocab_size": 151552,
}
GLM45 = {**GLM45_AIR, "hidden_size": 5120, "intermediate_size": 12288, "moe_intermediate_size": 1536,  # zai-org/GLM-4.5
         "n_routed_experts": 160, "num_hidden_layers": 92, "first_k_dense_replace": 3, "use_qk_norm": True,
         "routed_scaling_factor": 2.5}
MINIMAX_M2 = {  # MiniMaxAI/MiniMax-M2 config.json, the keys transformers reads (MiniMaxM2Config defaults: its sizes)
    "architectures": ["MiniMaxM2ForCausalLM"], "head_dim": 128, "hidden_act": "silu", "hidden_size": 3072,
    "intermediate_size": 1536, "max_position_embeddings": 196608, "model_type": "minimax_m2",
    "num_attention_heads": 48, "num_experts_per_tok": 8, "num_hidden_layers": 62, "num_key_value_heads": 8,
    "num_local_experts": 256, "rms_norm_eps": 1e-06, "rope_theta": 5000000, "rotary_dim": 64,
    "scoring_func": "sigmoid", "tie_word_embeddings": False, "torch_dtype": "bfloat16", "use_qk_norm": True,
    "vocab_size": 200064,
}
APERTUS_8B = {  # swiss-ai/Apertus-8B-2509 config.json (written by transformers 4.57: qk_norm, post_norm, mlp_bias)
    "architectures": ["ApertusForCausalLM"], "attention_bias": False, "hidden_act": "xielu", "hidden_size": 4096,
    "intermediate_size": 21504, "max_position_embeddings": 65536, "mlp_bias": False, "model_type": "apertus",
    "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8, "post_norm": False,
    "qk_norm": True, "rms_norm_eps": 1e-05, "rope_scaling": {"factor": 8.0, "high_freq_factor": 4.0,
    "low_freq_factor": 1.0, "original_max_position_embeddings": 8192, "rope_type": "llama3"},
    "rope_theta": 12000000.0, "tie_word_embeddings": False, "torch_dtype": "bfloat16", "vocab_size": 131072,
}
CLASSES = {"gemma3_text": ("Gemma3TextConfig", "Gemma3ForCausalLM"),
           "gemma3": ("Gemma3Config", "Gemma3ForConditionalGeneration"),
           "smollm3": ("SmolLM3Config", "SmolLM3ForCausalLM"), "olmo2": ("Olmo2Config", "Olmo2ForCausalLM"),
           "glm4": ("Glm4Config", "Glm4ForCausalLM"), "olmo3": ("Olmo3Config", "Olmo3ForCausalLM"),
           "exaone4": ("Exaone4Config", "Exaone4ForCausalLM"), "seed_oss": ("SeedOssConfig", "SeedOssForCausalLM"),
           "glm4_moe": ("Glm4MoeConfig", "Glm4MoeForCausalLM"),
           "minimax_m2": ("MiniMaxM2Config", "MiniMaxM2ForCausalLM"),
           "apertus": ("ApertusConfig", "ApertusForCausalLM")}


# model types whose full-size config.json is held against transformers here (tests/test_hf_config.py checks
# that every supported type is tested somewhere)
TESTED_TYPES = {"gemma3_text", "gemma3", "smollm3", "olmo2", "glm4", "llama4_text", "llama4", "olmo3", "exaone4",
                "seed_oss", "glm4_moe", "minimax_m2", "apertus",
                "mamba2", "nemotron_h", "granitemoehybrid",  # the Mamba2 families: tests/model/test_mamba2.py, ...
                "mamba", "falcon_mamba", "jamba",  # the Mamba-1 families: tests/model/test_mamba1.py, test_jamba.py
                "falcon_h1", "zamba2"}  # tests/model/test_falcon_h1.py, test_zamba2.py


def on_meta(data: dict):
    import torch
    import transformers
    from transformers.initialization import no_init_weights

    config_class, model_class = CLASSES[data["model_type"]]
    config = getattr(transformers, config_class).from_dict(data)
    with warnings.catch_warnings(), torch.device("meta"), no_init_weights():
        warnings.simplefilter("ignore")
        model = getattr(transformers, model_class)(config)
    model.tie_weights()
    return model


def _total(module) -> int:
    return sum(p.numel() for p in module.parameters())


def _read(tmp_path, data: dict):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(data))
    return load(str(path))


@pytest.mark.parametrize("data", [GEMMA3_1B, SMOLLM3_3B, OLMO2_7B, GLM4_9B, OLMO3_7B, EXAONE4_32B,
                                  SEED_OSS_36B, APERTUS_8B],
                         ids=["gemma-3-1b", "smollm3-3b", "olmo-2-7b", "glm-4-9b", "olmo-3-7b", "exaone-4.0-32b",
                              "seed-oss-36b", "apertus-8b"])
def test_full_size_counts_equal_transformers(tmp_path, data):
    assert count.total(_read(tmp_path, data)) == _total(on_meta(data))


def test_gemma3_27b_language_model_and_vision_tower_apart(tmp_path):
    """Gemma3ForConditionalGeneration: its language model (and the tied head) is what tfcalc counts -- the
    gemma-3-27b preset's count -- and its vision tower with the projector is vision_params."""
    model = on_meta(GEMMA3_27B)
    cfg = _read(tmp_path, GEMMA3_27B)
    language = _total(model.model.language_model) + (0 if cfg.tie_embeddings else _total(model.lm_head))
    assert count.total(cfg) == language == count.total(load("gemma-3-27b"))
    assert cfg.vision_params == _total(model.model.vision_tower) + _total(model.model.multi_modal_projector)
    assert count.total(cfg) + cfg.vision_params == _total(model)
    # the text layers: five local (window 1024, base 1e4) to one global (base 1e6), as the preset has them
    assert list(cfg.architecture.output.layers()) == list(load("gemma-3-27b").architecture.output.layers())


def test_the_vision_tower_is_named_beside(tmp_path, cli):
    """By hand (SigLIP so400m/14 at 896², modeling_siglip.py; h = 1152, i = 4304, 27 layers): patch embedding
    3·14·14·1152 + 1152 = 678,528; positions (896/14)² = 4,096 × 1152 = 4,718,592; a layer's two LayerNorms
    4,608, Q/K/V/O 4·(1152² + 1152) = 5,313,024 and MLP 2·1152·4304 + 4304 + 1152 = 9,921,872, 15,239,504
    × 27 = 411,466,608; final LayerNorm 2,304: 416,866,032 (the technical report's 417M vision encoder).
    Projector: 1152 × 5376 + 1152 = 6,194,304. Together 423,060,336."""
    path = tmp_path / "gemma3" / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(GEMMA3_27B))
    data = cli("params", str(path), "--json", "--no-measure").json()
    assert data["vision_params"] == 416_866_032 + 6_194_304 == 423_060_336
    assert any("vision tower and projector" in note for note in data["notes"])
    assert cli("params", "gemma-3-27b", "--json", "--no-measure").json()["vision_params"] is None


LLAMA4_SCOUT_TEXT = {  # meta-llama/Llama-4-Scout-17B-16E, text_config
    "attention_bias": False, "attention_chunk_size": 8192, "attn_scale": 0.1, "attn_temperature_tuning": True,
    "floor_scale": 8192, "head_dim": 128, "hidden_act": "silu", "hidden_size": 5120, "interleave_moe_layer_step": 1,
    "intermediate_size": 8192, "intermediate_size_mlp": 16384, "max_position_embeddings": 10485760,
    "model_type": "llama4_text", "no_rope_layers": [], "num_attention_heads": 40, "num_experts_per_tok": 1,
    "num_hidden_layers": 48, "num_key_value_heads": 8, "num_local_experts": 16, "rms_norm_eps": 1e-05,
    "rope_scaling": {"factor": 16.0, "high_freq_factor": 1.0, "low_freq_factor": 1.0,
                     "original_max_position_embeddings": 8192, "rope_type": "llama3"},
    "rope_theta": 500000.0, "use_qk_norm": True, "vocab_size": 202048,
}
LLAMA4_SCOUT = {
    "architectures": ["Llama4ForConditionalGeneration"], "model_type": "llama4", "text_config": LLAMA4_SCOUT_TEXT,
    "tie_word_embeddings": False, "torch_dtype": "bfloat16",
    "vision_config": {"hidden_act": "gelu", "hidden_size": 1408, "image_size": 336, "intermediate_size": 5632,
                      "model_type": "llama4_vision_model", "multi_modal_projector_bias": False, "norm_eps": 1e-05,
                      "num_attention_heads": 16, "num_channels": 3, "num_hidden_layers": 34, "patch_size": 14,
                      "pixel_shuffle_ratio": 0.5, "projector_input_dim": 4096, "projector_output_dim": 4096,
                      "rope_theta": 10000, "vision_output_dim": 4096},
}
CLASSES.update(llama4_text=("Llama4TextConfig", "Llama4ForCausalLM"),
               llama4=("Llama4Config", "Llama4ForConditionalGeneration"))


def test_llama4_scout_language_model_and_vision_apart(tmp_path):
    """Meta's model card: 17B active, 16 experts, 109B total (with the vision encoder). The language model
    transformers builds is the llama-4-scout preset's count, 107,769,861,120 (17,172,894,720 active: one of
    16 experts per layer); the vision model and projector are vision_params; together the card's 109B."""
    model = on_meta(LLAMA4_SCOUT)
    cfg = _read(tmp_path, LLAMA4_SCOUT)
    assert count.total(cfg) == _total(model.language_model) == count.total(load("llama-4-scout")) == 107_769_861_120
    assert cfg.vision_params == _total(model.vision_model) + _total(model.multi_modal_projector)
    assert round((count.total(cfg) + cfg.vision_params) / 1e9) == 109
    assert count.active_params(cfg, count.breakdown(cfg)) == 17_172_894_720
    assert list(cfg.architecture.output.layers()) == list(load("llama-4-scout").architecture.output.layers())
    (tmp_path / "text").mkdir()
    text = _read(tmp_path / "text", LLAMA4_SCOUT_TEXT | {"architectures": ["Llama4ForCausalLM"]})
    assert count.total(text) == _total(on_meta(LLAMA4_SCOUT_TEXT)) == count.total(cfg)


@pytest.mark.parametrize("data, message", [
    ({**SMOLLM3_3B, "no_rope_layers": [1, 0]}, "'no_rope_layers' must list 0 or 1 for each of the 36 layers"),
    ({**SMOLLM3_3B, "no_rope_layers": "all"}, "'no_rope_layers' must list 0 or 1"),
    ({**SMOLLM3_3B, "no_rope_layer_interval": 0}, "'no_rope_layer_interval' must be a positive integer"),
    ({**GEMMA3_1B, "layer_types": ["full_attention"] * 3}, "'layer_types' lists 3 layers; 'num_hidden_layers' is 26"),
    ({**GEMMA3_1B, "layer_types": ["local"] * 26}, "'layer_types' must be a list of"),
    ({**GEMMA3_1B, "sliding_window_pattern": 0}, "'sliding_window_pattern' must be a positive integer"),
    ({**GEMMA3_1B, "rope_local_base_freq": -1}, "'rope_local_base_freq' must be a positive number"),
    ({**GEMMA3_1B, "use_bidirectional_attention": True}, "'use_bidirectional_attention'"),
    ({**LLAMA4_SCOUT_TEXT, "moe_layers": [0, 5, 7]}, "is not every k-th layer"),
    ({**LLAMA4_SCOUT_TEXT, "interleave_moe_layer_step": 0}, "'interleave_moe_layer_step' must be a positive"),
    ({**LLAMA4_SCOUT_TEXT, "layer_types": ["chunked_attention", "sliding_attention"] * 24}, "mixes sliding and "
                                                                                           "chunked"),
    ({**GEMMA3_27B, "text_config": [1]}, "'text_config' must be an object"),
    ({**GEMMA3_27B, "vision_config": {**GEMMA3_27B["vision_config"], "patch_size": 0}}, "'patch_size' must be a "
                                                                                          "positive integer"),
], ids=["nope-list-short", "nope-list-type", "nope-interval", "layer-types-length", "layer-types-kind",
        "window-pattern", "local-base", "bidirectional", "moe-layers", "moe-step", "mixed-spans",
        "text-config", "vision-patch"])
def test_bad_files_are_one_line_errors(tmp_path, cli, data, message):
    path = tmp_path / "m" / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(data))
    r = cli("params", str(path), "--no-measure")
    assert r.code == 2 and r.out == "" and message in r.err and len(r.err.strip().splitlines()) == 1, r.err


def test_an_irregular_layer_list_becomes_a_pattern(tmp_path):
    """A layer list no period describes (SmolLM3 with NoPE layers 0 and 2 of 4) is kept as layer_pattern runs."""
    cfg = _read(tmp_path, {**SMOLLM3_3B, "num_hidden_layers": 4, "no_rope_layers": [0, 1, 0, 0]})
    assert cfg.layer_pattern == "nope, full, nope*2" and cfg.nope_every is None
    assert [b.attention.rope_theta is None for b in cfg.architecture.output.layers()] == [True, False, True, True]


def test_layer_lists_no_period_says_are_kept_as_patterns(tmp_path):
    """Gemma 2 with its first two layers global (an irregular layer_types), and Qwen2 windowed from layer
    max_window_layers on (configuration_qwen2.py): once refused, now layer_pattern runs, each layer as
    transformers builds it."""
    from test_hf_config import GEMMA2_9B, QWEN2_7B

    (tmp_path / "g").mkdir()
    gemma = _read(tmp_path / "g", {**GEMMA2_9B, "layer_types": ["full_attention"] * 2 + ["sliding_attention"] * 40})
    assert gemma.layer_pattern == "full*2, local*40"
    assert [b.attention.window for b in gemma.architecture.output.layers()] == [None] * 2 + [4096] * 40
    (tmp_path / "q").mkdir()
    qwen = _read(tmp_path / "q", {**QWEN2_7B, "use_sliding_window": True, "max_window_layers": 20,
                                  "sliding_window": 4096})
    assert qwen.layer_pattern == "full*20, local*8"


def test_gemma3_global_rope_scaling_is_counted_and_built(tmp_path):
    """Gemma 3 4B-27B scale the global layers' RoPE linearly (factor 8), nested in rope_parameters by
    transformers 5: the counts hold, and load_model builds it (the global layers only) with transformers'
    logits at 24 positions (tests/test_hf_rope_scaling.py holds every built scaling)."""
    import torch
    import transformers
    from hf_tiny import LLAMA_LIKE, TOKENS

    import tfcalc

    config = transformers.Gemma3TextConfig(**LLAMA_LIKE, **TOKENS, head_dim=8, sliding_window=3,
                                           rope_scaling={"rope_type": "linear", "factor": 8.0})
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    model = transformers.Gemma3ForCausalLM(config).eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.save_pretrained(tmp_path)
    cfg = load(str(tmp_path / "config.json"))
    assert count.total(cfg) == sum(p.numel() for p in model.parameters())
    assert (cfg.rope_scaling, cfg.rope_scaling_factor, cfg.rope_scaling_layers) == ("linear", 8.0, "full")
    ids = torch.randint(0, 61, (2, 24), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        got, expected = tfcalc.load_model(str(tmp_path))(ids), model(ids).logits
    assert (got - expected).abs().max() <= 1e-4


def _tiny_vlm(kind: str):
    import torch
    import transformers
    from hf_tiny import LLAMA_LIKE, TOKENS

    torch.manual_seed(0)
    if kind == "gemma3":
        text = transformers.Gemma3TextConfig(**LLAMA_LIKE, **TOKENS, head_dim=8, sliding_window=3,
                                              sliding_window_pattern=2)
        vision = transformers.SiglipVisionConfig(hidden_size=16, intermediate_size=24, num_hidden_layers=1,
                                                 num_attention_heads=2, image_size=28, patch_size=14,
                                                 vision_use_head=False)
        config = transformers.Gemma3Config(text_config=text, vision_config=vision, mm_tokens_per_image=4,
                                           image_token_index=60, boi_token_index=58, eoi_token_index=59)
        model = transformers.Gemma3ForConditionalGeneration(config)
    else:
        text = transformers.Llama4TextConfig(**{**LLAMA_LIKE, "intermediate_size": 16}, **TOKENS, head_dim=8,
                                             intermediate_size_mlp=40, num_local_experts=4,
                                             interleave_moe_layer_step=2, attention_chunk_size=3)
        vision = transformers.Llama4VisionConfig(hidden_size=16, intermediate_size=24, num_hidden_layers=1,
                                                 num_attention_heads=2, image_size=28, patch_size=14,
                                                 vision_output_dim=20, projector_input_dim=20, projector_output_dim=20)
        config = transformers.Llama4Config(text_config=text, vision_config=vision, image_token_index=60)
        model = transformers.Llama4ForConditionalGeneration(config)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p), alpha=0.05)
    return model.eval()


@pytest.mark.parametrize("kind", ["gemma3", "llama4"])
def test_a_vision_language_checkpoint_counts_its_language_model_and_names_its_vision(tmp_path, cli, kind):
    """A tiny Gemma3ForConditionalGeneration / Llama4ForConditionalGeneration saved by transformers: `params
    FOLDER` matches every language-model tensor to the analytic count and counts the vision tower and
    projector apart (= vision_params); load_model runs the language model, with transformers' logits on text."""
    import torch

    import tfcalc
    from tfcalc.count.model.params import total

    model = _tiny_vlm(kind)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.save_pretrained(tmp_path)
    cfg = load(str(tmp_path / "config.json"))
    assert total(cfg) + cfg.vision_params == sum(p.numel() for p in model.parameters())
    data = cli("params", str(tmp_path), "--json").json()
    ckpt = data["checkpoint"]
    assert ckpt["agree"] and ckpt["vision"] == cfg.vision_params and ckpt["parameters_matched"] == total(cfg)
    ids = torch.randint(0, 50, (2, 9), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        # Llama 4 on text alone is its language model (a Llama4ForCausalLM in every transformers release that
        # has Llama 4); called through the wrapper, transformers 5.24 fails on text-only input (its output
        # object reads an `image_outputs` the language model does not return).
        text_model = model.language_model if kind == "llama4" else model
        expected = text_model(input_ids=ids).logits
        got = tfcalc.load_model(str(tmp_path))(ids)
    assert (got - expected).abs().max() <= 1e-4 * expected.abs().max()


def test_olmo3_7b_preset_and_layers(tmp_path):
    """Olmo-3-7B: transformers' count at full size on meta is the olmo-3-7b preset's; three sliding layers
    (window 4096) then one full, eight times (the paper's 3 : 1, the last layer full). By hand: embedding and head
    2 × 100,278 × 4096 = 821,477,376; a layer 4 · 4096² + 3 · 4096 · 11008 + 4 · 4096 (two output norms, Q and K
    norms over the whole projection) = 202,391,552, × 32 = 6,476,529,664; final norm 4096: 7,298,011,136."""
    cfg = _read(tmp_path, OLMO3_7B)
    assert count.total(cfg) == _total(on_meta(OLMO3_7B)) == count.total(load("olmo-3-7b")) == 7_298_011_136
    assert (cfg.sliding_window, cfg.full_attention_every, cfg.qk_norm_over) == (4096, 4, "projection")
    assert list(cfg.architecture.output.layers()) == list(load("olmo-3-7b").architecture.output.layers())


@pytest.mark.parametrize("changes, message", [
    ({"layer_types": ["sliding_attention"] * 31}, "'layer_types' lists 31 layers; 'num_hidden_layers' is 32"),
    ({"layer_types": ["sliding_attention", "linear_attention"] * 16}, "'layer_types' must be a list of"),
    ({"layer_types": None, "sliding_window": 0}, "names sliding window layers but 'sliding_window' is 0"),
    ({"rope_parameters": {"full_attention": 5}}, "'rope_parameters' full_attention must be an object"),
    ({"rope_parameters": {"sliding_attention": {"rope_theta": -1}}}, "'rope_theta' must be a positive number"),
    ({"rope_theta": "big"}, "'rope_theta' must be"),
])
def test_olmo3_hostile_fields(tmp_path, changes, message):
    from tfcalc.config import ConfigError

    with pytest.raises(ConfigError) as e:
        _read(tmp_path, {**OLMO3_7B, **changes})
    assert message in str(e.value), str(e.value)


def test_exaone4_32b_preset_and_layers(tmp_path):
    """EXAONE-4.0-32B: transformers' count at full size on meta is the exaone-4.0-32b preset's. By hand: embedding
    and head 2 × 102,400 × 5120 = 1,048,576,000; a layer Q and O 2 × 5120², K and V 2 × 1024 × 5120, SwiGLU
    3 × 5120 × 27,392, two output norms 2 × 5120 and per-head Q and K norms 2 × 128: 483,666,176, × 64 =
    30,954,635,264; final norm 5120: 32,003,216,384. Three sliding layers (window 4096, RoPE) then a full one
    without RoPE (Exaone4Attention rotates only the sliding layers)."""
    cfg = _read(tmp_path, EXAONE4_32B)
    assert count.total(cfg) == _total(on_meta(EXAONE4_32B)) == count.total(load("exaone-4.0-32b")) == 32_003_216_384
    assert (cfg.sliding_window, cfg.full_attention_every, cfg.nope_every) == (4096, 4, 4)
    assert list(cfg.architecture.output.layers()) == list(load("exaone-4.0-32b").architecture.output.layers())


@pytest.mark.parametrize("changes, message", [
    ({"layer_types": None}, "'sliding_window_pattern' 'LLLG' without 'layer_types'"),
    ({"layer_types": None, "sliding_window_pattern": 0}, "'sliding_window_pattern' 0 without 'layer_types'"),
    ({"layer_types": None, "sliding_window": None}, "'sliding_window' is null and 'layer_types' is not given"),
    ({"layer_types": ["full_attention"] * 63}, "'layer_types' must list one kind for each of the 64 layers"),
    ({"layer_types": ["sliding_attention", "local"] * 32}, "'layer_types' must be a list of"),
    ({"sliding_window": None}, "names sliding window layers but 'sliding_window' is None"),
])
def test_exaone4_hostile_fields(tmp_path, changes, message):
    from tfcalc.config import ConfigError

    with pytest.raises(ConfigError) as e:
        _read(tmp_path, {**EXAONE4_32B, **changes})
    assert message in str(e.value), str(e.value)


def test_seed_oss_36b_preset():
    """Seed-OSS-36B: transformers' count at full size on meta is the seed-oss-36b preset's. By hand: embedding and
    head 2 × 155,136 × 5120 = 1,588,592,640; a layer Q 5120 × 10,240 and O 10,240 × 5120 (80 heads of 128), K and V
    2 × 1024 × 5120, Q/K/V biases 10,240 + 2 × 1024, SwiGLU 3 × 5120 × 27,648, two norms 2 × 5120: 540,039,168,
    × 64 = 34,562,506,752; final norm 5120: 36,151,104,512."""
    cfg = load("seed-oss-36b")
    assert count.total(cfg) == _total(on_meta(SEED_OSS_36B)) == 36_151_104_512
    assert (cfg.attn_bias, cfg.o_bias, cfg.ffn_bias, cfg.head_dim) == (True, False, False, 128)


@pytest.mark.parametrize("changes, message", [
    ({"attention_out_bias": "no"}, "'attention_out_bias'"),
    ({"mlp_bias": 1.5}, "'mlp_bias'"),
    ({"head_dim": 0}, "field 'd_head' must be positive"),
])
def test_seed_oss_hostile_fields(tmp_path, changes, message):
    from tfcalc.config import ConfigError

    with pytest.raises(ConfigError) as e:
        _read(tmp_path, {**SEED_OSS_36B, **changes})
    assert message in str(e.value), str(e.value)


@pytest.mark.parametrize("data, total", [(GLM45_AIR, 106_852_245_504), (GLM45, 352_797_814_784)],
                         ids=["glm-4.5-air", "glm-4.5"])
def test_glm45_counts_equal_transformers(tmp_path, data, total):
    """GLM-4.5-Air and GLM-4.5 at full size on meta (transformers builds no MTP layer; tfcalc counts it beside, so
    the report's 106B and 355B totals, arXiv 2508.06471 Table 1, are these plus the MTP layer)."""
    cfg = _read(tmp_path, data)
    assert count.total(cfg) == _total(on_meta(data)) == total
    assert cfg.mtp_layers == 1 and cfg.architecture.mtp is not None
    if data is GLM45:
        assert count.total(load("glm-4.5")) == total
        assert list(cfg.architecture.output.layers()) == list(load("glm-4.5").architecture.output.layers())


@pytest.mark.parametrize("changes, message", [
    ({"first_k_dense_replace": -1}, "field 'first_dense_layers' must be positive"),
    ({"n_group": 3}, "'router_groups' (3) must divide n_expert (160)"),
    ({"topk_group": 2}, "'router_topk_groups' (2) must be at most router_groups (1)"),
    ({"use_qk_norm": "yes"}, "'use_qk_norm'"),
    ({"partial_rotary_factor": 2.0}, "rope_fraction"),
    ({"moe_layer_freq": 2}, "'moe_layer_freq' 2 is not supported"),
])
def test_glm4_moe_hostile_fields(tmp_path, changes, message):
    from tfcalc.config import ConfigError

    with pytest.raises(ConfigError) as e:
        _read(tmp_path, {**GLM45, **changes})
    assert message in str(e.value), str(e.value)


def test_minimax_m2_preset_equals_transformers():
    """MiniMax-M2 at full size on meta, the minimax-m2 preset's count. By hand: embedding and head 2 × 200,064 × 3072
    = 1,229,193,216; a layer Q and O 2 × 3072 × 6144, K and V 2 × 1024 × 3072, Q and K norms 6144 + 1024, router
    256 × 3072, 256 experts 3 × 1536 × 3072, two norms 2 × 3072: 3,668,718,592, × 62 = 227,460,552,704; final norm
    3072: 228,689,748,992 (the model card's 230B)."""
    cfg = load("minimax-m2")
    assert count.total(cfg) == _total(on_meta(MINIMAX_M2)) == 228_689_748_992
    assert cfg.rope_fraction == 0.5 and cfg.qk_norm_over == "projection"


@pytest.mark.parametrize("changes, message", [
    ({"rotary_dim": 65}, "'rotary_dim' must be an even number of channels 2 .. head_dim (128); got 65"),
    ({"rotary_dim": 256}, "'rotary_dim' must be an even number"),
    ({"rotary_dim": "64"}, "'rotary_dim' must be an even number"),
    ({"num_local_experts": 0}, "n_expert"),
    ({"num_experts_per_tok": 300}, "fewer than n_expert_active (300)"),
])
def test_minimax_m2_hostile_fields(tmp_path, changes, message):
    from tfcalc.config import ConfigError

    with pytest.raises(ConfigError) as e:
        _read(tmp_path, {**MINIMAX_M2, **changes})
    assert message in str(e.value), str(e.value)


def test_apertus_8b_preset():
    """Apertus-8B: transformers' count at full size on meta is the apertus-8b preset's. By hand: embedding and head
    2 × 131,072 × 4096 = 1,073,741,824; a layer Q and O 2 × 4096², K and V 2 × 1024 × 4096, the MLP up and down
    2 × 4096 × 21,504 (not gated), two norms 2 × 4096, Q/K norms 2 × 128, xIELU's alpha_p and alpha_n 2:
    218,112,258, × 32 = 6,979,592,256; final norm 4096: 8,053,338,176."""
    cfg = load("apertus-8b")
    assert count.total(cfg) == _total(on_meta(APERTUS_8B)) == 8_053_338_176
    assert (cfg.activation, cfg.gated_ffn, cfg.qk_norm, cfg.attn_bias) == ("xielu", False, True, False)


def test_xielu_flops_are_the_elementwise_ops_transformers_runs():
    """xIELU's non-matmul work per element of the MLP hidden is the number of full-size elementwise aten ops
    transformers' XIELUActivation (its Python path) dispatches on it: 12 (both branches of its torch.where)."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from transformers.activations import XIELUActivation

    from tfcalc.count.model import flops
    from tfcalc.workload import Workload

    x = torch.randn(6, 7)

    class Ops(TorchDispatchMode):
        n = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            Ops.n += isinstance(out, torch.Tensor) and out.shape == x.shape
            return out

    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        act = XIELUActivation(dtype=torch.float32)
        with Ops():
            act(x)
    b = flops.breakdown(load("apertus-8b"), Workload(batch=2, seq=5))
    assert b.non_matmul_by_kind()["activation"] == Ops.n * 2 * 5 * 21504 * 32
    assert Ops.n == 12


@pytest.mark.parametrize("rope", [None, {"rope_type": "llama3", "rope_theta": 1000.0, "factor": 8.0,
                                         "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                         "original_max_position_embeddings": 8}], ids=["default", "stated"])
def test_apertus_llama3_scaling_is_counted_and_built(tmp_path, rope):
    """Apertus' llama3 RoPE scaling (stated, or ApertusConfig's default when the file names none): the counts
    hold, and load_model builds it, with transformers' logits."""
    import torch
    import transformers
    from hf_tiny import LLAMA_LIKE, TOKENS

    import tfcalc

    torch.manual_seed(0)
    model = transformers.ApertusForCausalLM(transformers.ApertusConfig(**LLAMA_LIKE, **TOKENS, rope_parameters=rope))
    model.eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.save_pretrained(tmp_path)
    if rope is None:  # a file that names no scaling: ApertusConfig fills in llama3
        raw = json.loads((tmp_path / "config.json").read_text())
        raw.pop("rope_parameters", None), raw.pop("rope_scaling", None)
        (tmp_path / "config.json").write_text(json.dumps(raw))
    cfg = load(str(tmp_path / "config.json"))
    assert count.total(cfg) == sum(p.numel() for p in model.parameters()) and cfg.rope_scaling == "llama3"
    ids = torch.randint(0, 61, (2, 20), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        got, expected = tfcalc.load_model(str(tmp_path))(ids), model(ids).logits
    assert (got - expected).abs().max() <= 1e-4


@pytest.mark.parametrize("changes, message", [
    ({"hidden_act": "xelu"}, "'hidden_act'"),
    ({"qk_norm": False}, "'qk_norm' false is not built"),
    ({"post_norm": True}, "'post_norm' true is not built"),
    ({"mlp_bias": True}, "'mlp_bias' true is not built"),
    ({"attention_bias": "no"}, "'attention_bias'"),
    ({"intermediate_size": 0}, "must be positive"),
])
def test_apertus_hostile_fields(tmp_path, changes, message):
    from tfcalc.config import ConfigError

    with pytest.raises(ConfigError) as e:
        _read(tmp_path, {**APERTUS_8B, **changes})
    assert message in str(e.value), str(e.value)
