"""`tfcalc check` reads like a diff (issue 32): each drift names its model and field at any width, the cause
where check can tell, the command that accepts the new figures, and a warning when the checkout's presets
are not the installed ones that were counted."""

from __future__ import annotations

import json
import shlex
import shutil

import pytest

from tfcalc.presets import preset_dir
from tfcalc.report import snapshot_cause

MODEL = "n_layer: 2\nd_model: 32\nn_head: 4\nvocab_size: 61\nmax_seq_len: 16\n"


@pytest.fixture
def drifted(cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "my-model.yaml").write_text(MODEL)
    assert cli("snapshot", "my-model.yaml", "gpt2", "-o", "snap.json").code == 0
    (tmp_path / "my-model.yaml").write_text(MODEL.replace("n_layer: 2", "n_layer: 3"))
    return tmp_path


@pytest.mark.parametrize("columns", [60, 80, 120, 200])
def test_each_drift_names_its_model_field_and_cause_at_any_width(cli, drifted, monkeypatch, columns, width):
    width(columns)
    r = cli("check", "snap.json")
    assert r.code == 1
    words = " ".join(r.out.split())
    assert "my-model: 28 drifted; the config changed: n_layer 2 → 3" in words
    lines = r.out.splitlines()
    drifts = cli("check", "snap.json", "--json").json()
    # each drifted field starts a line of its own (a row, or its continuation below a narrow table)
    assert all(any(line.lstrip().startswith(d["field"]) for line in lines) for d in drifts)
    assert "gpt2" not in words.split("To accept")[0]  # gpt2 did not move
    assert "To accept today's figures: tfcalc snapshot my-model.yaml gpt2 -o snap.json" in words


def test_the_accept_command_accepts(cli, drifted):
    accept = cli("check", "snap.json", "--json").json()[0]["accept"]
    argv = shlex.split(accept)
    assert argv[:2] == ["tfcalc", "snapshot"]
    assert cli(*argv[1:]).code == 0 and cli("check", "snap.json").code == 0


def test_the_cause_is_the_version_or_unknown_when_the_config_is_as_pinned(cli, drifted):
    data = json.loads((drifted / "snap.json").read_text())
    gpt2 = data["entries"][1]
    gpt2["params"]["total"] += 1
    data["tfcalc_version"] = "0.0.9"
    (drifted / "snap.json").write_text(json.dumps(data))
    causes = {d["preset"]: d["cause"] for d in cli("check", "snap.json", "--json").json()}
    assert causes["gpt2"].startswith("tfcalc's version changed: 0.0.9 → ")
    assert causes["my-model"] == "the config changed: n_layer 2 → 3"  # the config is told first
    data["tfcalc_version"] = snapshot_cause.__version__
    del gpt2["config"]  # a snapshot written before configs were pinned
    (drifted / "snap.json").write_text(json.dumps(data))
    causes = {d["preset"]: d["cause"] for d in cli("check", "snap.json", "--json").json()}
    assert causes["gpt2"].startswith("the config or tfcalc's counting changed")


def test_every_packaged_preset_is_accepted_by_the_bare_command():
    entries = [{"spec": name, "overrides": []} for name in snapshot_cause.preset_names()]
    assert snapshot_cause.accept_command("golden.json", entries) == "tfcalc snapshot -o golden.json"
    two = [{"spec": "gpt2", "overrides": ["n_layer=3"]}, {"spec": "bert base.yaml", "overrides": ["n_layer=3"]}]
    assert (snapshot_cause.accept_command("s.json", two)
            == "tfcalc snapshot gpt2 'bert base.yaml' --set n_layer=3 -o s.json")


def test_a_warning_when_the_checkouts_presets_differ_from_the_installed(cli, tmp_path, monkeypatch):
    checkout = tmp_path / "tfcalc-clone"
    shutil.copytree(preset_dir(), checkout / "presets")
    (checkout / "pyproject.toml").write_text('[project]\nname = "tfcalc"\n')
    monkeypatch.chdir(checkout)
    assert cli("snapshot", "gpt2", "-o", "snap.json").code == 0
    assert cli("check", "snap.json").err == ""  # the same presets: nothing to say
    edited = checkout / "presets" / "gpt2.yaml"
    edited.write_text(edited.read_text() + "\n# edited\n")
    r = cli("check", "snap.json")
    assert r.code == 0 and r.err.count("\n") == 1
    assert "warning: the presets in the checkout" in r.err and "gpt2.yaml" in r.err and "pip install -e ." in r.err
