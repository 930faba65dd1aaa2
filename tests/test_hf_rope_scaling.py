"""RoPE scaling built into tfcalc's model (tfcalc.architecture.rope, tfcalc.model.rope_scaling), held against
transformers 5.24: the inverse frequencies and attention factors of the published checkpoints' scalings equal
what transformers' ROPE_INIT_FUNCTIONS compute; tiny checkpoints of each scaling, saved by transformers and
loaded by load_model, give transformers' logits within 1e-4 (fp32) at 24 positions, past the 16 (or 8) they
state as the original context; and the scaling shows at that length (the same weights unscaled differ)."""

from __future__ import annotations

import json
import warnings

import pytest
from hf_tiny import DS, LLAMA_LIKE, TOKENS, V

from tfcalc.presets import load

pytestmark = pytest.mark.filterwarnings("ignore")

T = 24  # positions run: past every case's original context
LLAMA3 = dict(rope_type="llama3", rope_theta=10.0, factor=4.0, low_freq_factor=1.0, high_freq_factor=2.0,
              original_max_position_embeddings=16)  # wavelengths 6.3 (kept), 8.4-15 (blended), 20+ (scaled)
YARN = dict(rope_type="yarn", rope_theta=100.0, factor=4.0, original_max_position_embeddings=8, beta_fast=8.0,
            beta_slow=1.0)
DEFAULT = dict(rope_type="default", rope_theta=100.0)
# (config class, model class, keyword arguments, the rope_parameters of the same model unscaled)
CASES = {
    "llama-llama3": ("LlamaConfig", "LlamaForCausalLM", dict(LLAMA_LIKE, head_dim=16, rope_parameters=LLAMA3),
                     dict(rope_type="default", rope_theta=10.0)),
    "llama-linear": ("LlamaConfig", "LlamaForCausalLM",
                     dict(LLAMA_LIKE, rope_parameters=dict(rope_type="linear", rope_theta=100.0, factor=3.0)), DEFAULT),
    "qwen2-yarn": ("Qwen2Config", "Qwen2ForCausalLM", dict(LLAMA_LIKE, rope_parameters=YARN), DEFAULT),
    "qwen3-yarn-mscale": ("Qwen3Config", "Qwen3ForCausalLM",
                          dict(LLAMA_LIKE, head_dim=16, rope_parameters=dict(YARN, mscale=0.8, mscale_all_dim=0.5)),
                          DEFAULT),
    # gpt-oss's own: the ramp's ends not truncated (base 10 and 16 original positions put them at 0 and 1.62,
    # not 0 and 2: the test below shows truncating changes the logits); sinks, windows and experts as in hf_tiny
    "gpt_oss-yarn": ("GptOssConfig", "GptOssForCausalLM",
                     dict(LLAMA_LIKE, head_dim=8, num_local_experts=4, num_experts_per_tok=2, sliding_window=4,
                          rope_parameters=dict(YARN, rope_theta=10.0, original_max_position_embeddings=16,
                                               beta_fast=4.0, truncate=False)),
                     dict(rope_type="default", rope_theta=10.0)),
    # Gemma 3: linear on the global layer only, the local ones (window 4) at their own base, unscaled
    "gemma3_text-linear": ("Gemma3TextConfig", "Gemma3ForCausalLM",
                           dict(LLAMA_LIKE, **TOKENS, num_hidden_layers=3, head_dim=8, sliding_window=4,
                                query_pre_attn_scalar=12,
                                layer_types=["sliding_attention", "full_attention", "sliding_attention"],
                                rope_parameters={"full_attention": dict(rope_type="linear", rope_theta=1000.0,
                                                                        factor=4.0),
                                                 "sliding_attention": dict(rope_type="default", rope_theta=10.0)}),
                           {"full_attention": dict(rope_type="default", rope_theta=1000.0),
                            "sliding_attention": dict(rope_type="default", rope_theta=10.0)}),
    # Llama 4 Scout's kind: llama3 with low = high (no blended band), on the chunked RoPE layers
    "llama4_text-llama3": ("Llama4TextConfig", "Llama4ForCausalLM",
                           dict(LLAMA_LIKE, **TOKENS, num_hidden_layers=4, head_dim=8, intermediate_size=16,
                                intermediate_size_mlp=40, num_local_experts=4, interleave_moe_layer_step=2,
                                no_rope_layer_interval=2, attention_chunk_size=12, floor_scale=2, attn_scale=0.3,
                                rope_parameters=dict(LLAMA3, high_freq_factor=1.0, rope_theta=100.0)),
                           DEFAULT),
    # OLMo 3's: YaRN with a stated attention factor, full layers only
    "olmo3-yarn": ("Olmo3Config", "Olmo3ForCausalLM",
                   dict(LLAMA_LIKE, **TOKENS, num_hidden_layers=4, sliding_window=3,
                        layer_types=["sliding_attention", "full_attention", "sliding_attention", "full_attention"],
                        rope_parameters={"full_attention": dict(YARN, attention_factor=1.3),
                                         "sliding_attention": dict(rope_type="default", rope_theta=10.0)}),
                   {"full_attention": DEFAULT, "sliding_attention": dict(rope_type="default", rope_theta=10.0)}),
    # EXAONE 4.0 32B's kind: llama3 on the sliding (RoPE) layers; the full layer has no RoPE
    "exaone4-llama3": ("Exaone4Config", "Exaone4ForCausalLM",
                       dict(LLAMA_LIKE, **TOKENS, num_hidden_layers=4, sliding_window=5, sliding_window_pattern=4,
                            rope_parameters=dict(LLAMA3, rope_theta=100.0)), DEFAULT),
    # DeepSeek-V3's latent attention with YaRN's stated attention factor and an untruncated ramp (its mscale²
    # softmax scale from mscale_all_dim beside them)
    "deepseek_v3-yarn": ("DeepseekV3Config", "DeepseekV3ForCausalLM",
                         dict(DS, q_lora_rank=20, n_group=4, topk_group=2,
                              rope_parameters=dict(YARN, rope_theta=10000.0, original_max_position_embeddings=16,
                                                   truncate=False, attention_factor=1.1, mscale_all_dim=0.8)),
                         dict(rope_type="default", rope_theta=10000.0)),
    "apertus-llama3": ("ApertusConfig", "ApertusForCausalLM",
                       dict(LLAMA_LIKE, **TOKENS, rope_parameters=dict(LLAMA3, rope_theta=100.0)), DEFAULT),
}


def _build(config_class: str, model_class: str, kwargs: dict):
    import torch
    import transformers

    torch.manual_seed(0)
    config = getattr(transformers, config_class)(**kwargs)
    config._attn_implementation = "eager"
    if hasattr(config, "_experts_implementation"):
        config._experts_implementation = "eager"
    model = getattr(transformers, model_class)(config).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p), alpha=0.05)
    return model


def _save(model, folder, edit=None):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.save_pretrained(folder)
    if edit is not None:  # the file as a published checkpoint writes it
        path = folder / "config.json"
        path.write_text(json.dumps(edit(json.loads(path.read_text()))))
    return folder


def _ids():
    import torch

    return torch.randint(0, V, (2, T), generator=torch.Generator().manual_seed(7))


def _logits(model, ids):
    import torch

    with torch.no_grad():
        out = model(ids)
    return out if isinstance(out, torch.Tensor) else out.logits


@pytest.mark.parametrize("name", list(CASES))
def test_loaded_scaled_checkpoint_computes_what_transformers_computes(tmp_path, name):
    import tfcalc

    config_class, model_class, kwargs, plain = CASES[name]
    model = _build(config_class, model_class, kwargs)
    folder = _save(model, tmp_path / "scaled")
    cfg = load(str(folder / "config.json"))
    assert cfg.rope_scaling is not None and cfg.max_seq_len >= T
    ids = _ids()
    expected = _logits(model, ids)
    got = _logits(tfcalc.load_model(str(folder)), ids)
    assert got.shape == expected.shape and (got - expected).abs().max() <= 1e-4
    assert expected.abs().max() > 0.1
    # the same weights without the scaling: other logits at this length, so the scaling is what matched
    unscaled = _build(config_class, model_class, dict(kwargs, rope_parameters=plain))
    unscaled.load_state_dict(model.state_dict())
    assert (_logits(unscaled, ids) - expected).abs().max() > 1e-3


def _legacy_gemma3(data: dict) -> dict:
    """A published Gemma 3 file (transformers 4): top-level rope_scaling, rope_theta, rope_local_base_freq."""
    nested = data.pop("rope_parameters")
    return {**data, "rope_scaling": {"rope_type": "linear", "factor": nested["full_attention"]["factor"]},
            "rope_theta": nested["full_attention"]["rope_theta"],
            "rope_local_base_freq": nested["sliding_attention"]["rope_theta"]}


def _named_none(data: dict) -> dict:
    data.pop("rope_parameters", None), data.pop("rope_scaling", None)
    return data


@pytest.mark.parametrize("name, edit, kwargs", [
    ("gemma3_text-linear", _legacy_gemma3, {}),
    # GptOssConfig fills in YaRN ×32 from 4,096 (truncate false) when the file names none; ApertusConfig llama3
    ("gpt_oss-yarn", _named_none, dict(rope_parameters=None, max_position_embeddings=8192)),
    ("apertus-llama3", _named_none, dict(rope_parameters=None)),
], ids=["gemma3-legacy-rope-scaling", "gpt_oss-filled-in", "apertus-filled-in"])
def test_the_scaling_a_file_leaves_implicit(tmp_path, name, edit, kwargs):
    """The file as published: Gemma 3's top-level rope_scaling (the global layers only), and a gpt-oss or
    Apertus file that names no scaling, which their config classes fill in."""
    import transformers

    import tfcalc

    config_class, model_class, base, _ = CASES[name]
    model = _build(config_class, model_class, {**base, **kwargs})
    folder = _save(model, tmp_path / "m", edit)
    reread = getattr(transformers, config_class).from_pretrained(folder)  # transformers reads the edited file alike
    assert reread.rope_parameters == model.config.rope_parameters
    cfg = load(str(folder / "config.json"))
    assert cfg.rope_scaling == {"gemma3_text-linear": "linear", "gpt_oss-yarn": "yarn"}.get(name, "llama3")
    ids = _ids()
    assert (_logits(tfcalc.load_model(str(folder)), ids) - _logits(model, ids)).abs().max() <= 1e-4


def test_published_scalings_have_transformers_frequencies():
    """The scalings of the released checkpoints at full size: tfcalc's inverse frequencies equal
    transformers' (ROPE_INIT_FUNCTIONS on the config class), and so do the attention factors."""
    import torch
    import transformers
    from test_hf_patterns import APERTUS_8B, GEMMA3_27B, GEMMA3_27B_TEXT, LLAMA4_SCOUT_TEXT, OLMO3_7B
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    from tfcalc.model.rope_scaling import scaled_inv_freq

    oss = {"model_type": "gpt_oss", "hidden_size": 2880, "num_attention_heads": 64, "head_dim": 64,
           "intermediate_size": 2880, "num_hidden_layers": 2, "vocab_size": 201088}
    cases = [("GptOssConfig", oss, oss, None), ("Gemma3TextConfig", GEMMA3_27B_TEXT, GEMMA3_27B, "full_attention"),
             ("Llama4TextConfig", LLAMA4_SCOUT_TEXT, LLAMA4_SCOUT_TEXT, None),
             ("Olmo3Config", OLMO3_7B, OLMO3_7B, "full_attention"), ("ApertusConfig", APERTUS_8B, APERTUS_8B, None)]
    for config_class, hf_data, data, layer_type in cases:
        hf = getattr(transformers, config_class)(**{k: v for k, v in hf_data.items() if k != "model_type"})
        params = hf.rope_parameters[layer_type] if layer_type else hf.rope_parameters
        inv, factor = ROPE_INIT_FUNCTIONS[params["rope_type"]](hf, "cpu", layer_type=layer_type)
        cfg = _read(data)
        attention = next(b.attention for b in cfg.architecture.output.layers()
                         if b.attention.rope_scaling is not None)
        ours = scaled_inv_freq(attention.rope_theta, attention.rope_dim, attention.rope_scaling)
        assert torch.equal(ours, inv), config_class
        assert attention.rope_scaling.attention_factor == pytest.approx(factor, rel=1e-12), config_class


def _read(data: dict):
    import tempfile
    from pathlib import Path

    folder = Path(tempfile.mkdtemp()) / "m"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(data))
    return load(str(folder / "config.json"))


def test_where_each_scaling_applies():
    """Gemma 3 27B: linear ×8 on its 10 global layers, none on the 52 local ones; gpt-oss: YaRN on every
    layer, windowed or not; Llama 4 Scout: llama3 on the chunked RoPE layers, the NoPE ones rotate nothing."""
    from test_hf_patterns import GEMMA3_27B, LLAMA4_SCOUT_TEXT

    from tfcalc.architecture.rope import LinearScaling, Llama3Scaling, Yarn

    gemma = [b.attention for b in _read(GEMMA3_27B).architecture.output.layers()]
    assert [a.rope_scaling for a in gemma if a.window is None] == [LinearScaling(8.0)] * 10
    assert {a.rope_scaling for a in gemma if a.window is not None} == {None} and len(gemma) == 62
    for name in ("gpt-oss-120b", "gpt-oss-20b"):
        assert {b.attention.rope_scaling for b in load(name).architecture.output.layers()} == {
            Yarn(32.0, 4096, 32.0, 1.0, truncate=False)}
    scout = [b.attention for b in _read(LLAMA4_SCOUT_TEXT).architecture.output.layers()]
    assert {a.rope_scaling for a in scout if a.rope_theta is not None} == {Llama3Scaling(16.0, 1.0, 1.0, 8192)}
    assert {a.rope_scaling for a in scout if a.rope_theta is None} == {None}


def test_dynamic_ntk_is_the_default_rope_within_the_context(tmp_path):
    """Dynamic NTK changes the base only past max_position_embeddings (_compute_dynamic_ntk_parameters: base ·
    (factor·T/max - (factor - 1)) for T above max): load_model runs it as the default RoPE, with transformers'
    logits at 32 of 32 positions."""
    import torch

    import tfcalc

    model = _build("LlamaConfig", "LlamaForCausalLM",
                   dict(LLAMA_LIKE, rope_parameters=dict(rope_type="dynamic", rope_theta=100.0, factor=4.0)))
    folder = _save(model, tmp_path)
    assert load(str(folder / "config.json")).rope_scaling is None
    ids = torch.randint(0, V, (2, 32), generator=torch.Generator().manual_seed(5))
    assert (_logits(tfcalc.load_model(str(folder)), ids) - _logits(model, ids)).abs().max() <= 1e-4


def test_proportional_on_a_llama_is_built(tmp_path):
    """Proportional RoPE (Gemma 4's; tfcalc.architecture.rope) on a Llama: the whole head in rotate-half, half its
    frequencies turning; counted as before and run by load_model with transformers' logits."""
    import torch

    import tfcalc
    from tfcalc.count.model import params as count

    model = _build("LlamaConfig", "LlamaForCausalLM",
                   dict(LLAMA_LIKE, rope_parameters=dict(rope_type="proportional", rope_theta=100.0,
                                                         partial_rotary_factor=0.5)))
    folder = _save(model, tmp_path)
    cfg = load(str(folder / "config.json"))
    assert (cfg.rope_scaling, cfg.rope_proportion, cfg.rope_fraction) == ("proportional", 0.5, 1.0)
    assert count.total(cfg) == sum(p.numel() for p in model.parameters())
    ids = torch.randint(0, V, (2, 32), generator=torch.Generator().manual_seed(5))
    assert (_logits(tfcalc.load_model(str(folder)), ids) - _logits(model, ids)).abs().max() <= 1e-4


def test_each_preset_states_its_checkpoints_scaling():
    """The presets carry the scaling of the config.json they cite: the layers equal those read from the file
    (tests/test_hf_patterns.py holds the files; gpt-oss's as GptOssConfig fills it in)."""
    from test_hf_patterns import APERTUS_8B, EXAONE4_32B, GEMMA3_27B, LLAMA4_SCOUT_TEXT, OLMO3_7B

    for preset, data in (("gemma-3-27b", GEMMA3_27B), ("llama-4-scout", LLAMA4_SCOUT_TEXT), ("olmo-3-7b", OLMO3_7B),
                         ("exaone-4.0-32b", EXAONE4_32B), ("apertus-8b", APERTUS_8B)):
        read = {b.attention.rope_scaling for b in _read(data).architecture.output.layers()} - {None}
        assert read and read == {b.attention.rope_scaling for b in load(preset).architecture.output.layers()} - {None}


HOSTILE_FILES = [
    ({"rope_scaling": {"rope_type": "ntk-by-parts", "factor": 2.0}}, "'rope_scaling' type 'ntk-by-parts' is not a "
                                                                      "RoPE scaling transformers knows"),
    ({"rope_scaling": {"rope_type": "linear"}}, "missing required field 'factor'"),
    ({"rope_scaling": {"rope_type": "linear", "factor": -2.0}}, "'rope_scaling_factor' must be positive"),
    ({"rope_scaling": {"rope_type": "linear", "factor": "8"}}, "'factor'"),
    ({"rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0}},
     "missing required field 'high_freq_factor'"),
    ({"rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 4.0, "high_freq_factor": 1.0}},
     "rope_low_freq_factor (4.0) must be at most rope_high_freq_factor (1.0)"),
    ({"rope_scaling": {"rope_type": "yarn", "factor": 4.0, "truncate": "no"}}, "'truncate'"),
    ({"rope_scaling": {"rope_type": "yarn", "factor": 4.0, "beta_fast": 0}}, "'yarn_beta_fast' must be positive"),
    ({"rope_scaling": {"rope_type": "yarn", "factor": 4.0, "attention_factor": -1.0}},
     "'yarn_attention_factor' must be positive"),
    ({"rope_scaling": [8.0]}, "'rope_scaling' must be an object"),
    ({"rope_parameters": {"full_attention": {"rope_type": "linear", "factor": 2.0},
                          "sliding_attention": {"rope_type": "linear", "factor": 4.0}},
      "layer_types": ["sliding_attention", "full_attention"], "sliding_window": 4},
     "scales the layer types full_attention, sliding_attention differently"),
    ({"rope_parameters": {"full_attention": {"rope_type": "default"},
                          "sliding_attention": {"rope_type": "linear", "factor": 4.0}},
      "layer_types": ["sliding_attention", "full_attention"], "sliding_window": 4},
     "scales the layer types sliding_attention differently"),
]


@pytest.mark.parametrize("changes, message", HOSTILE_FILES,
                         ids=["unknown-type", "no-factor", "negative-factor", "factor-string", "llama3-no-high",
                              "llama3-low-above-high", "truncate-string", "beta-zero", "attention-factor-negative",
                              "not-an-object", "types-differ", "sliding-only"])
def test_bad_scalings_in_a_file_are_one_line_errors(tmp_path, cli, changes, message):
    from test_hf_config import LLAMA3_8B

    path = tmp_path / "m" / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps({**LLAMA3_8B, **changes}))
    r = cli("params", str(path), "--no-measure")
    assert r.code == 2 and r.out == "" and message in r.err and len(r.err.strip().splitlines()) == 1, r.err


def test_a_flat_scaling_in_a_file_nested_by_layer_type_is_refused(tmp_path, cli):
    """Gemma3TextConfig applies a flat rope_parameters to no layer: refused rather than guessed."""
    from test_hf_patterns import GEMMA3_1B

    path = tmp_path / "m" / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps({**GEMMA3_1B, "rope_scaling": None,
                                "rope_parameters": {"rope_type": "linear", "factor": 8.0}}))
    r = cli("params", str(path), "--no-measure")
    assert r.code == 2 and "must be nested by layer type" in r.err and len(r.err.strip().splitlines()) == 1


@pytest.mark.parametrize("sets, message", [
    (["rope_scaling=linear"], "rope_scaling linear needs rope_scaling_factor"),
    (["rope_scaling=llama3", "rope_scaling_factor=8", "rope_original_max_seq_len=8192"],
     "rope_scaling llama3 needs rope_low_freq_factor"),
    (["rope_scaling=yarn", "rope_scaling_factor=8"], "rope_scaling yarn needs rope_original_max_seq_len"),
    (["rope_scaling=linear", "rope_scaling_factor=8", "yarn_beta_fast=32"],
     "yarn_beta_fast does not apply to rope_scaling linear"),
    (["rope_scaling_layers=full"], "rope_scaling_layers applies with rope_scaling only"),
    (["rope_scaling=dynamic"], "rope_scaling"),
    (["rope_scaling_layers=local", "rope_scaling=linear", "rope_scaling_factor=2"], "rope_scaling_layers"),
    (["pos_encoding=learned", "rope_scaling=linear", "rope_scaling_factor=2"],
     "rope_scaling applies to pos_encoding rope only"),
], ids=["linear-no-factor", "llama3-no-low", "yarn-no-original", "yarn-field-on-linear", "layers-alone", "dynamic",
        "layers-local", "learned-positions"])
def test_bad_scaling_fields_are_one_line_errors(cli, sets, message):
    args = ["params", "llama3-8b", "--no-measure"]
    for s in sets:
        args += ["--set", s]
    r = cli(*args)
    assert r.code == 2 and r.out == "" and message in r.err and len(r.err.strip().splitlines()) == 1, r.err


def test_latent_attention_builds_yarn_only(cli):
    r = cli("params", "deepseek-v3", "--no-measure", "--set", "rope_scaling=linear", "--set",
            "rope_original_max_seq_len=null", "--set", "yarn_beta_fast=null", "--set", "yarn_beta_slow=null",
            "--set", "yarn_mscale=null", "--set", "yarn_mscale_all_dim=null")
    assert r.code == 2 and "latent attention (kv_lora_rank) builds rope_scaling yarn on every layer only" in r.err


def test_the_scaling_changes_no_count(cli):
    """A function of the position only: params, FLOPs and memory of Llama 3 8B alike with and without it."""
    scaled = ["--set", "rope_scaling=llama3", "--set", "rope_scaling_factor=8", "--set",
              "rope_original_max_seq_len=8192", "--set", "rope_low_freq_factor=1", "--set", "rope_high_freq_factor=4"]
    for command in (["params", "--no-measure"], ["flops", "--seq", "4096"], ["memory", "--seq", "4096"]):
        plain = cli(*command, "llama3-8b", "--json").json()
        other = cli(*command, "llama3-8b", "--json", *scaled).json()
        keys = [k for k in plain if k.endswith(("total", "flops", "bytes")) and isinstance(plain[k], int)]
        assert keys and all(plain[k] == other[k] for k in keys)


@pytest.mark.parametrize("name", ["gpt_oss-yarn", "gemma3_text-linear", "llama-llama3"])
def test_decoding_past_the_original_context_reads_the_scaled_tables(tmp_path, name):
    """The runtime's decode steps (one token each, the static cache, device positions) continue a prompt of 6
    greedily to position 24 as transformers' greedy generate does: the scaled tables serve decode too."""
    import torch

    import tfcalc
    from tfcalc.model import generate

    config_class, model_class, kwargs, _ = CASES[name]
    model = _build(config_class, model_class, kwargs)
    prompt = _ids()[:, :6]
    ours = generate(tfcalc.load_model(str(_save(model, tmp_path))), prompt, T - 6)
    with torch.no_grad():
        theirs = model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=T - 6,
                                min_new_tokens=T - 6, do_sample=False)  # the mask: a 0 in the prompt is no pad
    assert torch.equal(ours, theirs[:, 6:])


def test_older_spellings_of_a_scaling_are_read():
    """Qwen's model cards add YaRN as {"type": "yarn", ...} (transformers 4's key); Phi-3's "su" and "yarn" are
    longrope (Phi3Config), counted and not built; a nested dict's own truncate is not read by transformers."""
    from test_hf_config import LLAMA3_8B, QWEN3_8B

    qwen = _read({**QWEN3_8B, "rope_scaling": {"type": "yarn", "factor": 4.0,
                                               "original_max_position_embeddings": 32768}})
    assert (qwen.rope_scaling, qwen.rope_scaling_factor, qwen.rope_original_max_seq_len) == ("yarn", 4.0, 32768)
    phi = {"architectures": ["Phi3ForCausalLM"], "model_type": "phi3", "hidden_size": 64, "intermediate_size": 96,
           "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 100, "max_position_embeddings": 64,
           "rope_scaling": {"type": "su", "short_factor": [1.0] * 8, "long_factor": [2.0] * 8}}
    phi3 = _read(phi)  # "su" is longrope (Phi3Config), its original length Phi3Config's 4,096
    assert (phi3.rope_scaling, phi3.rope_original_max_seq_len, phi3.rope_short_factor) == ("longrope", 4096, (1.0,) * 8)
    olmo = {**LLAMA3_8B, "model_type": "olmo3", "architectures": ["Olmo3ForCausalLM"],
            "layer_types": ["sliding_attention", "full_attention"] * 16, "sliding_window": 4096,
            "rope_parameters": {"full_attention": {"rope_type": "yarn", "factor": 8.0, "truncate": False,
                                                   "original_max_position_embeddings": 8192},
                                "sliding_attention": {"rope_type": "default"}}}
    cfg = _read(olmo)
    assert (cfg.rope_scaling, cfg.rope_scaling_layers, cfg.yarn_truncate) == ("yarn", "full", None)


def test_an_untruncated_ramp_is_what_matched():
    """gpt-oss's truncate false changes this case's logits, so the match above is the untruncated ramp's."""
    config_class, model_class, kwargs, _ = CASES["gpt_oss-yarn"]
    model = _build(config_class, model_class, kwargs)
    truncated = _build(config_class, model_class, dict(kwargs, rope_parameters=dict(kwargs["rope_parameters"],
                                                                                      truncate=True)))
    truncated.load_state_dict(model.state_dict())
    ids = _ids()
    assert (_logits(truncated, ids) - _logits(model, ids)).abs().max() > 1e-3
