"""Child processes that never outlive tfcalc, and the folders they leave when tfcalc is killed.

- ``die_with_parent``: Linux's PR_SET_PDEATHSIG (prctl(2)) asks the kernel to SIGKILL the caller when its
  parent dies, whatever killed the parent -- SIGKILL included, which no handler sees. Called first thing
  in every child (the measuring child, each distributed rank), then the parent's pid is compared with the
  one it was started by, in case the parent died before the request was made. Pure ctypes: no torch.
- ``run_folder``: the temporary folder of one measured run (its request, the ranks' logs, answers and
  progress), removed however the run ends. A ``finally`` removes it on every ending that runs code; for
  SIGKILL, which runs none, a lifeline removes it: a small process (no torch, started in its own session so
  that a signal to tfcalc's process group does not reach it) that waits for its parent -- tfcalc -- to go,
  then removes the folder (after the ranks, which the kernel kills with tfcalc, are gone) and leaves. It
  leaves by itself as soon as the folder is gone, so after a run that ended normally it is gone too
  (issue 33). It watches its own parent pid (getppid changes when the parent dies), which no pid reuse fools.
- ``sweep_stale``: a temporary folder named ``<prefix><pid>-...`` whose pid no longer runs was left by a
  tfcalc that was SIGKILLed together with its lifeline (a `kill -9` of every process); the next run removes
  it. Only folders of this user.
- ``signal_name``: how a process ended, in words (``SIGKILL``, ``SIGSEGV (segmentation fault)``).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

PARENT_ENV = "TFCALC_PARENT_PID"
_PR_SET_PDEATHSIG = 1  # linux/prctl.h

_SIGNAL_WORDS = {"SIGSEGV": "a segmentation fault", "SIGBUS": "a bus error", "SIGABRT": "an abort",
                 "SIGKILL": "killed: out of memory, or by another process", "SIGFPE": "an arithmetic fault",
                 "SIGILL": "an illegal instruction", "SIGTERM": "terminated", "SIGINT": "interrupted"}


def die_with_parent(parent: int | None = None) -> None:
    """Linux: be SIGKILLed by the kernel when the parent dies; exit at once when it already has. Elsewhere
    (or without prctl) the parent's handlers must do. parent: the pid expected (default: $TFCALC_PARENT_PID;
    nothing is done without one, as under torchrun, whose own agent stops its workers)."""
    if parent is None:
        text = os.environ.get(PARENT_ENV, "")
        if not (text.isascii() and text.isdigit()):
            return
        parent = int(text)
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL))
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:
        os._exit(1)


def signal_name(signum: int) -> str:
    """'SIGSEGV (a segmentation fault)', 'SIGKILL (killed: out of memory, or by another process)', ..."""
    try:
        name = signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"
    return f"{name} ({_SIGNAL_WORDS[name]})" if name in _SIGNAL_WORDS else name


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive
        return True
    return True


def sweep_stale(prefix: str, folder: str | None = None) -> list[str]:
    """Remove the folders ``<prefix><pid>-*`` in the temporary folder whose pid is gone (see the module
    docstring); the names removed."""
    removed = []
    root = Path(folder or tempfile.gettempdir())
    try:
        entries = list(root.glob(f"{prefix}*"))
    except OSError:
        return removed
    for entry in entries:
        pid_text = entry.name[len(prefix):].split("-", 1)[0]
        try:
            st = entry.lstat()
        except OSError:
            continue
        mine = st.st_uid == os.getuid() and entry.is_dir() and not entry.is_symlink()
        if not (pid_text.isascii() and pid_text.isdigit() and mine):
            continue
        if _alive(int(pid_text)):
            continue
        shutil.rmtree(entry, ignore_errors=True)
        removed.append(entry.name)
    return removed


# The lifeline's program, run with -I (no site, no PYTHONPATH: nothing of tfcalc or torch to import): argv is
# the folder and the parent's pid. It polls every 0.1 s: a lifeline costs one sleeping process and no CPU.
_LIFELINE = """
import os, shutil, sys, time
folder, parent = sys.argv[1], int(sys.argv[2])
while os.path.isdir(folder):
    if os.getppid() != parent:
        for _ in range(20):
            time.sleep(0.1)
            shutil.rmtree(folder, ignore_errors=True)
            if not os.path.lexists(folder):
                break
        break
    time.sleep(0.1)
"""


def lifeline(folder: str) -> subprocess.Popen | None:
    """Start the process that removes folder once this process is gone (see the module docstring); None
    where it cannot start (the sweep of the next run is then the fallback)."""
    try:
        return subprocess.Popen([sys.executable, "-I", "-c", _LIFELINE, folder, str(os.getpid())],
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True, close_fds=True)
    except OSError:
        return None


def end_lifeline(proc: subprocess.Popen | None) -> None:
    """Stop the lifeline of a folder this process removed itself (it would leave within 0.1 s anyway)."""
    if proc is not None and proc.poll() is None:
        with contextlib.suppress(OSError):
            proc.kill()
        proc.wait()


@contextlib.contextmanager
def run_folder(prefix: str):
    """A fresh temporary folder ``<prefix><pid>-XXXX`` for one run, removed when the block ends however it
    ends, and by its lifeline when this process is SIGKILLed; folders left by killed runs are swept first."""
    sweep_stale(prefix)
    folder = tempfile.mkdtemp(prefix=f"{prefix}{os.getpid()}-")
    watcher = lifeline(folder)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)
        end_lifeline(watcher)
