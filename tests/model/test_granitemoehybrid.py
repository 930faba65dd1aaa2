"""The granitemoehybrid family (Granite-4.0-H) against transformers 5.24 (models/granitemoehybrid/
modeling_granitemoehybrid.py): every layer a Mamba2 or attention mixer, then SwiGLU experts beside a shared SwiGLU
MLP (``hybrid_with_ffn``), Granite's four multipliers, no positions. A small published-shaped config at full size
on meta (parameters exact; the generation state at 4,096 tokens equal to transformers' cache bytes); a tiny
checkpoint loaded by load_model (logits within 1e-4, fp32; FLOPs against FlopCounterMode on transformers' module,
whose expert loop reads routing counts back and so runs on real weights only); decode against the uncached forward.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from hf_pairs import (
    assert_decode_equals,
    assert_logits_close,
    config_json,
    eager_flops,
    hf_cache_bytes,
    nudge,
    saved_pair,
)

from tfcalc.count.model import flops as count_flops, params as count_params
from tfcalc.count.model.memory import kv_cache_bytes
from tfcalc.presets import load
from tfcalc.workload import Workload

transformers = pytest.importorskip("transformers")

# the example config.json of a GraniteMoeHybrid model (8 layers, 3 Mamba2 to 1 attention, 8 experts top 2, NoPE,
# Granite's multipliers) as the model family's documentation shows it; not a Granite-4.0-H release
DOC_EXAMPLE = {
    "architectures": ["GraniteMoeHybridForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
    "attention_multiplier": 0.015625, "bos_token_id": 0, "eos_token_id": 0, "embedding_multiplier": 12,
    "hidden_act": "silu", "hidden_size": 512, "initializer_range": 0.1, "intermediate_size": 1024,
    "layer_types": ["mamba", "mamba", "mamba", "attention", "mamba", "mamba", "mamba", "attention"],
    "logits_scaling": 2, "mamba_chunk_size": 256, "mamba_conv_bias": True, "mamba_d_conv": 4, "mamba_d_head": 128,
    "mamba_d_state": 128, "mamba_expand": 2, "mamba_n_groups": 1, "mamba_n_heads": 8, "mamba_proj_bias": False,
    "max_position_embeddings": 4096, "model_type": "granitemoehybrid", "normalization_function": "rmsnorm",
    "num_attention_heads": 8, "num_experts_per_tok": 2, "num_hidden_layers": 8, "num_key_value_heads": 8,
    "num_local_experts": 8, "output_router_logits": False, "position_embedding_type": "nope",
    "residual_multiplier": 0.22, "rms_norm_eps": 1e-05, "rope_scaling": None, "rope_theta": 10000,
    "router_aux_loss_coef": 0.0, "shared_intermediate_size": 512, "tie_word_embeddings": True,
    "torch_dtype": "bfloat16", "use_cache": True, "vocab_size": 49152,
}
SKIP = ("architectures", "model_type", "torch_dtype", "normalization_function", "rope_scaling", "rope_theta")


def _hf(raw, device="meta", dtype=torch.float32):
    keys = {k: v for k, v in raw.items() if k not in SKIP}
    with torch.device(device):
        return transformers.GraniteMoeHybridForCausalLM(transformers.GraniteMoeHybridConfig(**keys)).to(dtype).eval()


@pytest.mark.parametrize("experts", [8, 0], ids=["moe", "dense"])
def test_parameters_equal_transformers_on_meta(tmp_path, experts):
    raw = dict(DOC_EXAMPLE, num_local_experts=experts)
    cfg = config_json(tmp_path, raw)
    assert count_params.total(cfg) == sum(p.numel() for p in _hf(raw).parameters())
    if experts:  # by hand: 6 Mamba2 mixers (8 heads of 128, 1 group, state 128), 2 attention (8 heads of 64),
        d, inner, conv = 512, 1024, 1024 + 2 * 128  # every layer 8 SwiGLU experts of 1024, router, shared of 512
        mamba = d * (inner + conv + 8) + conv * 4 + conv + 3 * 8 + inner + inner * d
        ffn = 8 * 3 * d * 1024 + 8 * d + 3 * d * 512
        assert count_params.total(cfg) == 6 * mamba + 2 * 4 * d * d + 8 * (ffn + 2 * d) + 49152 * d + d


def test_state_at_4096_tokens_equals_transformers_cache(tmp_path):
    """Dense (no experts): transformers' expert loop cannot run on meta, and the FFN holds no state."""
    raw = dict(DOC_EXAMPLE, num_local_experts=0)
    cfg, hf = config_json(tmp_path, raw), _hf(raw, dtype=torch.bfloat16)
    with torch.no_grad():
        cache = hf(torch.zeros(1, 4096, dtype=torch.long, device="meta"), use_cache=True).cache
    hf_bytes = hf_cache_bytes(cache)
    by_hand = 2 * 2 * 4096 * 512 * 2 + 6 * ((1024 + 256) * 4 * 2 + 8 * 128 * 128 * 4)
    assert kv_cache_bytes(cfg, Workload(batch=1, seq=4096, kv_dtype="bf16")) == hf_bytes == by_hand


TINY = dict(vocab_size=61, hidden_size=32, num_hidden_layers=3, layer_types=["mamba", "attention", "mamba"],
            num_attention_heads=4, num_key_value_heads=2, mamba_n_heads=8, mamba_d_head=8, mamba_n_groups=2,
            mamba_d_state=6, mamba_d_conv=4, mamba_chunk_size=4, mamba_expand=2, intermediate_size=12,
            shared_intermediate_size=20, num_local_experts=8, num_experts_per_tok=2, embedding_multiplier=1.5,
            residual_multiplier=0.5, attention_multiplier=0.3, logits_scaling=2.0, position_embedding_type="nope",
            max_position_embeddings=64)


@pytest.fixture(scope="module")
def tiny_pair(tmp_path_factory):
    torch.manual_seed(0)
    hf = _hf(TINY, device="cpu")
    nudge(hf)
    return saved_pair(hf, tmp_path_factory.mktemp("tiny_granitemoehybrid"))


def test_tiny_checkpoint_logits_equal_transformers(tiny_pair):
    hf, model = tiny_pair
    assert_logits_close(hf, model, torch.randint(0, 61, (2, 11)))


def test_tiny_forward_flops_equal_flop_counter_on_transformers(tiny_pair):
    """Less the named term of the Mamba2 convolutions (tfcalc.architecture.mamba2); attention eager, as CPU SDPA's
    fused kernel is no op FlopCounterMode counts."""
    hf, model = tiny_pair
    T = 11
    measured = eager_flops(hf, torch.randint(0, 61, (1, T)))
    conv_dim, K = 64 + 2 * 2 * 6, 4
    dropped = 2 * 2 * conv_dim * K * (K - 1)
    assert measured == count_flops.forward_flops(model.cfg, Workload(batch=1, seq=T)) + dropped


def test_decode_equals_the_uncached_forward_and_transformers(tiny_pair):
    hf, model = tiny_pair
    prompt, new = torch.randint(0, 61, (2, 5)), 8
    assert_decode_equals(model, hf, prompt, new, model.new_cache(2, 5 + new))


@pytest.mark.parametrize("key, value, message", [
    ("layer_types", ["mamba", "moe"], "'layer_types' must list"),
    ("layer_types", [], "'layer_types' must list"),
    ("mamba_d_head", 100, "must equal mamba_expand·hidden_size"),
    ("mamba_n_heads", 7, "must divide"),
    ("position_embedding_type", "alibi", "none of nope, rope"),
    ("logits_scaling", 0, "'logits_scaling' must be a positive number"),
    ("time_step_limit", [0.0, 5.0], "time_step_limit"),
])
def test_bad_granitemoehybrid_config_json_is_one_line(tmp_path, key, value, message):
    from tfcalc.errors import InputError

    auto = {"mamba_d_head": "auto"} if key == "mamba_n_heads" else {}  # the head width derived from the heads
    with pytest.raises(InputError, match=message):
        config_json(tmp_path, dict(DOC_EXAMPLE, **{key: value}, **auto))


# Granite-4.0-H-Small's config.json as transcribed (tests/fixtures/published_configs/README.md names each source;
# presets/granite-4.0-h-small.yaml cites them key by key)
PUBLISHED = Path(__file__).parents[1] / "fixtures" / "published_configs"
H_SMALL = json.loads((PUBLISHED / "granitemoehybrid-h-small.json").read_text())


def test_h_small_parameters_equal_transformers_on_meta(tmp_path):
    """32,207,337,984: the card's "32B total"; 36 Mamba2 mixers (128 heads of 64, 1 group, state 128) and 4
    attention layers (32 heads of 128, 8 KV heads) at layers 5, 15, 25, 35, each then 72 SwiGLU experts of 768 beside
    a shared SwiGLU MLP of 1536; tied head. By hand as well."""
    cfg = config_json(tmp_path, H_SMALL)
    total = count_params.total(cfg)
    assert total == sum(p.numel() for p in _hf(H_SMALL).parameters()) == 32_207_337_984
    d, inner, conv, heads = 4096, 8192, 8192 + 2 * 128, 128
    mamba = d * (inner + conv + heads) + conv * 4 + conv + 3 * heads + inner + inner * d
    attention = d * 4096 + 2 * d * 1024 + 4096 * d
    ffn = 72 * 3 * d * 768 + 72 * d + 3 * d * 1536
    assert total == 36 * mamba + 4 * attention + 40 * (ffn + 2 * d) + 100352 * d + d


def test_h_small_state_at_4096_tokens_equals_transformers_cache(tmp_path):
    """The 4 attention layers' K/V (8 heads of 128, bf16) and the 36 Mamba2 layers' convolution (K columns, bf16) and
    SSM state (fp32); the experts dropped (their loop cannot run on meta; the FFN holds no state)."""
    raw = dict(H_SMALL, num_local_experts=0)
    cfg, hf = config_json(tmp_path, raw), _hf(raw, dtype=torch.bfloat16)
    with torch.no_grad():
        cache = hf(torch.zeros(1, 4096, dtype=torch.long, device="meta"), use_cache=True).cache
    by_hand = 4 * 2 * 4096 * 8 * 128 * 2 + 36 * ((8192 + 256) * 4 * 2 + 128 * 64 * 128 * 4)
    assert kv_cache_bytes(cfg, Workload(batch=1, seq=4096, kv_dtype="bf16")) == hf_cache_bytes(cache) == by_hand
    assert kv_cache_bytes(load("granite-4.0-h-small"), Workload(batch=1, seq=4096, kv_dtype="bf16")) == by_hand


def test_the_h_small_preset_is_its_config_json(tmp_path):
    cfg, preset = config_json(tmp_path, H_SMALL), load("granite-4.0-h-small")
    assert count_params.breakdown(cfg) == count_params.breakdown(preset)
    assert count_params.total(preset) == 32_207_337_984
    assert abs(count_params.total(preset) / 32e9 - 1) < 0.01  # the card's "32B total"
    # active: the 62 experts of 72 a token skips, in each of the 40 layers, left out -- about the card's "9B activated"
    assert count_params.active_total(preset) == 32_207_337_984 - 40 * 62 * 3 * 4096 * 768 == 8_803_121_664
    for seq in (1024, 4096):
        w = Workload(batch=1, seq=seq)
        assert count_flops.forward_flops(cfg, w) == count_flops.forward_flops(preset, w)
        assert kv_cache_bytes(cfg, w) == kv_cache_bytes(preset, w)


@pytest.mark.parametrize("override, message", [
    ("hybrid_pattern=MMMM", "one letter per layer (40); got 4"),
    ("hybrid_pattern=MMMMM*MMMMMMMMM*MMMMMMMMM*MMMMMMMMM*MMMX", "letter 'X' is none of"),
    ("ssm_groups=3", "ssm_heads (128) must be a multiple of ssm_groups (3)"),
    ("n_expert_active=73", "n_expert_active (73) must not exceed n_expert (72)"),
    ("shared_expert_d_ff=-1", "'shared_expert_d_ff' must be positive"),
])
def test_bad_overrides_of_the_h_small_preset_are_one_line(cli, override, message):
    r = cli("params", "granite-4.0-h-small", "--set", override)
    assert r.code == 2 and message in r.err and len(r.err.strip().splitlines()) == 1
