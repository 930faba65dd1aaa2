"""tfcalc snapshot / check: the CI regression of counts."""

import json
import os
from pathlib import Path

import pytest
from conftest import assert_one_line_error

from tfcalc import writing
from tfcalc.count.model import params as count
from tfcalc.presets import load, preset_names
from tfcalc.report import snapshot as snap


def test_snapshot_then_check_passes(cli, tmp_path):
    out = tmp_path / "snap.json"
    r = cli("snapshot", "gpt2", "llama2-7b", "-o", str(out))
    assert r.code == 0, r.err
    data = json.loads(out.read_text())
    assert data["tfcalc_version"] and data["conventions"]["flop"]
    assert [e["preset"] for e in data["entries"]] == ["gpt2", "llama2-7b"]
    assert data["entries"][0]["params"]["total"] == 124_439_808
    r = cli("check", str(out))
    assert r.code == 0 and "match" in r.out


def test_default_snapshot_covers_every_preset(cli, tmp_path):
    out = tmp_path / "all.json"
    assert cli("snapshot", "-o", str(out)).code == 0
    assert [e["spec"] for e in json.loads(out.read_text())["entries"]] == preset_names()


def test_a_changed_number_fails_naming_preset_and_field(cli, tmp_path):
    out = tmp_path / "snap.json"
    cli("snapshot", "gpt2", "-o", str(out))
    data = json.loads(out.read_text())
    data["entries"][0]["params"]["breakdown"]["attn_q_weight"] += 1
    out.write_text(json.dumps(data))
    r = cli("check", str(out))
    assert r.code == 1
    assert "gpt2" in r.out and "params.breakdown.attn_q_weight" in r.out and "-1" in r.out
    drifts = cli("check", str(out), "--json").json()
    assert [{k: d[k] for k in ("preset", "field", "expected", "got", "difference")} for d in drifts] == [
        {"preset": "gpt2", "field": "params.breakdown.attn_q_weight", "expected": 7_077_889, "got": 7_077_888,
         "difference": -1}]  # issue 32 added "cause" and "accept" beside these


def test_tolerance_is_relative(tmp_path):
    data = snap.build(["gpt2"], [])
    data["entries"][0]["params"]["total"] += 1
    assert snap.compare(data, tolerance=0) and not snap.compare(data, tolerance=1e-6)


def test_user_files_are_rechecked_from_their_path(cli, tmp_path):
    model = tmp_path / "mine.yaml"
    model.write_text("n_layer: 2\nd_model: 32\nn_head: 4\nvocab_size: 61\nmax_seq_len: 16\n")
    out = tmp_path / "snap.json"
    assert cli("snapshot", str(model), "-o", str(out)).code == 0
    assert cli("check", str(out)).code == 0
    model.write_text("n_layer: 3\nd_model: 32\nn_head: 4\nvocab_size: 61\nmax_seq_len: 16\n")
    r = cli("check", str(out), "--json")
    assert r.code == 1
    drifts = {d["field"]: d for d in r.json()}
    assert drifts["params.total"]["preset"] == "mine"
    assert drifts["params.total"]["got"] == count.total(load(str(model)))


def test_overrides_are_recorded_and_reapplied(cli, tmp_path):
    out = tmp_path / "snap.json"
    assert cli("snapshot", "gpt2", "--set", "n_layer=3", "-o", str(out)).code == 0
    entry = json.loads(out.read_text())["entries"][0]
    assert entry["overrides"] == ["n_layer=3"]
    assert entry["params"]["total"] == count.total(load("gpt2", ["n_layer=3"])) != count.total(load("gpt2"))
    assert cli("check", str(out)).code == 0


def test_bad_snapshot_files_exit_2_with_one_line(cli, tmp_path):
    bad = tmp_path / "bad.json"
    for text, message in [("{\"entries\": [", "not valid JSON"), ("[1, 2]", "not a tfcalc snapshot"),
                          ("{\"format\": 1, \"entries\": [{}]}", "entry 0 has no 'spec'"),
                          ("{\"format\": 9, \"entries\": []}", "snapshot format 9")]:
        bad.write_text(text)
        r = cli("check", str(bad))
        assert r.code == 2 and r.err.count("\n") == 1 and message in r.err, (text, r.err)
    r = cli("check", str(tmp_path / "missing.json"))
    assert r.code == 2 and "no such file" in r.err


def test_a_figure_that_is_not_finite_is_refused_and_nothing_is_written(cli, tmp_path, monkeypatch):
    """JSON has no Infinity: a snapshot that would carry one is refused in one line, the old file kept."""
    out = tmp_path / "snap.json"
    out.write_text("old")
    monkeypatch.setattr(snap, "figures", lambda model: {"params": {"total": float("inf")}})
    r = cli("snapshot", "gpt2", "-o", str(out))
    assert_one_line_error(r, "not finite")
    assert out.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["snap.json"]


def test_write_is_atomic(tmp_path, monkeypatch):
    out = tmp_path / "snap.json"
    snap.write_atomic(out, {"old": True})

    def crash(*args, **kwargs):  # the new text is written, not yet on disk nor renamed
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(writing.os, "fsync", crash)
    with pytest.raises(RuntimeError):
        snap.write_atomic(out, {"new": True})
    assert json.loads(out.read_text()) == {"old": True}
    assert [p.name for p in tmp_path.iterdir()] == ["snap.json"]


def test_written_file_has_ordinary_permissions(tmp_path):
    umask = os.umask(0o022)
    try:
        snap.write_atomic(tmp_path / "new.json", {})
        assert (tmp_path / "new.json").stat().st_mode & 0o777 == 0o644
        (tmp_path / "new.json").chmod(0o640)
        snap.write_atomic(tmp_path / "new.json", {"again": 1})
        assert (tmp_path / "new.json").stat().st_mode & 0o777 == 0o640
    finally:
        os.umask(umask)


GOLDEN = Path(__file__).parent.parent / "golden" / "snapshot.json"


def test_the_projects_golden_snapshot_still_holds():
    """Every count of every preset, pinned. A change that moves one fails here (and in CI's
    `tfcalc check`) until the snapshot is deliberately rewritten: tfcalc snapshot -o tests/golden/snapshot.json"""
    data = snap.read(GOLDEN)
    assert [e["spec"] for e in data["entries"]] == preset_names(), "a preset is missing from the golden snapshot"
    drifts = snap.compare(data)
    assert not drifts, "\n".join(f"{d.preset} {d.field}: {d.expected} -> {d.got}" for d in drifts)


def test_snapshot_holds_flops_and_memory_figures():
    entry = snap.build(["gpt2"], [])["entries"][0]
    assert entry["flops"]["forward_flops"] == 291_648_307_200
    assert entry["flops"]["crossover_seq"] == {"scores_vs_ffn": 3072, "attention_vs_ffn": 1536}
    assert entry["memory"]["weights_bytes"] == 2 * 124_439_808
    assert entry["memory"]["kv_cache_bytes"] == 2 * 1024 * 12 * 12 * 64 * 2


def test_unwritable_output_is_one_line(cli, tmp_path):
    r = cli("snapshot", "gpt2", "-o", str(tmp_path / "missing-dir" / "snap.json"))
    assert r.code == 2 and r.err.count("\n") == 1 and "cannot write there" in r.err


def test_a_directory_in_the_way_is_one_line_and_leaves_nothing_behind(cli, tmp_path):
    (tmp_path / "snap.json").mkdir()
    r = cli("snapshot", "gpt2", "-o", str(tmp_path / "snap.json"))
    assert r.code == 2 and "cannot write" in r.err
    assert [p.name for p in tmp_path.iterdir()] == ["snap.json"]
