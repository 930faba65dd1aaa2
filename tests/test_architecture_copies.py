"""Smaller copies made from the description (tfcalc.architecture.copies: Architecture.shrunk, one_of_each) and
the flat fields written back from them (tfcalc.config_copies.with_architecture).

The expected layers are read by hand off each model's own definition, never off tfcalc's copies: Llama 4
Scout has no RoPE in layers 3, 7, ... (configuration_llama4.py, no_rope_layers: every 4th) and chunked
attention in the others; DeepSeek-V3 its first 3 layers dense (first_k_dense_replace 3) and 58 MoE; Gemma 2
alternates sliding and full layers, the first sliding (layer_types); Gemma 3 27B is (sliding×5, full)×10,
sliding×2 (62 layers); gpt-oss alternates sliding and full, the first sliding."""

import pytest
from conftest import configs
from hypothesis import HealthCheck, assume, given, settings, strategies as st

from tfcalc.config import from_mapping, replace
from tfcalc.config_copies import with_architecture
from tfcalc.count.model.params import total
from tfcalc.errors import InputError
from tfcalc.measure.params import measured_total
from tfcalc.model import build_model
from tfcalc.presets import load, preset_names


def letters(arch, names) -> str:
    """One letter per layer of the output stack: names(block)."""
    return "".join(names(b) for b in arch.output.layers())


def scout(b) -> str:  # c: chunked, RoPE; n: global, NoPE
    a = b.attention
    assert (a.chunk is not None) == (a.rope_theta is not None) and b.is_moe
    return "c" if a.chunk is not None else "n"


def moe(b) -> str:
    return "m" if b.is_moe else "d"


def window(b) -> str:  # l: through the sliding window; g: the whole context
    return "l" if b.attention.window is not None else "g"


@pytest.mark.parametrize("n, expected", [(1, "c"), (2, "cn"), (3, "ccn"), (4, "cccn"), (6, "cccncc"), (8, "cccn" * 2),
                                         (47, "cccn" * 11 + "ccc"), (48, "cccn" * 12)])
def test_llama_4_keeps_nope_every_fourth_layer(n, expected):
    cfg = load("llama-4-scout")
    assert letters(cfg.architecture, scout) == "cccn" * 12  # the model itself, as its config says
    assert letters(cfg.architecture.shrunk(n), scout) == expected


@pytest.mark.parametrize("preset", ["deepseek-v3", "kimi-k2"])
@pytest.mark.parametrize("n, dense", [(1, 0), (2, 1), (4, 1), (10, 1), (40, 2), (60, 3)])
def test_deepseek_keeps_its_dense_layers_first(preset, n, dense):
    """Dense first, then MoE, never fewer than one of each from 2 layers on; 1 layer: the MoE layer (58 of 61
    layers, and the bulk of the weights). The dense layers at n: their share 3n/61 rounded to the nearest,
    at least 1 (kimi-k2: 1 dense of 61, so 1)."""
    cfg = load(preset)
    first = 3 if preset == "deepseek-v3" else 1
    dense = min(dense, first)
    assert letters(cfg.architecture, moe) == "d" * first + "m" * (61 - first)
    assert letters(cfg.architecture.shrunk(n), moe) == "d" * dense + "m" * (n - dense)


@pytest.mark.parametrize("preset, n, expected", [
    ("gemma-2-9b", 1, "l"), ("gemma-2-9b", 3, "lgl"), ("gemma-2-9b", 4, "lglg"),
    ("gpt-oss-20b", 2, "lg"), ("gpt-oss-20b", 5, "lglgl"),
    ("gemma-3-27b", 2, "lg"), ("gemma-3-27b", 5, "llllg"), ("gemma-3-27b", 7, "lllllgl"),
    ("gemma-3-27b", 8, "lllllgll"), ("gemma-3-27b", 20, "lllllg" * 3 + "ll"),
])
def test_windowed_models_keep_their_local_global_pattern(preset, n, expected):
    arch = load(preset).architecture
    assert letters(arch.shrunk(n), window) == expected
    assert {b for b in arch.shrunk(n).output.layers()} <= {b for b, _ in arch.output.kinds()}  # blocks unchanged


def test_a_plain_model_keeps_its_block_and_everything_else():
    arch = load("llama2-7b").architecture
    small = arch.shrunk(3)
    assert small.output.n_layer == 3 and list(small.output.layers()) == [arch.output.layer(0)] * 3
    assert (small.head, small.output.embeddings, small.output.final_norm) == (
        arch.head, arch.output.embeddings, arch.output.final_norm)
    assert arch.shrunk(32) == arch and arch.shrunk(1000) == arch


def test_an_encoder_decoder_shrinks_each_stack():
    arch = load("transformer-base").architecture
    small = arch.shrunk(2, 1)
    assert [s.n_layer for s in small.stacks] == [1, 2] and [s.name for s in small.stacks] == ["encoder", "decoder"]
    assert [s.n_layer for s in arch.shrunk(3).stacks] == [3, 3]


@pytest.mark.parametrize("preset, expected", [("deepseek-v3", "dm"), ("llama-4-scout", "mm"), ("llama2-7b", "d"),
                                              ("mixtral-8x7b", "m")])
def test_one_of_each_holds_each_kind_once_in_model_order(preset, expected):
    arch = load(preset).architecture
    small = arch.one_of_each()
    assert letters(small, moe) == expected
    assert list(small.output.layers()) == [b for b, _ in arch.output.kinds()]
    if preset == "llama-4-scout":
        assert letters(small, scout) == "cn"


# ---------- the flat fields written back ----------


@pytest.mark.parametrize("preset", preset_names())
def test_every_preset_at_every_small_depth_has_flat_fields_that_say_it(preset):
    cfg = load(preset)
    for n in range(2, 9, 2) if cfg.moe_shortcut else range(1, 9):  # LongCat-Flash's pairs: an odd depth is refused
        arch = cfg.architecture.shrunk(n, 1)
        copy = with_architecture(cfg, arch)
        assert copy.n_layer == min(n, cfg.n_layer)
        rebuilt = type(cfg)(**{f: getattr(copy, f) for f in cfg.__dataclass_fields__})  # from the fields alone
        assert list(rebuilt.architecture.output.layers()) == list(arch.output.layers())
        assert list(rebuilt.architecture.stacks[0].layers()) == list(arch.stacks[0].layers())


def test_written_back_fields_are_the_plain_ones_where_they_still_hold():
    scout_cfg = load("llama-4-scout")
    four = with_architecture(scout_cfg, scout_cfg.architecture.shrunk(4))
    assert (four.n_layer, four.nope_every, four.full_attention_every, four.layer_pattern) == (4, 4, 4, None)
    two = with_architecture(scout_cfg, scout_cfg.architecture.shrunk(2))
    assert (two.n_layer, two.nope_every, two.full_attention_every, two.layer_pattern) == (2, None, None, "local, nope")
    ds = load("deepseek-v3")
    assert with_architecture(ds, ds.architecture.shrunk(4)).first_dense_layers == 1
    one = with_architecture(ds, ds.architecture.shrunk(1))
    assert (one.first_dense_layers, one.dense_d_ff) == (None, None)  # no dense layer left to be that wide
    gpt2 = load("gpt2")
    assert with_architecture(gpt2, gpt2.architecture.shrunk(2)) == load("gpt2", ["n_layer=2"])


# ---------- any config: random architectures, mixed layers and attention patterns ----------


def _is_subsequence(short, long) -> bool:
    it = iter(long)
    return all(any(x == y for y in it) for x in short)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(configs(mixed=True), st.data())
def test_any_config_shrunk_keeps_its_kinds_in_order_and_has_flat_fields(cfg, data):
    """At any depth n: n layers (or the model's, if fewer), a subsequence of the model's layers (each run
    cut short, in order), every kind kept where n is at least the number of kinds, the kinds first seen
    in the model's order; and the flat fields written back say exactly that copy, and build a module of
    the parameters the count gives."""
    if cfg.arch != "encoder-decoder" and cfg.pos_encoding == "rope" and data.draw(st.booleans(), label="pattern"):
        kinds = data.draw(st.lists(st.sampled_from(["full", "nope"] + ["local", "local_nope"] * (
            cfg.sliding_window is not None or cfg.attention_chunk_size is not None)), min_size=1, max_size=4))
        repeat = data.draw(st.integers(1, 3), label="repeat")
        try:
            cfg = replace(cfg, n_layer=len(kinds) * repeat, full_attention_every=None, nope_every=None,
                          attn_temperature_floor=None, attn_temperature_scale=None, first_dense_layers=None,
                          moe_every=None, dense_layers=None, dense_d_ff=None,
                          layer_pattern=f"({', '.join(kinds)})*{repeat}")
        except InputError:
            assume(False)
    n = data.draw(st.integers(1, cfg.n_layer + 1), label="n")
    arch = cfg.architecture
    small = arch.shrunk(n)  # an encoder-decoder's stacks alike: its flat fields give both one depth pattern
    for s, t in zip(small.stacks, arch.stacks, strict=True):
        layers, original = list(s.layers()), list(t.layers())
        kinds = list(dict.fromkeys(original))
        assert len(layers) == min(n, len(original))
        assert _is_subsequence(layers, original)
        seen = list(dict.fromkeys(layers))
        assert seen == [k for k in kinds if k in seen]  # first seen in the model's order
        if len(layers) >= len(kinds):
            assert set(seen) == set(kinds)
    try:
        copy = with_architecture(cfg, small)
    except InputError as e:  # only an encoder-decoder's stacks, sharing one pattern, may be unsayable
        assert cfg.arch == "encoder-decoder" and "flat fields cannot say" in str(e)
        return
    rebuilt = from_mapping({f: getattr(copy, f) for f in copy.__dataclass_fields__})
    assert [list(s.layers()) for s in rebuilt.architecture.stacks] == [list(s.layers()) for s in small.stacks]
    assert measured_total(build_model(copy, "meta")) == total(copy)
