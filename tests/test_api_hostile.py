"""The Python API checks what the command line checks, and says it in the same one line (issue 23,
causes 7 and 9): an InputError, never a TypeError, AttributeError or a silent acceptance."""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import given, settings, strategies as st

import tfcalc
from tfcalc.errors import InputError

# (id, call, the CLI argv that must fail with the same line, or None, a fragment of the line)
CASES = [
    ("plan-mfu-string", lambda: tfcalc.plan("gpt2", dp=2, mfu="0.4"), None, "--mfu must be a number in [0.0001, 1]"),
    ("plan-mfu-tiny", lambda: tfcalc.plan("gpt2", dp=2, mfu=1e-300),
     ["plan", "gpt2", "--dp", "2", "--mfu", "1e-300"], "--mfu must be a number"),
    ("plan-zero-true", lambda: tfcalc.plan("gpt2", dp=2, zero=True), None, "--zero must be 0, 1, 2 or 3; got True"),
    ("plan-zero-true-search", lambda: tfcalc.plan("gpt2", gpus=8, zero=True), None, "--zero must be 0, 1, 2 or 3"),
    ("plan-zero-5", lambda: tfcalc.plan("gpt2", dp=2, zero=5), ["plan", "gpt2", "--dp", "2", "--zero", "5"],
     "--zero must be 0, 1, 2 or 3; got 5"),
    ("plan-tp-0", lambda: tfcalc.plan("llama2-7b", gpus=8, tp=0), ["plan", "llama2-7b", "--gpus", "8", "--tp", "0"],
     "--tp must be between 1"),
    ("plan-tp-float", lambda: tfcalc.plan("gpt2", tp=2.0), None, "--tp must be an integer; got float"),
    ("plan-gpus-list", lambda: tfcalc.plan("gpt2", gpus=[8]), None, "--gpus: expected a number of GPUs or 'auto'"),
    ("plan-recompute-bad", lambda: tfcalc.plan("gpt2", dp=2, recompute="some"),
     None, "--recompute must be one of none, selective, full"),
    ("plan-tokens-huge", lambda: tfcalc.plan("gpt2", dp=2, tokens=10**40), None, "--tokens must be a whole number"),
    ("plan-tokens-text", lambda: tfcalc.plan("gpt2", dp=2, tokens="1e999999"),
     ["plan", "gpt2", "--dp", "2", "--tokens", "1e999999"], "is more than 1e+30 tokens"),
    ("plan-device-spec-number", lambda: tfcalc.plan("gpt2", dp=2, device_spec=3), None, "--device-spec must be"),
    ("infer-batch-empty", lambda: tfcalc.infer("gpt2", batch=[]), None, "--batch: give one batch size or more"),
    ("infer-batch-0", lambda: tfcalc.infer("gpt2", batch=0), None, "--batch must be between 1"),
    ("infer-group-size-float", lambda: tfcalc.infer("gpt2", dtype="int4", group_size=64.5), None,
     "--group-size must be a whole number of weights"),
    ("infer-repeat-0", lambda: tfcalc.infer("gpt2", measure=True, repeat=0), None, "--repeat must be between 1"),
    ("infer-warmup-negative", lambda: tfcalc.infer("gpt2", measure=True, warmup=-1), None,
     "--warmup must be between 0"),
    # the measured run's counts are checked whether or not anything is measured, as the flags are
    ("infer-warmup-negative-estimate", lambda: tfcalc.infer("gpt2", warmup=-1), None,
     "--warmup must be between 0"),
    ("infer-repeat-0-estimate", lambda: tfcalc.infer("gpt2", repeat=0), None, "--repeat must be between 1"),
    ("infer-copy-bytes-negative", lambda: tfcalc.infer("gpt2", copy_bytes=-5), None, "copy_bytes must be between"),
    ("plan-nproc-0", lambda: tfcalc.plan("gpt2", dp=2, nproc=0), None, "--nproc must be between 1"),
    ("bench-nproc-bert", lambda: tfcalc.bench("bert-base", nproc=2), ["bench", "bert-base", "--nproc", "2"],
     "bert-base is an encoder"),
    ("bench-nproc-zero-true", lambda: tfcalc.bench("gpt2", nproc=2, zero=True), None, "--zero must be 0, 1, 2 or 3"),
    ("load-model-tpu", lambda: tfcalc.load_model("{d}", device="tpu"), None, "unknown device 'tpu'"),
    ("load-model-preset", lambda: tfcalc.load_model("gpt2"), None, "'gpt2' names a model config, not a checkpoint"),
    ("load-model-no-weights", lambda: tfcalc.load_model("{d}"), None, "no weights there"),
    ("load-model-not-a-path", lambda: tfcalc.load_model(3), None, "expected a path or a Hugging Face id"),
    ("load-model-dtype", lambda: tfcalc.load_model("{d}", dtype=3), None, "unknown dtype 3"),
    # issue 33, cause 6: what the command line refuses by its type, refused in the Python argument's name
    ("memory-budget-negative", lambda: tfcalc.memory("gpt2", budget=-1), None, "budget must be a size such as"),
    ("memory-budget-inf", lambda: tfcalc.memory("gpt2", budget=float("inf")), None, "got inf"),
    ("memory-budget-nan", lambda: tfcalc.memory("gpt2", budget=float("nan")), None, "got nan"),
    ("memory-budget-0", lambda: tfcalc.memory("gpt2", budget=0), None, "a number of bytes, 1 or more; got 0"),
    ("memory-budget-true", lambda: tfcalc.memory("gpt2", budget=True), None, "got True"),
    ("memory-budget-list", lambda: tfcalc.memory("gpt2", budget=[1]), None, "got [1]"),
    ("memory-budget-text", lambda: tfcalc.memory("gpt2", budget="-5GB"), ["memory", "gpt2", "--budget", "-5GB"],
     "cannot read --budget '-5GB' as a size"),
    ("memory-training-no", lambda: tfcalc.memory("gpt2", training="no"), None, "training must be True or False"),
    ("flops-measure-no", lambda: tfcalc.flops("gpt2", measure="no"), None, "measure must be True or False"),
    ("params-measure-0", lambda: tfcalc.params("gpt2", measure=0), None, "measure must be True or False; got 0"),
    ("memory-dtype-0", lambda: tfcalc.memory("gpt2", dtype=0), None, "dtype must be a string; got 0"),
    ("flops-device-number", lambda: tfcalc.flops("gpt2", device=1.5), None, "device must be a string"),
    ("infer-kv-dtype-0", lambda: tfcalc.infer("gpt2", kv_dtype=0), None, "kv_dtype must be a string; got 0"),
    ("scan-seq-nan", lambda: tfcalc.scan("gpt2", seq=float("nan")), None, "seq must be an integer or a list"),
    ("infer-rate-inf", lambda: tfcalc.infer("gpt2", rate=float("inf")), None, "rate must be a finite number"),
    ("infer-warmup-nan", lambda: tfcalc.infer("gpt2", warmup=float("nan")), None, "warmup must be an integer; got nan"),
    ("plan-nproc-inf", lambda: tfcalc.plan("gpt2", dp=2, nproc=float("inf")), None,
     "nproc must be an integer; got inf"),
    ("plan-sp-text", lambda: tfcalc.plan("gpt2", dp=2, sequence_parallel="yes"), None,
     "sequence_parallel must be True or False"),
]


@pytest.fixture
def folder(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(dict(model_type="llama", num_hidden_layers=1, hidden_size=8,
                                                          num_attention_heads=2, intermediate_size=16,
                                                          vocab_size=11)), encoding="utf-8")
    return tmp_path


@pytest.mark.parametrize("case, call, argv, message", CASES, ids=[c[0] for c in CASES])
def test_the_api_raises_the_clis_one_line(cli, folder, monkeypatch, case, call, argv, message):
    import tfcalc as api

    real = api.load_model
    monkeypatch.setattr(api, "load_model", lambda path, *a, **k: real(str(path).replace("{d}", str(folder))
                                                                      if isinstance(path, str) else path, *a, **k))
    with pytest.raises(InputError) as raised:
        call()
    line = str(raised.value)
    python = re.sub(r"--([a-z][a-z-]*)", lambda m: m.group(1).replace("-", "_"), message)  # issue 32
    assert python in line and "\n" not in line and len(line) < 300, line
    if argv is not None:  # the command line's line, in its flags' names
        r = cli(*argv)
        def plain(text: str) -> str:  # the flag or the Python argument: the same name
            return text.replace("--", "").replace("_", "-")

        assert r.code == 2 and plain(r.err) == plain(f"tfcalc: error: {line}\n")


def test_load_model_without_cuda_says_so():
    import torch

    if torch.cuda.is_available():
        pytest.skip("CUDA is here")
    with pytest.raises(InputError, match="CUDA is not available here"):
        tfcalc.load_model("gpt2", device="cuda")


BAD = [True, False, -1, 0, 1.5, float("nan"), float("inf"), -float("inf"), "", "no", "-1", [], [1], {"a": 1}, None,
       2**70]
CALLS = {"memory": dict(model="gpt2"), "flops": dict(model="gpt2"), "params": dict(model="gpt2", measure=False),
         "scan": dict(model="gpt2", seq=[128]), "infer": dict(model="gpt2"), "compare": dict(models=["gpt2"])}


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(sorted(CALLS)), st.data())
def test_the_apis_arguments_never_raise_an_internal_error(function, data):
    """Any argument of the API's fast functions (no measured run: measure stays off) given any value: a
    report, or an InputError of one line -- never a TypeError, ValueError or the like (issue 33, cause 6)."""
    import inspect

    f = getattr(tfcalc, function)
    names = [n for n, p in inspect.signature(f.__wrapped__).parameters.items()
             if p.kind is p.KEYWORD_ONLY or p.kind is p.POSITIONAL_OR_KEYWORD]
    skip = ("model", "device", "batch") + (("measure",) if function != "params" else ())  # no run (params': meta)
    names = [n for n in names if n not in skip]
    args = dict(CALLS[function])
    for name in data.draw(st.lists(st.sampled_from(names), max_size=3, unique=True)):
        args[name] = data.draw(st.sampled_from(BAD))
    models = args.pop("models", None)
    try:
        tfcalc.compare(*models, **args) if models else f(**args)
    except InputError as e:
        assert "\n" not in str(e) and len(str(e)) < 300, str(e)
