"""Progress within 2 s in every format, and an ETA that moves (issue 32)."""

from __future__ import annotations

import os
import select
import subprocess
import sys
import time

import pytest

from tfcalc.cli.render.eta import countdown

pty = pytest.importorskip("pty")


@pytest.mark.parametrize("fmt", ["table", "json", "csv"])
def test_a_timed_command_says_something_on_a_terminal_within_2_s(fmt, tmp_path):
    """stderr a terminal, stdout a file: the first bytes on stderr come before torch is imported."""
    master, slave = pty.openpty()
    started = time.monotonic()
    with open(tmp_path / "out", "wb") as out:
        p = subprocess.Popen([sys.executable, "-m", "tfcalc", "bench", "gpt2", "--set", "n_layer=1", "--seq", "8",
                              "--format", fmt], stdout=out, stderr=slave, stdin=subprocess.DEVNULL,
                             env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    os.close(slave)
    first, data = None, b""
    try:
        while time.monotonic() - started < 30 and first is None:
            ready, _, _ = select.select([master], [], [], 0.02)
            if ready:
                data += os.read(master, 4096)
                first = time.monotonic() - started
    finally:
        p.kill()
        p.wait()
        os.close(master)
    assert first is not None and first < 2.0, (first, data)
    assert b"tfcalc bench: starting" in data
    assert (tmp_path / "out").read_bytes() == b""  # nothing but the answer ever goes to stdout


def test_the_eta_counts_down_between_forecasts_and_says_when_it_runs_over():
    deadline = 100.0
    shown = [countdown(deadline, now, finished=False) for now in (91.0, 95.0, 99.6, 103.0)]
    assert shown == ["ETA 0:09", "ETA 0:05", "ETA 0:00", "ETA over by 0:03"]
    assert countdown(deadline, 103.0, finished=True) == "ETA 0:00"


def test_the_bar_column_reads_the_forecast_the_work_gave(monkeypatch):
    from types import SimpleNamespace

    from tfcalc.cli.render import eta

    column = eta.Countdown()
    task = SimpleNamespace(fields={"deadline": 50.0, "eta": "ETA 0:05"}, finished=False)
    monkeypatch.setattr(eta.time, "monotonic", lambda: 45.0)
    first = column.render(task).plain
    monkeypatch.setattr(eta.time, "monotonic", lambda: 48.0)
    assert (first, column.render(task).plain) == ("ETA 0:05", "ETA 0:02")
