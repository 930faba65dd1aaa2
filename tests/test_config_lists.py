"""Issue 33, causes 4 and 5: config.json readers check every per-layer list against the depth it describes as
transformers does (its config classes are the reference: tfcalc refuses a file exactly when transformers
does), refuse scales that divide by zero, read a safetensors header without mapping the file, and check a
quantized checkpoint's stored experts against its quantization_config -- each in one line, never an
internal error (hypothesis, a few hundred examples each)."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest
from hostile_cfg import NO_QUANT, OSS, oss_tensors, safetensors_bytes
from hypothesis import HealthCheck, given, settings, strategies as st

from tfcalc.errors import InputError
from tfcalc.presets import load

KINDS = ("sliding_attention", "full_attention")
FAMILIES = {"gemma2": "Gemma2Config", "qwen3": "Qwen3Config", "gpt_oss": "GptOssConfig"}
FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def _config(model_type: str, n: int, **changes) -> dict:
    fields = dict(model_type=model_type, num_hidden_layers=n, hidden_size=64, num_attention_heads=4,
                  num_key_value_heads=2, head_dim=16, intermediate_size=64, vocab_size=61, sliding_window=8,
                  use_sliding_window=True, num_local_experts=4, num_experts_per_tok=2, max_window_layers=0)
    fields.update(changes)
    return fields


def _load(tmp_path, fields: dict):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(fields), encoding="utf-8")
    return load(str(path))


def _transformers_refuses(model_type: str, n: int, layer_types: list[str]) -> bool:
    import transformers

    try:
        getattr(transformers, FAMILIES[model_type])(num_hidden_layers=n, layer_types=layer_types)
    except Exception:  # its strict validation: layer_types against num_hidden_layers
        return True
    return False


@FUZZ
@given(st.sampled_from(sorted(FAMILIES)), st.integers(1, 42), st.lists(st.sampled_from(KINDS), max_size=60))
def test_layer_types_refused_exactly_where_transformers_refuses(tmp_path, model_type, n, layer_types):
    fields = _config(model_type, n, layer_types=layer_types)
    try:
        cfg = _load(tmp_path, fields)
    except InputError as e:
        assert "\n" not in str(e) and len(str(e)) < 300
        assert _transformers_refuses(model_type, n, layer_types), str(e)
        assert f"'layer_types' lists {len(layer_types)} layers; 'num_hidden_layers' is {n}" in str(e)
        return
    assert not _transformers_refuses(model_type, n, layer_types)
    windows = [cfg.architecture.stacks[0].layer(i).mixer.window for i in range(n)]
    assert windows == [8 if k == "sliding_attention" else None for k in layer_types]  # each layer as listed


@pytest.mark.parametrize("model_type, n, entries", [("gpt_oss", 24, 0), ("qwen3", 28, 1), ("gemma2", 42, 2),
                                                    ("gpt_oss", 24, 23), ("qwen3", 24, 26), ("gemma2", 42, 100)])
def test_the_issues_lists_are_refused(tmp_path, model_type, n, entries):
    layer_types = [KINDS[(i + 1) % 2 == 0] for i in range(entries)]
    assert _transformers_refuses(model_type, n, layer_types)
    with pytest.raises(InputError, match=f"'layer_types' lists {entries} layers; 'num_hidden_layers' is {n}"):
        _load(tmp_path, _config(model_type, n, layer_types=layer_types))


@FUZZ
@given(st.sampled_from(["gemma2", "gemma3_text"]),
       st.one_of(st.integers(-10**6, 10**6), st.floats(allow_nan=True, allow_infinity=True)))
def test_query_pre_attn_scalar_positive_and_finite(tmp_path, model_type, scalar):
    fields = _config(model_type, 2, query_pre_attn_scalar=scalar)
    fields.pop("layer_types", None)
    text = json.dumps(fields, allow_nan=True)
    (tmp_path / "config.json").write_text(text, encoding="utf-8")
    try:
        cfg = load(str(tmp_path / "config.json"))
    except InputError as e:
        assert not (math.isfinite(scalar) and scalar > 0) or "query_pre_attn_scalar" not in str(e), str(e)
        return
    assert math.isfinite(scalar) and scalar > 0
    assert cfg.attn_scale == pytest.approx(scalar ** -0.5)  # modeling_gemma2.py: scaling = scalar ** -0.5


def _folder(tmp_path, config: dict, tensors: dict):
    (tmp_path / "config.json").write_text(json.dumps(config), encoding="utf-8")
    (tmp_path / "model.safetensors").write_bytes(safetensors_bytes(tensors))
    return tmp_path


def test_a_consistent_mxfp4_checkpoint_is_counted(tmp_path, cli):
    r = cli("params", str(_folder(tmp_path, OSS, oss_tensors())), "--json", "--no-measure")
    assert r.code == 0, r.err
    ckpt = r.json()["checkpoint"]
    assert ckpt["agree"] and not ckpt["missing"] and not ckpt["surplus"], ckpt


def test_plain_experts_without_quantization_config_are_counted(tmp_path, cli):
    r = cli("params", str(_folder(tmp_path, NO_QUANT, oss_tensors(experts="BF16"))), "--json", "--no-measure")
    assert r.code == 0, r.err
    assert r.json()["checkpoint"]["agree"]


QUANT = st.one_of(st.none(), st.integers(), st.text(max_size=5),
                  st.fixed_dictionaries({"quant_method": st.sampled_from(["mxfp4", "fp8", "", None, 4])},
                                        optional={"modules_to_not_convert": st.one_of(
                                            st.none(), st.lists(st.sampled_from(["lm_head", "model.layers.*.mlp",
                                                                                 "experts", ""]), max_size=3),
                                            st.integers())}))


@FUZZ
@given(QUANT, st.sampled_from(["mxfp4", "F32", "BF16"]), st.sampled_from(["U8", "F32", "BF16"]))
def test_quantization_configs_and_stored_dtypes_never_raise_an_internal_error(tmp_path, cli, quant, experts, blocks):
    config = {**NO_QUANT} if quant is None else {**NO_QUANT, "quantization_config": quant}
    r = cli("params", str(_folder(tmp_path, config, oss_tensors(experts, blocks))), "--no-measure")
    assert r.code in (0, 2) and "Traceback" not in r.err and "internal error" not in r.err, r.err
    mxfp4_config = isinstance(quant, dict) and quant.get("quant_method") == "mxfp4"
    consistent = (experts == "mxfp4" and blocks == "U8") == mxfp4_config
    if r.code == 0:  # accepted only where the stored format is the config's
        assert consistent
    else:
        assert r.err.count("\n") == 1


def test_a_header_is_read_without_mapping_the_shard(tmp_path):
    """A 1 TiB (sparse) shard under a 2 GiB address-space limit: safe_open mapped the whole file and failed
    with MemoryError; two bounded reads need a few bytes."""
    path = tmp_path / "model.safetensors"
    text = json.dumps({"w": {"dtype": "F32", "shape": [2**38], "data_offsets": [0, 2**40]}}).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(len(text).to_bytes(8, "little") + text)
        f.truncate(8 + len(text) + 2**40)
    code = ("import resource, sys; resource.setrlimit(resource.RLIMIT_AS, (2 * 2**30, 2 * 2**30)); "
            "from tfcalc.checkpoint.files import read_headers; "
            f"t = read_headers({str(path)!r}).tensors; print(t[0].shape, t[0].dtype)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr[-500:]
    assert r.stdout.strip() == f"({2**38},) F32"


@pytest.mark.parametrize("model_type, fields", [
    ("gemma2", {"sliding_window": 4096, "full_attention_every": 2}),
    ("gpt_oss", {"sliding_window": 8, "full_attention_every": 2}),
    ("qwen3", {"sliding_window": 8, "layer_pattern": f"full*4, local*{2**40 - 4}"}),
])
def test_a_default_per_layer_list_of_2_to_the_40_layers_is_not_built(tmp_path, model_type, fields):
    """The defaults of Gemma2Config and GptOssConfig (every second layer full) and Qwen's (full below
    max_window_layers) in closed form: the fields the list of every layer gave, at any depth."""
    import time

    start = time.monotonic()
    extra = {} if model_type != "gemma2" else {"sliding_window": None}
    cfg = _load(tmp_path, {k: v for k, v in _config(model_type, 2**40, max_window_layers=4, **extra).items()
                           if v is not None})
    assert time.monotonic() - start < 5
    for key, value in fields.items():
        assert getattr(cfg, key) == value, key


@pytest.mark.parametrize("model_type", ["gemma2", "gpt_oss", "qwen3"])
@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 9])
def test_the_closed_form_defaults_equal_the_listed_ones(tmp_path, model_type, n):
    """The same file with the default list written out (as transformers' config class writes it) reads the same."""
    import transformers

    fields = _config(model_type, n, max_window_layers=2)
    implicit = _load(tmp_path, fields)
    listed = getattr(transformers, FAMILIES[model_type])(num_hidden_layers=n, max_window_layers=2,
                                                         use_sliding_window=True, sliding_window=8).layer_types
    explicit = _load(tmp_path, {**fields, "layer_types": listed})
    assert implicit == explicit


def _compact_reference(kinds: list[str]) -> str:
    """The definition, quadratic: every group length, its repeats checked by building them, the shortest text."""
    def runs(part: list[str]) -> str:
        out, i = [], 0
        while i < len(part):
            j = i
            while j < len(part) and part[j] == part[i]:
                j += 1
            out.append(part[i] if j - i == 1 else f"{part[i]}*{j - i}")
            i = j
        return ", ".join(out)

    best, n = runs(kinds), len(kinds)
    for p in range(2, n // 2 + 1):
        reps = n // p
        if len(set(kinds[:p])) > 1 and kinds[:p] * reps == kinds[:p * reps]:
            rest = runs(kinds[p * reps:])
            best = min(best, f"({runs(kinds[:p])})*{reps}" + (f", {rest}" if rest else ""), key=len)
    return best


NAMES = st.sampled_from(["local", "full", "nope", "local_nope"])


@settings(max_examples=500, deadline=None)
@given(st.one_of(st.lists(NAMES, min_size=1, max_size=40),
                 st.tuples(st.lists(NAMES, min_size=1, max_size=6), st.integers(1, 12), st.lists(NAMES, max_size=5))
                 .map(lambda t: t[0] * t[1] + t[2])))
def test_compact_equals_the_quadratic_definition(kinds):
    from tfcalc.hf_config.layer_pattern import compact

    assert compact(kinds) == _compact_reference(kinds)


def test_a_listed_depth_of_50000_is_read_in_linear_time(tmp_path):
    """A periodic list broken at its end (every group length passes until the last layers) and a random one:
    the quadratic search took minutes."""
    import random
    import time

    from tfcalc.hf_config.layer_pattern import compact

    n = 50_000
    broken = ["local", "local", "local", "full"] * (n // 4 - 1) + ["full"] * 4
    rng = random.Random(1)
    noise = [rng.choice(["local", "full"]) for _ in range(n)]
    start = time.monotonic()
    # period 4 holds for the first 49,996 layers: the least group of it whose whole repeats fit is 12 layers
    # (4,166 × 12 = 49,992; 4 and 8 would need all 50,000), the rest 49,992.. = local*3, full*5
    assert compact(broken) == "(local*3, full, local*3, full, local*3, full)*4166, local*3, full*5"
    assert compact(noise).count(",") > 1000
    assert time.monotonic() - start < 10
