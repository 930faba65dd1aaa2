"""LongRoPE (Phi-3's "su"/"longrope") against transformers 5.24: a tiny phi3 checkpoint loaded by load_model gives
transformers' logits, the published Phi-3-mini-128k scaling gives transformers' frequencies and attention factor at
full size, and bad lists are one-line errors. Which list tfcalc's fixed tables take: tfcalc.architecture.rope."""

from __future__ import annotations

import json

import pytest
from hf_tiny import LLAMA_LIKE, TOKENS, V
from test_hf_rope_scaling import _build, _logits, _read, _save

from tfcalc.presets import load

SHORT, LONG = [1.0, 1.3, 2.0, 3.5], [1.1, 2.5, 6.0, 11.0]  # head_dim 8: four frequencies
LONGROPE = dict(rope_type="longrope", rope_theta=100.0, short_factor=SHORT, long_factor=LONG)

# Phi-3-mini-128k-instruct's first-release config.json (type "su", transformers 4.38.1), as quoted whole in
# modelscope/DiffSynth-Studio, diffsynth/models/omnigen.py (OmniGen's Phi-3 language model)
PHI3_MINI_128K_LONG = [
    1.0299999713897705, 1.0499999523162842, 1.0499999523162842, 1.0799999237060547, 1.2299998998641968,
    1.2299998998641968, 1.2999999523162842, 1.4499999284744263, 1.5999999046325684, 1.6499998569488525,
    1.8999998569488525, 2.859999895095825, 3.68999981880188, 5.419999599456787, 5.489999771118164,
    5.489999771118164, 9.09000015258789, 11.579999923706055, 15.65999984741211, 15.769999504089355,
    15.789999961853027, 18.360000610351562, 21.989999771118164, 23.079999923706055, 30.009998321533203,
    32.35000228881836, 32.590003967285156, 35.56000518798828, 39.95000457763672, 53.840003967285156,
    56.20000457763672, 57.95000457763672, 59.29000473022461, 59.77000427246094, 59.920005798339844,
    61.190006256103516, 61.96000671386719, 62.50000762939453, 63.3700065612793, 63.48000717163086,
    63.48000717163086, 63.66000747680664, 63.850006103515625, 64.08000946044922, 64.760009765625,
    64.80001068115234, 64.81001281738281, 64.81001281738281]
PHI3_MINI_128K_SHORT = [
    1.05, 1.05, 1.05, 1.1, 1.1, 1.1, 1.2500000000000002, 1.2500000000000002, 1.4000000000000004,
    1.4500000000000004, 1.5500000000000005, 1.8500000000000008, 1.9000000000000008, *[2.000000000000001] * 19,
    2.1000000000000005, 2.1000000000000005, 2.2, *[2.3499999999999996] * 4, 2.3999999999999995, 2.3999999999999995,
    2.6499999999999986, 2.6999999999999984, 2.8999999999999977, 2.9499999999999975, *[3.049999999999997] * 3]
PHI3_MINI_128K = {
    "model_type": "phi3", "architectures": ["Phi3ForCausalLM"], "hidden_size": 3072, "intermediate_size": 8192,
    "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 32, "vocab_size": 32064,
    "max_position_embeddings": 131072, "original_max_position_embeddings": 4096, "rms_norm_eps": 1e-05,
    "rope_theta": 10000.0, "sliding_window": 131072, "tie_word_embeddings": False, "hidden_act": "silu",
    "bos_token_id": 1, "eos_token_id": 32000, "pad_token_id": 32000,
    "rope_scaling": {"type": "su", "long_factor": PHI3_MINI_128K_LONG, "short_factor": PHI3_MINI_128K_SHORT}}


def _ids(T: int):
    import torch

    return torch.randint(0, V, (2, T), generator=torch.Generator().manual_seed(7))


@pytest.mark.parametrize("max_len, original, factor, T", [
    (32, 8, None, 10),  # past the original context: transformers takes long_factor, and so do tfcalc's tables
    (8, 8, 4.0, 6),  # within it (max_seq_len = original): short_factor both, the stated factor's attention scale
], ids=["long-past-original", "short-within-original"])
def test_a_longrope_phi3_checkpoint_computes_what_transformers_computes(tmp_path, max_len, original, factor, T):
    import tfcalc

    rope = dict(LONGROPE, **({} if factor is None else {"factor": factor}))
    kwargs = dict(LLAMA_LIKE, **TOKENS, max_position_embeddings=max_len, original_max_position_embeddings=original)
    model = _build("Phi3Config", "Phi3ForCausalLM", dict(kwargs, rope_parameters=rope))
    folder = _save(model, tmp_path / "m")
    cfg = load(str(folder / "config.json"))
    assert (cfg.rope_scaling, cfg.rope_original_max_seq_len, cfg.rope_scaling_factor) == \
        ("longrope", original, factor or max_len / original)
    ids = _ids(T)
    expected = _logits(model, ids)
    got = _logits(tfcalc.load_model(str(folder)), ids)
    assert (got - expected).abs().max() <= 1e-4 and expected.abs().max() > 0.1
    # the other list, or no scaling, on the same weights: other logits, so the list taken is what matched
    for other in (dict(rope, short_factor=LONG, long_factor=SHORT), dict(rope_type="default", rope_theta=100.0)):
        twin = _build("Phi3Config", "Phi3ForCausalLM", dict(kwargs, rope_parameters=other))
        twin.load_state_dict(model.state_dict())
        assert (_logits(twin, ids) - expected).abs().max() > 1e-3


def test_phi3_mini_128k_has_transformers_frequencies_at_full_size():
    """Both lists at full size: tfcalc's inverse frequencies equal transformers' (_compute_longrope_parameters at
    a length past 4,096 and at none), and the attention factor sqrt(1 + ln 32 / ln 4096) = 1.19024."""
    import dataclasses
    import math

    import torch
    import transformers
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    from tfcalc.architecture.rope import from_fields
    from tfcalc.model.rope_scaling import scaled_inv_freq

    # transformers 5.24 refuses the older name "su" in Phi3Config (standardize_rope_params reads the original
    # length for rope_type longrope only, before the rename): given as longrope, as the later releases write it
    renamed = dict(PHI3_MINI_128K, rope_scaling=dict(PHI3_MINI_128K["rope_scaling"], type="longrope"))
    hf = transformers.Phi3Config(**{k: v for k, v in renamed.items() if k != "model_type"})
    cfg = _read(PHI3_MINI_128K)
    assert dataclasses.replace(cfg, source="") == dataclasses.replace(_read(renamed), source="")
    for seq_len, max_len in ((4097, 131072), (None, 4096)):
        inv, factor = ROPE_INIT_FUNCTIONS["longrope"](hf, "cpu", seq_len=seq_len)
        scaling = from_fields(dataclasses.replace(cfg, max_seq_len=max_len))
        assert torch.equal(scaled_inv_freq(cfg.rope_theta, cfg.rope_dim, scaling), inv)
        assert scaling.attention_factor == pytest.approx(factor, rel=1e-12)
    assert factor == pytest.approx(math.sqrt(1 + math.log(32) / math.log(4096)), rel=1e-12)


def test_counts_do_not_change_with_longrope():
    """Phi-3-mini-128k's parameters: transformers' on meta, with the scaling and without."""
    import torch
    import transformers

    from tfcalc.count.model import params as count

    hf = transformers.Phi3Config(**{k: v for k, v in PHI3_MINI_128K.items() if k not in ("model_type", "rope_scaling")})
    with torch.device("meta"):
        expected = sum(p.numel() for p in transformers.Phi3ForCausalLM(hf).parameters())
    plain = {k: v for k, v in PHI3_MINI_128K.items() if k != "rope_scaling"}
    assert count.total(_read(PHI3_MINI_128K)) == count.total(_read(plain)) == expected


def _phi3(tmp_path, **changes):
    raw = dict(LLAMA_LIKE, **TOKENS, model_type="phi3", original_max_position_embeddings=8,
               rope_scaling=dict(LONGROPE))
    for key, value in changes.items():
        if key.startswith("rs_"):
            raw["rope_scaling"][key[3:]] = value
        elif value is None:
            raw.pop(key, None)
        else:
            raw[key] = value
    (tmp_path / "config.json").write_text(json.dumps(raw))
    return str(tmp_path / "config.json")


@pytest.mark.parametrize("changes, message", [
    (dict(rs_short_factor=[1.0] * 3), "rope_short_factor must hold one factor per rotated frequency (4"),
    (dict(rs_long_factor=[1.0] * 5), "rope_long_factor must hold one factor per rotated frequency (4"),
    (dict(rs_long_factor=[1.0, 0.0, 1.0, 1.0]), "rope_long_factor must hold positive numbers only"),
    (dict(rs_short_factor="1,2,3,4"), "must be a list of numbers"),
    (dict(rs_long_factor=None), "missing required field 'long_factor'"),
    (dict(original_max_position_embeddings="4k"), "'original_max_position_embeddings'"),
    (dict(original_max_position_embeddings=1), "'original_max_position_embeddings' must be an integer of at least 2"),
    (dict(rs_attention_factor=1.2), "'attention_factor' with longrope is not built"),
])
def test_bad_longrope_scalings_are_one_line_errors(tmp_path, cli, changes, message):
    path = _phi3(tmp_path, **changes)
    r = cli("params", path, "--no-measure")
    assert r.code == 2 and r.out == "" and message in r.err and len(r.err.strip().splitlines()) == 1, r.err


@pytest.mark.parametrize("model_type, top, expected", [
    ("phi3", None, 4096),  # Phi3Config's own default outranks the dict's (standardize_rope_params)
    ("phi3", 16, 16),
    ("llama", None, 24),  # a class without the field: the dict's
    ("llama", 16, 24),  # a top-level key LlamaConfig has no field for is not read
    ("llama", "none", 4096 * 8),  # none in the dict either: max_position_embeddings (factor 1)
])
def test_the_original_length_is_read_as_transformers_reads_it(tmp_path, model_type, top, expected):
    import transformers

    raw = dict(LLAMA_LIKE, **TOKENS, model_type=model_type, max_position_embeddings=4096 * 8,
               rope_scaling=dict(LONGROPE, original_max_position_embeddings=24))
    if top == "none":
        raw["rope_scaling"].pop("original_max_position_embeddings")
    elif top is not None:
        raw["original_max_position_embeddings"] = top
    config_class = {"phi3": transformers.Phi3Config, "llama": transformers.LlamaConfig}[model_type]
    hf = config_class(**{k: v for k, v in raw.items() if k != "model_type"})
    assert hf.rope_parameters["original_max_position_embeddings"] == expected
    cfg = _read(raw)
    assert cfg.rope_original_max_seq_len == expected
    assert cfg.rope_scaling_factor == raw["max_position_embeddings"] / expected


def test_decode_past_the_original_context_equals_transformers_generate(tmp_path):
    """A prompt already past the original 8 positions: every step of transformers' generate takes long_factor, as
    tfcalc's tables do; tfcalc's greedy decode over its cache equals it and the uncached forward's."""
    import torch
    from hf_pairs import assert_decode_equals

    import tfcalc

    kwargs = dict(LLAMA_LIKE, **TOKENS, original_max_position_embeddings=8, rope_parameters=LONGROPE)
    hf = _build("Phi3Config", "Phi3ForCausalLM", kwargs)
    folder = _save(hf, tmp_path / "m")
    model = tfcalc.load_model(str(folder))
    prompt = torch.randint(3, V, (2, 9), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        assert_decode_equals(model, hf, prompt, 6, model.new_cache(2, 15))


def test_below_the_original_context_the_fixed_tables_keep_long_factor(tmp_path):
    """The stated convention (tfcalc.architecture.rope): with max_seq_len past the original, a sequence shorter
    than it is rotated by long_factor, where transformers takes short_factor; so tfcalc's logits there equal
    transformers' for the same weights with long_factor given as the short list, and not the file's."""
    import tfcalc

    kwargs = dict(LLAMA_LIKE, **TOKENS, original_max_position_embeddings=8)
    hf = _build("Phi3Config", "Phi3ForCausalLM", dict(kwargs, rope_parameters=LONGROPE))
    folder = _save(hf, tmp_path / "m")
    twin = _build("Phi3Config", "Phi3ForCausalLM", dict(kwargs, rope_parameters=dict(LONGROPE, short_factor=LONG)))
    twin.load_state_dict(hf.state_dict())
    ids = _ids(6)
    got = _logits(tfcalc.load_model(str(folder)), ids)
    assert (got - _logits(twin, ids)).abs().max() <= 1e-4
    assert (got - _logits(hf, ids)).abs().max() > 1e-3
