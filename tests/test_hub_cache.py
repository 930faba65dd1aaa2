"""Hugging Face ids (org/name) read from the local cache, laid out as huggingface_hub lays it out; never
from the network. Absent: one line saying where tfcalc looked and how to get the file."""

from __future__ import annotations

import json

import pytest
from conftest import assert_one_line_error
from test_checkpoint import LLAMA, llama_tensors, write

from tfcalc.config import ConfigError
from tfcalc.count.model import params as count
from tfcalc.hub_cache import cache_dirs, is_repo_id
from tfcalc.presets import checkpoint_source, load

COMMIT = "0123456789abcdef0123456789abcdef01234567"


def cached(root, repo="acme/tiny-llama", commit=COMMIT, weights=False):
    """A snapshot in huggingface_hub's layout: models--org--name/{refs/main, snapshots/<commit>/...}."""
    repo_dir = root / f"models--{repo.replace('/', '--')}"
    snapshot = repo_dir / "snapshots" / commit
    snapshot.mkdir(parents=True)
    (repo_dir / "refs").mkdir()
    (repo_dir / "refs" / "main").write_text(commit)
    if weights:
        write(snapshot, llama_tensors())
    else:
        (snapshot / "config.json").write_text(json.dumps(LLAMA))
    return snapshot


def test_where_the_cache_is(monkeypatch, tmp_path):
    for var in ("HF_HUB_CACHE", "HF_HOME", "XDG_CACHE_HOME"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert cache_dirs() == [tmp_path / ".cache" / "huggingface" / "hub"]
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dirs() == [tmp_path / "xdg" / "huggingface" / "hub"]
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    assert cache_dirs() == [tmp_path / "hf" / "hub"]
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "cache"))
    assert cache_dirs() == [tmp_path / "cache"]


def test_an_id_reads_config_and_weights_from_the_cache(monkeypatch, tmp_path, cli):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    snapshot = cached(tmp_path, weights=True)
    source = checkpoint_source("acme/tiny-llama")
    assert source.folder == snapshot and source.weights == snapshot and source.cfg.name == "tiny-llama"
    r = cli("params", "acme/tiny-llama", "--json")
    assert r.code == 0 and r.json()["checkpoint_total"] == count.total(source.cfg)


def test_refs_main_picks_the_snapshot(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    cached(tmp_path / "hub", commit=COMMIT)
    other = tmp_path / "hub" / "models--acme--tiny-llama" / "snapshots" / ("f" * 40)
    other.mkdir()
    (other / "config.json").write_text(json.dumps({**LLAMA, "num_hidden_layers": 3}))
    assert load("acme/tiny-llama").n_layer == 2  # refs/main names COMMIT, not the newer folder


def test_an_absent_id_says_where_it_looked_and_how_to_get_it(monkeypatch, tmp_path, cli):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    message = "'meta-llama/Llama-2-7b-hf' is not in the local Hugging Face cache; "
    with pytest.raises(ConfigError, match="huggingface-cli download meta-llama/Llama-2-7b-hf config.json"):
        load("meta-llama/Llama-2-7b-hf")
    assert_one_line_error(cli("params", "meta-llama/Llama-2-7b-hf"), message)
    assert_one_line_error(cli("params", "meta-llama/Llama-2-7b-hf"), "models--meta-llama--Llama-2-7b-hf)")


def test_a_long_cache_path_leaves_the_advice_whole(monkeypatch, tmp_path, cli):
    """The advice comes before the folders, which are cut to their end: the error line's limit (about 280
    characters) once cut the advice mid-word ('or give a p … ')."""
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / ("a" * 200)))
    result = cli("params", "meta-llama/Llama-2-7b-hf")
    assert_one_line_error(result, "set HF_HUB_CACHE or HF_HOME, or give a path (looked in …")


@pytest.mark.parametrize("spec", ["org/../secret", "org/na..me", "org--x/name", "-org/name", "org/name/extra",
                                  "org/name.json", "a/" + "b" * 100])
def test_what_is_not_an_id(spec):
    assert not is_repo_id(spec)


def test_a_hostile_id_is_a_path_that_does_not_exist(monkeypatch, tmp_path, cli):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    assert_one_line_error(cli("params", "../../no-such-dir/x"), "no such file")
    assert_one_line_error(cli("params", "org/../../x"), "no such file")
    (tmp_path / "models--acme--bad" / "refs").mkdir(parents=True)
    (tmp_path / "models--acme--bad" / "refs" / "main").write_text("../../../etc")  # a hostile ref: ignored
    (tmp_path / "models--acme--bad" / "snapshots").mkdir()
    assert_one_line_error(cli("params", "acme/bad"), "is not in the local Hugging Face cache")
