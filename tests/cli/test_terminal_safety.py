"""What reaches a terminal from a file, a name or a flag (issue 23, cause 4): control characters escaped
(no escape sequence clears the screen, sets the title or forges a line), invisible format characters
escaped, long strings cut with their length, on stdout (every format) and on stderr."""

from __future__ import annotations

import json
import re

import pytest
from hostile import DEVICE, TINY, hf, safetensors_bytes

from tfcalc.cli.render.safe import safe

ESCAPE = "\x1b[2J\x1b]0;pwned\x07"
RAW = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u202e]")  # every control character but the newline


def _clean(text: str) -> None:
    text = text.replace("\r\n", "\n")  # CSV's own line ending (RFC 4180), not a character of the input
    assert not RAW.search(text), repr(RAW.search(text).group(0))
    assert "pwned" not in text or "\\x1b" in text  # shown escaped (Markdown doubles the backslash)


@pytest.fixture
def files(tmp_path):
    (tmp_path / "model.yaml").write_text(TINY + 'name: "\\e[2J\\e]0;pwned\\a\\u202eevil"\n', encoding="utf-8")
    (tmp_path / "gpu.yaml").write_text(DEVICE.replace("name: My GPU", 'name: "\\e[2J\\e]0;pwned\\a"'),
                                       encoding="utf-8")
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / "config.json").write_text(hf(), encoding="utf-8")
    long_name = "\x1b[2J\nforged: all good\n" + "x" * 1_000_000
    (ckpt / "model.safetensors").write_bytes(safetensors_bytes({long_name: [1]}))
    return tmp_path


CASES = [
    ("model-name-table", ["params", "{d}/model.yaml", "--no-measure"], 0),
    ("model-name-markdown", ["flops", "{d}/model.yaml", "-f", "markdown"], 0),
    ("model-name-csv", ["memory", "{d}/model.yaml", "-f", "csv"], 0),
    ("model-name-show", ["show", "{d}/model.yaml"], 0),
    ("set-name", ["params", "gpt2", "--no-measure", "--set", f"name={ESCAPE}"], 0),
    ("device-name-infer", ["infer", "gpt2", "--device-spec", "{d}/gpu.yaml"], 0),
    ("device-name-plan", ["plan", "gpt2", "--dp", "8", "--device-spec", "{d}/gpu.yaml"], 0),
    ("tensor-name-params", ["params", "{d}/ckpt", "--no-measure", "--verbose"], 1),
    ("preset-name-error", ["params", ESCAPE + "\nforged"], 2),
    ("device-key-error", ["infer", "gpt2", "--device-spec", ESCAPE], 2),
    ("set-value-error", ["params", "gpt2", "--set", f"n_layer={ESCAPE}"], 2),
]


@pytest.mark.parametrize("case, argv, code", CASES, ids=[c[0] for c in CASES])
def test_nothing_raw_reaches_the_terminal(cli, files, case, argv, code):
    r = cli(*[a.replace("{d}", str(files)) for a in argv])
    assert r.code == code, r.err[:300]
    for stream in (r.out, r.err):
        _clean(stream)
        assert not any(line.startswith("forged") for line in stream.splitlines())
        assert len(stream) < 200_000  # the 1 MB tensor name is cut, with its length
    if code == 2:
        assert r.err.count("\n") == 1 and len(r.err) < 300
    if case == "tensor-name-params":
        assert re.search(r"\(1,000,0\d\d characters\)", r.out + r.err)


def test_json_keeps_the_text_and_escapes_it_as_json_does(cli):
    r = cli("params", "gpt2", "--no-measure", "--json", "--set", f"name={ESCAPE}")
    assert "\x1b" not in r.out and json.loads(r.out)["preset"] == ESCAPE


@pytest.mark.parametrize("text, shown", [
    ("plain [v2]", "plain [v2]"), ("a\x1b[2Jb", "a\\x1b[2Jb"), ("line\nforged", "line\\nforged"),
    ("rtl\u202eevil", "rtl\\u202eevil"), ("bell\x07", "bell\\x07"), ("c1\x9b", "c1\\x9b"),
    ("x" * 1000, "x" * 260 + "… (1,000 characters)"),
])
def test_safe(text, shown):
    assert safe(text) == shown


def test_markup_in_a_set_name_is_that_name(cli):
    r = cli("params", "gpt2", "--no-measure", "--set", "name=[bold]x[/bold]", "--json")
    assert r.code == 0 and r.json()["preset"] == "[bold]x[/bold]"
    table = cli("params", "gpt2", "--no-measure", "--set", "name=[bold]x[/bold]")
    assert "[bold]x[/bold]" in table.out
