"""MoE families with no new mixer, held against transformers 5.24 at full size on meta: GLM-4.7-Flash
(glm4_moe_lite) and ERNIE-4.5 MoE (ernie4_5_moe). Each config class's defaults (the checkpoint its docstring
names) written as a config.json and read back: parameters exact, the cache transformers' DynamicCache holds after
4,096 tokens equal to tfcalc's KV bytes; the hostile cases of the keys each reads. Their tiny checkpoints (logits
through load_model, FLOPs, the KV of a tiny cache) are cases of tests/hf_tiny.py, run by tests/test_hf_models.py."""

from __future__ import annotations

import json
import warnings

import pytest
import torch

from tfcalc.count.model import params as count_params
from tfcalc.count.model.memory import kv_cache_bytes
from tfcalc.errors import InputError
from tfcalc.presets import load
from tfcalc.workload import Workload

pytestmark = pytest.mark.filterwarnings("ignore")

FAMILIES = {"glm4_moe_lite": ("Glm4MoeLiteConfig", "Glm4MoeLiteForCausalLM"),
            "ernie4_5_moe": ("Ernie4_5_MoeConfig", "Ernie4_5_MoeForCausalLM")}


def _published(model_type: str) -> dict:
    """The config class's defaults as transformers writes them to config.json."""
    import transformers

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return json.loads(getattr(transformers, FAMILIES[model_type][0])().to_json_string())


def _write(tmp_path, raw: dict) -> str:
    folder = tmp_path / raw["model_type"]
    folder.mkdir(exist_ok=True)
    (folder / "config.json").write_text(json.dumps(raw))
    return str(folder / "config.json")


def _meta(model_type: str):
    import transformers

    config_class, model_class = FAMILIES[model_type]
    with torch.device("meta"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return getattr(transformers, model_class)(getattr(transformers, config_class)())


@pytest.mark.parametrize("model_type", list(FAMILIES))
def test_default_size_parameters_exact(tmp_path, model_type):
    from tfcalc.measure.params import measure_params

    hf = _meta(model_type)
    cfg = load(_write(tmp_path, _published(model_type)))
    hf_total = sum(p.numel() for p in hf.parameters())  # a tied head counts once
    assert count_params.total(cfg) == hf_total
    total, breakdown = measure_params(cfg)
    assert total == hf_total and breakdown == count_params.breakdown(cfg)


def _cache_after(model, tokens: int) -> int:
    """Bytes transformers' DynamicCache holds after a forward of ``tokens`` positions through every layer's
    attention (on meta: shapes only), bf16."""
    from transformers import DynamicCache

    model = model.to(torch.bfloat16)
    cache = DynamicCache(config=model.config)
    d = model.config.hidden_size
    x = torch.empty(1, tokens, d, device="meta", dtype=torch.bfloat16)
    rotary = model.model.rotary_emb
    ids = torch.arange(tokens, device="meta")[None]
    cos, sin = rotary(x, ids)
    mask = torch.ones(1, 1, tokens, tokens, dtype=torch.bool, device="meta")
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn(x, (cos, sin), mask, cache=cache)
    return sum(t.numel() * t.element_size() for lay in cache.layers for t in (lay.keys, lay.values))


@pytest.mark.parametrize("model_type, per_token", [
    # transformers 5.24 caches the latent (Glm4MoeLiteAttention: kv_lora_rank 512 and the shared RoPE key of 64)
    ("glm4_moe_lite", 47 * (512 + 64)),
    ("ernie4_5_moe", 28 * 2 * 4 * 128),  # GQA: 4 KV heads of 2560 / 20 = 128
])
def test_generation_state_at_4096_tokens_is_what_transformers_cache_holds(tmp_path, model_type, per_token):
    T = 4096
    held = _cache_after(_meta(model_type), T)
    cfg = load(_write(tmp_path, _published(model_type)))
    work = Workload(batch=1, seq=T, kv_dtype="bf16")
    assert held == T * per_token * 2
    assert kv_cache_bytes(cfg, work) == held


GLM_LITE_HOSTILE = [
    (dict(mlp_layer_types=["dense"] * 3), "'mlp_layer_types' lists 3 layers; 'num_hidden_layers' is 47"),
    (dict(mlp_layer_types="dense"), "'mlp_layer_types' must be a list of 'dense' and 'sparse'"),
    (dict(mlp_layer_types=["dense", "moe"] + ["sparse"] * 45), "'mlp_layer_types' must be a list"),
    (dict(mlp_layer_types=None, first_k_dense_replace=3), "'first_k_dense_replace' 3 is not read by transformers"),
    (dict(first_k_dense_replace=2), "'first_k_dense_replace' 2 disagrees with 'mlp_layer_types'"),
    (dict(first_k_dense_replace="1"), "'first_k_dense_replace' must be an integer"),
    (dict(head_dim=32), "'head_dim' 32 differs from 'qk_rope_head_dim' 64"),
    (dict(num_key_value_heads=4), "'num_key_value_heads' 4 is not supported"),
    (dict(scoring_func="softmax"), "'scoring_func' 'softmax' is not supported"),
    (dict(rope_interleave="yes"), "'rope_interleave' must be true or false"),
]


@pytest.mark.parametrize("changes, message", GLM_LITE_HOSTILE)
def test_glm4_moe_lite_hostile_config_json(tmp_path, changes, message):
    with pytest.raises(InputError, match=message):
        load(_write(tmp_path, {**_published("glm4_moe_lite"), **changes}))


def test_glm4_moe_lite_layer_lists_and_aliases(tmp_path):
    """mlp_layer_types' dense layers where transformers puts them; head_dim read as qk_rope_head_dim."""
    raw = _published("glm4_moe_lite")
    kinds = ["dense", "dense"] + ["sparse"] * 45
    cfg = load(_write(tmp_path, {**raw, "mlp_layer_types": kinds, "first_k_dense_replace": 2}))
    assert [b.is_moe for b in cfg.architecture.output.layers()] == [k == "sparse" for k in kinds]
    kinds = ["sparse", "dense"] * 23 + ["dense"]
    cfg = load(_write(tmp_path, {**raw, "mlp_layer_types": kinds}))
    assert [b.is_moe for b in cfg.architecture.output.layers()] == [k == "sparse" for k in kinds]
    del raw["qk_rope_head_dim"]
    cfg = load(_write(tmp_path, {**raw, "head_dim": 32}))
    assert cfg.architecture.output.layer(0).mixer.qk_rope_head_dim == 32
