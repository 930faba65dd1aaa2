"""MoE families with no new mixer, held against transformers 5.24 at full size on meta: GLM-4.7-Flash
(glm4_moe_lite), ERNIE-4.5 MoE (ernie4_5_moe) and MiMo-V2-Flash (mimo_v2_flash). Each config class's defaults
(the checkpoint its docstring names) written as a config.json and read back: parameters exact, the cache
transformers holds after 4,096 tokens equal to tfcalc's KV bytes; the hostile cases of the keys each reads (and of
MiMo's new flat attention fields). Their tiny checkpoints (logits through load_model, FLOPs, the KV of a tiny
cache) are cases of tests/hf_tiny.py, run by tests/test_hf_models.py."""

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

TESTED_TYPES = {"glm4_moe_lite", "ernie4_5_moe", "mimo_v2_flash"}  # tested here (tests/test_hf_config.py)
FAMILIES = {"glm4_moe_lite": ("Glm4MoeLiteConfig", "Glm4MoeLiteForCausalLM"),
            "ernie4_5_moe": ("Ernie4_5_MoeConfig", "Ernie4_5_MoeForCausalLM"),
            "mimo_v2_flash": ("MiMoV2FlashConfig", "MiMoV2FlashForCausalLM")}


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
    # ERNIE-4.5's router correction bias: an nn.Parameter in transformers, a buffer in tfcalc (its module
    # docstring): 64 experts in each of the 27 MoE layers (1 .. 27)
    statics = sum(p.numel() for n, p in hf.named_parameters() if n.endswith("moe_statics.e_score_correction_bias"))
    assert statics == (27 * 64 if model_type == "ernie4_5_moe" else 0)
    hf_total -= statics
    assert count_params.total(cfg) == hf_total
    total, breakdown = measure_params(cfg)
    assert total == hf_total and breakdown == count_params.breakdown(cfg)


def _cache_after(model, tokens: int) -> int:
    """Bytes transformers' cache holds after a forward of ``tokens`` positions through every layer's attention
    (on meta: shapes only), bf16: its StaticCache of ``tokens`` positions (a ring of W slots in a sliding layer,
    StaticSlidingWindowLayer, as tfcalc allocates) where a layer slides, else its DynamicCache."""
    from transformers import DynamicCache, StaticCache

    model = model.to(torch.bfloat16)
    sliding = "sliding_attention" in (getattr(model.config, "layer_types", None) or [])
    cache = StaticCache(config=model.config, max_cache_len=tokens) if sliding else DynamicCache(config=model.config)
    d = model.config.hidden_size
    x = torch.empty(1, tokens, d, device="meta", dtype=torch.bfloat16)
    rotary = model.model.rotary_emb
    ids = torch.arange(tokens, device="meta")[None]
    mask = torch.ones(1, 1, tokens, tokens, dtype=torch.bool, device="meta")
    with torch.no_grad():
        for layer in model.model.layers:
            kind = getattr(layer.self_attn, "layer_type", None)
            cos, sin = rotary(x, ids, kind) if sliding else rotary(x, ids)
            layer.self_attn(x, (cos, sin), mask, cache=cache, cache_position=ids[0])
    return sum(t.numel() * t.element_size() for lay in cache.layers for t in (lay.keys, lay.values))


@pytest.mark.parametrize("model_type, per_token", [
    # transformers 5.24 caches the latent (Glm4MoeLiteAttention: kv_lora_rank 512 and the shared RoPE key of 64)
    ("glm4_moe_lite", 47 * (512 + 64)),
    ("ernie4_5_moe", 28 * 2 * 4 * 128),  # GQA: 4 KV heads of 2560 / 20 = 128
    # 9 full layers (0, 5, 11, ..., 47) of 4 K/V heads, K 192 and V 128 wide, every token; 39 sliding layers of
    # 8 K/V heads over a ring of 129 slots (counted per token here: 129 / 4096 of a token's worth)
    ("mimo_v2_flash", None),
])
def test_generation_state_at_4096_tokens_is_what_transformers_cache_holds(tmp_path, model_type, per_token):
    T = 4096
    held = _cache_after(_meta(model_type), T)
    cfg = load(_write(tmp_path, _published(model_type)))
    work = Workload(batch=1, seq=T, kv_dtype="bf16")
    if per_token is None:  # MiMo-V2-Flash
        assert held == (9 * T * 4 * (192 + 128) + 39 * 129 * 8 * (192 + 128)) * 2
    else:
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


ERNIE_HOSTILE = [
    (dict(use_bias=True), "'use_bias' true is not supported"),
    (dict(use_bias="no"), "'use_bias' must be true or false"),
    (dict(moe_layer_interval=0), "'moe_layer_interval' must be a positive integer; got 0"),
    (dict(moe_layer_interval=1.5), "'moe_layer_interval' must be an integer"),
    (dict(moe_layer_start_index=[1, 1]), "'moe_layer_start_index' must be an integer"),
    (dict(moe_layer_end_index="last"), "'moe_layer_end_index' must be an integer"),
    (dict(moe_num_shared_experts=-1), "'moe_num_shared_experts' must be 0 or more"),
    (dict(moe_k=0), "'n_expert_active' must be positive"),
    (dict(moe_num_experts="64"), "'moe_num_experts'"),
    (dict(intermediate_size=None), "missing required field 'intermediate_size'"),
    (dict(num_hidden_layers=2**40, moe_layer_end_index=5), "past the 1,000,000 layers"),
]


@pytest.mark.parametrize("changes, message", ERNIE_HOSTILE)
def test_ernie4_5_moe_hostile_config_json(tmp_path, changes, message):
    raw = {k: v for k, v in {**_published("ernie4_5_moe"), **changes}.items() if v is not None}
    with pytest.raises(InputError, match=message):
        load(_write(tmp_path, raw))


@pytest.mark.parametrize("keys, moe", [
    (dict(), [i >= 1 for i in range(28)]),  # the released layout: every layer past the first
    (dict(moe_layer_start_index=0, moe_layer_interval=2), [i % 2 == 1 for i in range(28)]),
    (dict(moe_layer_start_index=4, moe_layer_end_index=20, moe_layer_interval=3),
     [4 <= i <= 20 and (i + 1) % 3 == 0 for i in range(28)]),
    (dict(moe_layer_end_index=99), [i >= 1 for i in range(28)]),
])
def test_ernie4_5_moe_layers_are_where_transformers_puts_the_experts(tmp_path, keys, moe):
    """Ernie4_5_MoeDecoderLayer's rule, as transformers builds it on meta and as tfcalc reads it."""
    import transformers

    raw = {**_published("ernie4_5_moe"), **keys}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        hf_cfg = transformers.Ernie4_5_MoeConfig(**{k: v for k, v in keys.items()})
    with torch.device("meta"):
        layers = transformers.Ernie4_5_MoeModel(hf_cfg).layers
    assert [hasattr(layer.mlp, "experts") for layer in layers] == moe
    cfg = load(_write(tmp_path, raw))
    assert [b.is_moe for b in cfg.architecture.output.layers()] == moe


def test_ernie4_5_moe_with_no_expert_layer_is_the_dense_model(tmp_path):
    cfg = load(_write(tmp_path, {**_published("ernie4_5_moe"), "moe_layer_start_index": 28}))
    assert cfg.n_expert is None and cfg.d_ff == 12288


MIMO_HOSTILE = [
    (dict(rope_parameters={"full_attention": {"rope_type": "default", "rope_theta": 5e6, "partial_rotary_factor": 0.5},
                           "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}}),
     "different partial_rotary_factor"),
    (dict(rope_parameters={"full_attention": {"rope_type": "yarn", "rope_theta": 5e6, "factor": 2.0},
                           "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}}),
     "rope_type 'yarn' is not supported"),
    (dict(rope_parameters={"full_attention": [1], "sliding_attention": {}}), "full_attention must be an object"),
    (dict(rope_parameters={"full_attention": {"rope_theta": -1}, "sliding_attention": {}}),
     "rope_theta must be a positive number"),
    (dict(attention_value_scale=0), "'attention_value_scale' must be a positive number"),
    (dict(attention_value_scale="0.7"), "'attention_value_scale' must be a number"),
    (dict(v_head_dim=0), "'attn_v_head_dim' must be positive"),
    (dict(sliding_window=0), "'sliding_window' is 0"),
    (dict(sliding_window_size="128"), "'sliding_window_size' must be an integer"),
    (dict(layer_types=["sliding_attention"] * 47), "'layer_types' lists 47 layers"),
    (dict(layer_types=None, num_hidden_layers=2**40), "past the 1,000,000 layers"),
    (dict(num_attention_heads=12), "multiple of local_n_kv_head"),
    (dict(mlp_layer_types=["moe"] * 48), "'mlp_layer_types' must be a list"),
]


@pytest.mark.parametrize("changes, message", MIMO_HOSTILE)
def test_mimo_v2_flash_hostile_config_json(tmp_path, changes, message):
    raw = {k: v for k, v in {**_published("mimo_v2_flash"), **changes}.items() if v is not None}
    with pytest.raises(InputError, match=message):
        load(_write(tmp_path, raw))


def test_mimo_v2_flash_layers_and_window(tmp_path):
    """Five sliding layers to one full (layer 0 full too), the window W + 1 of sliding_window_size, as
    transformers builds them on meta."""
    import transformers

    raw = {**_published("mimo_v2_flash"), "sliding_window_size": 127}
    del raw["sliding_window"], raw["layer_types"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        hf_cfg = transformers.MiMoV2FlashConfig(sliding_window_size=127)
    with torch.device("meta"):
        hf = transformers.MiMoV2FlashModel(hf_cfg).layers
    cfg = load(_write(tmp_path, raw))
    mixers = [b.mixer for b in cfg.architecture.output.layers()]
    assert [m.window for m in mixers] == [layer.self_attn.sliding_window for layer in hf]
    assert {m.window for m in mixers} == {128, None}
    assert [m.n_kv_head for m in mixers] == [layer.self_attn.k_proj.out_features // 192 for layer in hf]
    assert [m.sinks for m in mixers] == [layer.self_attn.sinks is not None for layer in hf]
    assert {(m.rope_dim, m.rope_theta) for m in mixers} == {(64, 5e6), (64, 1e4)}


@pytest.mark.parametrize("sets, message", [
    (["local_n_kv_head=2"], "apply to the local layers: give sliding_window too"),
    (["attn_sinks_local=true"], "apply to the local layers: give sliding_window too"),
    (["sliding_window=8", "full_attention_every=2", "local_n_kv_head=5"], "multiple of local_n_kv_head"),
    (["attn_v_head_dim=0"], "'attn_v_head_dim' must be positive"),
])
def test_flat_fields_of_mimo_attention_hostile(sets, message):
    with pytest.raises(InputError, match=message):
        load("llama2-7b", sets)


def test_flat_fields_of_mimo_attention_count_per_layer():
    """llama2-7b with a window on every 2nd layer, 2× the K/V heads and sinks there, V heads of 64: each layer's
    attention weights by hand."""
    cfg = load("llama2-7b", ["n_kv_head=8", "sliding_window=8", "full_attention_every=2", "local_n_kv_head=16",
                             "attn_sinks_local=true", "attn_v_head_dim=64"])
    d, h = 4096, 128
    full = d * 32 * h + d * 8 * h + d * 8 * 64 + 32 * 64 * d
    local = d * 32 * h + d * 16 * h + d * 16 * 64 + 32 * 64 * d + 32
    import math

    blocks = [cfg.architecture.output.layer(i) for i in (0, 1)]
    assert [sum(math.prod(w.shape) for w in b.mixer.weights()) for b in blocks] == [local, full]


@pytest.mark.parametrize("name", ["glm4_moe_lite", "ernie4_5_moe", "mimo_v2_flash"])
def test_tiny_decode_over_tfcalc_cache_equals_transformers(saved, name):
    """Greedy decode over tfcalc's cache (MiMo's rings of 3 slots with sinks and twice the K/V heads, GLM's
    latent, ERNIE's GQA) equals its uncached forward and transformers' generate, past the window."""
    from hf_pairs import assert_decode_equals

    import tfcalc

    hf, folder = saved(name)
    model = tfcalc.load_model(str(folder))
    prompt = torch.randint(3, 61, (2, 7), generator=torch.Generator().manual_seed(3))
    assert_decode_equals(model, hf, prompt, 6, model.new_cache(2, 13))


def test_mimo_value_scale_is_folded_into_v(saved):
    """Without attention_value_scale the loaded model's logits move: the fold is what matches transformers."""
    import json as _json

    import tfcalc

    hf, folder = saved("mimo_v2_flash")
    ids = torch.randint(3, 61, (1, 9), generator=torch.Generator().manual_seed(5))
    raw = _json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(_json.dumps({**raw, "attention_value_scale": None}))
    try:
        unscaled = tfcalc.load_model(str(folder))
    finally:
        (folder / "config.json").write_text(_json.dumps(raw))
    with torch.no_grad():
        want, got = hf(ids).logits, unscaled(ids)
    assert (want - got).abs().max() > 1e-2


ATTENTION = {"glm4_moe_lite": ("glm4_moe_lite", "Glm4MoeLite", [0], 64),
             "ernie4_5_moe": ("ernie4_5_moe", "Ernie4_5_Moe", [0], 128),
             "mimo_v2_flash": ("mimo_v2_flash", "MiMoV2Flash", [0, 1], 64)}  # a full layer and a sliding one


@pytest.mark.parametrize("seq", [48, 96])
@pytest.mark.parametrize("model_type", list(ATTENTION))
def test_forward_flops_of_full_size_attention_equal_flop_counter_mode(tmp_path, model_type, seq):
    """Each family's attention at full published width on meta (eager: the scores as two matmuls over the full
    square, tfcalc's convention, a window's mask included): FlopCounterMode's total is tfcalc's per layer."""
    import importlib

    import transformers
    from torch.utils.flop_counter import FlopCounterMode

    module, prefix, layer_ids, rope = ATTENTION[model_type]
    m = importlib.import_module(f"transformers.models.{module}.modeling_{module}")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        hf_cfg = getattr(transformers, FAMILIES[model_type][0])()
    hf_cfg._attn_implementation = "eager"
    cfg = load(_write(tmp_path, _published(model_type)))
    for i in layer_ids:
        with torch.device("meta"):
            layer = getattr(m, f"{prefix}Attention")(hf_cfg, i).eval()
            x = torch.empty(1, seq, hf_cfg.hidden_size)
            cos = sin = torch.empty(1, seq, rope)
            mask = torch.zeros(1, 1, seq, seq)
        with torch.no_grad(), FlopCounterMode(display=False) as counter:
            layer(x, (cos, sin), mask)
        mixer = cfg.architecture.output.layer(i).mixer
        ours = sum(2 * seq * lin.n_in * lin.n_out for lin in mixer.linears()) + sum(
            mx.flops for mx in mixer.mixing(seq, seq))
        assert ours == counter.get_total_flops()


@pytest.mark.parametrize("name", ["glm4_moe_lite", "ernie4_5_moe", "mimo_v2_flash"])
def test_params_of_the_folder_explains_every_stored_tensor(saved, cli, name):
    """`tfcalc params FOLDER`: every tensor save_pretrained wrote is explained, the parameters matched are the
    analytic count, and the rest are the routers' correction biases (buffers), E per MoE layer."""
    hf, folder = saved(name)
    data = cli("params", str(folder), "--json").json()
    checkpoint = data["checkpoint"]
    assert checkpoint["agree"] and not checkpoint["unexplained"] and not checkpoint["misfits"]
    assert checkpoint["parameters_matched"] == data["analytic_total"] == data["empirical_total"]
    biases = sum(t.numel() for n, t in hf.state_dict().items() if n.endswith("e_score_correction_bias"))
    assert sum(checkpoint["buffers"].values()) == biases > 0
    assert data["checkpoint_total"] == data["analytic_total"] + biases
