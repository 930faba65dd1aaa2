"""`tfcalc flops`: the table, the JSON contract, the measured check, and one-line errors."""

import json
import subprocess
import sys

import pytest
from conftest import assert_one_line_error

from tfcalc.count.model import flops as count
from tfcalc.measure import flops as measure
from tfcalc.presets import load
from tfcalc.workload import Workload

CONTRACT = {"preset", "batch", "seq", "forward_flops", "forward_flops_causal", "training_flops", "measured_flops",
            "breakdown", "crossover_seq"}


def test_json_contract_and_defaults(cli):
    r = cli("flops", "gpt2", "--json")
    assert r.code == 0 and r.err == ""
    data = r.json()
    assert CONTRACT <= set(data)
    assert data["seq"] == 1024 and data["batch"] == 1  # --seq defaults to the context length
    assert data["forward_flops"] == 291_648_307_200 and data["measured_flops"] is None
    assert {"attention_proj", "attention_scores", "ffn", "lm_head"} <= set(data["breakdown"])
    assert sum(data["breakdown"].values()) == data["forward_flops"]
    assert data["training_flops"] == 3 * data["forward_flops"]
    assert data["crossover_seq"] == {"scores_vs_ffn": 3072, "attention_vs_ffn": 1536}
    assert all(isinstance(v, int) for v in data["breakdown"].values())


def test_several_presets_give_a_list_and_recompute_makes_training_4x(cli):
    data = cli("flops", "gpt2", "llama2-7b", "--seq", "128", "--batch", "2", "--recompute", "--json").json()
    assert [d["preset"] for d in data] == ["gpt2", "llama2-7b"]
    for d in data:
        assert d["training_flops"] == 4 * d["forward_flops"] and d["training_multiplier"] == 4
        assert d["forward_flops"] == count.forward_flops(load(d["preset"]), Workload(batch=2, seq=128))


def test_measure_agrees_and_is_reported(cli):
    data = cli("flops", "llama2-70b", "--seq", "33", "--measure", "--json").json()
    assert data["measured_flops"] == data["forward_flops"] and data["agree"] is True
    assert data["measured_device"] == "meta"
    assert data["measured_breakdown"]["attention_scores"] == data["breakdown"]["attention_scores"]


def test_measure_on_cpu_counts_the_attention(cli):
    r = cli("flops", "gpt2", "--set", "n_layer=1", "--seq", "16", "--measure", "--device", "cpu", "--json")
    data = r.json()
    assert r.code == 0 and data["measured_device"] == "cpu" and data["agree"] is True
    assert data["measured_by_module"]["attn.scores"] == data["breakdown"]["attention_scores"] > 0


def test_disagreement_exits_1(cli, monkeypatch):
    # Without our formula for the CPU flash-attention op, FlopCounterMode misses the scores.
    monkeypatch.setattr(measure, "CUSTOM_FORMULAS", {})
    r = cli("flops", "gpt2", "--set", "n_layer=1", "--seq", "8", "--measure", "--device", "cpu")
    assert r.code == 1 and "✗ DISAGREE" in r.out
    assert r.err.startswith("tfcalc: error: gpt2 + n_layer=1: measured") and "attention_scores" in r.err


def test_table_shows_breakdown_conventions_and_checks(cli):
    r = cli("flops", "gpt2", "--measure", "--training", "--decode", "--verbose", "--exact", "--format", "markdown")
    assert r.code == 0, r.err
    for text in ("Attention projections", "Q projection", "1024×64 @ 64×1024", "Attention scores", "FFN", "LM head",
                 "Embeddings (lookups)", "291,648,307,200", "Forward, causal", "Training ×3", "Training ×4",
                 "✓ agree", "Non-matmul (approximate", "softmax", "Kaplan 6ND", "Chinchilla", "PaLM", "Megatron",
                 "+0.00%", "Decode", "1024×", "T = 3,072"):
        assert text in r.out, text


def test_gpt3_answers_when_attention_overtakes_the_ffn(cli):
    out = " ".join(cli("flops", "gpt3").out.split())
    assert "When does attention overtake the FFN in gpt3-175b?" in out
    assert "T = 49,152 (= 4·d_model)" in out and "T = 24,576 (= 2·d_model)" in out
    assert "T = 98,303 and 49,151" in out


def test_several_presets_get_a_summary(cli):
    r = cli("flops", "gpt2", "llama2-70b", "--seq", "64")
    assert r.code == 0 and "Summary" in r.out and "3,072 / 1,536" in r.out


def test_analytic_beyond_the_context_warns(cli):
    r = cli("flops", "gpt2", "--seq", "4096", "--json")
    assert r.code == 0 and r.json()["seq"] == 4096
    assert r.err.startswith("tfcalc: warning: gpt2: --seq 4,096 exceeds the context of 1,024")
    assert r.json()["notes"]


@pytest.mark.parametrize(
    "args, message",
    [
        (["flops", "gpt2", "--seq", "0"], "--seq must be between 1 and"),
        (["flops", "gpt2", "--seq", "-5"], "--seq must be between 1 and"),
        (["flops", "gpt2", "--batch", "0"], "--batch must be between 1 and"),
        (["flops", "gpt2", "--batch", "-2", "--measure"], "--batch must be between 1 and"),
        (["flops", "gpt2", "--seq", "ten"], "Invalid value for '--seq' / '-s': cannot read 'ten' as a sequence length"),
        (["flops", "gpt2", "--seq", "2048", "--measure"], "exceeds the model's context of 1024 learned positions"),
        (["flops", "llama2-7b", "--seq", "5000", "--measure"], "4096 RoPE table rows"),
        (["flops", "gpt3", "--seq", "8", "--measure", "--device", "cpu"], "measure on meta"),
        (["flops", "gpt2", "--measure", "--device", "nonsense"],
         "unknown device 'nonsense'; use cpu, cuda, cuda:N or mps"),
        (["flops", "gpt-3"], "unknown preset 'gpt-3'"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(cli, args, message):
    assert_one_line_error(cli(*args), message)


def test_real_process_without_measure_does_not_import_torch():
    code = ("import sys; from tfcalc.cli.app import run; rc = run(['flops', 'gpt3', '--json']); "
            "assert rc == 0; sys.stderr.write(str('torch' in sys.modules))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == "False"
    assert json.loads(proc.stdout)["crossover_seq"] == {"scores_vs_ffn": 49152, "attention_vs_ffn": 24576}


def test_real_process_bad_seq_has_no_traceback():
    proc = subprocess.run([sys.executable, "-m", "tfcalc", "flops", "gpt2", "--seq", "2048", "--measure"],
                          capture_output=True, text=True)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr and proc.stderr.count("\n") == 1


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="this machine has CUDA")
def test_unavailable_device_is_one_line(cli):
    assert_one_line_error(cli("flops", "gpt2", "--seq", "8", "--measure", "--device", "cuda"),
                          "CUDA is not available here")
