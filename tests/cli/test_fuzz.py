"""Fuzzing every command's input (issue 11): random YAML and JSON documents, random --set strings and random
flag values. Whatever comes in, the answer is a result (exit 0 or 1) or one line of bad input (exit 2):
never an internal error, never a traceback. Example counts stay modest so the file runs in seconds."""

from __future__ import annotations

import json
import os

import yaml
from hostile import TINY
from hypothesis import HealthCheck, given, settings, strategies as st

from tfcalc.config import FIELD_NAMES

# TFCALC_FUZZ_EXAMPLES=2000 for a long hunt; 40 keeps the suite fast
FUZZ = settings(max_examples=int(os.environ.get("TFCALC_FUZZ_EXAMPLES", 40)), deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture])

numbers = st.one_of(st.integers(-3, 70), st.integers(), st.floats(allow_nan=True, allow_infinity=True),
                    st.sampled_from([0, 1, 2, 2**40, 2**41, 10**30, -1, 0.5, 1e308]))
scalars = st.one_of(st.none(), st.booleans(), numbers, st.text(max_size=12),
                    st.sampled_from(["decoder", "encoder", "encoder-decoder", "rope", "alibi", "rmsnorm", "silu",
                                     "gelu", "pre", "post", "gpt2", "llama", "[v2]", "[/]", "$x$", "…"]))
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner,
                                                                                           max_size=3), max_leaves=8)
field_maps = st.dictionaries(st.sampled_from(FIELD_NAMES) | st.text(max_size=10), values, max_size=12)


def _ok(r) -> None:
    """A result, or one line of bad input: never an internal error or a traceback."""
    assert r.code in (0, 1, 2), (r.code, r.err)
    assert "internal error" not in r.err and "Traceback" not in r.err, r.err
    if r.code == 2:
        assert r.err.count("\n") == 1 and len(r.err) < 300, r.err


@FUZZ
@given(fields=field_maps, raw=st.booleans(), junk=st.text(max_size=40))
def test_random_yaml_documents(cli, tmp_path, fields, raw, junk):
    path = tmp_path / "model.yaml"
    if raw:  # a valid config with random text spliced in: broken syntax, tags, anchors, tabs
        cut = len(junk) % (len(TINY) + 1)
        path.write_text(TINY[:cut] + junk + TINY[cut:], encoding="utf-8")
    else:
        base = yaml.safe_load(TINY)
        path.write_text(yaml.safe_dump({**base, **fields}, allow_unicode=True), encoding="utf-8")
    for command in (["params", str(path), "--no-measure"], ["show", str(path)], ["memory", str(path), "--json"]):
        _ok(cli(*command))


hf_keys = st.sampled_from(["num_hidden_layers", "hidden_size", "num_attention_heads", "intermediate_size",
                           "vocab_size", "num_key_value_heads", "head_dim", "max_position_embeddings", "hidden_act",
                           "rope_theta", "rope_parameters", "tie_word_embeddings", "n_layer", "n_embd", "n_head",
                           "n_positions", "n_inner", "activation_function", "num_local_experts",
                           "num_experts_per_tok", "type_vocab_size", "position_embedding_type", "attention_bias"])


@FUZZ
@given(model_type=st.sampled_from(["llama", "mistral", "mixtral", "gpt2", "bert"]) | values,
       fields=st.dictionaries(hf_keys, values, max_size=10))
def test_random_config_json_documents(cli, tmp_path, model_type, fields):
    base = dict(num_hidden_layers=2, hidden_size=32, num_attention_heads=4, intermediate_size=64, vocab_size=61,
                max_position_embeddings=16, n_layer=2, n_embd=32, n_head=4, n_positions=16, num_local_experts=4,
                num_experts_per_tok=2)
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**base, "model_type": model_type, **fields}), encoding="utf-8")
    _ok(cli("params", str(path), "--no-measure"))
    _ok(cli("flops", str(path), "--json"))


@FUZZ
@given(key=st.sampled_from(FIELD_NAMES) | st.text(max_size=10), value=st.text(max_size=20) | numbers.map(str),
       sep=st.sampled_from(["=", "", "==", " = "]))
def test_random_set_strings(cli, tmp_path, key, value, sep):
    (tmp_path / "tiny.yaml").write_text(TINY, encoding="utf-8")
    setting = f"{key}{sep}{value}"
    _ok(cli("params", "gpt2", "--no-measure", "--set", setting))
    _ok(cli("flops", str(tmp_path / "tiny.yaml"), "--set", setting, "--json"))


text_values = st.one_of(st.text(max_size=16), numbers.map(str), st.sampled_from(
    ["1,,2", "..", "1..", "..4", "4..1", "0", "-1", "nan", "inf", "1e3", "24", "80GB", "1..4096", "0x10", "  8 ",
     "9" * 400, "[bold]", "-", ""]))
# (command and its fixed arguments, the option fuzzed); {tiny} is a small YAML model. bench runs on a device
# that does not exist, so every check before the run is fuzzed and nothing is ever timed.
OPTIONS = st.sampled_from([
    (["flops", "{tiny}"], "--seq"), (["flops", "{tiny}"], "--batch"), (["flops", "{tiny}"], "--src-seq"),
    (["flops", "{tiny}", "--measure"], "--device"), (["memory", "{tiny}"], "--budget"),
    (["memory", "{tiny}"], "--seq"), (["memory", "{tiny}"], "--dtype"), (["memory", "{tiny}"], "--optimizer"),
    (["memory", "{tiny}", "--training"], "--batch"), (["bench", "{tiny}", "--device", "nowhere"], "--seq"),
    (["bench", "{tiny}", "--device", "nowhere"], "--repeat"), (["bench", "{tiny}", "--device", "nowhere"], "--n-layer"),
    (["bench", "{tiny}", "--device", "nowhere"], "--matmul-size"), (["scan", "{tiny}"], "--seq"),
    (["scan", "{tiny}"], "--budget"), (["scan", "{tiny}"], "--dpi"), (["compare", "{tiny}", "gpt2"], "--seq"),
    (["check", "{snap}"], "--tolerance"), (["params", "{tiny}"], "--format"), (["presets"], "--format"),
    (["snapshot", "{tiny}", "-o", "{out}"], "--set"), (["show", "{tiny}"], "--set"),
    # plan and infer (issue 23); plan never runs ranks here (no --measure)
    (["plan", "{tiny}", "--dp", "2"], "--tp"), (["plan", "{tiny}", "--gpus", "4"], "--pp"),
    (["plan", "{tiny}", "--dp", "2"], "--mfu"), (["plan", "{tiny}", "--dp", "2"], "--tokens"),
    (["plan", "{tiny}"], "--gpus"), (["plan", "{tiny}", "--dp", "2"], "--micro-batch"),
    (["plan", "{tiny}", "--dp", "2"], "--global-batch"), (["plan", "{tiny}", "--dp", "2"], "--zero"),
    (["plan", "{tiny}", "--dp", "2"], "--device-spec"), (["plan", "{tiny}", "--dp", "2"], "--seq"),
    (["infer", "{tiny}"], "--gen"), (["infer", "{tiny}"], "--batch"), (["infer", "{tiny}", "--dtype", "int4"],
                                                                        "--group-size"),
    (["infer", "{tiny}"], "--kv-dtype"), (["infer", "{tiny}"], "--device-spec"), (["infer", "{tiny}"], "--seq"),
    (["infer", "{tiny}", "--measure", "--device", "nowhere"], "--warmup"),
    (["infer", "{tiny}", "--measure", "--device", "nowhere"], "--repeat"),
])


@FUZZ
@given(option=OPTIONS, value=text_values)
def test_random_flag_values(cli, tmp_path, option, value):
    (tmp_path / "tiny.yaml").write_text(TINY, encoding="utf-8")
    (tmp_path / "snap.json").write_text(json.dumps({"format": 1, "entries": [{"spec": str(tmp_path / "tiny.yaml")}]}))
    fixed, name = option
    paths = {"{tiny}": str(tmp_path / "tiny.yaml"), "{snap}": str(tmp_path / "snap.json"),
             "{out}": str(tmp_path / "out.json")}
    r = cli(*[paths.get(a, a) for a in fixed], f"{name}={value}" if value.startswith("-") else name,
            *([] if value.startswith("-") else [value]))
    _ok(r)


device_fields = st.sampled_from(["name", "key", "peak_flops", "bandwidth_bytes_per_s", "memory_bytes",
                                 "intra_node_bytes_per_s", "inter_node_bytes_per_s", "gpus_per_node", "source",
                                 "node"]) | st.text(max_size=8)
rates = st.dictionaries(st.sampled_from(["bf16", "fp16", "fp32", "fp8", "int4", "bf17"]) | st.text(max_size=4),
                        numbers | st.text(max_size=8), max_size=3)


@FUZZ
@given(fields=st.dictionaries(device_fields, values | rates, max_size=8), raw=st.booleans(),
       junk=st.text(max_size=40))
def test_random_device_files(cli, tmp_path, fields, raw, junk):
    """Device files (--device-spec FILE) read as config files are: whatever they hold, no internal error."""
    from hostile import DEVICE

    path = tmp_path / "gpu.yaml"
    if raw:
        cut = len(junk) % (len(DEVICE) + 1)
        path.write_text(DEVICE[:cut] + junk + DEVICE[cut:], encoding="utf-8")
    else:
        path.write_text(yaml.safe_dump({**yaml.safe_load(DEVICE), **fields}, allow_unicode=True), encoding="utf-8")
    (tmp_path / "tiny.yaml").write_text(TINY, encoding="utf-8")
    for command in (["infer", str(tmp_path / "tiny.yaml"), "--device-spec", str(path), "--json"],
                    ["plan", str(tmp_path / "tiny.yaml"), "--dp", "2", "--device-spec", str(path), "--json"]):
        r = cli(*command)
        _ok(r)
        if r.code == 0:
            json.loads(r.out, parse_constant=lambda c: (_ for _ in ()).throw(ValueError(c)))  # strict JSON


api_values = st.one_of(st.none(), st.booleans(), numbers, st.text(max_size=8), st.lists(st.integers(0, 9), max_size=2))


@FUZZ
@given(function=st.sampled_from(["plan", "infer"]),
       kwargs=st.dictionaries(st.sampled_from(["gpus", "tp", "pp", "dp", "zero", "recompute", "micro_batch",
                                               "global_batch", "seq", "mfu", "tokens", "top", "sequence_parallel"]),
                              api_values, max_size=4),
       infer_kwargs=st.dictionaries(st.sampled_from(["batch", "seq", "gen", "dtype", "kv_dtype", "group_size",
                                                     "device_spec", "src_seq"]), api_values, max_size=3))
def test_random_python_api_arguments(tmp_path, function, kwargs, infer_kwargs):
    """The Python API (issue 23, cause 7): a report or an InputError, never another exception."""
    import tfcalc
    from tfcalc.errors import InputError

    (tmp_path / "tiny.yaml").write_text(TINY, encoding="utf-8")
    model = str(tmp_path / "tiny.yaml")
    try:
        if function == "plan":
            tfcalc.plan(model, **kwargs).to_json()
        else:
            tfcalc.infer(model, **infer_kwargs).to_json()
    except InputError as e:
        assert "\n" not in str(e) and len(str(e)) < 600, str(e)
