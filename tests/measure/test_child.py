"""The measuring child process's protocol (tfcalc.measure.child): JSON lines as the run goes, the answer
last; a child that fails, or runs too long, is one line of error and never outlives the call."""

import os

import pytest

from tfcalc.config import ConfigError
from tfcalc.measure import child

ECHO = ("import json, sys; from tfcalc.measure.child import emitter; emit = emitter(sys.stdout); "
        "request = json.loads(sys.stdin.read()); print('a library talking'); print(3); "
        "emit('step', 'one'); emit('note', 'read me'); emit('step', 'two'); emit('answer', {'got': request})")


def test_events_reach_their_handlers_in_order_and_the_answer_comes_back():
    heard = []
    proc = child.spawn(ECHO, dict(os.environ))
    answer = child.converse(proc, {"x": 1}, {"step": lambda s: heard.append(("step", s)),
                                             "note": lambda s: heard.append(("note", s))}, timeout=60)
    assert answer == {"got": {"x": 1}}
    assert heard == [("step", "one"), ("note", "read me"), ("step", "two")]
    assert proc.returncode == 0 and proc.stdout.closed


def test_a_failing_child_is_one_line_with_its_last_words():
    proc = child.spawn("import sys; sys.stdin.read(); sys.stderr.write('first\\nthe reason\\n'); sys.exit(3)",
                       dict(os.environ))
    with pytest.raises(ConfigError, match=r"exit 3\): the reason$"):
        child.converse(proc, {}, {}, timeout=60)


def test_a_child_past_its_time_is_stopped():
    proc = child.spawn("import sys, time; sys.stdin.read(); time.sleep(60)", dict(os.environ))
    with pytest.raises(ConfigError, match="ran past 0.5 s"):
        child.converse(proc, {}, {}, timeout=0.5)
    assert proc.poll() is not None


def test_a_child_never_asked_is_stopped_and_closed():
    proc = child.spawn("import time; time.sleep(60)", dict(os.environ))
    child.stop(proc, close=True)
    assert proc.poll() is not None and proc.stdin.closed and proc.stderr_file.closed
