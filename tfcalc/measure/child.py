"""A measuring child process that talks in JSON lines, so the parent can show its progress as it runs.

The child (``python -c <code>``) reads one JSON request on stdin and writes one JSON object per line on
stdout: ``{"step": name}`` as each step begins, ``{"note": line}`` for a line the user should read
before the run, and ``{"answer": {...}}`` last. The parent starts it early (``spawn``: the child imports
torch while the parent still checks the request), then ``converse`` sends the request and hands each
line to its handler as it arrives. stderr goes to a temporary file, read only when the child fails, so
a chatty child can never fill a pipe and stall.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import threading
from typing import Any, Callable, TextIO

from tfcalc.config import ConfigError


def spawn(code: str, env: dict[str, str]) -> subprocess.Popen:
    """Start the child. No orphan, whatever stops the parent: converse kills the child on any exception
    (Ctrl-C and SIGTERM arrive as tfcalc.cli.interrupts.Stopped), and the child may ask the kernel to
    kill it when the parent dies, SIGKILL included (tfcalc.measure.lifeline.die_with_parent). Its own
    session keeps a terminal's Ctrl-C to the parent, which then stops the child itself, once."""
    err = tempfile.TemporaryFile(mode="w+")
    proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=err, text=True, env=env, start_new_session=True)
    proc.stderr_file = err  # type: ignore[attr-defined]
    return proc


def emitter(stream: TextIO) -> Callable[[str, Any], None]:
    """The child's side: emit(kind, value) writes {kind: value} as one line, at once."""
    def emit(kind: str, value: Any) -> None:
        stream.write(json.dumps({kind: value}) + "\n")
        stream.flush()

    return emit


def stop(proc: subprocess.Popen, close: bool = False) -> None:
    """Kill the child if it still runs, and reap it; close: its pipes and stderr file too (a child
    never asked anything)."""
    if proc.poll() is None:
        proc.kill()
    proc.wait()
    if close:
        for stream in (proc.stdin, proc.stdout):
            if stream is not None and not stream.closed:
                stream.close()
        _close(proc)


def _close(proc: subprocess.Popen) -> None:
    err = getattr(proc, "stderr_file", None)
    if err is not None:
        err.close()


def _last_error_line(proc: subprocess.Popen) -> str:
    err = getattr(proc, "stderr_file", None)
    if err is None:
        return "?"
    err.seek(0)
    return (err.read().strip().splitlines() or ["?"])[-1]


def converse(proc: subprocess.Popen, request: dict[str, Any], handlers: dict[str, Callable[[Any], None]],
             timeout: float) -> dict[str, Any]:
    """Send request, pass each {kind: value} line to handlers[kind], return the answer. A child that
    dies, answers nothing or runs past timeout seconds is a one-line ConfigError; the child never
    outlives this call."""
    fired = []

    def kill() -> None:
        fired.append(True)
        proc.kill()

    timer = threading.Timer(timeout, kill)
    timer.start()
    answer = None
    try:
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(json.dumps(request))
        proc.stdin.close()
        for line in proc.stdout:
            try:
                message = json.loads(line)
            except json.JSONDecodeError:
                continue  # not ours (a library printing to stdout)
            if not isinstance(message, dict):
                continue
            for kind, value in message.items():
                if kind == "answer":
                    answer = value
                elif kind in handlers:
                    handlers[kind](value)
        proc.wait()
    except BrokenPipeError:  # the child died before it read the request
        proc.wait()
    finally:
        timer.cancel()
        stop(proc)
    why = _last_error_line(proc) if answer is None else ""
    stop(proc, close=True)
    if answer is not None:
        return answer
    if fired:
        raise ConfigError(f"the measurement ran past {timeout:g} s and was stopped; try a smaller --batch or --seq")
    if (proc.returncode or 0) < 0:
        why = "killed, likely out of memory"
    raise ConfigError(f"the measurement process failed (exit {proc.returncode}): {why}")
