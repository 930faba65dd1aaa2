"""Signals and a closed stdout, turned into one line (or silence) and the exit code a shell expects.

- Ctrl-C (SIGINT), SIGTERM and SIGHUP raise ``Stopped``, a BaseException: every ``finally`` and
  ``except BaseException`` on the way out runs, so the snapshot writer removes its temporary file and the
  memory measurement kills its child process. SIGTERM's default action would end the process at once,
  with neither. ``Stopped`` is not a KeyboardInterrupt, because Typer turns that into a silent exit 130
  before tfcalc could say "interrupted". Exit code 128 + the signal's number (130, 143, 129), as a shell
  reports a process its signal ended; the first signal starts the way out, and later ones are ignored so
  that the cleanup is not cut short.
- a broken pipe (``tfcalc presets | head -1``) is not an error of tfcalc's: no message, and exit 141
  (128 + SIGPIPE), what a shell reports for ``yes | head -1`` -- not 1, the code of a failed check.
  Typer would print nothing but exit 1, so the BrokenPipeError is caught before Typer sees it.
"""

from __future__ import annotations

import errno
import os
import signal
import sys

SIGINT = signal.SIGINT
SIGNALS = {signal.SIGINT: "interrupted", signal.SIGTERM: "terminated"}
if hasattr(signal, "SIGHUP"):
    SIGNALS[signal.SIGHUP] = "hung up"
BROKEN_PIPE_EXIT = 128 + 13  # SIGPIPE


class Stopped(BaseException):
    """A signal asked tfcalc to stop (see the module docstring)."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum

    @property
    def exit_code(self) -> int:
        return 128 + self.signum

    @property
    def message(self) -> str:
        return SIGNALS.get(self.signum, "stopped by a signal")


class BrokenPipe(BaseException):
    """stdout was closed by its reader; not an error."""


def _stop(signum: int, frame) -> None:
    for sig in SIGNALS:  # one way out: a second Ctrl-C must not cut the cleanup short
        signal.signal(sig, signal.SIG_IGN)
    raise Stopped(signum)


def install() -> None:
    """Route SIGINT, SIGTERM and SIGHUP to Stopped (main thread only, as Python requires)."""
    for sig in SIGNALS:
        if signal.getsignal(sig) is not signal.SIG_IGN:  # nohup and friends ignore SIGHUP on purpose
            signal.signal(sig, _stop)


_CLOSED: set[int] = set()  # the standard descriptors that were closed when tfcalc started


def hold_closed_fds() -> None:
    """`tfcalc ... >&-` or `2>&-` starts tfcalc with descriptor 1 or 2 closed: Python then sets sys.stdout
    (sys.stderr) to None, and the next file tfcalc opens would get that number, so that a print meant for
    the terminal would land in it. /dev/null is opened onto each closed one first; which were closed is
    kept (closed_streams) so that a closed stdout is said, not written into nothing."""
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            _CLOSED.add(fd)
            try:
                null = os.open(os.devnull, os.O_RDWR)
                if null != fd:
                    os.dup2(null, fd)
                    os.close(null)
            except OSError:
                pass
    for name in ("stdout", "stderr"):  # Python left them None: /dev/null streams, so that no write raises
        if getattr(sys, name) is None:
            setattr(sys, name, open(os.devnull, "w", encoding="utf-8"))  # noqa: SIM115 -- lives as long as tfcalc


def closed_streams() -> bool:
    """Whether stdout was closed when tfcalc started (a test's capture has no descriptor: not closed)."""
    return 1 in _CLOSED or sys.stdout is None


_WRITE_ERRORS = {errno.ENOSPC, errno.EIO, errno.EFBIG, getattr(errno, "EDQUOT", errno.ENOSPC)}


def stdout_failed(error: OSError) -> bool:
    """Whether an OSError is stdout refusing what is written (/dev/full, a full disk, a dead terminal): a
    write error that names no file (every file tfcalc opens itself is named in its errors, and its own
    writes become one-line InputErrors in tfcalc.writing)."""
    return error.errno in _WRITE_ERRORS and error.filename is None


def silence_stdout() -> None:
    """After a broken pipe: point stdout at /dev/null, so the interpreter's final flush raises nothing."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):  # no real file behind stdout (a test's capture)
        pass
