"""The gemma-4-31b preset (presets/gemma-4-31b.yaml) against the sources it cites: the preset equals GEMMA4_31B (the
checkpoint's config.json as transcribed in ollama/ollama x/models/gemma4/gemma4_test.go, TestParseTextConfig31B, with
max_position_embeddings at the model card's 256K, hidden_size_per_layer_input null written 0) read through tfcalc's
HF mapper, field by field; its shapes are Google DeepMind's Gemma4_31B (google-deepmind/gemma,
gemma/gm/nn/gemma4/_gemma4.py), by hand; its parameters are transformers 5.24's Gemma4ForCausalLM on meta, and within
0.1 % of the model card's "30.7B"."""

from __future__ import annotations

import json
import warnings

import pytest
import torch

from tfcalc.count.model import params as count_params
from tfcalc.presets import load

pytestmark = pytest.mark.filterwarnings("ignore")

LAYER_TYPES = (["sliding_attention"] * 5 + ["full_attention"]) * 10
TEXT = {
    "model_type": "gemma4_text", "hidden_size": 5376, "num_hidden_layers": 60, "intermediate_size": 21504,
    "num_attention_heads": 32, "num_key_value_heads": 16, "num_global_key_value_heads": 4, "head_dim": 256,
    "global_head_dim": 512, "vocab_size": 262144, "rms_norm_eps": 1e-6, "max_position_embeddings": 262144,
    "sliding_window": 1024, "final_logit_softcapping": 30.0, "use_double_wide_mlp": False, "num_kv_shared_layers": 0,
    # the transcription's null written 0 (no per-layer inputs), as tests/fixtures/published_configs does for the 26B:
    # transformers 5.24's strict Gemma4TextConfig refuses null there, and so does tfcalc (tests/test_gemma4.py)
    "hidden_size_per_layer_input": 0, "attention_k_eq_v": True, "tie_word_embeddings": True,
    "layer_types": LAYER_TYPES,
    "rope_parameters": {
        "full_attention": {"partial_rotary_factor": 0.25, "rope_theta": 1000000.0, "rope_type": "proportional"},
        "sliding_attention": {"rope_theta": 10000.0, "rope_type": "default"},
    },
}
GEMMA4_31B = {"architectures": ["Gemma4ForConditionalGeneration"], "model_type": "gemma4", "text_config": TEXT}
MODEL_CARD_PARAMS = 30.7e9  # "31B: 30.7B" (google/gemma-4-31B-it model card)
IDENTITY = ("name", "nominal_params", "source")  # the preset's own; a config.json names none of them


def _config_json(tmp_path) -> str:
    folder = tmp_path / "gemma-4-31B-it"
    folder.mkdir(exist_ok=True)
    (folder / "config.json").write_text(json.dumps(GEMMA4_31B))
    return str(folder / "config.json")


def test_the_preset_is_the_transcribed_config_field_by_field(tmp_path):
    ours, theirs = load("gemma-4-31b").resolved(), load(_config_json(tmp_path)).resolved()
    assert set(ours) == set(theirs)
    assert {k: (ours[k], theirs[k]) for k in ours if k not in IDENTITY and ours[k] != theirs[k]} == {}
    assert load("gemma-4-31b").architecture == load(_config_json(tmp_path)).architecture


def test_shapes_are_deepminds_gemma4_31b():
    """_gemma4_config(embed_dim=5376, num_heads=32, num_kv_heads=16, num_global_kv_heads=4, ...): hidden_dim = 4 ·
    embed_dim, head_dim 256, global_key_size 512 with K = V, 50 local layers (window 1024, base 10k) and 10 global ones
    (base 1M, a quarter of the frequencies turn), final soft-cap 30, 262,144 tokens, no per-layer inputs."""
    cfg = load("gemma-4-31b")
    assert (cfg.n_layer, cfg.d_model, cfg.ffn_dim, cfg.vocab_size) == (60, 5376, 4 * 5376, 262144)
    mixers = [b.mixer for b in cfg.architecture.output.layers()]
    local = [m for m in mixers if m.window is not None]
    wide = [m for m in mixers if m.window is None]
    assert len(local) == 50 and {(m.n_kv_head, m.head_dim, m.v_from_k, m.window) for m in local} == {(16, 256, False,
                                                                                                      1024)}
    assert len(wide) == 10 and {(m.n_kv_head, m.head_dim, m.v_from_k) for m in wide} == {(4, 512, True)}
    assert [i for i, m in enumerate(mixers) if m.window is None] == list(range(5, 60, 6))
    assert {m.rope_scaling.turning(m.head_dim) for m in wide} == {64}  # int(0.25 · 512 // 2)
    assert cfg.logit_softcap == 30.0 and cfg.per_layer_dim is None


def test_parameters_equal_transformers_on_meta_and_the_model_card(tmp_path):
    """30,697,345,280: the model card's 30.7B (ratio 0.99991). By hand: the table 262,144 · 5376; 50 local layers of
    Q 5376·8192, K and V 5376·4096 each, O 8192·5376; 10 global ones of Q 5376·16384, K 5376·2048 (no V), O
    16384·5376; every layer a GeGLU of 3 · 5376 · 21504, four norms of 5376 and Q/K norms of its head width; the
    final norm."""
    import transformers

    text = {k: v for k, v in TEXT.items() if k != "model_type"}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        hf_cfg = transformers.Gemma4TextConfig(**text)
    with torch.device("meta"):
        hf = transformers.Gemma4ForCausalLM(hf_cfg)
    hf_total = sum(p.numel() for p in hf.parameters())
    d, f = 5376, 21504
    local = d * 8192 + 2 * d * 4096 + 8192 * d + 3 * d * f + 4 * d + 2 * 256
    wide = d * 16384 + d * 2048 + 16384 * d + 3 * d * f + 4 * d + 2 * 512
    by_hand = 262144 * d + 50 * local + 10 * wide + d
    assert count_params.total(load("gemma-4-31b")) == hf_total == by_hand == 30_697_345_280
    assert abs(by_hand / MODEL_CARD_PARAMS - 1) < 1e-3
