"""The Python API checks what the command line checks, and says it in the same one line (issue 23,
causes 7 and 9): an InputError, never a TypeError, AttributeError or a silent acceptance."""

from __future__ import annotations

import json
import re

import pytest

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
    ("bench-nproc-bert", lambda: tfcalc.bench("bert-base", nproc=2), ["bench", "bert-base", "--nproc", "2"],
     "bert-base is an encoder"),
    ("bench-nproc-zero-true", lambda: tfcalc.bench("gpt2", nproc=2, zero=True), None, "--zero must be 0, 1, 2 or 3"),
    ("load-model-tpu", lambda: tfcalc.load_model("{d}", device="tpu"), None, "unknown device 'tpu'"),
    ("load-model-preset", lambda: tfcalc.load_model("gpt2"), None, "'gpt2' names a model config, not a checkpoint"),
    ("load-model-no-weights", lambda: tfcalc.load_model("{d}"), None, "no weights there"),
    ("load-model-not-a-path", lambda: tfcalc.load_model(3), None, "expected a path or a Hugging Face id"),
    ("load-model-dtype", lambda: tfcalc.load_model("{d}", dtype=3), None, "unknown dtype 3"),
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
