"""OLMo-Hybrid (model type olmo_hybrid) against transformers 5.24 (modeling_olmo_hybrid.py): gated-DeltaNet layers
(pre-norm, six projections, β in [0, 2]) beside OLMo 3's attention (output norms). At full size on meta with
OlmoHybridConfig's defaults (its docstring: allenai/Olmo-Hybrid-7B): parameters exact; the generation state at
4,096 tokens is what transformers' cache holds; a DeltaNet layer's FLOPs are FlopCounterMode's at two lengths plus
the hand-counted triangular solves; a tiny checkpoint in the released names (attention_layer_norm,
feedforward_layer_norm, q/k/v_conv1d) loaded by load_model gives transformers' logits and decodes over its fixed
state. The 10-token tiny case is tests/hf_tiny.py's "olmo_hybrid" (tests/test_hf_models.py)."""

from __future__ import annotations

import json
import math

import pytest
import torch
from hf_pairs import assert_logits_close, config_json, greedy_uncached

from tfcalc.count.model import params as count_params
from tfcalc.count.model.memory import kv_cache_bytes
from tfcalc.errors import InputError
from tfcalc.presets import load
from tfcalc.workload import Workload

pytestmark = pytest.mark.filterwarnings("ignore")

TESTED_TYPES = {"olmo_hybrid"}  # tests/test_hf_config.py: every supported type is tested somewhere
C = 64  # torch_chunk_gated_delta_rule's chunk_size
TINY = dict(vocab_size=61, hidden_size=32, intermediate_size=48, num_hidden_layers=4, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=256, pad_token_id=0, bos_token_id=1, eos_token_id=2,
            layer_types=["linear_attention", "linear_attention", "full_attention", "linear_attention"],
            linear_num_key_heads=2, linear_num_value_heads=2, linear_key_head_dim=8, linear_value_head_dim=16,
            rope_parameters={"rope_type": "default", "rope_theta": 500.0})


@pytest.fixture(scope="module")
def hf_meta():
    import transformers

    with torch.device("meta"):
        return transformers.OlmoHybridForCausalLM(transformers.OlmoHybridConfig())


def test_full_size_defaults_parameters_exact(tmp_path, hf_meta):
    """OlmoHybridConfig() (32 layers of 3840, every 4th full attention; DeltaNet 30 heads of dk 96, dv 192) on meta:
    tfcalc's count is transformers' numel; the DeltaNet layers pre-norm, the attention layers OLMo 3's output norms."""
    cfg = config_json(tmp_path, json.loads(hf_meta.config.to_json_string()))
    assert count_params.total(cfg) == sum(p.numel() for p in hf_meta.parameters()) == 7_430_870_688
    layers = list(cfg.architecture.output.layers())
    assert [b.placement for b in layers[:4]] == ["pre", "pre", "pre", "output"]
    assert (cfg.linear_key_head_dim, cfg.linear_value_head_dim, cfg.linear_beta_scale) == (96, 192, 2.0)


def test_generation_state_at_4096_tokens_is_what_transformers_cache_holds(tmp_path, hf_meta):
    """Every layer of transformers' model on meta over a 4,096-token prompt in bf16 with its DynamicCache: the bytes
    it holds are tfcalc's state. By hand: 8 attention layers' K and V (2 · 4096 · 30 heads · 128 · 2 bytes), 24
    DeltaNet layers' convolution state (C = 2·30·96 + 30·192 = 11,520 channels, 4 columns, bf16) and fp32 recurrent
    state (30 · 96 · 192 · 4 bytes)."""
    from transformers import DynamicCache

    model = hf_meta.to(torch.bfloat16)
    cache, T = DynamicCache(config=model.config), 4096
    x = torch.empty(1, T, 3840, device="meta", dtype=torch.bfloat16)
    cos = sin = torch.empty(1, T, 128, device="meta", dtype=torch.float32)
    with torch.no_grad():
        for i, layer in enumerate(model.model.layers):
            if model.config.layer_types[i] == "linear_attention":
                layer.linear_attn(x, cache=cache)
            else:
                layer.self_attn(x, (cos, sin), None, cache=cache)
    held = 0
    for lay in cache.layers:
        for name in ("keys", "values", "conv_states", "recurrent_states"):
            t = getattr(lay, name, None)
            tensors = t.values() if isinstance(t, dict) else [t]
            held += sum(v.numel() * v.element_size() for v in tensors if isinstance(v, torch.Tensor))
    by_hand = 8 * 2 * T * 30 * 128 * 2 + 24 * (11_520 * 4 * 2 + 30 * 96 * 192 * 4)
    cfg = config_json(tmp_path, json.loads(hf_meta.config.to_json_string()))
    assert held == by_hand == kv_cache_bytes(cfg, Workload(batch=1, seq=T, kv_dtype="bf16"))


@pytest.mark.parametrize("seq", [100, 200])
def test_deltanet_layer_flops_equal_flop_counter_mode(tmp_path, seq):
    """transformers' OlmoHybridGatedDeltaNet at full width (random weights, fp32), its forward under
    FlopCounterMode, plus the two triangular solves per chunk and head it does not see (64·63·(dk + dv) per chunk
    and head), less the K - 1 convolution outputs it computes and drops (2·C·K·(K - 1)): tfcalc's count of the
    layer. 100 and 200 tokens: 2 and 4 chunks, padded."""
    import transformers
    import transformers.models.olmo_hybrid.modeling_olmo_hybrid as m
    from torch.utils.flop_counter import FlopCounterMode

    config = transformers.OlmoHybridConfig()
    torch.manual_seed(0)
    layer = m.OlmoHybridGatedDeltaNet(config, 0).eval()
    x = torch.randn(1, seq, 3840) * 0.1
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        layer(x)
    cfg = config_json(tmp_path, json.loads(config.to_json_string()))
    mixer = cfg.architecture.output.layer(0).mixer
    ours = sum(2 * seq * lin.n_in * lin.n_out for lin in mixer.linears()) + sum(
        mx.flops for mx in mixer.mixing(seq, seq))
    solves = 30 * math.ceil(seq / C) * C * (C - 1) * (96 + 192)
    thrown = 2 * 11_520 * 4 * 3
    assert ours == counter.get_total_flops() + solves - thrown


def _released_name(name: str) -> str:
    """transformers' module name -> the released checkpoints' (conversion_mapping.py's olmo_hybrid renames,
    reversed): the DeltaNet layers' norms; the attention layers' post_attention_layernorm too, as the rename is."""
    return name.replace("input_layernorm", "attention_layer_norm").replace(
        "post_attention_layernorm", "feedforward_layer_norm")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A tiny OlmoHybridForCausalLM (dv = 2·dk, as the released model) written in the released checkpoints' names,
    its convolution as q/k/v_conv1d of Hk·dk, Hk·dk and Hv·dv channels (OLMo-core's, from the FLA library). Written
    with safetensors: transformers 5.24's save_pretrained splits conv1d into three equal parts, which no released
    checkpoint holds where dk != dv (test_transformers_equal_split_is_refused_in_one_line)."""
    import transformers
    from safetensors.torch import save_file

    from tfcalc.model.load import load_model

    torch.manual_seed(0)
    config = transformers.OlmoHybridConfig(**TINY)
    hf = transformers.OlmoHybridForCausalLM(config).eval()
    with torch.no_grad():
        for name, p in hf.named_parameters():
            p.add_(torch.randn_like(p) * (0.3 if "norm" in name else 0.05))
    state, out = hf.state_dict(), {}
    for name, t in state.items():
        if name.endswith("linear_attn.conv1d.weight"):
            for part, piece in zip("qkv", t.split([16, 16, 32]), strict=True):
                out[_released_name(name).replace("conv1d", f"{part}_conv1d")] = piece.contiguous()
        else:
            out[_released_name(name)] = t.contiguous()
    folder = tmp_path_factory.mktemp("olmo_hybrid")
    (folder / "config.json").write_text(config.to_json_string())
    save_file(out, str(folder / "model.safetensors"))
    return hf, load_model(str(folder)), load(str(folder / "config.json")), folder


def test_tiny_released_checkpoint_logits_across_chunks(tiny):
    """130 tokens: three chunks, the state carried between them; within 1e-4 of the largest logit."""
    hf, ours, cfg, _ = tiny
    ids = torch.randint(0, 61, (2, 130), generator=torch.Generator().manual_seed(3))
    assert_logits_close(hf, ours, ids)
    assert count_params.total(cfg) == sum(p.numel() for p in hf.parameters())


def test_tiny_decode_with_the_fixed_state(tiny):
    """A prompt of 60, 9 new tokens (across the chunk boundary at 64): the recurrent step continues the chunked
    prefill as the uncached forward does; the cache is the count's bytes."""
    from tfcalc.model import generate

    _, ours, cfg, _ = tiny
    prompt = torch.randint(0, 61, (2, 60), generator=torch.Generator().manual_seed(5))
    cache = ours.new_cache(2, 69)
    assert torch.equal(generate(ours, prompt, 9, cache=cache), greedy_uncached(ours, prompt, 9))
    assert cache.nbytes == kv_cache_bytes(cfg, Workload(batch=2, seq=60, gen=9, dtype="fp32", kv_dtype="fp32"))


def test_nope_mode_checkpoint_logits(tmp_path):
    """rope_parameters with a null rope_theta: OlmoHybridModel builds no rotary embedding (NoPE); tfcalc reads it
    as pos_encoding none, and the checkpoint transformers' save_pretrained writes (dk = dv, so its equal split of
    the convolution is the true one) gives its logits."""
    import transformers

    from tfcalc.model.load import load_model

    torch.manual_seed(0)
    config = transformers.OlmoHybridConfig(**{**TINY, "linear_value_head_dim": 8,
                                              "rope_parameters": {"rope_type": "default", "rope_theta": None}})
    hf = transformers.OlmoHybridForCausalLM(config).eval()
    assert hf.model.rotary_emb is None
    with torch.no_grad():
        for name, p in hf.named_parameters():
            p.add_(torch.randn_like(p) * (0.3 if "norm" in name else 0.05))
    hf.save_pretrained(tmp_path)
    assert load(str(tmp_path / "config.json")).pos_encoding == "none"
    assert_logits_close(hf, load_model(str(tmp_path)), torch.randint(0, 61, (2, 20)))


def test_grouped_value_heads_checkpoint_logits(tmp_path):
    """linear_num_value_heads a multiple of linear_num_key_heads (found by tests/test_config_fuzz.py: tfcalc refused
    it): OlmoHybridGatedDeltaNet repeats each query/key head over its group of value heads (repeat_interleave), as
    Qwen3-Next's does. One key head of 16 over two value heads of 8 (Q, K and V 16 channels each, so the equal split
    of save_pretrained is the true one): parameters exact, transformers' logits over three chunks, the decode over
    the fixed state the uncached forward's."""
    import transformers

    from tfcalc.model import generate
    from tfcalc.model.load import load_model

    torch.manual_seed(0)
    config = transformers.OlmoHybridConfig(**{**TINY, "linear_num_key_heads": 1, "linear_num_value_heads": 2,
                                              "linear_key_head_dim": 16, "linear_value_head_dim": 8})
    hf = transformers.OlmoHybridForCausalLM(config).eval()
    with torch.no_grad():
        for name, p in hf.named_parameters():
            p.add_(torch.randn_like(p) * (0.3 if "norm" in name else 0.05))
    hf.save_pretrained(tmp_path)
    ours = load_model(str(tmp_path))
    assert count_params.total(load(str(tmp_path / "config.json"))) == sum(p.numel() for p in hf.parameters())
    assert_logits_close(hf, ours, torch.randint(0, 61, (2, 130), generator=torch.Generator().manual_seed(3)))
    prompt = torch.randint(0, 61, (1, 60), generator=torch.Generator().manual_seed(5))
    assert torch.equal(generate(ours, prompt, 6, cache=ours.new_cache(1, 66)), greedy_uncached(ours, prompt, 6))


def test_transformers_equal_split_is_refused_in_one_line(tiny, tmp_path):
    """transformers 5.24's save_pretrained writes conv1d back as three equal thirds (its Concatenate reversed), not
    the Hk·dk, Hk·dk, Hv·dv of the released checkpoints: with dk != dv tfcalc refuses it by shape, in one line."""
    from safetensors.torch import load_file, save_file

    import tfcalc

    _, _, _, folder = tiny
    tensors = load_file(str(folder / "model.safetensors"))
    for i in (0, 1, 3):
        key = f"model.layers.{i}.linear_attn"
        whole = torch.cat([tensors.pop(f"{key}.{p}_conv1d.weight") for p in "qkv"])
        for p, piece in zip("qkv", whole.chunk(3), strict=True):
            tensors[f"{key}.{p}_conv1d.weight"] = piece.contiguous()
    (tmp_path / "config.json").write_text((folder / "config.json").read_text())
    save_file(tensors, str(tmp_path / "model.safetensors"))
    with pytest.raises(InputError, match=r"_conv1d\.weight': shape \[2[02], 1, 4\] does not fit"):
        tfcalc.load_model(str(tmp_path))


@pytest.mark.parametrize("changes, message", [
    (dict(layer_types=["linear_attention"] * 4), "at least one linear_attention and one full_attention"),
    (dict(layer_types=["full_attention"] * 4), "at least one linear_attention and one full_attention"),
    (dict(layer_types=["linear_attention"] * 3), "'layer_types' lists 3 layers; 'num_hidden_layers' is 4"),
    (dict(layer_types=["sliding_attention"] * 4), "'layer_types' must be a list of linear_attention"),
    (dict(layer_types="linear_attention"), "'layer_types' must be a list"),
    (dict(linear_num_value_heads=3), "'linear_num_value_heads' 3 must be a positive multiple of 'linear_num_key_"),
    (dict(linear_num_key_heads=0), "'linear_num_key_heads' must be a positive integer"),
    (dict(linear_key_head_dim=0), "'linear_key_head_dim' must be a positive integer"),
    (dict(linear_key_head_dim=True), "'linear_key_head_dim' must be an integer"),
    (dict(linear_num_key_heads=2.5), "'linear_num_key_heads'"),
    (dict(hidden_act="gelu"), "'hidden_act' 'gelu'"),
    (dict(rope_parameters={"rope_type": "default", "rope_theta": "x"}), "'rope_theta' must be a number"),
    (dict(rope_parameters={"rope_type": "default", "rope_theta": -1}), "'rope_theta' must be positive"),
    (dict(architectures=["OlmoHybridForSequenceClassification"]), "is not supported"),
])
def test_hostile_config_json(tmp_path, changes, message):
    with pytest.raises(InputError, match=message):
        config_json(tmp_path, {"model_type": "olmo_hybrid", **TINY, **changes})


def test_defaults_and_big_depths(tmp_path):
    """Without layer_types every 4th layer is full (a period, no list: 2**40 layers read at once); under four layers
    the last (OlmoHybridConfig.__post_init__); without head sizes dk = int(0.75·d / heads), dv = 2·dk; the β
    scale 1 where linear_allow_neg_eigval is false."""
    base = {k: v for k, v in TINY.items() if not k.startswith("linear_") and k != "layer_types"}
    big = config_json(tmp_path, {"model_type": "olmo_hybrid", **base, "num_hidden_layers": 2 ** 40})
    assert big.full_attention_every == 4 and count_params.total(big) > 2 ** 40
    (tmp_path / "config.json").unlink()
    three = config_json(tmp_path, {"model_type": "olmo_hybrid", **base, "num_hidden_layers": 3,
                                   "linear_allow_neg_eigval": False})
    assert [b.placement for b in three.architecture.output.layers()] == ["pre", "pre", "output"]
    assert (three.linear_key_head_dim, three.linear_value_head_dim, three.linear_key_heads) == (6, 12, 4)
    assert three.linear_beta_scale is None


@pytest.mark.parametrize("overrides, message", [
    (["linear_separate_projections=true"], "give linear_mixer too"),
    (["linear_norm_placement=pre"], "give linear_mixer too"),
    (["linear_beta_scale=2"], "give linear_mixer too"),
])
def test_hostile_flat_fields(overrides, message):
    with pytest.raises(InputError, match=message):
        load("llama2-7b", overrides)


def test_hostile_flat_fields_beside_the_mixer(tiny):
    folder = tiny[3]
    for overrides, message in ((["linear_split_projections=true"], "not both"),
                               (["linear_beta_scale=-1"], "field 'linear_beta_scale' must be positive"),
                               (["linear_norm_eps=0"], "field 'linear_norm_eps' must be positive")):
        with pytest.raises(InputError, match=message):
            load(str(folder / "config.json"), overrides)
