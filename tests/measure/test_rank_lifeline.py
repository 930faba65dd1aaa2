"""Ranks never outlive tfcalc, and how one ended is said of that rank (issue 23, causes 2, 3 and 10).

The ranks here are small Python programs, not torch ones: what is tested is the launcher's watchdog, its
kill of each rank's process group, the kernel's PR_SET_PDEATHSIG asked by each rank, and the sweep of the
folders a SIGKILLed tfcalc left. tests/cli/test_hostile_process.py runs the real ranks."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from tfcalc.errors import InputError
from tfcalc.measure import launch, lifeline
from tfcalc.measure.launch import run_ranks

ROOT = Path(__file__).resolve().parent.parent.parent
linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc and PR_SET_PDEATHSIG are Linux's")
# each rank writes its pid to <folder>/pid-<rank>, asks to die with its parent, then does what it is told
RANK = ("import os, sys, time, signal\n"
        "from tfcalc.measure.lifeline import die_with_parent\n"
        "die_with_parent()\n"
        "open(os.path.join({folder!r}, 'pid-' + os.environ['RANK']), 'w').write(str(os.getpid()))\n"
        "{then}\n")


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except OSError:
        return False
    return state != "Z"


def _wait_for(condition, timeout: float = 30) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if condition():
            return True
        time.sleep(0.05)
    return False


@linux
def test_a_stopped_rank_ends_the_run_naming_it(tmp_path, monkeypatch):
    monkeypatch.setattr(launch, "STOPPED_LIMIT_S", 1.0)
    code = RANK.format(folder=str(tmp_path), then="if os.environ['RANK'] == '1': os.kill(os.getpid(), "
                       "signal.SIGSTOP)\ntime.sleep(60)")
    logs = [str(tmp_path / f"{r}.err") for r in range(2)]
    start = time.monotonic()
    with pytest.raises(InputError, match=r"rank 1 \(pid \d+\) was stopped \(SIGSTOP, or a debugger\) for 1 s"):
        run_ranks([sys.executable, "-c", code], 2, logs, timeout=60)
    assert time.monotonic() - start < 15
    assert not any(_alive(int((tmp_path / f"pid-{r}").read_text())) for r in range(2))


@pytest.mark.parametrize("sig, words", [(signal.SIGKILL, r"killed by SIGKILL \(killed: out of memory, or by another"),
                                        (signal.SIGSEGV, r"killed by SIGSEGV \(a segmentation fault\)")])
def test_a_rank_killed_by_a_signal_is_named_with_it_not_its_peer(tmp_path, sig, words):
    """Rank 1 dies by a signal; rank 0 then fails as a peer does (exit 1, a closed connection): the
    message names rank 1 and the signal, not rank 0 and 'out of memory'."""
    # rank 0 fails only once rank 1 is dead (a zombie or reaped): a fixed sleep lost the race on a loaded machine
    wait = ("def _dead(f):\n"
            "    try:\n"
            "        pid = open(f).read().strip()\n"
            "        return bool(pid) and open('/proc/' + pid + '/stat').read().rpartition(')')[2].split()[0] == 'Z'\n"
            "    except OSError:\n"
            "        return os.path.exists(f)\n"
            f"end = time.monotonic() + 30\n"
            f"while not _dead(os.path.join({str(tmp_path)!r}, 'pid-1')) and time.monotonic() < end:\n"
            "    time.sleep(0.01)\n")
    then = (f"if os.environ['RANK'] == '1': os.kill(os.getpid(), {int(sig)})\n"
            + wait + "raise ConnectionError('Connection closed by peer')")
    logs = [str(tmp_path / f"{r}.err") for r in range(2)]
    with pytest.raises(InputError, match=rf"^the distributed run failed: rank 1 \({words}"):
        run_ranks([sys.executable, "-c", RANK.format(folder=str(tmp_path), then=then)], 2, logs, timeout=60)


PARENT = """
import sys
from tfcalc.measure.launch import run_ranks
code, folder = sys.argv[1], sys.argv[2]
run_ranks([sys.executable, "-c", code], 2, [folder + "/0.err", folder + "/1.err"], timeout=120)
"""


@linux
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT, signal.SIGKILL],
                         ids=lambda s: signal.Signals(s).name)
def test_ranks_die_with_their_parent_whatever_the_signal(tmp_path, sig):
    """A parent using the Python API (no tfcalc handlers): SIGTERM/SIGHUP caught for the launch, SIGINT a
    KeyboardInterrupt through the finally, SIGKILL the kernel's PR_SET_PDEATHSIG."""
    code = RANK.format(folder=str(tmp_path), then="time.sleep(60)")
    parent = subprocess.Popen([sys.executable, "-c", PARENT, code, str(tmp_path)], cwd=ROOT,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        assert _wait_for(lambda: all((tmp_path / f"pid-{r}").exists() for r in range(2)), 60), "no ranks"
        time.sleep(0.2)  # both pid files written in full
        pids = [int((tmp_path / f"pid-{r}").read_text()) for r in range(2)]
        parent.send_signal(sig)
        parent.wait(timeout=30)
    finally:
        parent.kill()
    assert _wait_for(lambda: not any(_alive(p) for p in pids), 10), "a rank outlived its parent"


@linux
def test_the_folder_a_killed_run_left_is_swept_by_the_next(tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()  # a pid that no longer runs
    stale = tmp_path / f"{launch.TEMP_PREFIX}{dead.pid}-abc"
    (stale / "inductor").mkdir(parents=True)
    mine = tmp_path / f"{launch.TEMP_PREFIX}{os.getpid()}-xyz"  # a live run's: kept
    mine.mkdir()
    other = tmp_path / f"{launch.TEMP_PREFIX}notapid"
    other.mkdir()
    assert lifeline.sweep_stale(launch.TEMP_PREFIX, str(tmp_path)) == [stale.name]
    assert not stale.exists() and mine.exists() and other.exists()


def test_a_launch_names_its_folder_with_its_pid(monkeypatch):
    seen = {}

    def fake_run(cmd, nproc, logs, timeout, watch=None):
        seen["folder"] = Path(logs[0]).parent.name
        raise InputError("stop here")

    monkeypatch.setattr(launch, "run_ranks", fake_run)
    with pytest.raises(InputError, match="stop here"):
        launch.launch([{}], 1, device="cpu")
    assert seen["folder"].startswith(f"{launch.TEMP_PREFIX}{os.getpid()}-")
    assert not (Path(tempfile.gettempdir()) / seen["folder"]).exists()


def test_torch_distributed_debug_detail_is_not_passed_to_the_ranks(monkeypatch):
    monkeypatch.setenv("TORCH_DISTRIBUTED_DEBUG", "DETAIL")
    assert "TORCH_DISTRIBUTED_DEBUG" not in launch.rank_env(0, 2, 1234)
    monkeypatch.setenv("TORCH_DISTRIBUTED_DEBUG", "INFO")
    assert launch.rank_env(0, 2, 1234)["TORCH_DISTRIBUTED_DEBUG"] == "INFO"


def test_signal_names():
    assert lifeline.signal_name(11) == "SIGSEGV (a segmentation fault)"
    assert lifeline.signal_name(999) == "signal 999"


# a parent that takes a run folder, says its name, then waits to be killed (issue 33, cause 8)
HOLDS_FOLDER = ("import sys, time\n"
                "from tfcalc.measure.lifeline import run_folder\n"
                "with run_folder('tfcalc-dist-') as folder:\n"
                "    print(folder, flush=True)\n"
                "    time.sleep(60)\n")


@linux
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=lambda s: signal.Signals(s).name)
def test_a_run_folder_goes_with_its_parent_whatever_the_signal(tmp_path, sig):
    """SIGKILL runs no finally: the lifeline removes the folder; SIGTERM's default runs none either."""
    parent = subprocess.Popen([sys.executable, "-c", HOLDS_FOLDER], cwd=ROOT, stdout=subprocess.PIPE,
                              env={**os.environ, "PYTHONPATH": str(ROOT), "TMPDIR": str(tmp_path)})
    try:
        folder = Path(parent.stdout.readline().decode().strip())
        assert folder.parent == tmp_path and folder.is_dir()
        (folder / "rank-0.err").write_text("a rank's log\n")
        parent.send_signal(sig)
        parent.wait(timeout=30)
    finally:
        parent.kill()
    assert _wait_for(lambda: not folder.exists(), 10), "the run folder outlived its parent"
    assert list(tmp_path.iterdir()) == []


def test_a_run_folder_ending_normally_leaves_no_folder_and_no_lifeline(tmp_path, monkeypatch):
    started = []
    real = lifeline.lifeline
    monkeypatch.setattr(lifeline, "lifeline", lambda folder: started.append(real(folder)) or started[-1])
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    with pytest.raises(KeyError), lifeline.run_folder("tfcalc-dist-") as folder:
        assert Path(folder).is_dir()
        raise KeyError("any exception")
    assert not Path(folder).exists() and started[0].poll() is not None
