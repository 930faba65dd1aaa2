"""--overlap and --offload read their lists by one rule (tfcalc.name_lists): repeated or comma-separated,
any case, 'none' or an empty value for nothing; an empty item, 'none' beside a name, an unknown name or a
name twice refused in one line, exit 2 -- the same for both flags."""

import pytest
from conftest import assert_one_line_error

import tfcalc
from tfcalc.errors import InputError
from tfcalc.name_lists import name_list

LAYOUT = ["llama2-7b", "--tp", "2", "--pp", "2", "--dp", "2", "--sequence-parallel", "--global-batch", "8",
          "--seq", "2048"]
FLAGS = {"--overlap": ("tp", "pp"), "--offload": ("optimizer", "activations")}


def _key(flag):
    return "overlap" if flag == "--overlap" else "offload"


@pytest.mark.parametrize("flag", FLAGS)
@pytest.mark.parametrize("values, want", [
    (["{a},{b}"], "ab"), (["{b},{a}"], "ab"), (["{a}", "--FLAG", "{b}"], "ab"), ([" {A} , {b} "], "ab"),
    (["{b}"], "b"), (["none"], ""), (["NONE"], ""), ([""], ""), (["  "], ""),
])
def test_both_flags_take_the_same_lists(cli, flag, values, want):
    a, b = FLAGS[flag]
    args = [v.format(a=a, b=b, A=a.upper()).replace("--FLAG", flag) for v in values]
    r = cli("plan", *LAYOUT, flag, *args, "--json")
    assert r.code == 0, r.err
    assert r.json()["layout"][_key(flag)] == [{"a": a, "b": b}[c] for c in want]


@pytest.mark.parametrize("flag", FLAGS)
@pytest.mark.parametrize("values, message", [
    (["{a},,{b}"], "has an empty item"), (["{a},"], "has an empty item"), ([",{a}"], "has an empty item"),
    ([","], "has an empty item"), (["{a}", "--FLAG", ""], "has an empty item"),
    (["none,{a}"], "none means no"), (["{a}", "--FLAG", "none"], "none means no"),
    (["{a},{a}"], "names each of"), (["{a}", "--FLAG", "{A}"], "names each of"),
    (["dp"], "takes"), (["{a};{b}"], "takes"), (["x" * 5000], "takes"), (["{a},\x1b[31m"], "takes"),
])
def test_both_flags_refuse_the_same_lists(cli, flag, values, message):
    a, b = FLAGS[flag]
    args = [v.format(a=a, b=b, A=a.upper()).replace("--FLAG", flag) for v in values]
    r = cli("plan", *LAYOUT, flag, *args)
    assert_one_line_error(r, f"{flag} {message}")
    assert len(r.err) < 300  # a long value is cut, not echoed


@pytest.mark.parametrize("flag", FLAGS)
def test_the_python_api_reads_a_text_by_the_same_rule(flag):
    a, b = FLAGS[flag]
    kwargs = dict(tp=2, pp=2, dp=2, sequence_parallel=True, global_batch=8, seq=2048)
    r = tfcalc.plan("llama2-7b", **kwargs, **{_key(flag): f"{b.upper()}, {a}"})
    assert r.to_json()["layout"][_key(flag)] == [a, b]
    for bad, words in ((f"{a},,{b}", "empty item"), (f"{a},{a}", "once"), ("none,x", "none means")):
        with pytest.raises(InputError, match=words):
            tfcalc.plan("llama2-7b", **kwargs, **{_key(flag): bad})
    with pytest.raises(InputError, match="once"):
        tfcalc.plan("llama2-7b", **kwargs, **{_key(flag): (a, a)})


def test_the_rule_itself():
    assert name_list("--x", None, ("p", "q")) == ()
    assert name_list("--x", ["Q", "p"], ("p", "q")) == ("p", "q")
    with pytest.raises(InputError, match="--x takes p, q or both"):
        name_list("--x", "r", ("p", "q"))
