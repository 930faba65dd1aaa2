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


def silence_stdout() -> None:
    """After a broken pipe: point stdout at /dev/null, so the interpreter's final flush raises nothing."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):  # no real file behind stdout (a test's capture)
        pass
