"""The command line: tables, the JSON contract, and one-line errors with exit code 2."""

import json
import subprocess
import sys

import pytest
import yaml
from conftest import assert_one_line_error

from tfcalc.count.model import params as count
from tfcalc.presets import load, preset_names


def test_params_table_shows_breakdown_check_and_approximation(cli):
    r = cli("params", "gpt2", "--verbose")
    assert r.code == 0, r.err
    for text in ("token embedding", "attention Q weight", "FFN up weight", "final norm", "tied to token_embedding",
                 "124,439,808", "✓ agree", "12·L·d² + V·d", "-0.73%", "in bf16", "237.4 MiB", "248,879,616 bytes"):
        assert text in r.out, text


def test_params_json_contract_single_and_several(cli):
    one = cli("params", "gpt2", "--json").json()
    assert {"preset", "analytic_total", "empirical_total", "breakdown"} <= set(one)
    assert one["preset"] == "gpt2" and one["analytic_total"] == one["empirical_total"] == 124_439_808
    assert sum(one["breakdown"].values()) == one["analytic_total"]
    assert all(isinstance(v, int) for v in one["breakdown"].values())
    several = cli("params", "gpt2", "llama2-7b", "--json").json()
    assert [r["preset"] for r in several] == ["gpt2", "llama2-7b"]
    assert several[1]["empirical_total"] == 6_738_415_616


def test_named_size_and_the_gap_to_it(cli):
    r = cli("params", "gpt2-xl", "--no-measure", "--json").json()
    assert r["nominal_params"] == "1.5B"
    assert r["nominal_rel_difference"] == pytest.approx(1_557_611_200 / 1.5e9 - 1)
    assert "named 1.5B; exact count +3.8% from it" in cli("params", "gpt2-xl", "--no-measure").out


def test_no_measure_skips_torch(cli):
    r = cli("params", "gpt3", "--no-measure", "--json").json()
    assert r["empirical_total"] is None and r["analytic_total"] == count.total(load("gpt3"))


def test_gpt3_inconsistency_is_shown(cli):
    r = cli("params", "gpt3-xl")
    assert "Note:" in r.out and "3072 differs from d_model = 2048" in r.out
    assert cli("params", "gpt3-xl", "--json").json()["notes"]


def test_several_presets_get_a_summary(cli):
    r = cli("params", "gpt2", "llama2-70b", "--no-measure")
    assert r.code == 0 and "Summary" in r.out and "llama2-70b" in r.out


def test_set_override_changes_the_count(cli):
    r = cli("params", "gpt2", "--set", "n_layer=1", "--json").json()
    assert r["analytic_total"] == r["empirical_total"] == count.total(load("gpt2", ["n_layer=1"]))


def test_user_yaml_path(cli, tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text("n_layer: 2\nd_model: 32\nn_head: 4\nvocab_size: 61\nmax_seq_len: 16\n")
    r = cli("params", str(path), "--json").json()
    assert r["preset"] == "mine" and r["analytic_total"] == r["empirical_total"]


def test_presets_lists_every_preset(cli):
    rows = cli("presets", "--json").json()
    assert [r["name"] for r in rows] == preset_names()
    gpt3 = next(r for r in rows if r["name"] == "gpt3-175b")
    assert gpt3["aliases"] == ["gpt3"] and gpt3["params"] == 174_604_259_328
    table = cli("presets").out
    assert "llama2-70b" in table and "64/8" in table


def test_show_round_trips(cli, tmp_path):
    text = cli("show", "llama2-70b", "--set", "n_layer=2").out
    data = yaml.safe_load(text)
    assert data["n_layer"] == 2 and data["d_ff"] == 28672 and data["n_kv_head"] == 8
    path = tmp_path / "again.yaml"
    path.write_text(text)
    assert count.total(load(str(path))) == count.total(load("llama2-70b", ["n_layer=2"]))
    assert cli("show", "gpt2", "--json").json()["d_head"] == 64


@pytest.mark.parametrize(
    "args, message",
    [
        (["params", "gpt-2"], "unknown preset 'gpt-2' (did you mean 'gpt2'?)"),
        (["params", "missing.yaml"], "missing.yaml: no such file"),
        (["params", "gpt2", "--set", "n_layer"], "--set expects key=value"),
        (["params", "gpt2", "--set", "n_layers=2"], "did you mean 'n_layer'"),
        (["params", "gpt2", "--set", "n_layer=-2"], "must be positive"),
        (["params", "gpt2", "--bogus"], "No such option: --bogus"),
        (["params"], "Missing argument"),
        (["nonsense"], "No such command 'nonsense'"),
        (["show", "gpt2", "--set", "norm=rms"], "did you mean 'rmsnorm'"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(cli, args, message):
    assert_one_line_error(cli(*args), message)


def test_no_arguments_prints_help(cli):
    r = cli()
    assert r.code == 0 and "params" in r.out and "presets" in r.out


def test_version(cli):
    r = cli("--version")
    assert r.code == 0 and r.out.startswith("tfcalc ")


@pytest.mark.parametrize(
    "content, message",
    [("", "the file is empty"), ("n_layer: [\n", "not valid YAML"), ("- a\n", "expected a mapping"),
     ("n_layer: 2\nd_model: 32\nn_head: 4\nvocab_size: 61\nmax_seq_len: 16\nbias: true\n", "unknown field 'bias'")],
    ids=["empty", "malformed", "not-a-mapping", "unknown-field"],
)
def test_real_process_bad_file_has_no_traceback(tmp_path, content, message):
    path = tmp_path / "bad.yaml"
    path.write_text(content)
    proc = subprocess.run([sys.executable, "-m", "tfcalc", "params", str(path)], capture_output=True, text=True)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr and proc.stderr.count("\n") == 1
    assert message in proc.stderr


def test_real_process_json_is_parseable():
    proc = subprocess.run([sys.executable, "-m", "tfcalc", "params", "gpt3", "--json"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""  # no torch warnings leak
    assert json.loads(proc.stdout)["empirical_total"] == 174_604_259_328


def test_encoder_decoder_table_has_encoder_and_decoder_sections_with_cross_attention(cli):
    r = cli("params", "transformer-base", "--verbose")
    assert r.code == 0, r.err
    for text in ("Encoder (6 layers)", "Decoder (6 layers)", "Cross-attention", "cross-attention Q weight",
                 "63,045,632", "✓ agree", "12·L_enc·d² + 16·L_dec·d² + V·d", "Positions: sinusoidal"):
        assert text in " ".join(r.out.split()), text
    data = cli("params", "transformer-base", "--json").json()
    assert data["arch"] == "encoder-decoder" and sum(data["stacks"].values()) == data["analytic_total"]
    assert data["groups"]["cross_attention"] == data["breakdown"]["cross_attn_q_weight"] * 4


def test_moe_shows_active_parameters(cli):
    r = cli("params", "mixtral", "--verbose")
    assert "Active per token (top-2 of 8)" in r.out and "12,879,925,248" in r.out and "32 × 8" in r.out
    assert "Note: mixture of experts" in r.out
    data = cli("params", "mixtral-8x7b", "--json").json()
    assert data["analytic_total"] == data["empirical_total"] == 46_702_792_704
    assert data["active_params"] == 12_879_925_248 and data["stacks"] == {}
    assert cli("params", "gpt2", "--json").json()["active_params"] == 124_439_808


def test_bert_has_no_lm_head_and_says_so(cli):
    r = cli("params", "bert-base")
    assert "Pooler" in r.out and "LM head" not in r.out.split("Note:")[0] and "BertModel" in r.out


def test_presets_show_the_kind(cli):
    rows = {row["name"]: row for row in cli("presets", "--json").json()}
    assert rows["mixtral-8x7b"]["n_expert"] == 8 and rows["mixtral-8x7b"]["active_params"] == 12_879_925_248
    assert rows["transformer-big"]["arch"] == "encoder-decoder" and rows["transformer-big"]["n_encoder_layer"] == 6
    table = cli("presets").out
    assert "decoder MoE 2/8" in table and "enc-dec" in table and "6+6" in table


def test_params_of_a_config_json(cli, tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "gpt2", "n_layer": 2, "n_embd": 32, "n_head": 4,
                                "n_positions": 16, "vocab_size": 61}))
    r = cli("params", str(path), "--json").json()
    assert r["analytic_total"] == r["empirical_total"] and r["preset"] == tmp_path.name
