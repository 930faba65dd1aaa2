"""The public Python API returns the report objects; their to_json() is the CLI's --json output."""

from __future__ import annotations

import subprocess
import sys

import pytest

import tfcalc
from tfcalc.config import ModelConfig
from tfcalc.presets import load


def test_the_issue_example_in_a_fresh_process():
    code = "import tfcalc; r = tfcalc.flops('gpt2', seq=1024); print(r.to_json()['forward_flops'])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "291648307200"


@pytest.mark.parametrize("args, call", [
    (["params", "gpt2", "--set", "n_layer=6"], lambda: tfcalc.params("gpt2", n_layer=6)),
    (["params", "llama2-70b", "--no-measure"], lambda: tfcalc.params("llama2-70b", measure=False)),
    (["flops", "gpt2", "--seq", "128", "--batch", "2", "--measure"],
     lambda: tfcalc.flops("gpt2", batch=2, seq=128, measure=True)),
    (["flops", "transformer-base", "--seq", "64", "--src-seq", "100"],
     lambda: tfcalc.flops("transformer-base", seq=64, src_seq=100)),
    (["memory", "llama2-7b", "--training", "--budget", "80GiB"],
     lambda: tfcalc.memory("llama2-7b", training=True, budget="80GiB")),
    (["memory", "gpt2", "--dtype", "fp32", "--seq", "256", "--set", "tie_embeddings=false"],
     lambda: tfcalc.memory("gpt2", seq=256, dtype="fp32", tie_embeddings=False)),
])
def test_to_json_equals_the_cli_json(cli, args, call):
    assert call().to_json() == cli(*args, "--json").json()


def test_model_may_be_a_config_or_a_path(tmp_path):
    cfg = load("gpt2")
    assert tfcalc.params(cfg, measure=False).analytic_total == 124_439_808
    small = ModelConfig(n_layer=2, d_model=64, n_head=4, vocab_size=100, max_seq_len=32, name="small")
    assert tfcalc.flops(small, seq=32, measure=True).agrees
    path = tmp_path / "mine.yaml"
    path.write_text("n_layer: 2\nd_model: 64\nn_head: 4\nvocab_size: 100\nmax_seq_len: 32\n")
    assert tfcalc.params(path).agrees and tfcalc.params(str(path), n_layer=3).model.label == "mine + n_layer=3"


def test_bench_returns_its_report():
    report = tfcalc.bench("gpt2", seq=16, min_time=0, warmup=0, repeat=2, matmul_size=32, n_layer=1, d_model=48,
                          vocab_size=64)
    data = report.to_json()
    assert data["seq"] == 16 and data["dtype"] == "fp32" and data["median_s"] > 0


def test_bad_input_raises_the_one_family():
    from tfcalc.errors import InputError

    with pytest.raises(InputError, match="unknown preset"):
        tfcalc.params("gpt9")
    with pytest.raises(InputError, match="^seq must be between"):  # the Python argument, not --seq (issue 32)
        tfcalc.flops("gpt2", seq=0)
