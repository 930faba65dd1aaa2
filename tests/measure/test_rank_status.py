"""Each rank's progress (issue 21): the status files a rank writes, the parent's reader that never moves a
rank back, and the one line per rank `bench ranks` and `plan --measure` show. The real 2-rank run is
tests/measure/test_distributed.py::test_each_rank_reports_its_phase_and_only_moves_forward."""

import io
import json

from tfcalc.cli import render
from tfcalc.measure.rank_status import RankStatus, StatusReader, StatusWriter, status_path


def test_the_reader_keeps_each_ranks_furthest_step(tmp_path):
    reader = StatusReader(str(tmp_path), 2)
    assert [s.phase for s in reader.poll()] == ["starting (importing torch)"] * 2  # nothing written yet
    w0 = StatusWriter(str(tmp_path), 0, 5)
    w0.write("rendezvous")
    w0.advance("building the model")
    w0.advance("timed 1 of 3")
    assert reader.poll()[0] == RankStatus(0, 2, 5, "timed 1 of 3")
    # a stale file (an older step) and a torn one are ignored: the line stays where it was
    with open(status_path(str(tmp_path), 0), "w", encoding="utf-8") as f:
        json.dump({"done": 1, "total": 5, "phase": "building the model"}, f)
    assert reader.poll()[0].done == 2
    with open(status_path(str(tmp_path), 0), "w", encoding="utf-8") as f:
        f.write('{"done": 4, "tot')
    assert reader.poll()[0] == RankStatus(0, 2, 5, "timed 1 of 3")
    assert reader.poll()[1].done == 0


def test_the_writer_never_counts_past_its_total(tmp_path):
    w = StatusWriter(str(tmp_path), 1, 2)
    for _ in range(4):
        w.advance("x")
    assert StatusReader(str(tmp_path), 2).poll()[1] == RankStatus(1, 2, 2, "x")


class _Terminal(io.StringIO):
    def isatty(self):
        return True


def test_one_line_per_rank_with_its_phase(monkeypatch):
    err = _Terminal()
    monkeypatch.setattr("sys.stderr", err)
    monkeypatch.setenv("COLUMNS", "120")
    with render.ranks_progress("bench ranks gpt2", 2) as show:
        show([RankStatus(0, 3, 10, "timed 1 of 5"), RankStatus(1, 2, 10, "warm-up 2 of 3")])
    text = err.getvalue()
    assert "bench ranks gpt2: rank 0: timed 1 of 5" in text and "3/10" in text
    assert "bench ranks gpt2: rank 1: warm-up 2 of 3" in text and "2/10" in text


def test_quiet_off_a_terminal(monkeypatch, capsys):
    with render.ranks_progress("plan gpt2", 2) as show:
        show([RankStatus(0, 1, 2, "x")])
    assert capsys.readouterr().err == ""
