"""tfcalc.writing and `tfcalc snapshot -o`: regular files atomically, links through to their targets, stdout
for '-', and nothing else ever replaced."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from tfcalc import writing
from tfcalc.errors import InputError

ROOT = Path(__file__).resolve().parent.parent


def test_a_regular_file_keeps_its_mode(tmp_path):
    out = tmp_path / "s.json"
    out.write_text("old")
    out.chmod(0o604)
    writing.write_atomic(out, "new")
    assert out.read_text() == "new" and stat.S_IMODE(out.stat().st_mode) == 0o604


def test_a_symlink_is_written_through_and_stays_a_link(tmp_path):
    (tmp_path / "real.json").write_text("old")
    (tmp_path / "link.json").symlink_to("real.json")
    assert writing.write_atomic(tmp_path / "link.json", "new") == tmp_path / "real.json"
    assert (tmp_path / "link.json").is_symlink() and (tmp_path / "real.json").read_text() == "new"
    (tmp_path / "dangling.json").symlink_to("made.json")
    writing.write_atomic(tmp_path / "dangling.json", "made")
    assert (tmp_path / "made.json").read_text() == "made" and (tmp_path / "dangling.json").is_symlink()


def test_special_files_are_never_replaced(tmp_path):
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "to-null").symlink_to("/dev/null")
    for path, kind in ((tmp_path / "fifo", "a FIFO"), ("/dev/null", "a character device"),
                       (tmp_path / "to-null", "a character device"), (tmp_path, "a directory")):
        with pytest.raises(InputError, match=kind):
            writing.write_atomic(path, "x")
    assert stat.S_ISFIFO(os.lstat(tmp_path / "fifo").st_mode) and os.readlink(tmp_path / "to-null") == "/dev/null"
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fifo", "to-null"]


def test_a_char_device_made_here_is_refused(tmp_path, cli):
    try:
        os.mknod(tmp_path / "dev", stat.S_IFCHR | 0o600, os.makedev(1, 3))  # what /dev/null is
    except (PermissionError, OSError) as e:
        pytest.skip(f"cannot make a device node here ({e})")
    r = cli("snapshot", "gpt2", "-o", str(tmp_path / "dev"))
    assert r.code == 2 and "it is a character device" in r.err
    assert stat.S_ISCHR(os.lstat(tmp_path / "dev").st_mode)


def test_dash_and_the_processs_own_stdout_are_stdout(cli, tmp_path):
    assert writing.is_stdout("-") and not writing.is_stdout(tmp_path / "x.json")
    r = cli("snapshot", "gpt2", "-o", "-")
    assert r.code == 0 and json.loads(r.out)["entries"][0]["spec"] == "gpt2" and r.err == ""
    assert list(tmp_path.iterdir()) == []


def test_dev_stdout_writes_to_stdout_and_leaves_the_link_alone(tmp_path):
    """As root, a rename over /dev/stdout would replace the system's symlink by a file."""
    before = os.readlink("/dev/stdout") if os.path.islink("/dev/stdout") else None
    proc = subprocess.run([sys.executable, "-m", "tfcalc", "snapshot", "gpt2", "-o", "/dev/stdout"],
                          capture_output=True, cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["entries"][0]["preset"] == "gpt2"
    assert (os.readlink("/dev/stdout") if os.path.islink("/dev/stdout") else None) == before
    redirected = tmp_path / "out.json"  # /dev/stdout pointing at a file: the same file, written once
    with open(redirected, "w") as f:
        proc = subprocess.run([sys.executable, "-m", "tfcalc", "snapshot", "gpt2", "-o", "/dev/stdout"], stdout=f,
                              stderr=subprocess.PIPE, cwd=ROOT, timeout=120)
    assert proc.returncode == 0 and json.loads(redirected.read_text())["format"] == 1


def test_snapshot_json_summarises_the_file_written(cli, tmp_path):
    r = cli("snapshot", "gpt2", "-o", str(tmp_path / "s.json"), "--json")
    assert r.code == 0 and r.json() == {"path": str(tmp_path / "s.json"), "tfcalc_version": r.json()["tfcalc_version"],
                                        "format": 1, "models": ["gpt2"]}


def test_an_input_folder_stands_for_the_files_tfcalc_reads_in_it(tmp_path):
    """issue 33: a model folder's config.json and weights are inputs; a snapshot written there before is not."""
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "model.safetensors").write_bytes(b"")
    (tmp_path / "snap.json").write_text("old")
    for name in ("config.json", "model.safetensors"):
        with pytest.raises(InputError, match="that is a file this command reads"):
            writing.refuse_inputs(tmp_path / name, [tmp_path], "-o")
    writing.refuse_inputs(tmp_path / "snap.json", [tmp_path], "-o")
