"""Fuzzing the parsers of issue 33's bounds and guards (causes 1, 3, 8, 9): whatever text a count or size flag
gets, it is a count within the flag's bound or one line naming the flag; the output guard refuses exactly the
paths that are an input's file; a layer pattern's repeat of any length is read whole. A few hundred examples
each, in seconds."""

from __future__ import annotations

import os

import pytest
import typer
from hypothesis import HealthCheck, assume, example, given, settings, strategies as st

from tfcalc.cli.options import bounded_count, bounded_size
from tfcalc.errors import InputError
from tfcalc.measure import bounds

MANY = settings(max_examples=int(os.environ.get("TFCALC_FUZZ_EXAMPLES", 300)), deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture])
FEW = settings(max_examples=int(os.environ.get("TFCALC_FUZZ_EXAMPLES", 60)), deadline=None,
               suppress_health_check=[HealthCheck.function_scoped_fixture])

COUNT_FLAGS = [flag for flag in bounds.BOUNDS if flag not in ("--copy-size", "--max-time")]
LOW = {"--warmup": 0}
texts = st.one_of(
    st.integers().map(str), st.integers(-10, 10**7).map(str), st.text(max_size=30),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.tuples(st.integers(0, 10**6), st.sampled_from(["", "k", "K", "M", "B", "G", "T", "e3", "e9", "e99", ".5",
                                                      "x"])).map(lambda t: f"{t[0]}{t[1]}"),
    st.sampled_from(["1e6", "1e9", "100000", "100001", "10000", "0", "-0", "+5", " 7 ", "1_000", "٣", "1k",
                     "9" * 5000]),
)


@MANY
@given(flag=st.sampled_from(COUNT_FLAGS), text=texts)
def test_a_count_flag_reads_a_bounded_count_or_names_itself(flag, text):
    try:
        value = bounded_count(flag, LOW.get(flag, 1))(text)
    except typer.BadParameter as e:
        message = str(e.message)
        assert message.startswith(flag) and "\n" not in message and len(message) < 250, message
        return
    assert isinstance(value, int) and LOW.get(flag, 1) <= value <= bounds.largest(flag)


UNITS = ["B", "KiB", "MiB", "GiB", "TiB", "GB", "TB", "PB", "kb", ""]
sizes = st.one_of(texts, st.tuples(st.integers(0, 10**6), st.sampled_from(UNITS)).map(lambda t: f"{t[0]}{t[1]}"))


@MANY
@given(text=sizes)
def test_copy_size_reads_a_bounded_size_or_names_itself(text):
    from tfcalc.count.model.budget import parse_bytes

    try:
        same = bounded_size("--copy-size")(text)
    except typer.BadParameter as e:
        message = str(e.message)
        assert "--copy-size" in message and "\n" not in message and len(message) < 250, message
        return
    assert same == text and 1 <= parse_bytes(text, "--copy-size") <= bounds.largest("--copy-size")


anything = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True, allow_infinity=True),
                     st.text(max_size=10), st.lists(st.integers(), max_size=2))


@MANY
@given(flag=st.sampled_from(list(bounds.BOUNDS)), value=anything)
def test_the_api_side_check_takes_any_value(flag, value):
    """tfcalc.measure.bounds.check, what the reports call for the Python API: a value or one line."""
    try:
        if flag == "--max-time":
            out = bounds.check_seconds(flag, value)
            assert 0 < out <= bounds.largest(flag)
        else:
            out = bounds.check(flag, value, LOW.get(flag, 1))
            assert isinstance(out, int) and out <= bounds.largest(flag)
    except InputError as e:
        assert str(e).startswith(flag) and "\n" not in str(e) and len(str(e)) < 250, str(e)


@FEW
@given(flag=st.sampled_from(["--repeat", "--warmup", "--steps", "--matmul-size", "--copy-size"]), text=sizes)
@example(flag="--repeat", text="²")  # str.isdigit() is true for '²', and int() refuses it (found by this test)
@example(flag="--steps", text="\u0663")  # an Arabic-Indic 3: digits, but not the ASCII ones a count is written in
def test_bench_decode_refuses_a_bad_count_in_one_line_naming_it(cli, flag, text):
    """Through the command line: only values the parser refuses (a valid one would start a run)."""
    parse = bounded_size(flag) if flag == "--copy-size" else bounded_count(flag, LOW.get(flag, 1))
    try:
        parse(text)
        assume(False)
    except typer.BadParameter:
        pass
    assume(not text.startswith("-") or text.lstrip("-")[:1].isdigit())  # '--x' would read as another option
    r = cli("bench decode", "gpt2", flag, text)
    assert r.code == 2 and r.out == "", (r.code, r.err)
    assert r.err.count("\n") == 1 and flag in r.err and "internal error" not in r.err, r.err


@MANY
@given(digits=st.text("0123456789", min_size=1, max_size=60), group=st.booleans())
def test_a_pattern_repeat_of_any_length_is_read_whole(digits, group):
    from tfcalc.architecture.patterns import MAX_REPEAT, parse

    text = f"(full, full)*{digits}" if group else f"full*{digits}"
    try:
        runs = parse(text)
    except InputError as e:
        assert "\n" not in str(e) and ("repeat" in str(e) or "spans" in str(e)), str(e)
        assert "cannot read" not in str(e)
        return
    assert 1 <= int(digits) <= MAX_REPEAT and sum(len(r.kinds) * r.repeat for r in runs) == int(digits) * (
        2 if group else 1)


@FEW
@given(links=st.lists(st.sampled_from(["symlink", "hardlink", "copy"]), min_size=1, max_size=4),
       pick=st.integers(0, 10), folder_input=st.booleans())
def test_the_output_guard_refuses_exactly_an_inputs_file(tmp_path_factory, links, pick, folder_input):
    """Files a.yaml (read) and links or copies of it; writing to a name refused iff it is a.yaml's inode."""
    from tfcalc import writing

    d = tmp_path_factory.mktemp("out")
    (d / "a.yaml").write_text("n_layer: 2\n")
    names = ["a.yaml"]
    for i, kind in enumerate(links):
        name = f"l{i}.yaml"
        if kind == "symlink":
            os.symlink(names[-1], d / name)  # a chain of links, each to the last
        elif kind == "hardlink":
            os.link(d / names[-1], d / name)
        else:
            (d / name).write_text("n_layer: 2\n")
        names.append(name)
    out = d / names[pick % len(names)]
    same = os.stat(out).st_ino == os.stat(d / "a.yaml").st_ino
    inputs = [d] if folder_input else [d / "a.yaml"]
    if folder_input:  # a folder stands for every file of it tfcalc reads: each name here is one
        same = True
    if same:
        with pytest.raises(InputError, match="that is a file this command reads"):
            writing.refuse_inputs(out, inputs, "-o")
    else:
        writing.refuse_inputs(out, inputs, "-o")
    writing.refuse_inputs(d / "new.json", inputs, "-o")  # a new file is never an input
