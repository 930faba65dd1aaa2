"""The qwen3.5-397b-a17b preset (presets/qwen3.5-397b-a17b.yaml) against its sources: the preset is the published
text_config, as two public transcriptions give it, read through tfcalc's HF mapper field by field; its parameters
are transformers 5.24's on meta (Qwen3_5MoeForCausalLM); and its totals are the model card's "397B total, 17B
activated" -- which is also what settles the one key the transcriptions disagree on.

Sources of PUBLISHED (the keys of Qwen/Qwen3.5-397B-A17B's text_config): NVIDIA-NeMo/Megatron-Bridge
tests/unit_tests/models/qwen/test_qwen35_bridge.py (commit 0be1d58b, fixture qwen3_5_397b_a17b_config_dict) for
every key (its model_type qwen3_5_moe written as the text_config's qwen3_5_moe_text, whose keys these are), and
THUDM/slime scripts/models/qwen3.5-397B-A17B.sh (commit aa84536b) for the same sizes as Megatron
arguments. shared_expert_intermediate_size is slime's 1024 (moe-shared-expert-intermediate-size); the
Megatron-Bridge fixture's 4096 gives 398.6B parameters and 19.6B active, which the card's figures rule out
(test_the_published_totals_decide_the_shared_expert).
"""

from __future__ import annotations

import json
import warnings

import pytest
import torch

from tfcalc.count.model import params as count_params
from tfcalc.presets import load

pytestmark = pytest.mark.filterwarnings("ignore")

PUBLISHED = {  # the fixture's keys in its order; head_dim is slime's kv-channels (the fixture leaves it out)
    "architectures": ["Qwen3_5MoeForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 248045,
    "eos_token_id": 248046, "full_attention_interval": 4, "hidden_act": "silu", "hidden_size": 4096,
    "initializer_range": 0.02, "intermediate_size": 1024, "linear_conv_kernel_dim": 4, "linear_key_head_dim": 128,
    "linear_num_key_heads": 16, "linear_num_value_heads": 64, "linear_value_head_dim": 128,
    "max_position_embeddings": 262144, "model_type": "qwen3_5_moe_text", "moe_intermediate_size": 1024,
    "norm_topk_prob": True, "num_attention_heads": 32, "num_experts": 512, "num_experts_per_tok": 10,
    "num_hidden_layers": 60, "num_key_value_heads": 2, "output_router_logits": False, "rms_norm_eps": 1e-06,
    "rope_parameters": {"partial_rotary_factor": 0.25, "rope_theta": 10000000}, "rope_theta": 10000000,
    "router_aux_loss_coef": 0.001, "shared_expert_intermediate_size": 1024, "tie_word_embeddings": False,
    "torch_dtype": "bfloat16", "use_cache": True, "vocab_size": 248320, "attention_bias": False, "head_dim": 256,
}
IDENTITY = ("name", "nominal_params", "source")  # the preset's own; a config.json names none of them
TOTAL, ACTIVE = 397e9, 17e9  # QwenLM/Qwen3.5 README and model card: "397B-A17B"; docs.sglang.io: 397B / 17B


def _config_json(tmp_path) -> str:
    folder = tmp_path / "Qwen3.5-397B-A17B"
    folder.mkdir(exist_ok=True)
    (folder / "config.json").write_text(json.dumps(PUBLISHED))
    return str(folder / "config.json")


def _near_the_card(cfg) -> bool:
    """The card's figures are whole billions, and its total holds the vision tower (about 0.4B) this preset
    leaves out: the language model's total within 1B below or 0.5B above 397B, its active count within 0.5B."""
    total, active = count_params.total(cfg), count_params.active_total(cfg)
    return TOTAL - 1e9 < total < TOTAL + 0.5e9 and abs(active - ACTIVE) < 0.5e9


def test_the_preset_is_the_published_config_field_by_field(tmp_path):
    ours, theirs = load("qwen3.5-397b-a17b").resolved(), load(_config_json(tmp_path)).resolved()
    assert set(ours) == set(theirs)
    assert {k: (ours[k], theirs[k]) for k in ours if k not in IDENTITY and ours[k] != theirs[k]} == {}
    assert load("qwen3.5-397b-a17b").architecture == load(_config_json(tmp_path)).architecture


def test_parameters_equal_transformers_on_meta():
    import transformers

    kw = {k: v for k, v in PUBLISHED.items() if k not in ("architectures", "model_type")}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        hf_cfg = transformers.Qwen3_5MoeTextConfig(**kw)
    with torch.device("meta"):
        hf = transformers.Qwen3_5MoeForCausalLM(hf_cfg)
    hf_total = sum(p.numel() for p in hf.parameters())
    assert count_params.total(load("qwen3.5-397b-a17b")) == hf_total == 396_346_350_336


def test_the_published_totals_decide_the_shared_expert():
    """396.35B total, 17.35B active: the card's 397B and 17B (ratios 0.998 and 1.021). The Megatron-Bridge
    fixture's shared_expert_intermediate_size 4096 would give 398.6B and 19.6B: not this checkpoint."""
    cfg = load("qwen3.5-397b-a17b")
    assert (count_params.total(cfg), count_params.active_total(cfg)) == (396_346_350_336, 17_349_040_896)
    assert _near_the_card(cfg)
    assert not _near_the_card(load("qwen3.5-397b-a17b", ["shared_expert_d_ff=4096"]))
