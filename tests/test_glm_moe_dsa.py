"""GLM-5 (model_type glm_moe_dsa): DeepSeek-V3.2's sparse attention with the indexer's RoPE on interleaved pairs
(tfcalc.architecture.sparse_latent, ``index_interleave``), held against transformers 5.24 (modeling_glm_moe_dsa.py):
GlmMoeDsaConfig's defaults (its docstring's checkpoint, zai-org/GLM-5) written as a config.json and read back,
parameters exact on meta, FlopCounterMode on one attention layer at two lengths, the cache at 4,096 tokens; a tiny
checkpoint's logits and decode; its "shared" indexer layers (indexer_types / index_topk_pattern /
index_topk_freq, IndexCache) held the same way, with no indexer weights, FLOPs or indexer keys of their own."""

from __future__ import annotations

import json
import warnings

import pytest
import torch

from tfcalc.architecture.sparse_latent import topk_pairs
from tfcalc.count.model import params as count_params
from tfcalc.count.model.memory import kv_cache_bytes
from tfcalc.errors import InputError
from tfcalc.presets import load
from tfcalc.workload import Workload

pytestmark = pytest.mark.filterwarnings("ignore")

TINY = dict(vocab_size=61, hidden_size=32, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=4,
            intermediate_size=40, moe_intermediate_size=16, n_routed_experts=8, num_experts_per_tok=2,
            n_shared_experts=1, first_k_dense_replace=1, kv_lora_rank=12, q_lora_rank=20, qk_nope_head_dim=8,
            qk_rope_head_dim=4, v_head_dim=6, max_position_embeddings=64, index_topk=5, index_n_heads=16,
            index_head_dim=8)


def _published() -> dict:
    """GlmMoeDsaConfig() as transformers writes it to config.json (78 layers, hidden 6144, 64 heads of 192 + 64,
    values 256, 256 experts of 2048, 32 indexer heads)."""
    import transformers

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return json.loads(transformers.GlmMoeDsaConfig().to_json_string())


def _write(tmp_path, raw: dict):
    folder = tmp_path / "glm5"
    folder.mkdir(exist_ok=True)
    (folder / "config.json").write_text(json.dumps(raw))
    return str(folder / "config.json")


@pytest.fixture(scope="module")
def hf_meta():
    import transformers

    with torch.device("meta"):
        return transformers.GlmMoeDsaForCausalLM(transformers.GlmMoeDsaConfig())


def test_default_size_parameters_exact(tmp_path, hf_meta):
    from tfcalc.measure.params import measure_params

    cfg = load(_write(tmp_path, _published()))
    hf_total = sum(p.numel() for p in hf_meta.parameters())
    assert count_params.total(cfg) == hf_total
    total, breakdown = measure_params(cfg)
    assert total == hf_total and breakdown == count_params.breakdown(cfg)
    mixer = cfg.architecture.output.layer(0).mixer
    assert (mixer.index_n_heads, mixer.index_head_dim, mixer.index_interleave) == (32, 128, True)
    # the indexer by hand: wq_b 2048 × 32·128, wk 6144 × 128, k_norm 2 × 128, weights_proj 6144 × 32
    indexer = 2048 * 32 * 128 + 6144 * 128 + 2 * 128 + 6144 * 32
    assert sum(p.numel() for p in hf_meta.model.layers[0].self_attn.indexer.parameters()) == indexer


@pytest.mark.parametrize("seq", [48, 96])
def test_forward_flops_equal_flop_counter_mode_on_transformers_attention(tmp_path, seq):
    """GlmMoeDsaAttention at full width on meta (top-32 keys): its FLOPs are tfcalc's full-square count."""
    import transformers
    import transformers.models.glm_moe_dsa.modeling_glm_moe_dsa as m
    from torch.utils.flop_counter import FlopCounterMode

    hf_cfg = transformers.GlmMoeDsaConfig(index_topk=32)
    hf_cfg._attn_implementation = "eager"
    with torch.device("meta"):
        layer = m.GlmMoeDsaAttention(hf_cfg, 0).eval()
        x = torch.empty(1, seq, 6144)
        cos = sin = torch.empty(1, seq, 64)
        mask = torch.ones(1, 1, seq, seq, dtype=torch.bool).tril()
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        layer(x, (cos, sin), mask)
    mixer = load(_write(tmp_path, {**_published(), "index_topk": 32})).architecture.output.layer(0).mixer
    mixing = mixer.mixing(seq, seq)
    assert sum(2 * seq * lin.n_in * lin.n_out for lin in mixer.linears()) + sum(
        mx.flops for mx in mixing) == counter.get_total_flops()
    sparse = topk_pairs(seq, seq, 32)
    assert sum(mx.causal_flops for mx in mixing) == (seq * (seq + 1) * (32 * 128 + 32)
                                                     + 2 * sparse * 64 * (256 + 256))


def test_generation_state_at_4096_tokens_is_what_transformers_cache_holds(tmp_path, hf_meta):
    from transformers import DynamicCache

    model = hf_meta.to(torch.bfloat16)
    cache = DynamicCache(config=model.config)
    T = 4096
    x = torch.empty(1, T, 6144, device="meta", dtype=torch.bfloat16)
    cos = sin = torch.empty(1, T, 64, device="meta", dtype=torch.bfloat16)
    mask = torch.ones(1, 1, T, T, dtype=torch.bool, device="meta")
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn(x, (cos, sin), mask, cache=cache)
    held = sum(t.numel() * t.element_size() for lay in cache.layers for t in (lay.keys, lay.values, lay.indexer_keys))
    cfg = load(_write(tmp_path, _published()))
    assert held == 78 * T * (512 + 64 + 128) * 2 == kv_cache_bytes(cfg, Workload(batch=1, seq=T, kv_dtype="bf16"))


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    import transformers

    import tfcalc

    torch.manual_seed(0)
    config = transformers.GlmMoeDsaConfig(**TINY)
    config._attn_implementation = "eager"
    config._experts_implementation = "eager"
    hf = transformers.GlmMoeDsaForCausalLM(config).eval()
    with torch.no_grad():
        for p in hf.parameters():
            p.add_(torch.randn_like(p), alpha=0.05)
    folder = tmp_path_factory.mktemp("glm5-tiny")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        hf.save_pretrained(folder)
    return hf, tfcalc.load_model(str(folder)), load(str(folder / "config.json"))


def test_tiny_logits_and_decode_equal_transformers(tiny):
    from tfcalc.model import generate

    hf, ours, _ = tiny
    ids = torch.randint(0, 61, (2, 12), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        ref, got = hf(input_ids=ids).logits, ours(ids)
    assert (got - ref).abs().max() <= 1e-4 * ref.abs().max() and ref.abs().max() > 0.1
    for block in ours.blocks:  # V3.2's rotate-half indexer RoPE instead: other keys picked, other logits
        block.attn.indexer.interleave = False
    try:
        with torch.no_grad():
            assert (ours(ids) - ref).abs().max() > 1e-3
    finally:
        for block in ours.blocks:
            block.attn.indexer.interleave = True
    prompt, idx = ids[:, :9], ids[:, :9]
    with torch.no_grad():
        for _ in range(6):
            idx = torch.cat([idx, hf(input_ids=idx).logits[:, -1:].argmax(-1)], dim=1)
    assert torch.equal(generate(ours, prompt, 6, cache=ours.new_cache(2, 15)), idx[:, 9:])


@pytest.mark.parametrize("changes, message", [
    (dict(indexer_types=["shared", "full"] + ["full"] * 76), "first layer must run its indexer"),
    (dict(indexer_types=["full", "shared"]), "'indexer_types' .* must give each of the 78 layers"),
    (dict(indexer_types="full"), "'indexer_types'"),
    (dict(indexer_types=["full", "sparse"] + ["full"] * 76), "'indexer_types'"),
    (dict(indexer_types=None, index_topk_pattern="FX" * 39), "'index_topk_pattern'"),
    (dict(indexer_types=None, index_topk_pattern=7), "'index_topk_pattern'"),
    (dict(indexer_types=None, index_topk_freq=2, index_skip_topk_offset=0), "first layer must run its indexer"),
    (dict(indexer_types=None, index_topk_freq="2"), "'index_topk_freq' must be an integer"),
    (dict(indexer_types=None, index_skip_topk_offset=1.5), "'index_skip_topk_offset' must be an integer"),
    (dict(index_n_heads=0), "'index_n_heads' must be positive"),
    (dict(q_lora_rank=None), "'q_lora_rank' null is not supported"),
])
def test_hostile_config_json(tmp_path, changes, message):
    with pytest.raises(InputError, match=message):
        load(_write(tmp_path, {**_published(), **changes}))


def test_flat_field_index_rope_interleave_needs_index_topk():
    with pytest.raises(InputError, match="applies to sparse attention only"):
        load("deepseek-v3", ["index_rope_interleave=true"])
    assert load("deepseek-v3.2", ["index_rope_interleave=true"]).architecture.output.layer(0).mixer.index_interleave


# GLM-5's shared indexer layers (configuration_glm_moe_dsa.py: indexer_types; GlmMoeDsaAttention builds no indexer
# on a "shared" layer and takes the previous full layer's top-k)
@pytest.mark.parametrize("extra", [dict(index_topk_freq=4), dict(index_topk_freq=3, index_skip_topk_offset=5),
                                   dict(index_topk_pattern="FSSF" * 19 + "FS")])
def test_shared_indexer_layers_parameters_exact(tmp_path, extra):
    import transformers

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        hf_cfg = transformers.GlmMoeDsaConfig(**extra)
        raw = json.loads(hf_cfg.to_json_string())
    with torch.device("meta"):
        hf = transformers.GlmMoeDsaForCausalLM(hf_cfg)
    raw.pop("indexer_types")  # read back from the keys transformers derives it from, as a published file has them
    cfg = load(_write(tmp_path, raw))
    assert cfg.index_topk_pattern == "".join("F" if k == "full" else "S" for k in hf_cfg.indexer_types)
    assert "S" in cfg.index_topk_pattern
    assert count_params.total(cfg) == sum(p.numel() for p in hf.parameters())
    shared = hf_cfg.indexer_types.count("shared")  # each shared layer: one indexer fewer (by hand, as above)
    assert count_params.total(load(_write(tmp_path, _published()))) - count_params.total(cfg) == shared * (
        2048 * 32 * 128 + 6144 * 128 + 2 * 128 + 6144 * 32)


@pytest.mark.parametrize("seq", [48, 96])
def test_shared_layer_flops_equal_flop_counter_mode(tmp_path, seq):
    """A shared GlmMoeDsaAttention given the previous layer's top-k: no indexer FLOPs, the main attention's."""
    import transformers
    import transformers.models.glm_moe_dsa.modeling_glm_moe_dsa as m
    from torch.utils.flop_counter import FlopCounterMode

    hf_cfg = transformers.GlmMoeDsaConfig(index_topk=32, index_topk_freq=2)
    hf_cfg._attn_implementation = "eager"
    assert hf_cfg.indexer_types[2] == "shared"
    with torch.device("meta"):
        layer = m.GlmMoeDsaAttention(hf_cfg, 2).eval()
        x = torch.empty(1, seq, 6144)
        cos = sin = torch.empty(1, seq, 64)
        mask = torch.ones(1, 1, seq, seq, dtype=torch.bool).tril()
        top = torch.zeros(1, seq, 32, dtype=torch.long)
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        layer(x, (cos, sin), mask, prev_topk_indices=top)
    cfg = load(_write(tmp_path, {**_published(), "index_topk": 32, "indexer_types": hf_cfg.indexer_types}))
    mixer = cfg.architecture.output.layer(2).mixer
    assert mixer.index_shared and not cfg.architecture.output.layer(1).mixer.index_shared
    assert sum(2 * seq * lin.n_in * lin.n_out for lin in mixer.linears()) + sum(
        mx.flops for mx in mixer.mixing(seq, seq)) == counter.get_total_flops()
    assert not [w for w in mixer.weights() if "indexer" in w.name] and mixer.state()[-1].name != "index_k"


def test_shared_layers_generation_state_is_what_transformers_cache_holds(tmp_path):
    """transformers writes indexer keys on full layers only (update_indexer is the indexer's): 4,096 tokens."""
    import transformers
    from transformers import DynamicCache

    hf_cfg = transformers.GlmMoeDsaConfig(index_topk_freq=4)
    with torch.device("meta"):
        model = transformers.GlmMoeDsaForCausalLM(hf_cfg).to(torch.bfloat16)
    cache, T = DynamicCache(config=model.config), 4096
    x = torch.empty(1, T, 6144, device="meta", dtype=torch.bfloat16)
    cos = sin = torch.empty(1, T, 64, device="meta", dtype=torch.bfloat16)
    mask = torch.ones(1, 1, T, T, dtype=torch.bool, device="meta")
    top = torch.zeros(1, T, 2048, dtype=torch.long, device="meta")
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn(x, (cos, sin), mask, cache=cache, prev_topk_indices=top)
    held = sum(t.numel() * t.element_size() for lay in cache.layers for t in (lay.keys, lay.values, lay.indexer_keys)
               if t is not None and t.numel())
    full = hf_cfg.indexer_types.count("full")
    cfg = load(_write(tmp_path, {**_published(), "indexer_types": hf_cfg.indexer_types}))
    assert held == (78 * (512 + 64) + full * 128) * T * 2 == kv_cache_bytes(
        cfg, Workload(batch=1, seq=T, kv_dtype="bf16"))


def test_tiny_shared_indexer_logits_and_decode_equal_transformers(tmp_path):
    import transformers

    import tfcalc
    from tfcalc.model import generate

    torch.manual_seed(0)
    config = transformers.GlmMoeDsaConfig(**{**TINY, "num_hidden_layers": 4}, index_topk_pattern="FSFS")
    config._attn_implementation = "eager"
    config._experts_implementation = "eager"
    hf = transformers.GlmMoeDsaForCausalLM(config).eval()
    assert hf.model.layers[1].self_attn.indexer is None
    with torch.no_grad():
        for p in hf.parameters():
            p.add_(torch.randn_like(p), alpha=0.05)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        hf.save_pretrained(tmp_path)
    ours = tfcalc.load_model(str(tmp_path))
    assert ours.blocks[1].attn.indexer is None and ours.blocks[3].attn.top_source == (ours.blocks[2].attn,)
    assert sum(p.numel() for p in ours.parameters()) == sum(p.numel() for p in hf.parameters())
    ids = torch.randint(0, 61, (2, 12), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        ref, got = hf(input_ids=ids).logits, ours(ids)
    assert (got - ref).abs().max() <= 1e-4 * ref.abs().max() and ref.abs().max() > 0.1
    prompt, idx = ids[:, :9], ids[:, :9]
    with torch.no_grad():
        for _ in range(6):
            idx = torch.cat([idx, hf(input_ids=idx).logits[:, -1:].argmax(-1)], dim=1)
    assert torch.equal(generate(ours, prompt, 6, cache=ours.new_cache(2, 15)), idx[:, 9:])
    ours.blocks[3].attn.top_source = (ours.blocks[0].attn,)  # layer 0's top-k instead of layer 2's: other logits
    with torch.no_grad():
        assert (ours(ids) - ref).abs().max() > 1e-3


@pytest.mark.parametrize("preset, value, message", [
    ("deepseek-v3", "F" * 61, "applies to sparse attention only"),
    ("glm-5.1", "FS", "one letter per layer \\(78\\)"),
    ("glm-5.1", "S" + "F" * 77, "starting with F"),
    ("glm-5.1", "F" * 77 + "x", "one letter per layer"),
])
def test_flat_field_index_topk_pattern_hostile(preset, value, message):
    with pytest.raises(InputError, match=message):
        load(preset, [f"index_topk_pattern={value}"])


def test_flat_field_index_topk_pattern_on_the_preset():
    cfg = load("glm-5.1", ["index_topk_pattern=" + "F" + "FSSS" * 19 + "F"])
    layers = [cfg.architecture.output.layer(i).mixer.index_shared for i in range(78)]
    assert layers == [c == "S" for c in cfg.index_topk_pattern] and sum(layers) == 57
