"""Small things a new user met (issue 21): help once, honest wording, whole advice, titles at the
terminal's width, several models' reports apart."""

from __future__ import annotations

import io

import pytest
from conftest import assert_one_line_error
from rich.console import Console

from tfcalc.cli.render import backends
from tfcalc.cli.render.doc import Column, Doc


def test_bare_tfcalc_prints_the_help_once(cli):
    r = cli()
    assert r.code == 0 and r.out.count("Usage: tfcalc") == 1, r.out


def test_sinusoidal_positions_name_no_channel_count(cli):
    """transformer-base said 'sinusoidal on 0 of 64 channels': only RoPE rotates some channels."""
    out = " ".join(cli("params", "transformer-base").out.split())
    assert "Positions: sinusoidal, no parameters" in out and "0 of 64" not in out
    partial = " ".join(cli("params", "gpt2", "--set", "pos_encoding=rope", "--set", "rope_fraction=0.25").out.split())
    assert "rope on 16 of 64 channels per head" in partial


def test_scan_help_offers_no_device_list(cli):
    """scan refused --device-spec list, which its help offered; `tfcalc devices` is the table."""
    r = cli("scan", "--help")
    assert r.code == 0 and "list" not in r.out.split("--device-spec")[1].split("--")[0]
    assert "tfcalc devices" in " ".join(r.out.split())


def test_devices_command_and_the_old_spelling(cli):
    table = cli("devices", "--json")
    assert table.code == 0 and any(d["key"] == "h100-sxm" for d in table.json())
    old = cli("infer", "--device-spec", "list", "--json")
    assert old.code == 0 and old.json() == table.json()
    assert old.err.count("\n") == 1 and "tfcalc devices" in old.err


def _render(doc: Doc, width: int) -> str:
    buffer = io.StringIO()
    backends.write_rich(doc, Console(file=buffer, width=width, color_system=None))
    return buffer.getvalue()


def test_a_title_wraps_to_the_terminal_not_the_table():
    doc = Doc()
    title = "a long title of a narrow table, which once wrapped to the table's own width of a dozen columns"
    doc.table(title, Column("x", "int")).add(1)
    lines = _render(doc, 120).splitlines()
    assert lines[0] == title


def test_several_models_are_separated_by_a_rule(cli):
    out = cli("params", "gpt2", "llama2-7b", "--no-measure").out
    before, after = out.split("llama2-7b: parameters")
    assert "────────" in before.splitlines()[-2] or set(before.rstrip().splitlines()[-1]) <= {"─", " "}
    md = cli("flops", "gpt2", "llama2-7b", "--format", "markdown").out
    assert "\n---\n" in md


@pytest.mark.parametrize("spec, expected", [("H100", "'h100-nvl', 'h100-pcie', 'h100-sxm'"), ("A100-80GB", None),
                                            ("v10", "'v100'")])
def test_device_names_suggested_by_prefix_and_case(cli, spec, expected):
    """`--device-spec H100` suggested v100 (difflib alone): a prefix names every device it begins."""
    r = cli("infer", "llama2-7b", "--device-spec", spec, "--json")
    if expected is None:
        assert r.code == 0, r.err  # the case of a whole key is ignored
    else:
        assert_one_line_error(r, f"(did you mean {expected}?)")


def test_preset_names_suggested_by_prefix(cli):
    assert_one_line_error(cli("params", "llama2"), "did you mean 'llama2-13b', 'llama2-70b', 'llama2-7b'?")
