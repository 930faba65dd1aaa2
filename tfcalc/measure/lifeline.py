"""Child processes that never outlive tfcalc, and the folders they leave when tfcalc is killed.

- ``die_with_parent``: Linux's PR_SET_PDEATHSIG (prctl(2)) asks the kernel to SIGKILL the caller when its
  parent dies, whatever killed the parent -- SIGKILL included, which no handler sees. Called first thing
  in every child (the measuring child, each distributed rank), then the parent's pid is compared with the
  one it was started by, in case the parent died before the request was made. Pure ctypes: no torch.
- ``sweep_stale``: a temporary folder named ``<prefix><pid>-...`` whose pid no longer runs was left by a
  tfcalc that was SIGKILLed (no ``finally`` ran); the next run removes it. Only folders of this user.
- ``signal_name``: how a process ended, in words (``SIGKILL``, ``SIGSEGV (segmentation fault)``).
"""

from __future__ import annotations

import os
import shutil
import signal
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
        if not text.isdigit():
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
        if not pid_text.isdigit() or st.st_uid != os.getuid() or not entry.is_dir() or entry.is_symlink():
            continue
        if _alive(int(pid_text)):
            continue
        shutil.rmtree(entry, ignore_errors=True)
        removed.append(entry.name)
    return removed
