"""Reports in a notebook: a one-line repr saying what was asked and the headline figure (it was a 5,184-
character dataclass dump), _repr_markdown_ and _repr_html_ with the command line's tables, to_dict(),
to_frame() where pandas is installed; tfcalc.compare() and tfcalc.scan() return reports like the others."""

from __future__ import annotations

import html
import subprocess
import sys

import pytest

import tfcalc

REPORTS = {
    "params": (lambda: tfcalc.params("gpt2", measure=False), ["params", "gpt2", "--no-measure"], "124,439,808"),
    "flops": (lambda: tfcalc.flops("gpt2"), ["flops", "gpt2"], "291.6 GFLOP"),
    "memory": (lambda: tfcalc.memory("llama2-7b", budget="24GiB"), ["memory", "llama2-7b", "--budget", "24GiB"],
               "12.55 GiB"),
    "infer": (lambda: tfcalc.infer("llama2-7b", batch=[1, 64]), ["infer", "llama2-7b", "--batch", "1,64"],
              "does not fit"),
    "plan": (lambda: tfcalc.plan("llama2-70b", tp=8, pp=2, dp=4, zero=1),
             ["plan", "llama2-70b", "--tp", "8", "--pp", "2", "--dp", "4", "--zero", "1"], "(does not fit)"),
    "compare": (lambda: tfcalc.compare("gpt2", "llama2-7b"), ["compare", "gpt2", "llama2-7b"], "gpt2, llama2-7b"),
    "scan": (lambda: tfcalc.scan("gpt2", [128, 1024, 4096]), ["scan", "gpt2", "--seq", "128,1024,4096"], "3,072"),
}


@pytest.mark.parametrize("name", REPORTS)
def test_repr_is_one_line_with_the_headline(name):
    build, _, figure = REPORTS[name]
    text = repr(build())
    assert "\n" not in text and len(text) < 200 and figure in text, text


@pytest.mark.parametrize("name", REPORTS)
def test_markdown_and_html_are_the_command_line_tables(cli, name):
    build, args, _ = REPORTS[name]
    report = build()
    assert report._repr_markdown_() == cli(*args, "--format", "markdown").out
    page = report._repr_html_()
    md = report._repr_markdown_()
    for title in [line.strip("*") for line in md.splitlines() if line.startswith("**") and line.endswith("**")]:
        assert f"<b>{html.escape(title)}</b>" in page
    separators = [line for line in md.splitlines() if line.startswith(("|:---", "|---:"))]  # one per table
    assert page.count("<table>") == len(separators) > 0


@pytest.mark.parametrize("name", REPORTS)
def test_to_dict_is_the_json_answer(cli, name):
    build, args, _ = REPORTS[name]
    data, answer = build().to_dict(), cli(*args, "--json").json()
    assert isinstance(data, dict)
    assert data == (answer if isinstance(answer, dict) else {"rows": answer})


def test_compare_and_scan_in_the_api_match_the_commands(cli):
    assert tfcalc.compare("gpt2", "llama2-7b", seq=512).to_json() == cli("compare", "gpt2", "llama2-7b", "-s", "512",
                                                                          "--json").json()
    assert tfcalc.scan("gpt2").to_json() == cli("scan", "gpt2", "--json").json()


def test_to_frame_is_the_csv_table(cli):
    """pandas is in the `test` extra (pyproject.toml), not a dependency: this runs wherever the tests do."""
    import io

    import pandas

    frame = tfcalc.memory("llama2-7b").to_frame()
    expected = pandas.read_csv(io.StringIO(cli("memory", "llama2-7b", "-f", "csv").out))
    assert list(frame.columns) == list(expected.columns) and len(frame) == len(expected)
    weights = frame[frame.iloc[:, 0] == "Weights"]
    assert int(weights["Bytes (bytes)"].iloc[0]) == int(expected[expected.iloc[:, 0] == "Weights"]["Bytes (bytes)"]
                                                       .iloc[0]) == 13476831232  # 6,738,415,616 params x 2 bytes


def test_to_frame_without_pandas_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "pandas", None)  # as if not installed: `import pandas` raises ImportError
    with pytest.raises(ImportError, match="to_frame\\(\\) needs pandas"):
        tfcalc.params("gpt2", measure=False).to_frame()


def test_tfcalc_works_without_pandas():
    """pandas is a test-only dependency: the package, its API and the CLI import and run with it absent."""
    code = ("import sys; sys.modules['pandas'] = None\n"
            "import tfcalc, tfcalc.notebook\n"
            "from tfcalc.cli.app import main\n"
            "assert tfcalc.params('gpt2', measure=False).to_dict()\n"
            "sys.argv = ['tfcalc', 'memory', 'gpt2', '-f', 'csv']\n"
            "main()\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("Item,") or "Weights" in r.stdout, r.stdout
