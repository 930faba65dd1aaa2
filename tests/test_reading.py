"""tfcalc.reading, tfcalc.yaml_load and tfcalc.errors.shown: the guards every user file passes through."""

from __future__ import annotations

import os
import time

import pytest
import yaml

from tfcalc import reading, yaml_load
from tfcalc.errors import InputError, shown, shown_path


def test_a_regular_file_is_read(tmp_path):
    (tmp_path / "a.yaml").write_text("n: 1\n")
    assert reading.read_text(tmp_path / "a.yaml", "YAML") == "n: 1\n"


def test_the_size_limit_counts_bytes_read_not_what_the_file_claims(tmp_path):
    (tmp_path / "a.yaml").write_text("x" * 101)
    with pytest.raises(InputError, match="larger than"):
        reading.read_text(tmp_path / "a.yaml", "YAML", limit=100)
    assert reading.read_text(tmp_path / "a.yaml", "YAML", limit=101) == "x" * 101
    start = time.monotonic()
    with pytest.raises(InputError, match="character device"):  # /proc files claim size 0; /dev/zero never ends
        reading.read_text("/dev/zero", "YAML")
    assert time.monotonic() - start < 1


def test_special_files_are_refused_before_reading(tmp_path):
    os.mkfifo(tmp_path / "fifo")  # no writer: a blocking open would wait forever
    with pytest.raises(InputError, match=r"is a FIFO \(named pipe\), not a JSON file"):
        reading.read_text(tmp_path / "fifo", "JSON")
    with pytest.raises(InputError, match="is a directory"):
        reading.read_text(tmp_path, "YAML")
    assert reading.special_kind(os.stat(tmp_path).st_mode) == "a directory"
    assert reading.special_kind(os.stat("/dev/null").st_mode) == "a character device"


@pytest.mark.parametrize("text, message", [
    ('{"a": 1, "a": 2}', "the key 'a' is given twice"),
    ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
    ("[" * 65 + "]" * 65, "nested more than 64 levels"),
    ('{"n": ' + "1" * 5000 + "}", "a number too long to read"),
    ("{n: 1}", "not valid JSON at line 1, column 2"),
])
def test_json_guards(text, message):
    with pytest.raises(InputError, match=message):
        reading.parse_json(text, "f.json")


def test_depth_is_measured_without_recursion():
    deep: list = []
    for _ in range(10_000):
        deep = [deep]
    with pytest.raises(InputError, match="nested more than 64"):
        reading.check_depth(deep, "x")
    reading.check_depth({"a": [[1], {"b": 2}]}, "x")


def bomb(levels: int, width: int = 9) -> str:
    rows = [f"- &a0 [{', '.join(['x'] * width)}]"]
    rows += [f"- &a{i} [{', '.join([f'*a{i - 1}'] * width)}]" for i in range(1, levels)]
    return "\n".join(rows) + "\n"


def test_alias_expansion_is_bounded_before_anything_is_built():
    assert len(yaml_load.load(bomb(3))) == 3  # 9 + 81 + 729 values: fine
    start = time.monotonic()
    with pytest.raises(yaml.YAMLError, match="expand to more than 10,000 values"):
        yaml_load.load(bomb(9))  # 9^9 = 387 million once expanded
    assert time.monotonic() - start < 1


@pytest.mark.parametrize("text, message", [
    ("a: &a [1, *a]", "refers to a value that contains it"),
    ("a: " + "[" * 65 + "]" * 65, "nested more than 64 levels"),
    ("a: " + "[" * 100_000 + "]" * 100_000, "nested more than 64 levels"),  # libyaml's composer would segfault
    ("a: 1\nb: 2\na: 3\n", r"the key 'a' is given twice \(lines 1 and 3\)"),
    ("n: " + "7" * 5000, "an integer of 5,000 digits is too long"),
])
def test_yaml_guards(text, message):
    with pytest.raises(yaml.YAMLError, match=message):
        yaml_load.load(text)


def test_yaml_still_reads_what_configs_use():
    assert yaml_load.load("eps: 1e-5\nx: 1.5\nflag: true\nnothing: null") == {"eps": 1e-5, "x": 1.5, "flag": True,
                                                                           "nothing": None}
    merged = yaml_load.load("base: &b {x: 1, y: 2}\nm:\n  <<: *b\n  x: 3\n")  # a merge may override its keys
    assert merged["m"] == {"x": 3, "y": 2}
    assert yaml_load.load("a: &a [1]\nb: *a") == {"a": [1], "b": [1]}
    assert yaml_load.load("1: a\n'1': b") == {1: "a", "1": "b"}  # an int and a string key differ


def test_shown_is_short_whatever_the_value():
    shared = ["x"] * 9
    for _ in range(8):
        shared = [shared] * 9  # 9^9 items if expanded
    start = time.monotonic()
    texts = [shown(shared), shown(10**5000), shown("y" * 10**6), shown({"a": [1, 2], "b": 2}), shown(b"z" * 500)]
    assert time.monotonic() - start < 0.1
    assert all(len(t) < 120 for t in texts), texts
    assert texts[1] == "a 5001-digit integer"
    assert texts[2].endswith("(str of 1,000,000 characters)")
    assert shown([1]) == "[1]" and shown("a") == "'a'" and shown(None) == "None" and shown(float("nan")) == "nan"
    assert shown(int("9" * 4000)) == "a 4000-digit integer"
    assert shown_path("/x" * 500).endswith("(1,000 characters)") and shown_path("/tmp/a") == "/tmp/a"
