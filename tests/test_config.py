"""ModelConfig: derived sizes and validation."""

import dataclasses

import pytest
from conftest import tiny

from tfcalc.config import ConfigError, ModelConfig, from_mapping


def test_derived_sizes_are_properties_not_copies():
    cfg = tiny(d_model=64, n_head=8)
    assert (cfg.head_dim, cfg.kv_heads, cfg.q_dim, cfg.kv_dim, cfg.ffn_dim) == (8, 8, 64, 64, 256)
    wider = dataclasses.replace(cfg, d_model=128)
    assert wider.head_dim == 16 and wider.ffn_dim == 512  # re-derived, never stale


def test_explicit_d_head_is_kept_even_when_width_differs_from_d_model():
    cfg = tiny(d_model=2048, n_head=24, d_head=128)
    assert cfg.head_dim == 128 and cfg.q_dim == 3072


@pytest.mark.parametrize(
    "d_model, multiplier, multiple_of, expected",
    [(4096, None, 256, 11008), (5120, None, 256, 13824), (8192, 1.3, 4096, 28672)],
    ids=["llama2-7b", "llama2-13b", "llama2-70b"],
)
def test_llama_ffn_derivation_matches_meta(d_model, multiplier, multiple_of, expected):
    cfg = tiny(d_model=d_model, n_head=32, gated_ffn=True, ffn_dim_multiplier=multiplier, ffn_multiple_of=multiple_of)
    assert cfg.ffn_dim == expected


def test_gqa_and_mqa_kv_width():
    assert tiny(n_head=8, n_kv_head=2, d_model=64).kv_dim == 16
    assert tiny(n_head=8, n_kv_head=1, d_model=64).kv_dim == 8


@pytest.mark.parametrize(
    "changes, message",
    [
        (dict(n_layer=0), "'n_layer' must be positive"),
        (dict(d_model=-8), "'d_model' must be positive"),
        (dict(vocab_size=0), "'vocab_size' must be positive"),
        (dict(d_head=0), "'d_head' must be positive"),
        (dict(n_layer=2.5), "'n_layer' must be an integer"),
        (dict(n_layer=True), "'n_layer' must be an integer"),
        (dict(attn_bias="yes"), "'attn_bias' must be true or false"),
        (dict(norm_eps="small"), "'norm_eps' must be a number"),
        (dict(norm="rms"), "did you mean 'rmsnorm'"),
        (dict(pos_encoding="rotary"), "must be one of learned, sinusoidal, rope, alibi, none"),
        (dict(d_model=30, n_head=4), "d_model (30) is not divisible by n_head (4)"),
        (dict(n_head=4, n_kv_head=3), "must be a multiple of n_kv_head (3)"),
        (dict(n_head=4, n_kv_head=8), "must be a multiple of n_kv_head (8)"),
        (dict(pos_encoding="rope", d_head=7), "d_head must be even"),
        (dict(norm="rmsnorm", norm_bias=True), "rmsnorm has no bias"),
        (dict(d_ff=64, ffn_multiple_of=256), "give either d_ff or its derivation"),
        (dict(ffn_mult=0.01), "derived d_ff is 0"),
    ],
)
def test_impossible_configs_are_refused_naming_the_field(changes, message):
    with pytest.raises(ConfigError) as info:
        tiny(**changes)
    assert message in str(info.value)
    assert "\n" not in str(info.value)


def test_from_mapping_names_unknown_and_missing_fields():
    base = dict(n_layer=2, d_model=32, n_head=4, vocab_size=61, max_seq_len=16)
    with pytest.raises(ConfigError, match=r"unknown field 'n_haed' \(did you mean 'n_head'\?\)"):
        from_mapping({**base, "n_haed": 4})
    with pytest.raises(ConfigError, match="missing required field 'vocab_size'"):
        from_mapping({k: v for k, v in base.items() if k != "vocab_size"})
    assert from_mapping(base) == ModelConfig(**base)


def test_resolved_writes_derived_sizes_and_rebuilds_the_same_model():
    cfg = tiny(gated_ffn=True, ffn_multiple_of=16)
    data = cfg.resolved()
    assert data["d_ff"] == cfg.ffn_dim and data["d_head"] == cfg.head_dim and data["n_kv_head"] == cfg.kv_heads
    rebuilt = from_mapping(data)
    assert (rebuilt.ffn_dim, rebuilt.q_dim, rebuilt.kv_dim) == (cfg.ffn_dim, cfg.q_dim, cfg.kv_dim)


def test_field_types_are_read_from_the_annotations():
    """One list of types: the dataclass's own annotations, each field's kind as written in tfcalc/config.py."""
    from typing import Optional

    from tfcalc.config_rules import FieldType, field_types

    types = field_types(ModelConfig)
    assert set(types) == {f.name for f in dataclasses.fields(ModelConfig) if f.metadata.get("front_end", True)}
    assert types["n_layer"] == FieldType(int, False) and types["d_head"] == FieldType(int, True)
    assert types["rope_theta"] == FieldType(float, False) and types["attn_scale"] == FieldType(float, True)
    assert types["final_norm"] == FieldType(bool, False) and types["attn_out_bias"] == FieldType(bool, True)
    assert types["dense_layers"] == FieldType("ints", True) and types["layer_pattern"] == FieldType(str, True)
    assert types["dtype"] == FieldType(str, True, ("fp32", "bf16", "fp16"))
    assert types["norm"] == FieldType(str, False, ("layernorm", "rmsnorm"))

    @dataclasses.dataclass
    class Odd:
        shape: Optional[dict] = None

    with pytest.raises(TypeError, match="field shape"):
        field_types(Odd)


@pytest.mark.parametrize("field, value, message", [
    ("n_layer", "2", "field 'n_layer' must be an integer; got '2' (str)"),
    ("d_head", 1.5, "field 'd_head' must be an integer or null; got 1.5 (float)"),
    ("attn_out_bias", 1, "field 'attn_out_bias' must be true, false or null; got 1 (int)"),
    ("dense_layers", [True], "field 'dense_layers' must be a list of integers or null"),
    ("dtype", "fp8", "field 'dtype' must be one of fp32, bf16, fp16 or null; got 'fp8'"),
    ("rope_theta", float("nan"), "field 'rope_theta' must be a number; got nan"),
    ("type_vocab_size", -1, "field 'type_vocab_size' must be 0 or more; got -1"),
    ("mtp_layers", 0, None), ("type_vocab_size", 0, None),
    ("n_expert", 0, "field 'n_expert' must be positive; got 0"),
    ("norm_eps", 0.0, "field 'norm_eps' must be positive; got 0.0"),
    ("vocab_size", 2**40 + 1, "field 'vocab_size' must be at most 1,099,511,627,776"),
])
def test_each_kind_of_field_is_checked_by_its_annotation(field, value, message):
    data = {**dict(n_layer=2, d_model=32, n_head=4, vocab_size=61, max_seq_len=16), field: value}
    if message is None:
        assert getattr(from_mapping(data), field) == value
        return
    with pytest.raises(ConfigError) as e:
        from_mapping(data)
    assert message in str(e.value), str(e.value)


def test_every_field_is_in_exactly_one_component_group():
    from tfcalc.config import FIELD_NAMES
    from tfcalc.config_groups import GROUPS

    listed = [f for _, fields in GROUPS for f in fields]
    assert sorted(listed) == sorted(FIELD_NAMES) and len(listed) == len(set(listed))


def test_show_prints_the_fields_group_by_group(cli):
    import yaml

    text = cli("show", "llama-4-scout").out
    assert "# attention per layer: windows, chunks, NoPE" in text and "# mixture of experts" in text
    attention = text.index("# attention (Attention)")
    assert attention < text.index("\nn_kv_head:") < text.index("# feed-forward") < text.index("\nd_ff:")
    every = cli("show", "llama-4-scout", "--json").json()  # JSON lists every field; the screen leaves out nulls
    assert yaml.safe_load(text) == {k: v for k, v in every.items() if v is not None}
    assert yaml.safe_load(cli("show", "llama-4-scout", "--all").out) == every  # --all: the same fields, all
