"""What the renderers do with hostile text: Rich markup shown literally in every format, ASCII stand-ins,
one-line messages, and a budget past the search cap said to be one (issue 11)."""

from __future__ import annotations

import pytest
from hostile import TINY

from tfcalc.cli import render
from tfcalc.cli.render.ascii import to_ascii

NAME, SOURCE = "m[bold]x[/]", "[fp16] src [/] [v2]"


@pytest.fixture
def marked(tmp_path):
    path = tmp_path / "odd[v2].yaml"
    path.write_text(TINY + f'name: "{NAME}"\nsource: "{SOURCE}"\n', encoding="utf-8")
    return str(path)


FORMATTED = [["params"], ["flops"], ["memory"], ["scan", "--seq", "4..16"], ["compare", "gpt2"]]
MARKUP_CASES = ([(c, f) for c in FORMATTED for f in ("table", "markdown", "csv", "json")]
                + [(["memory", "--measure"], "table"), (["show"], None), (["snapshot", "-o", "-"], None)])


@pytest.mark.parametrize("command, fmt", MARKUP_CASES, ids=[f"{' '.join(c)} {f or ''}" for c, f in MARKUP_CASES])
def test_markup_in_names_and_sources_is_shown_as_typed(cli, marked, command, fmt):
    args = [command[0], marked, *command[1:]] + (["--format", fmt] if fmt else [])
    r = cli(*args)
    assert r.code == 0, r.err
    if fmt != "csv" or command[0] == "compare":  # CSV is one table without a title: no name but compare's headers
        assert NAME in r.out, r.out[:500]
    assert "MarkupError" not in r.err


def test_markup_in_a_progress_description_is_literal(monkeypatch, capsys):
    monkeypatch.setattr(render.sys.stderr, "isatty", lambda: True)
    with render.progress(f"bench {NAME} [/]", 2, enabled=True) as advance:
        advance()
        advance()


@pytest.mark.parametrize("text, expected", [
    ("✓ agree", "ok agree"), ("12·L·d² + V·d", "12.L.d^2 + V.d"), ("2¹⁰, 2²⁰", "2^10, 2^20"), ("Q·Kᵀ", "Q.K^T"),
    ("1024×768 — ok…", "1024x768 -- ok..."), ("naïve", "na?ve"), ("plain", "plain"),
])
def test_ascii_stand_ins(text, expected):
    assert to_ascii(text) == expected


def test_messages_are_one_line_and_short():
    assert render.one_line("a\nb\tc") == "a b c"
    long = render.one_line("start " + "x" * 10**6 + " end")
    assert len(long) <= render.MAX_MESSAGE and long.startswith("start ") and long.endswith(" end")


def test_a_budget_past_the_search_cap_is_a_lower_bound(cli):
    fit = cli("memory", "gpt2", "--budget", "99999999999PB", "--json").json()["fit"]
    assert fit["max_seq_capped"] and fit["max_batch_capped"]
    table = cli("memory", "gpt2", "--budget", "99999999999PB", "-f", "markdown").out
    assert "at least 1,099,511,627,776 tokens (the search stops there" in table
    normal = cli("memory", "gpt2", "--budget", "80GB", "--json").json()["fit"]
    assert not normal["max_seq_capped"] and not normal["max_batch_capped"]


def test_a_plot_title_with_dollars_is_literal(cli, tmp_path):
    pytest.importorskip("matplotlib")
    path = tmp_path / "m.yaml"
    path.write_text(TINY + 'name: "cost $5 \\\\frac{a $x^"\n', encoding="utf-8")
    r = cli("scan", str(path), "--seq", "4..8", "--plot", str(tmp_path / "p.png"))
    assert r.code == 0, r.err
    assert (tmp_path / "p.png").stat().st_size > 0
