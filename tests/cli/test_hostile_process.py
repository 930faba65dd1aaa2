"""Hostile conditions only a real process meets: signals, a closed pipe, an ASCII-only stdout, a low
`ulimit -v`, a FIFO (issue 11). Each runs `python -m tfcalc` with a time limit."""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent.parent
GOLDEN = ROOT / "tests" / "golden" / "snapshot.json"


def tfcalc(*args: str, env: dict | None = None, timeout: float = 120, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tfcalc", *args], capture_output=True, timeout=timeout, cwd=ROOT,
                          env={**os.environ, **(env or {})}, **kwargs)


def _processes(marker: bytes, parent: int | None = None) -> set[tuple[int, int]]:
    """(pid, start time in clock ticks) of the processes whose command line holds marker, read from /proc
    (ps cuts long command lines); given a parent, only its children. Both matter: other suites on the
    machine start the same children meanwhile (a child of theirs taken for ours outlives our parent), and
    a pid may be reused by a later child (the start time tells them apart)."""
    found = set()
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and marker in (entry / "cmdline").read_bytes():
                fields = (entry / "stat").read_text().rpartition(")")[2].split()  # after "pid (comm)"
                ppid, start = int(fields[1]), int(fields[19])  # stat(5): fields 4 and 22
                if parent is None or ppid == parent:
                    found.add((int(entry.name), start))
        except (OSError, ValueError, IndexError):  # gone meanwhile
            pass
    return found


def _measuring_children(parent: int | None = None) -> set[tuple[int, int]]:
    """tfcalc's measuring child processes (tfcalc.measure.memory.start_child), as _processes."""
    return _processes(b"import _child_main", parent)


def _wait_for(condition, timeout: float = 90) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if condition():
            return True
        time.sleep(0.1)
    return False


@pytest.mark.parametrize("sig, code, line", [(signal.SIGTERM, 143, "tfcalc: terminated"),
                                             (signal.SIGINT, 130, "tfcalc: interrupted")])
def test_a_signal_during_memory_measure_stops_the_child_too(sig, code, line):
    if not Path("/proc/self/cmdline").exists():
        pytest.skip("finds the child through /proc")
    proc = subprocess.Popen([sys.executable, "-m", "tfcalc", "memory", "gpt2", "--measure", "--training", "--batch",
                             "4", "--seq", "512"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT)
    try:
        assert _wait_for(lambda: _measuring_children(proc.pid)), "the measuring child never started"
        (child,) = _measuring_children(proc.pid)
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == code
    assert err.decode() == line + "\n" and out == b""
    assert _wait_for(lambda: child not in _measuring_children(), 10), "the measuring child outlived its parent"


def test_a_killed_parent_takes_its_measuring_child_along():
    """SIGKILL runs no handler: the child asked the kernel to kill it with its parent (PR_SET_PDEATHSIG)."""
    if not sys.platform.startswith("linux"):
        pytest.skip("PR_SET_PDEATHSIG and /proc are Linux's")
    proc = subprocess.Popen([sys.executable, "-m", "tfcalc", "memory", "gpt2", "--measure", "--training", "--batch",
                             "4", "--seq", "512"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT)
    assert _wait_for(lambda: _measuring_children(proc.pid)), "the measuring child never started"
    (child,) = _measuring_children(proc.pid)
    proc.kill()
    proc.wait(timeout=30)
    assert _wait_for(lambda: child not in _measuring_children(), 10), "the measuring child outlived its parent"


SLOW_WRITE = """
import sys, time
from tfcalc import writing
def slow_fsync(fd):
    sys.stderr.write("writing\\n"); sys.stderr.flush(); time.sleep(60)
writing.os.fsync = slow_fsync
sys.argv = ["tfcalc", "snapshot", "gpt2", "-o", sys.argv[1]]
from tfcalc.cli.app import main
main()
"""


def test_sigterm_while_writing_a_snapshot_leaves_the_old_file_and_no_temporary(tmp_path):
    out = tmp_path / "snap.json"
    out.write_text("old\n")
    proc = subprocess.Popen([sys.executable, "-c", SLOW_WRITE, str(out)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, cwd=ROOT)
    try:
        assert proc.stderr.readline() == b"writing\n"  # the temporary file exists, written, not yet renamed
        assert len(list(tmp_path.iterdir())) == 2
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 143 and err == b"tfcalc: terminated\n"
    assert [p.name for p in tmp_path.iterdir()] == ["snap.json"] and out.read_text() == "old\n"


@pytest.mark.parametrize("args", [["presets"], ["params", "gpt2", "--json", "--no-measure"],
                                  ["snapshot", "gpt2", "-o", "-"]],
                         ids=lambda a: " ".join(a))
def test_a_closed_pipe_exits_quietly_with_141(args):
    read, write = os.pipe()
    os.close(read)  # `tfcalc ... | head -0`: the reader is gone before the first write
    try:
        proc = subprocess.run([sys.executable, "-m", "tfcalc", *args], stdout=write, stderr=subprocess.PIPE,
                              cwd=ROOT, timeout=120)
    finally:
        os.close(write)
    assert proc.returncode == 141 and proc.stderr == b""


def test_head_reading_one_line_is_not_an_error():
    shell = f"{sys.executable} -m tfcalc presets | head -1; echo \"status ${{PIPESTATUS[0]}}\""
    proc = subprocess.run(["bash", "-c", shell], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert proc.stdout.splitlines()[0].startswith("Presets")
    assert proc.stdout.splitlines()[-1] in ("status 0", "status 141") and proc.stderr == ""


@pytest.mark.parametrize("args, code", [(["params", "gpt2"], 0), (["flops", "gpt2", "--verbose"], 0),
                                        (["memory", "gpt2", "--training"], 0), (["check", str(GOLDEN)], 0),
                                        (["show", "gpt2"], 0), (["params", "/tmp/naïve—×.yaml"], 2)],
                         ids=lambda a: " ".join(a) if isinstance(a, list) else str(a))
def test_an_ascii_only_stdout_gets_ascii_stand_ins(args, code):
    proc = tfcalc(*args, env={"PYTHONIOENCODING": "ascii"})
    assert proc.returncode == code, proc.stderr
    out, err = proc.stdout.decode("ascii"), proc.stderr.decode("ascii")  # raises if anything is not ASCII
    assert "Traceback" not in err
    if code:
        assert err.count("\n") == 1 and err.startswith("tfcalc: error: ")
    if args == ["params", "gpt2"]:
        assert "ok agree" in out and "12.L.d^2 + V.d" in out
    if args[0] == "check":
        assert out.startswith("ok ")


def _limit_address_space(gib: int):
    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (gib * 2**30, gib * 2**30))
    return apply


@pytest.mark.parametrize("args, message", [
    (["bench", "llama2-70b", "--n-layer", "1"], "the room under the address-space limit (ulimit -v)"),
    (["flops", "bert-base", "--measure", "--device", "cpu", "--batch", "2048", "--seq", "512"], "address-space limit"),
    (["memory", "gpt2", "--measure", "--training", "--batch", "64"], "address-space limit"),
], ids=["bench", "flops", "memory"])
def test_a_low_ulimit_v_is_refused_before_allocating(args, message):
    start = time.monotonic()
    proc = tfcalc(*args, preexec_fn=_limit_address_space(4))
    err = proc.stderr.decode()
    assert proc.returncode == 2, err
    assert err.count("\n") == 1 and message in err and "try " in err
    assert time.monotonic() - start < 60


def test_a_fifo_is_refused_without_waiting_for_a_writer(tmp_path):
    os.mkfifo(tmp_path / "model.yaml")
    proc = tfcalc("params", str(tmp_path / "model.yaml"), timeout=60)
    assert proc.returncode == 2 and b"is a FIFO" in proc.stderr


def test_dev_zero_is_refused_at_once():
    proc = tfcalc("params", "/dev/zero", timeout=60)
    assert proc.returncode == 2 and proc.stderr == b"tfcalc: error: /dev/zero: is a character device, not a YAML " \
                                                   b"file; tfcalc reads regular files only\n"


# ---- round 3 (issue 23): streams, environment and real ranks ----

def _shell(command: str, env: dict | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    """command run by bash with `tfcalc` standing for this interpreter's tfcalc; stdout+stderr captured."""
    line = command.replace("tfcalc ", f"{sys.executable} -m tfcalc ")
    return subprocess.run(["bash", "-c", line], capture_output=True, text=True, cwd=ROOT, timeout=timeout,
                          env={**os.environ, **(env or {})})


STREAM_CASES = [
    ("stdout-closed", "tfcalc params gpt2 >&-; echo status $?", None, "status 2",
     "tfcalc: error: stdout is closed (>&-): there is nowhere to write the answer"),
    ("stdout-closed-json", "tfcalc params gpt2 --json >&-; echo status $? >&2", None, "",
     "tfcalc: error: stdout is closed"),
    ("stdout-dev-full", "tfcalc params gpt2 > /dev/full; echo status $? >&2", None, "",
     "tfcalc: error: cannot write the answer to stdout (No space left on device)"),
    ("stdout-dev-full-json", "tfcalc flops gpt2 --json > /dev/full; echo status $? >&2", None, "",
     "tfcalc: error: cannot write the answer to stdout (No space left on device)"),
    ("stderr-closed-bad-input", "tfcalc params nosuchmodel 2>&-; echo status $?", None, "status 2", ""),
    ("both-closed-bad-input", "tfcalc params nosuchmodel 2>&- >&-; echo status $? >&2", None, "", ""),
    ("torch-logs-nonsense", "tfcalc params gpt2 > /dev/null", {"TORCH_LOGS": "nonsense"}, "",
     "tfcalc: error: torch cannot start with TORCH_LOGS='nonsense'"),
]


@pytest.mark.parametrize("case, command, env, out, err", STREAM_CASES, ids=[c[0] for c in STREAM_CASES])
def test_closed_and_full_streams_and_a_bad_environment_are_one_line(case, command, env, out, err):
    start = time.monotonic()
    proc = _shell(command, env)
    assert time.monotonic() - start < 60
    assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr, proc.stderr
    assert proc.stdout.strip() == out, proc.stdout[:300]
    lines = [line for line in proc.stderr.splitlines() if not line.startswith("status ")]
    if err:
        assert len(lines) == 1 and lines[0].startswith(err) and len(lines[0]) < 300, proc.stderr
    else:
        assert lines == [], proc.stderr
    status = [line for line in (proc.stdout + proc.stderr).splitlines() if line.startswith("status ")]
    assert status in ([], ["status 2"]), status


def _ranks(parent: int | None = None, program: bytes = b"tfcalc.measure.distributed") -> set[tuple[int, int]]:
    """tfcalc's distributed ranks (those running program), as _processes."""
    return _processes(program, parent)


RUNS = {"plan": (["plan", "gpt2", "--dp", "2", "--measure"], b"tfcalc.measure.distributed"),
        "infer-tp": (["infer", "gpt2", "--set", "n_layer=2", "--tp", "2", "--measure", "--seq", "8", "--gen", "2"],
                     b"tfcalc.measure.serving_tp")}


@pytest.mark.parametrize("run, sig", [("plan", signal.SIGTERM), ("plan", signal.SIGKILL), ("infer-tp", signal.SIGKILL)],
                         ids=["plan-SIGTERM", "plan-SIGKILL", "infer-tp-SIGKILL"])
def test_real_ranks_die_with_their_parent_and_leave_no_folder(tmp_path, run, sig):
    """`kill PID` (SIGTERM) runs tfcalc's way out; SIGKILL runs nothing: the kernel kills the ranks
    (PR_SET_PDEATHSIG) and the folder's lifeline removes the folder left in TMPDIR (issue 33, cause 8)."""
    if not sys.platform.startswith("linux"):
        pytest.skip("PR_SET_PDEATHSIG and /proc are Linux's")
    argv, program = RUNS[run]
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    proc = subprocess.Popen([sys.executable, "-m", "tfcalc", *argv], cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    try:
        assert _wait_for(lambda: len(_ranks(proc.pid, program)) == 2, 120), "the ranks never started"
        ranks = _ranks(proc.pid, program)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert _wait_for(lambda: not (ranks & _ranks(program=program)), 15), "a rank outlived its parent"
    assert _wait_for(lambda: not list(tmp_path.glob("tfcalc-dist-*")), 15), "the run folder outlived its parent"
    if sig == signal.SIGTERM:
        assert proc.returncode == 143 and err.decode() == "tfcalc: terminated\n"
