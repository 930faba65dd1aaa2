"""Gemma 4's language model (gemma4_text, and gemma4 without its towers) against transformers 5.24: the tiny
checkpoints of tests/hf_tiny.py (parameters, FLOPs, logits and the cache are run for every case by
tests/test_hf_models.py) decoded over tfcalc's cache, with each layer's layer_scalar loaded; Gemma4TextConfig's
default sizes (per-layer embeddings off) on meta: parameters exact, the cache after 4,096 tokens, a full and a
sliding layer's attention FLOPs at two lengths; proportional RoPE; the hostile cases of the keys read."""

from __future__ import annotations

import json
import re
import warnings

import pytest
import torch

from tfcalc.count.model import params as count_params
from tfcalc.count.model.memory import kv_cache_bytes
from tfcalc.errors import InputError
from tfcalc.presets import load
from tfcalc.workload import Workload

pytestmark = pytest.mark.filterwarnings("ignore")

TESTED_TYPES = {"gemma4", "gemma4_text"}  # tested here (tests/test_hf_config.py)

# Gemma4TextConfig's defaults without per-layer embeddings, and the global layers' K/V read from K over 2 heads
# (attention_k_eq_v, num_global_key_value_heads): a 30-layer model, five local layers then one global
FULL = dict(hidden_size_per_layer_input=0, attention_k_eq_v=True, num_global_key_value_heads=2)


def _hf_config(**changes):
    import transformers

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return transformers.Gemma4TextConfig(**{**FULL, **changes})


def _write(tmp_path, raw: dict, name: str = "gemma4") -> str:
    folder = tmp_path / name
    folder.mkdir(exist_ok=True)
    (folder / "config.json").write_text(json.dumps(raw))
    return str(folder / "config.json")


def _published(**changes) -> dict:
    return json.loads(_hf_config(**changes).to_json_string())


def _scaled(hf, seed: int) -> None:
    """Each layer's layer_scalar (a buffer, 1 at init) moved, so that loading it shows."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, buffer in hf.named_buffers():
            if name.endswith("layer_scalar"):
                buffer.copy_(0.5 + torch.rand(buffer.shape, generator=g))


@pytest.mark.parametrize("name", ["gemma4_text", "gemma4_text-plain", "gemma4_text-ple", "gemma4_text-moe"])
def test_tiny_decode_over_tfcalc_cache_equals_transformers(saved, tmp_path, name):
    """layer_scalar set, saved, loaded: logits within 1e-4 of transformers'; greedy decode over tfcalc's cache
    (rings of the window in the local layers, the wide global heads) equals its uncached forward and transformers'
    generate, past the window."""
    from hf_pairs import assert_decode_equals, assert_logits_close, saved_pair

    hf, _ = saved(name)
    _scaled(hf, 4)
    hf, model = saved_pair(hf, tmp_path / "scaled")
    prompt = torch.randint(3, 61, (2, 7), generator=torch.Generator().manual_seed(3))
    assert_logits_close(hf, model, prompt)
    assert_decode_equals(model, hf, prompt, 6, model.new_cache(2, 13))
    scalars = [float(b.layer_scalar) for b in model.blocks]
    assert len(set(scalars)) == len(scalars) and 1.0 not in scalars


def test_layer_scalar_and_v_norm_matter(saved):
    """Without the loaded layer_scalar, or without the V norm, tfcalc's logits leave transformers': each is what
    matches it (the tiny case's V norm over 8 channels, its scalars moved)."""
    import tfcalc

    hf, folder = saved("gemma4_text")
    _scaled(hf, 5)
    hf.save_pretrained(folder)
    ids = torch.randint(3, 61, (1, 9), generator=torch.Generator().manual_seed(5))
    model = tfcalc.load_model(str(folder))
    with torch.no_grad():
        want = hf(ids).logits
        assert (want - model(ids)).abs().max() <= 1e-4 * want.abs().max()
        for block in model.blocks:
            block.layer_scalar.fill_(1.0)
        assert (want - model(ids)).abs().max() > 1e-3
    from tfcalc.architecture import Attention

    assert all(isinstance(b.attention, Attention) and b.attention.v_norm is not None
               for b in model.cfg.architecture.output.layers())


@pytest.mark.parametrize("changes", [
    {}, dict(hidden_size_per_layer_input=256, num_kv_shared_layers=12, use_double_wide_mlp=True),
    # experts beside the MLP, sized as 26B-A4B is said to be (not a preset: no config.json of it is cited here)
    dict(hidden_size=2816, intermediate_size=2112, num_attention_heads=16, num_key_value_heads=8, enable_moe_block=True,
         num_experts=128, top_k_experts=8, moe_intermediate_size=704),
], ids=["dense", "ple-shared", "moe"])
def test_default_size_parameters_and_layers(tmp_path, changes):
    """Gemma4TextConfig's default sizes on meta: parameters exact (tfcalc's model and its formula); 25 local layers
    of 4 K/V heads of 256, 5 global ones of 2 K/V heads of 512 with no V weight. And with the default per-layer
    inputs (256 a layer, a table of 262,144 rows: 2,013,265,920 parameters) and the last 12 layers reading K/V."""
    import transformers

    from tfcalc.measure.params import measure_params

    with torch.device("meta"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        hf = transformers.Gemma4ForCausalLM(_hf_config(**changes))
    cfg = load(_write(tmp_path, _published(**changes)))
    if "hidden_size_per_layer_input" in changes:
        assert count_params.breakdown(cfg)["per_layer_embedding"] == 262_144 * 30 * 256 == 2_013_265_920
    if "enable_moe_block" in changes:
        assert cfg.architecture.moe().beside_mlp is not None and cfg.architecture.moe().shared.d_ff == 2112
    total = sum(p.numel() for p in hf.parameters())
    assert count_params.total(cfg) == total
    measured, breakdown = measure_params(cfg)
    assert measured == total and breakdown == count_params.breakdown(cfg)
    mixers = [b.mixer for b in cfg.architecture.output.layers()]
    wide = [m for m in mixers if m.window is None]
    assert len(wide) == 5 and {(m.n_kv_head, m.head_dim, m.v_from_k) for m in wide} == {(2, 512, True)}
    kv = changes.get("num_key_value_heads", 4)
    assert {(m.n_kv_head, m.head_dim, m.v_from_k, m.window) for m in mixers if m.window} == {(kv, 256, False, 512)}
    assert {m.rope_scaling.turning(m.head_dim) for m in wide} == {64}  # int(0.25 · 512 // 2)


def test_generation_state_at_4096_tokens_is_what_transformers_cache_holds(tmp_path):
    """transformers' StaticCache after 4,096 tokens through every layer's attention (meta, bf16): 25 rings of 512
    slots of 4 K/V heads of 256, and 5 global layers of every position, 2 K/V heads of 512, K and V both (V is K's
    projection there, normed apart and not rotated, so cached beside it); tfcalc's KV bytes equal them."""
    import transformers

    T = 4096
    hf_cfg = _hf_config()
    hf_cfg._attn_implementation = "eager"
    with torch.device("meta"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        hf = transformers.Gemma4ForCausalLM(hf_cfg).to(torch.bfloat16)
    cache = transformers.StaticCache(config=hf.config, max_cache_len=T)
    x = torch.empty(1, T, hf_cfg.hidden_size, device="meta", dtype=torch.bfloat16)
    ids = torch.arange(T, device="meta")[None]
    mask = torch.ones(1, 1, T, T, dtype=torch.bool, device="meta")
    with torch.no_grad():
        for layer in hf.model.layers:
            kind = layer.self_attn.layer_type
            cos, sin = hf.model.rotary_emb(x, ids, kind)
            layer.self_attn(x, (cos, sin), mask, shared_kv_states={}, cache=cache, cache_position=ids[0])
    held = sum(t.numel() * t.element_size() for lay in cache.layers for t in (lay.keys, lay.values))
    assert held == (25 * 512 * 2 * 4 * 256 + 5 * T * 2 * 2 * 512) * 2
    cfg = load(_write(tmp_path, _published()))
    assert kv_cache_bytes(cfg, Workload(batch=1, seq=T, kv_dtype="bf16")) == held


@pytest.mark.parametrize("seq", [48, 96])
def test_forward_flops_of_full_size_attention_equal_flop_counter_mode(tmp_path, seq):
    """A local layer and a global one (V from K: no V projection) at full width on meta, eager (the scores as two
    matmuls over the full square, tfcalc's convention): FlopCounterMode's total is tfcalc's per layer."""
    from torch.utils.flop_counter import FlopCounterMode
    from transformers.models.gemma4.modeling_gemma4 import Gemma4TextAttention

    hf_cfg = _hf_config()
    hf_cfg._attn_implementation = "eager"
    cfg = load(_write(tmp_path, _published()))
    for i in (0, 5):
        width = 512 if i == 5 else 256
        with torch.device("meta"):
            layer = Gemma4TextAttention(hf_cfg, i).eval()
            x = torch.empty(1, seq, hf_cfg.hidden_size)
            cos = sin = torch.empty(1, seq, width)
            mask = torch.zeros(1, 1, seq, seq)
        with torch.no_grad(), FlopCounterMode(display=False) as counter:
            layer(x, (cos, sin), mask, shared_kv_states={})
        mixer = cfg.architecture.output.layer(i).mixer
        ours = sum(2 * seq * lin.n_in * lin.n_out for lin in mixer.linears()) + sum(
            mx.flops for mx in mixer.mixing(seq, seq))
        assert ours == counter.get_total_flops()


def test_proportional_rope_tables_equal_transformers():
    """tfcalc's proportional table (a quarter of a 512-wide head's frequencies turning, the rest still) equals
    transformers' Gemma4TextRotaryEmbedding for the global layers, and the default one for the local layers."""
    import transformers

    from tfcalc.architecture.rope import Proportional
    from tfcalc.model.positions import rope_tables
    from tfcalc.model.rope_scaling import scaled_tables

    hf_cfg = _hf_config(num_hidden_layers=6)
    rotary = transformers.models.gemma4.modeling_gemma4.Gemma4TextRotaryEmbedding(hf_cfg)
    x, ids = torch.empty(1, 40), torch.arange(40)[None]
    cos, sin = rotary(x, ids, "full_attention")
    ours = scaled_tables(1_000_000.0, 512, 40, Proportional(0.25))
    assert torch.allclose(cos[0], ours[0], atol=1e-6) and torch.allclose(sin[0], ours[1], atol=1e-6)
    assert (ours[1][:, 64:256] == 0).all() and (ours[1][1:, :64] != 0).all()
    cos, sin = rotary(x, ids, "sliding_attention")
    local = rope_tables(10_000.0, 256, 40)
    assert torch.allclose(cos[0], local[0], atol=1e-5) and torch.allclose(sin[0], local[1], atol=1e-5)


@pytest.mark.parametrize("towers", ["none", "vision", "audio", "both"])
def test_multimodal_file_counts_its_towers_apart(tmp_path, towers):
    """gemma4: its text_config's model (the defaults filled in, the outer tie_word_embeddings), and the vision and
    audio towers with their projections as vision_params: together transformers' Gemma4ForConditionalGeneration's
    parameter count, at the towers' default sizes and at others."""
    import transformers

    from tfcalc.count.model import params as count

    text = _hf_config(num_hidden_layers=6, vocab_size=1000).to_dict()
    vision = transformers.Gemma4VisionConfig(num_key_value_heads=4, patch_size=14).to_dict()
    audio = transformers.Gemma4AudioConfig(subsampling_conv_channels=[64, 16], conv_kernel_size=3).to_dict()
    kw = dict(vision_config=vision if towers in ("vision", "both") else None,
              audio_config=audio if towers in ("audio", "both") else None)
    if towers == "both":  # and the default towers
        kw = dict(vision_config=transformers.Gemma4VisionConfig().to_dict(),
                  audio_config=transformers.Gemma4AudioConfig().to_dict())
    with torch.device("meta"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        hf = transformers.Gemma4ForConditionalGeneration(transformers.Gemma4Config(text_config=text, **kw))
    cfg = load(_write(tmp_path, json.loads(hf.config.to_json_string())))
    language = sum(p.numel() for n, p in hf.named_parameters() if "language_model" in n)
    assert count.total(cfg) == language
    assert (cfg.vision_params or 0) == sum(p.numel() for p in hf.parameters()) - language
    assert (cfg.vision_params is None) == (towers == "none")
    assert cfg.global_d_head == 512 and cfg.global_v_from_k and cfg.rope_scaling == "proportional"


def test_multimodal_checkpoint_loads_its_language_model(tmp_path, cli):
    """A tiny Gemma4ForConditionalGeneration (per-layer inputs, shared K/V, a vision and an audio tower) saved: its
    language model's logits on text through load_model, and `tfcalc params FOLDER` explains every tensor (the
    towers' as vision_params)."""
    import transformers
    from hf_tiny import CASES

    import tfcalc

    text = transformers.Gemma4TextConfig(**CASES["gemma4_text-ple"].kwargs).to_dict()
    vision = transformers.Gemma4VisionConfig(hidden_size=16, intermediate_size=24, num_hidden_layers=1,
                                             num_attention_heads=2, num_key_value_heads=2, head_dim=8,
                                             position_embedding_size=10, patch_size=4).to_dict()
    audio = transformers.Gemma4AudioConfig(hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                           subsampling_conv_channels=[8, 4], output_proj_dims=12).to_dict()
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        config = transformers.Gemma4Config(text_config=text, vision_config=vision, audio_config=audio)
        config.text_config._attn_implementation = "eager"
        hf = transformers.Gemma4ForConditionalGeneration(config).eval()
    with torch.no_grad():
        for p in hf.parameters():
            p.add_(torch.randn_like(p), alpha=0.05)
    _scaled(hf, 7)
    hf.save_pretrained(tmp_path)
    ids = torch.randint(3, 61, (2, 9), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        want, got = hf(input_ids=ids).logits, tfcalc.load_model(str(tmp_path))(ids)
    assert (want - got).abs().max() <= 1e-4 * want.abs().max()
    data = cli("params", str(tmp_path), "--json").json()
    checkpoint = data["checkpoint"]
    assert checkpoint["agree"] and not checkpoint["unexplained"] and not checkpoint["misfits"]
    language = sum(p.numel() for n, p in hf.named_parameters() if "language_model" in n)
    # the towers' tensors in the file: their parameters and the audio tower's clipping bounds (four buffers per
    # clipped Linear, Gemma4ClippableLinear: no parameters)
    bounds = sum(t.numel() for n, t in hf.state_dict().items() if n.endswith(("_min", "_max")))
    assert bounds == 40 and data["analytic_total"] == language
    assert checkpoint["vision"] == data["vision_params"] + bounds
    assert data["analytic_total"] + data["vision_params"] == sum(p.numel() for p in hf.parameters())


HOSTILE = [
    (dict(hidden_size_per_layer_input=-2), "'hidden_size_per_layer_input' must be 0 or more"),
    (dict(hidden_size_per_layer_input="x"), "'hidden_size_per_layer_input' must be an integer"),
    (dict(hidden_size_per_layer_input=None), "'hidden_size_per_layer_input' is null: Gemma4TextConfig requires an"),
    (dict(hidden_size_per_layer_input=8, vocab_size_per_layer_input=0), "'vocab_size_per_layer_input' must be a po"),
    (dict(hidden_size_per_layer_input=8, vocab_size_per_layer_input=[1]), "'vocab_size_per_layer_input' must be an"),
    (dict(num_kv_shared_layers=30), "'num_kv_shared_layers' must be 0 or more and below 'num_hidden_layers'"),
    (dict(num_kv_shared_layers=-1), "'num_kv_shared_layers' must be 0 or more"),
    (dict(num_kv_shared_layers=1, per_layer_config=None, layer_types=["sliding_attention"] * 29 + ["full_attention"]),
     "a layer type among the shared layers has no earlier layer of its type"),
    (dict(use_double_wide_mlp="no"), "'use_double_wide_mlp' must be true or false"),
    (dict(enable_moe_block=True), "'num_experts' must be a positive integer with enable_moe_block"),
    (dict(enable_moe_block=True, num_experts=4, top_k_experts=0, moe_intermediate_size=8), "'top_k_experts' must"),
    (dict(enable_moe_block=True, num_experts=4, top_k_experts=5, moe_intermediate_size=8),
     "n_expert_active .5. must not exceed n_expert .4."),
    (dict(enable_moe_block="yes"), "'enable_moe_block' must be true or false"),
    (dict(attention_k_eq_v=1), "'attention_k_eq_v' must be true or false"),
    (dict(use_bidirectional_attention="all"), "'use_bidirectional_attention' 'all' is not supported"),
    (dict(global_head_dim=0, per_layer_config=None), "'global_head_dim' must be a positive integer"),
    (dict(global_head_dim=2.5, per_layer_config=None), "'global_head_dim' must be an integer"),
    (dict(num_global_key_value_heads=3, per_layer_config=None), "n_head .8. must be a multiple of global_n_kv_head"),
    (dict(per_layer_config=[1]), "'per_layer_config' must be an object"),
    (dict(per_layer_config={"0": {"head_dim": 512}}), "'per_layer_config' layer 0: tfcalc builds head_dim and"),
    (dict(per_layer_config={"x": {}}), "'per_layer_config' entry 'x' must be a layer index"),
    (dict(per_layer_config={"5": {"head_dim": 512, "sliding_window": 3}}), "'per_layer_config' layer 5"),
    (dict(per_layer_config={"5": {"head_dim": 512}}), "must give every full_attention layer the same overrides"),
    (dict(layer_types=["sliding_attention"] * 3), "'layer_types' lists 3 layers; 'num_hidden_layers' is 30"),
    (dict(layer_types="full"), "'layer_types' must be a list of sliding_attention and full_attention"),
    (dict(rope_parameters={"full_attention": {"rope_type": "yarn"}, "sliding_attention": {}}),
     "'rope_parameters' full_attention rope_type 'yarn' is not supported"),
    (dict(rope_parameters={"full_attention": {}, "sliding_attention": {"rope_type": "proportional"}}),
     "'rope_parameters' sliding_attention rope_type 'proportional' is not supported"),
    (dict(rope_parameters={"full_attention": 3, "sliding_attention": {}}), "must be an object"),
    (dict(rope_parameters={"full_attention": {"rope_theta": -1}, "sliding_attention": {}}),
     "rope_theta must be a positive number"),
    (dict(rope_parameters={"full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0},
                           "sliding_attention": {}}), "'partial_rotary_factor' must be a positive number"),
    (dict(rope_parameters={"full_attention": {"rope_type": "proportional", "partial_rotary_factor": 2.0},
                           "sliding_attention": {}}), "rope_proportion in .0, 1."),
    (dict(sliding_window=0), "'layer_types' names sliding window layers but 'sliding_window' is 0"),
    (dict(architectures=["Gemma4ForConditionalGeneration"]), "'architectures' 'Gemma4ForConditionalGeneration'"),
]


@pytest.mark.parametrize("changes, message", HOSTILE)
def test_hostile_config_json(tmp_path, changes, message):
    raw = {**_published(), **changes}
    raw = {k: v for k, v in raw.items() if v is not None or k == "hidden_size_per_layer_input"}
    with pytest.raises(InputError, match=message):
        load(_write(tmp_path, raw))


def test_zero_per_layer_width_is_no_table_and_absent_is_the_default(tmp_path):
    """hidden_size_per_layer_input 0: no per-layer inputs (Gemma4TextModel tests it for truth); left out:
    Gemma4TextConfig's 256."""
    raw = _published()
    assert load(_write(tmp_path, {**raw, "hidden_size_per_layer_input": 0})).per_layer_dim is None
    del raw["hidden_size_per_layer_input"]
    cfg = load(_write(tmp_path, raw, "absent"))
    assert (cfg.per_layer_dim, cfg.per_layer_vocab) == (256, None)  # 262,144 rows: the vocabulary's


@pytest.mark.parametrize("key", ["hidden_size_per_layer_input", "vocab_size_per_layer_input"])
@pytest.mark.parametrize("wrapped", [False, True], ids=["gemma4_text", "gemma4"])
def test_a_null_per_layer_size_is_refused_as_transformers_refuses_the_file(tmp_path, key, wrapped):
    """Gemma4TextConfig declares both per-layer sizes plain ints, validated strictly: transformers 5.24 loads no
    config.json with null there (StrictDataclassFieldValidationError), so tfcalc refuses it in one line rather than
    reading no per-layer inputs, or the default, in silence -- with per-layer inputs in use (p = 8) or not."""
    import transformers

    for p in (8, 0):
        raw = {**_published(hidden_size_per_layer_input=p, vocab_size_per_layer_input=96), key: None}
        if wrapped:
            raw = {"model_type": "gemma4", "architectures": ["Gemma4ForConditionalGeneration"], "text_config": raw}
        path = _write(tmp_path, raw, f"{key}-{p}")
        with pytest.raises(Exception, match=f"field '{key}'.*\\n.*expected int, got NoneType"):
            transformers.AutoConfig.from_pretrained(str(tmp_path / f"{key}-{p}"))
        with pytest.raises(InputError, match=f"'{key}' is null: Gemma4TextConfig requires an integer there") as e:
            load(path)
        assert "\n" not in str(e.value)


FLAT_HOSTILE = [
    ("global_d_head=16", "global_d_head applies to the global layers beside local ones: give sliding_window"),
    ("sliding_window=4,global_n_kv_head=3", "must be a multiple of global_n_kv_head"),
    ("sliding_window=4,global_d_head=7", "int.global_d_head · rope_fraction. must be even"),
    ("sliding_window=4,global_v_from_k=true,attn_v_head_dim=8", "global_v_from_k reads V from K's projection"),
    ("rope_scaling=proportional,rope_scaling_factor=1", "rope_scaling proportional needs rope_proportion"),
    ("rope_proportion=0.5", "rope_proportion applies with rope_scaling only"),
    ("rope_scaling=proportional,rope_scaling_factor=1,rope_proportion=1.5", "rope_proportion in .0, 1."),
    ("rope_scaling=proportional,rope_scaling_factor=1,rope_proportion=0.5,rope_fraction=0.5",
     "give rope_fraction 1 with it"),
    ("layer_scalar=2", "layer_scalar"),
    ("per_layer_vocab=10", "per_layer_vocab is the rows of the per-layer token table: give per_layer_dim"),
    ("per_layer_dim=0", "field 'per_layer_dim' must be positive"),
    ("kv_shared_layers=32", "kv_shared_layers .32. must be below n_layer .32."),
    ("kv_shared_d_ff=10", "kv_shared_d_ff is the FFN width of the layers that share K/V"),
    ("sliding_window=8,full_attention_every=32,kv_shared_layers=1",
     "kv_shared_layers .1.: a global layer among the last 1 has no earlier global layer"),
    ("moe_beside_mlp=true", "moe_beside_mlp .Gemma 4's experts beside the MLP. needs n_expert"),
    ("n_expert=4,n_expert_active=2,norm_placement=sandwich,moe_beside_mlp=true",
     "Gemma 4's experts beside the MLP need the MLP as the shared expert"),
]


@pytest.mark.parametrize("sets, message", FLAT_HOSTILE)
def test_flat_fields_hostile(cli, sets, message):
    args = [a for s in sets.split(",") for a in ("--set", s)]
    r = cli("params", "llama2-7b", *args)
    assert r.code == 2 and re.search(message, r.err), r.err
    assert "Traceback" not in r.err and len(r.err.strip().splitlines()) == 1


# ---------- K/V shared across the last layers (num_kv_shared_layers) ----------

SHARED = dict(vocab_size=61, hidden_size=32, intermediate_size=48, num_hidden_layers=6, num_attention_heads=4,
              num_key_value_heads=2, head_dim=8, global_head_dim=16, num_global_key_value_heads=1,
              attention_k_eq_v=True, hidden_size_per_layer_input=0, sliding_window=3, max_position_embeddings=32,
              final_logit_softcapping=3.0, num_kv_shared_layers=3, use_double_wide_mlp=True,
              layer_types=["sliding_attention", "full_attention", "sliding_attention", "sliding_attention",
                           "full_attention", "full_attention"], pad_token_id=0, bos_token_id=1, eos_token_id=2)


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    """A tiny Gemma 4 whose last 3 layers read the K/V of layers 1 (global) and 2 (local), their MLPs twice as
    wide; weights and layer scalars moved; saved. transformers 5.24 runs it only with output_hidden_states set
    (its _maybe_slice_kv_shared_inputs slices per_layer_inputs, None without per-layer embeddings)."""
    import transformers

    torch.manual_seed(0)
    config = transformers.Gemma4TextConfig(**SHARED)
    config._attn_implementation = "eager"
    hf = transformers.Gemma4ForCausalLM(config).eval()
    with torch.no_grad():
        for p in hf.parameters():
            p.add_(torch.randn_like(p), alpha=0.05)
    _scaled(hf, 6)
    folder = tmp_path_factory.mktemp("gemma4_shared")
    hf.save_pretrained(folder)
    return hf, folder


def test_shared_kv_layers_read_their_sources(shared):
    """The description: layers 1 and 2 the sources, 3-5 readers without K/V weights or state, MLPs 96 wide."""
    _, folder = shared
    cfg = load(str(folder / "config.json"))
    layers = list(cfg.architecture.output.layers())
    assert [b.mixer.kv_share for b in layers] == [None, "source", "source", "reader", "reader", "reader"]
    assert [b.ffn.d_ff for b in layers] == [48] * 3 + [96] * 3
    reader = layers[3].mixer
    assert {w.name for w in reader.weights()} == {"q_weight", "o_weight", "q_norm_weight"}
    assert reader.state() == [] and [lin.name for lin in reader.linears()] == ["q", "o"]


def test_shared_kv_parameters_logits_and_flops_equal_transformers(shared):
    from torch.utils.flop_counter import FlopCounterMode

    import tfcalc
    from tfcalc.count.model import flops as flops_count

    hf, folder = shared
    cfg = load(str(folder / "config.json"))
    assert count_params.total(cfg) == sum(p.numel() for p in hf.parameters())
    ids = torch.randint(3, 61, (2, 10), generator=torch.Generator().manual_seed(1))
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        want = hf(ids, output_hidden_states=True).logits
    rotary = sum(sum(ops.values()) for path, ops in counter.get_flop_counts().items() if path.endswith("rotary_emb"))
    assert flops_count.forward_flops(cfg, Workload(batch=2, seq=10)) == counter.get_total_flops() - rotary
    model = tfcalc.load_model(str(folder))
    with torch.no_grad():
        got = model(ids)
    assert (want - got).abs().max() <= 1e-4 * want.abs().max() and want.abs().max() > 0.1


def test_shared_kv_decode_equals_transformers_and_the_cache_holds_the_sources_only(shared):
    """Greedy decode over tfcalc's cache (past the window of 3) equals its uncached forward and transformers'
    generate; tfcalc's cache allocates the sources' K/V only, as tfcalc counts it and as transformers' StaticCache
    holds after a forward (its reader layers never written)."""
    import transformers
    from hf_pairs import greedy_uncached

    import tfcalc
    from tfcalc.model import generate

    hf, folder = shared
    model = tfcalc.load_model(str(folder))
    prompt = torch.randint(3, 61, (2, 7), generator=torch.Generator().manual_seed(3))
    cache = model.new_cache(2, 13)
    out = generate(model, prompt, 6, cache=cache)
    assert torch.equal(out, greedy_uncached(model, prompt, 6))
    theirs = hf.generate(prompt, max_new_tokens=6, do_sample=False, output_hidden_states=True,
                         return_dict_in_generate=True).sequences[:, 7:]
    assert torch.equal(out, theirs)
    cfg = load(str(folder / "config.json"))
    counted = kv_cache_bytes(cfg, Workload(batch=2, seq=13, dtype="fp32"))
    assert cache.nbytes == counted
    static = transformers.StaticCache(config=hf.config, max_cache_len=13)
    ids = torch.randint(3, 61, (2, 13), generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        hf(ids, past_key_values=static, use_cache=True, output_hidden_states=True)
    held = sum(t.numel() * t.element_size() for lay in static.layers for t in (lay.keys, lay.values)
               if t is not None and lay.is_initialized)
    # three layers keep a cache: layer 0 (ring of 3, 2 K/V heads of 8), 1 (13 positions, 1 head of 16), 2 (ring)
    assert held == counted == 2 * 4 * 2 * (2 * 3 * 2 * 8 + 13 * 16)


def test_default_size_forward_flops_equal_flop_counter_mode(tmp_path):
    """Gemma4TextConfig's defaults with per-layer inputs and the last 12 layers reading K/V (wide MLPs), on meta:
    FlopCounterMode over the whole model equals tfcalc's forward FLOPs at 64 and 128 tokens (tests/test_gemma3n.py)."""
    from test_gemma3n import full_size_flops

    full_size_flops("Gemma4TextConfig", "Gemma4ForCausalLM", dict(num_kv_shared_layers=12, use_double_wide_mlp=True),
                    tmp_path)


def test_params_names_the_per_layer_table_apart(saved, cli):
    """`tfcalc params`: the per-layer token table counted in the model and named apart, its size as the breakdown's."""
    _, folder = saved("gemma4_text-ple")
    data = cli("params", str(folder), "--json").json()
    assert data["breakdown"]["per_layer_embedding"] == 61 * 6 * 6
    text = " ".join(cli("params", str(folder)).out.split())
    assert f"per-layer embeddings: {61 * 6 * 6:,} of the {data['analytic_total']:,} parameters" in text


TOWER_HOSTILE = [
    ("vision_config", dict(hidden_size=0), r"\(vision_config\): 'hidden_size' must be a positive integer"),
    ("vision_config", dict(patch_size="16"), r"\(vision_config\): 'patch_size' must be a positive integer"),
    ("vision_config", dict(attention_bias=True), "'attention_bias' true is not counted by tfcalc"),
    ("audio_config", dict(subsampling_conv_channels=[128]), "'subsampling_conv_channels' must be two positive"),
    ("audio_config", dict(conv_kernel_size=-1), r"\(audio_config\): 'conv_kernel_size' must be a positive integer"),
    ("audio_config", [1], "'audio_config' must be an object of config fields"),
]


@pytest.mark.parametrize("key, value, message", TOWER_HOSTILE)
def test_hostile_towers(tmp_path, key, value, message):
    raw = {"model_type": "gemma4", "architectures": ["Gemma4ForConditionalGeneration"],
           "text_config": _published(num_hidden_layers=6), key: value}
    with pytest.raises(InputError, match=message):
        load(_write(tmp_path, raw))
