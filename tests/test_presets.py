"""Loading presets, user YAML files and --set overrides; every bad input is one named line."""

import re

import pytest

from tfcalc.config import ConfigError
from tfcalc.count.model.params import total as params_total
from tfcalc.presets import load, parse_override, preset_dir, preset_names, resolve_preset_name

ISSUE_PRESETS = [
    "gpt2", "gpt2-medium", "gpt2-large", "gpt2-xl",
    "gpt3-small", "gpt3-medium", "gpt3-large", "gpt3-xl", "gpt3-2.7b", "gpt3-6.7b", "gpt3-13b", "gpt3-175b",
    "llama2-7b", "llama2-13b", "llama2-70b",
    "llama3-8b", "llama3-70b", "mistral-7b", "mixtral-8x7b", "bert-base", "bert-large",
    "transformer-base", "transformer-big",
    "gpt-oss-20b", "gpt-oss-120b", "qwen3-30b-a3b", "qwen3-235b-a22b",  # issue 22
]
KIND_FIELDS = ("n_encoder_layer", "n_expert", "n_expert_active", "type_vocab_size", "embedding_norm",
               "embedding_scale", "pooler", "lm_head", "tie_encoder_embedding")
GOOD_YAML = "n_layer: 2\nd_model: 32\nn_head: 4\nvocab_size: 61\nmax_seq_len: 16\n"


def test_every_promised_preset_ships():
    assert set(ISSUE_PRESETS) <= set(preset_names())


@pytest.mark.parametrize("name", preset_names())
def test_preset_files_are_explicit_and_cite_a_source(name):
    text = (preset_dir() / f"{name}.yaml").read_text()
    assert text.startswith("#"), "a comment citing the source comes first"
    cfg = load(name)
    assert cfg.name == name and cfg.source and cfg.nominal_params
    kind = KIND_FIELDS if cfg.arch != "decoder" or cfg.n_expert else ()  # GPT and Llama 2 predate them
    for field in ("arch", *kind, "n_layer", "d_model", "n_head", "n_kv_head", "d_head", "d_ff", "vocab_size",
                  "max_seq_len", "pos_encoding", "norm", "norm_placement", "final_norm", "activation", "gated_ffn",
                  "attn_bias", "ffn_bias", "norm_bias", "tie_embeddings", "norm_eps"):
        # given, or left derived where the source derives it, with the derivation and its value in a comment
        derived = re.search(rf"\n# {field}: derived, (.+); here (\S+)\n", text)
        assert f"\n{field}:" in text or derived, f"{name} leaves {field} implicit"
        if derived:
            assert derived.group(2) == str(cfg.resolved()[field]).lower(), (name, field)


@pytest.mark.parametrize("override, heads, width", [("n_head=16", 16, 48), ("n_head=6", 6, 128)])
def test_a_derived_size_follows_an_override(override, heads, width):
    """gpt2 leaves n_kv_head, d_head and d_ff derived, as OpenAI's model.py does: --set n_head=16 gives 16
    heads of 48 (it failed over the preset's stated n_kv_head 12), and the count of gpt2 is unchanged."""
    cfg = load("gpt2", [override])
    assert (cfg.n_head, cfg.kv_heads, cfg.head_dim, cfg.ffn_dim) == (heads, heads, width, 3072)
    assert params_total(cfg) == params_total(load("gpt2")) == 124_439_808  # d_model unchanged: same weights


def test_rmsnorm_implies_no_bias_unless_given(tmp_path):
    path = tmp_path / "r.yaml"
    path.write_text(GOOD_YAML + "norm: rmsnorm\n")
    assert not load(str(path)).norm_has_bias and load("gpt2").norm_has_bias
    assert not load("gpt2", ["norm=rmsnorm"]).norm_has_bias
    with pytest.raises(ConfigError, match="rmsnorm has no bias"):
        load(str(path), ["norm_bias=true"])


def test_gpt3_table_2_1_as_printed():
    table = {  # Brown et al. 2020, Table 2.1: n_layer, d_model, n_head, d_head
        "gpt3-small": (12, 768, 12, 64), "gpt3-medium": (24, 1024, 16, 64), "gpt3-large": (24, 1536, 16, 96),
        "gpt3-xl": (24, 2048, 24, 128), "gpt3-2.7b": (32, 2560, 32, 80), "gpt3-6.7b": (32, 4096, 32, 128),
        "gpt3-13b": (40, 5140, 40, 128), "gpt3-175b": (96, 12288, 96, 128),
    }
    for name, shape in table.items():
        cfg = load(name)
        assert (cfg.n_layer, cfg.d_model, cfg.n_head, cfg.head_dim) == shape
        assert (cfg.max_seq_len, cfg.vocab_size, cfg.ffn_dim) == (2048, 50257, 4 * cfg.d_model)


def test_alias_and_case():
    assert load("gpt3").name == "gpt3-175b"
    assert load("GPT2").name == "gpt2"


@pytest.mark.parametrize("typo, suggestion", [("gpt-2", "gpt2"), ("llama2_7b", "llama2-7b"), ("gpt3-175", "gpt3-175b")])
def test_unknown_preset_suggests_close_names(typo, suggestion):
    with pytest.raises(ConfigError, match=f"unknown preset '{typo}' \\(did you mean '{suggestion}'"):
        resolve_preset_name(typo)


def test_user_yaml_file(tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text(GOOD_YAML + "norm_eps: 1e-6\n")  # 1e-6 without a dot still reads as a float
    cfg = load(str(path))
    assert cfg.name == "mine" and cfg.n_layer == 2 and cfg.norm_eps == 1e-6


@pytest.mark.parametrize(
    "text, message",
    [
        ("", "the file is empty"),
        ("# only a comment\n", "the file is empty"),
        ("- 1\n- 2\n", "expected a mapping of field: value, got a list"),
        ("just words\n", "expected a mapping of field: value, got a str"),
        ("n_layer: [1,\n", "not valid YAML at line"),
        ("n_layer: 2\n  d_model: 3\n", "not valid YAML at line"),
        (GOOD_YAML + "n_haed: 4\n", "unknown field 'n_haed' (did you mean 'n_head'?)"),
        (GOOD_YAML.replace("n_layer: 2", "n_layer: two"), "field 'n_layer' must be an integer; got 'two' (str)"),
        (GOOD_YAML.replace("n_layer: 2", "n_layer: -1"), "field 'n_layer' must be positive"),
        (GOOD_YAML.replace("d_model: 32", "d_model: 30"), "d_model (30) is not divisible by n_head (4)"),
        (GOOD_YAML + "n_kv_head: 3\n", "must be a multiple of n_kv_head (3)"),
        (GOOD_YAML.replace("vocab_size: 61\n", ""), "missing required field 'vocab_size'"),
    ],
    ids=["empty", "comment-only", "list", "scalar", "unclosed", "bad-indent", "unknown-field", "wrong-type",
         "negative", "indivisible-heads", "indivisible-kv", "missing-field"],
)
def test_bad_yaml_files_name_the_file_and_field(tmp_path, text, message):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load(str(path))
    assert message in str(info.value) and "bad.yaml" in str(info.value)
    assert "\n" not in str(info.value)


def test_missing_file_and_directory(tmp_path):
    with pytest.raises(ConfigError, match="no such file"):
        load(str(tmp_path / "nope.yaml"))
    with pytest.raises(ConfigError, match="no config.json in"):  # a folder is read as a model folder
        load(str(tmp_path) + "/")


def test_overrides_apply_on_presets_and_files(tmp_path):
    assert load("gpt2", ["n_layer=2", "tie_embeddings=false"]).n_layer == 2
    assert load("gpt2", ["tie_embeddings=false"]).tie_embeddings is False
    assert load("gpt2", ["norm_eps=1e-6"]).norm_eps == 1e-6
    path = tmp_path / "m.yaml"
    path.write_text(GOOD_YAML)
    assert load(str(path), ["d_head=16"]).q_dim == 64


@pytest.mark.parametrize(
    "override, message",
    [
        ("n_layer", "--set expects key=value, got 'n_layer'"),
        ("=3", "--set expects key=value"),
        ("n_layers=3", "--set: unknown field 'n_layers' (did you mean 'n_layer'?)"),
        ("n_layer=three", "field 'n_layer' must be an integer"),
        ("n_layer=0", "field 'n_layer' must be positive"),
        ("n_layer=[1, 2]", "expected a single value"),
        ("n_head=7", "d_model (768) is not divisible by n_head (7)"),
        ("n_kv_head=5", "n_head (12) must be a multiple of n_kv_head (5)"),
    ],
)
def test_bad_overrides(override, message):
    with pytest.raises(ConfigError) as info:
        load("gpt2", [override])
    assert message in str(info.value)


def test_parse_override_types():
    assert parse_override("n_layer=12") == ("n_layer", 12)
    assert parse_override("d_head=null") == ("d_head", None)
    assert parse_override("gated_ffn=true") == ("gated_ffn", True)
    assert parse_override("norm=rmsnorm") == ("norm", "rmsnorm")
