"""The glm-5.1 preset (tfcalc/presets: presets/glm-5.1.yaml) against GLM-5.1's published config.json: the preset is
that file read through tfcalc's HF mapper, field by field; its parameters are transformers 5.24's on meta; and the
checkpoint's own tensor total (753,864,139,008, the safetensors listing beside the config) is that count plus what
transformers does not build, derived by hand.

Source of GLM51: zai-org/GLM-5.1's config.json (transformers_version 5.4.0), reproduced verbatim under "原始
config.json" in a public model-information report (a GitHub markdown file generated from
/nfs/ofs-llm-ssd/models/opensource/GLM-5.1, with the checkpoint's weight listing: 282 safetensors files, 59,870
tensors, 753,864,139,008 parameters). Keys as published; only their order and Python's spelling of true/false differ.
"""

from __future__ import annotations

import json
import warnings

import pytest
import torch

from tfcalc.count.model import params as count_params
from tfcalc.presets import load

pytestmark = pytest.mark.filterwarnings("ignore")

GLM51 = {
    "architectures": ["GlmMoeDsaForCausalLM"], "attention_bias": False, "attention_dropout": 0.0, "dtype": "bfloat16",
    "eos_token_id": [154820, 154827, 154829], "ep_size": 1, "first_k_dense_replace": 3, "hidden_act": "silu",
    "head_dim": 64, "hidden_size": 6144, "index_head_dim": 128, "index_n_heads": 32, "index_topk": 2048,
    "indexer_rope_interleave": True, "initializer_range": 0.02, "intermediate_size": 12288, "kv_lora_rank": 512,
    "max_position_embeddings": 202752, "moe_intermediate_size": 2048, "moe_layer_freq": 1, "model_type": "glm_moe_dsa",
    "n_group": 1, "n_routed_experts": 256, "n_shared_experts": 1, "norm_topk_prob": True, "num_attention_heads": 64,
    "num_experts_per_tok": 8, "num_hidden_layers": 78, "num_key_value_heads": 64, "num_nextn_predict_layers": 1,
    "pad_token_id": 154820, "pretraining_tp": 1, "q_lora_rank": 2048, "qk_head_dim": 256, "qk_nope_head_dim": 192,
    "qk_rope_head_dim": 64, "rms_norm_eps": 1e-05, "rope_interleave": True,
    "rope_parameters": {"rope_theta": 1000000, "rope_type": "default"}, "routed_scaling_factor": 2.5,
    "scoring_func": "sigmoid", "tie_word_embeddings": False, "topk_group": 1, "topk_method": "noaux_tc",
    "transformers_version": "5.4.0", "use_cache": True, "v_head_dim": 256, "vocab_size": 154880,
}
CHECKPOINT_TENSORS = 753_864_139_008  # the report's weight listing: every tensor in the 282 safetensors files
IDENTITY = ("name", "nominal_params", "source")  # the preset's own; a config.json names none of them


def _config_json(tmp_path) -> str:
    folder = tmp_path / "GLM-5.1"
    folder.mkdir(exist_ok=True)
    (folder / "config.json").write_text(json.dumps(GLM51))
    return str(folder / "config.json")


@pytest.fixture(scope="module")
def hf_meta():
    import transformers

    kw = {k: v for k, v in GLM51.items() if k not in ("architectures", "model_type", "transformers_version")}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        hf_cfg = transformers.GlmMoeDsaConfig(**kw)
    with torch.device("meta"):
        return transformers.GlmMoeDsaForCausalLM(hf_cfg)


def test_the_preset_is_the_published_config_field_by_field(tmp_path):
    ours, theirs = load("glm-5.1").resolved(), load(_config_json(tmp_path)).resolved()
    assert set(ours) == set(theirs)
    differ = {k: (ours[k], theirs[k]) for k in ours if k not in IDENTITY and ours[k] != theirs[k]}
    assert differ == {}
    assert load("glm-5.1").architecture == load(_config_json(tmp_path)).architecture


def test_parameters_equal_transformers_on_meta(hf_meta):
    """743,911,199,232: "744B" as Z.ai states GLM-5's size."""
    cfg = load("glm-5.1")
    hf_total = sum(p.numel() for p in hf_meta.parameters())
    assert count_params.total(cfg) == hf_total == 743_911_199_232


def test_the_checkpoints_tensor_total_by_hand(hf_meta):
    """The checkpoint holds what transformers builds plus its MTP module (layer 78: one MoE decoder layer, eh_proj
    6144 × 12288, enorm, hnorm and shared_head.norm of 6144; embedding and head shared with the model) and the
    routers' e_score_correction_bias (256 a MoE layer, 75 + the MTP's; transformers keeps them as buffers)."""
    d = 6144
    moe_layer = sum(p.numel() for p in hf_meta.model.layers[3].parameters())
    assert [n for n, _ in hf_meta.model.layers[3].named_buffers()] == ["mlp.gate.e_score_correction_bias"]
    mtp = moe_layer + d * 2 * d + 3 * d
    assert count_params.total(load("glm-5.1")) + mtp + 76 * 256 == CHECKPOINT_TENSORS
