"""A new mixer reaches the flat front end (YAML fields, --set keys, layer_pattern) through its own module alone:
the kind below -- its fields, their types, defaults and rules, its layer_pattern word and its builder -- is
declared in this file and registered in tfcalc.architecture.kinds; no tfcalc file names it. A YAML file that
mixes it with softmax attention (3 toy layers : 1 attention layer) is then read by tfcalc.presets and counted by
`tfcalc params` (analytic and on meta) and `tfcalc memory`, each figure against the hand derivation below.

The toy is tests/model/test_mixer_plugin.py's linear attention (its component and its torch module, reused):
Q, K, V and O bias-free projections of H_t·h_t channels, a fixed fp32 state S of H_t × h_t × h_t per sequence
(Katharopoulos et al. 2020, sec. 3.4). Its flat fields: ``toy_heads`` (H_t; None: n_head) and ``toy_head_dim``
(h_t, default 8).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import pytest
from conftest import assert_one_line_error
from test_mixer_plugin import ToyLinearAttention, ToyLinearAttentionModule

from tfcalc import presets
from tfcalc.architecture import kinds
from tfcalc.config import from_mapping
from tfcalc.errors import InputError


@dataclass(frozen=True)
class ToyFields:
    toy_heads: Optional[int] = None  # H_t; None: n_head
    toy_head_dim: int = 8  # h_t


def build_toy(cfg, i: int, causal: bool) -> ToyLinearAttention:
    return ToyLinearAttention(cfg.d_model, cfg.toy_heads or cfg.n_head, cfg.toy_head_dim, causal)


def check_toy(cfg) -> None:
    if (cfg.toy_heads is not None or cfg.toy_head_dim != 8) and "toy" not in (cfg.layer_pattern or ""):
        raise InputError("toy_heads and toy_head_dim apply to toy layers: name them in layer_pattern")


TOY = kinds.MixerKind("toy linear attention", ToyFields, build_toy, words=("toy",), check=check_toy,
                      group="toy linear attention (tests)")


@pytest.fixture(autouse=True)
def registered():
    """The kind registered for each test and taken out after, so no other test sees it."""
    kinds.register(TOY)
    yield
    kinds.unregister(TOY.name)


# tiny GPT-2 shapes: d = 32, attention 4 heads of 8, FFN 4d = 128 (GELU, biased), LayerNorm with bias, a learned
# position table of 16 rows, vocabulary 61, tied LM head; 4 layers: toy, toy, toy, full attention
D, H, HD, F_, V, P = 32, 4, 8, 128, 61, 16
YAML = """\
n_layer: 4
d_model: 32
n_head: 4
vocab_size: 61
max_seq_len: 16
layer_pattern: "toy*3, full"
toy_heads: 2
toy_head_dim: 24
"""


def by_hand_params(ht: int, hdt: int) -> int:
    toy = 4 * D * ht * hdt  # Q, K, V: d -> H_t·h_t; O: H_t·h_t -> d; no biases
    attention = D * 3 * H * HD + 3 * H * HD + H * HD * D + D  # fused QKV and O, with biases
    common = 2 * 2 * D + D * F_ + F_ + F_ * D + D  # two LayerNorms (weight, bias), the FFN with biases
    return V * D + P * D + 3 * (toy + common) + (attention + common) + 2 * D  # + the final LayerNorm


@pytest.fixture
def yaml_file(tmp_path):
    path = tmp_path / "toy-hybrid.yaml"
    path.write_text(YAML)
    return path


def test_the_yaml_builds_three_toy_layers_and_one_attention_layer(yaml_file):
    cfg = presets.load(str(yaml_file))
    layers = list(cfg.architecture.output.layers())
    assert [type(b.mixer).__name__ for b in layers] == ["ToyLinearAttention"] * 3 + ["Attention"]
    assert (layers[0].mixer.n_head, layers[0].mixer.head_dim) == (2, 24)  # the kind's own fields
    assert (cfg.toy_heads, cfg.toy_head_dim) == (2, 24)  # read like any other field
    assert presets.load(str(yaml_file), ["toy_heads=null"]).architecture.output.layer(0).mixer.n_head == H


def test_params_analytic_and_on_meta_equal_the_hand_count(yaml_file, cli):
    r = cli("params", str(yaml_file), "--json")
    assert r.code == 0, r.err
    out = r.json()
    assert out["analytic_total"] == out["empirical_total"] == by_hand_params(2, 24) == 59_104
    # Q of the three toy layers (d -> H_t·h_t) and of the attention layer (d -> H·h), one breakdown key
    assert out["breakdown"]["attn_q_weight"] == 3 * D * 2 * 24 + D * H * HD == 5_632


def test_set_of_the_kinds_field_changes_the_count(yaml_file, cli):
    r = cli("params", str(yaml_file), "--set", "toy_head_dim=16", "--json")
    assert r.code == 0, r.err
    assert r.json()["analytic_total"] == r.json()["empirical_total"] == by_hand_params(2, 16) == 52_960


def test_memory_counts_the_toys_fixed_state_beside_the_attention_cache(yaml_file, cli):
    batch, seq = 2, 12
    r = cli("memory", str(yaml_file), "--batch", str(batch), "--seq", str(seq), "--kv-dtype", "bf16", "--json")
    assert r.code == 0, r.err
    attention = 2 * seq * H * HD * 2  # K and V of the one attention layer, bf16
    toy = 3 * 2 * 24 * 24 * 4  # S per toy layer: H_t·h_t·h_t in fp32, whatever --kv-dtype says
    assert r.json()["kv_cache_bytes"] == batch * (attention + toy) == 2 * (1_536 + 13_824)


@pytest.mark.parametrize("args, message", [
    (["--set", "toy_head_dim=wide"], "field 'toy_head_dim' must be an integer; got 'wide' (str)"),
    (["--set", "toy_head_dim=0"], "field 'toy_head_dim' must be positive; got 0"),
    (["--set", "toy_head_dimm=16"], "unknown field 'toy_head_dimm' (did you mean 'toy_head_dim'?)"),
    (["--set", "layer_pattern=full*4"], "toy_heads and toy_head_dim apply to toy layers"),
    (["--set", "layer_pattern=toy*3, tody"], "unknown layer kind 'tody' (known: full, local, nope, local_nope, "),
])
def test_bad_values_of_the_kinds_fields_are_one_line(yaml_file, cli, args, message):
    r = cli("params", str(yaml_file), *args)
    assert_one_line_error(r, message)
    assert "tody" not in args[-1] or "toy)" in r.err  # the kind's word among the known ones


def test_a_bad_type_in_the_yaml_names_the_file_and_the_field(tmp_path, cli):
    path = tmp_path / "bad.yaml"
    path.write_text(YAML.replace("toy_heads: 2", "toy_heads: [2]"))
    assert_one_line_error(cli("memory", str(path)), "bad.yaml: field 'toy_heads' must be an integer or null")


def test_without_the_kind_its_word_and_fields_are_unknown(yaml_file, tmp_path):
    kinds.unregister(TOY.name)
    with pytest.raises(InputError, match="unknown field 'toy_heads'"):
        presets.load(str(yaml_file))
    words_only = tmp_path / "words-only.yaml"
    words_only.write_text(YAML.replace("toy_heads: 2\n", "").replace("toy_head_dim: 24\n", ""))
    with pytest.raises(InputError, match="unknown layer kind 'toy'"):
        presets.load(str(words_only))


def test_the_module_the_toy_names_is_built(yaml_file):
    from tfcalc.model import build_model

    model = build_model(presets.load(str(yaml_file)), "meta")
    assert [type(b.attn).__name__ for b in model.blocks][:3] == [ToyLinearAttentionModule.__name__] * 3


def test_show_lists_the_kinds_fields_under_its_group_and_they_load_back(yaml_file, tmp_path, cli):
    r = cli("show", str(yaml_file))
    assert r.code == 0, r.err
    shown = r.out.splitlines()
    at = shown.index("# toy linear attention (tests)")
    assert shown[at + 1:at + 3] == ["toy_heads: 2", "toy_head_dim: 24"]
    again = tmp_path / "again.yaml"
    again.write_text(r.out)
    assert presets.load(str(again)).architecture == presets.load(str(yaml_file)).architecture


def test_a_smaller_copy_keeps_one_layer_of_each_kind_and_says_it_in_flat_fields(yaml_file):
    from tfcalc.config_copies import with_architecture

    cfg = presets.load(str(yaml_file))
    small = cfg.architecture.one_of_each()
    copy = with_architecture(cfg, small)
    assert (copy.n_layer, copy.layer_pattern, copy.toy_head_dim) == (2, "toy, full", 24)
    assert copy.to_architecture() == small


def test_the_hybrid_decodes_through_both_states_as_its_uncached_forward(yaml_file):
    """The toy's fixed state and the attention layer's growing K/V in one cache: generate equals the greedy
    argmax of the whole forward re-run at each step, and the cache holds the bytes memory counts."""
    import torch
    from hf_pairs import greedy_uncached

    from tfcalc.count.model.memory import kv_cache_bytes
    from tfcalc.model import build_model, generate
    from tfcalc.workload import Workload

    cfg = presets.load(str(yaml_file))
    torch.manual_seed(0)
    model = build_model(cfg, "cpu", torch.float32).eval()
    prompt, new = torch.randint(0, V, (2, 5)), 6
    cache = model.new_cache(2, 5 + new)  # room for every token's K and V, the last one's too, as the count keeps
    assert torch.equal(generate(model, prompt, new, cache=cache), greedy_uncached(model, prompt, new))
    toy, attention = 3 * 2 * (2 * 24 * 24) * 4, 2 * (5 + new) * 2 * (H * HD) * 4  # fp32 S; K and V in fp32
    assert cache.nbytes == kv_cache_bytes(cfg, Workload(batch=2, seq=5, gen=new, kv_dtype="fp32")) \
        == toy + attention == 27_648 + 5_632


@dataclass(frozen=True)
class Clashing:
    sliding_window: Optional[int] = None  # softmax attention's


@dataclass(frozen=True)
class Required:
    toy_width: int  # no default: a model without the kind could not leave it out


@pytest.mark.parametrize("kind, error, message", [
    (kinds.MixerKind("clash", Clashing, build_toy), ValueError, "'sliding_window' belongs to kind 'attention'"),
    (kinds.MixerKind("clash", ToyFields, build_toy, words=("full",)), ValueError, "belongs to kind"),
    (kinds.MixerKind("required", Required, build_toy), TypeError, "field 'toy_width' needs a default"),
    (kinds.MixerKind("spaced", ToyFields, build_toy, words=("toy 2",)), ValueError, "letters and '_'"),
    (kinds.MixerKind("second default", ToyFields, build_toy, default=True), ValueError, "the default kind already"),
])
def test_a_kind_that_clashes_is_refused_as_it_registers(kind, error, message):
    """A programming error in a kind, said when it registers (not a user's bad input): the registry keeps one
    owner per field and word, and one default kind."""
    kinds.unregister(TOY.name)  # the toy's fields and word out of the way of the cases that reuse them
    with pytest.raises(error, match=message):
        kinds.register(kind)
    assert kind.name not in {k.name for k in kinds.kinds()}


@dataclass(frozen=True)
class NopeToyFields:
    toy_on_nope: bool = False  # the toy in place of softmax attention in the NoPE layers


NOPE_TOY = kinds.MixerKind("toy on NoPE layers", NopeToyFields, lambda cfg, i, causal: ToyLinearAttention(
    cfg.d_model, cfg.n_head, cfg.d_model // cfg.n_head, causal), claims=lambda cfg, layer: cfg.toy_on_nope
    and layer is not None and not layer.rope)


def test_a_kind_may_claim_layers_by_their_kind_in_the_pattern():
    """``claims(cfg, layer)``: here the NoPE layers of nope_every, without a word in a layer_pattern."""
    kinds.register(NOPE_TOY)
    try:
        fields = dict(n_layer=4, d_model=D, n_head=H, vocab_size=V, max_seq_len=P, pos_encoding="rope",
                      nope_every=2)
        cfg = from_mapping({**fields, "toy_on_nope": True})
        assert [type(b.mixer).__name__ for b in cfg.architecture.output.layers()] == \
            ["Attention", "ToyLinearAttention"] * 2  # layers 1 and 3 have no RoPE
        plain = from_mapping(fields)
        assert {type(b.mixer).__name__ for b in plain.architecture.output.layers()} == {"Attention"}
    finally:
        kinds.unregister(NOPE_TOY.name)
