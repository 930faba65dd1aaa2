"""tfcalc compare, tfcalc scan (table, JSON, PNG plot), and plain output for pipes and NO_COLOR."""

import builtins
import os
import re
import struct
import subprocess
import sys

import pytest

from tfcalc.cli.options import parse_lengths
from tfcalc.count.model import flops as count_flops, memory as count_memory
from tfcalc.presets import load
from tfcalc.workload import Workload


def parse_seq_range(text):
    return sorted(set(parse_lengths(text)))


def test_compare_side_by_side(cli):
    rows = cli("compare", "gpt2", "llama2-7b", "llama2-70b", "--json").json()
    assert [r["preset"] for r in rows] == ["gpt2", "llama2-7b", "llama2-70b"]
    seven, seventy = rows[1], rows[2]
    assert seven["params"] == 6_738_415_616
    # KV cache per token, bf16: 2 (K and V) * layers * kv heads * d_head * 2 bytes
    assert seven["kv_cache_bytes_per_token"] == 2 * 32 * 32 * 128 * 2
    assert seventy["kv_cache_bytes_per_token"] == 2 * 80 * 8 * 128 * 2
    assert all(r["seq"] == 1024 for r in rows)  # one length for all: the shortest context (gpt2's)
    assert seven["forward_flops_per_token"] * 1024 == count_flops.forward_flops(
        load("llama2-7b"), Workload(batch=1, seq=1024)
    )
    at_4096 = cli("compare", "llama2-7b", "llama2-70b", "--seq", "4096", "--json").json()[0]
    assert at_4096["forward_flops_per_token"] * 4096 == count_flops.forward_flops(
        load("llama2-7b"), Workload(batch=1, seq=4096)
    )
    assert seven["training_flops_per_token"] == 3 * seven["forward_flops_per_token"]
    table = cli("compare", "gpt2", "llama2-7b").out
    assert "KV cache / token" in table and "Highlighted: differs from the first model" in table


def test_compare_refuses_a_single_model(cli):
    r = cli("compare", "gpt2")
    assert r.code == 2 and "at least two" in r.err


@pytest.mark.parametrize(
    "text, expected",
    [("128..1024", [128, 256, 512, 1024]), ("100..1000", [100, 200, 400, 800, 1000]), ("7", [7]),
     ("4096,256,1024", [256, 1024, 4096])],
)
def test_seq_ranges(text, expected):
    assert parse_seq_range(text) == expected


@pytest.mark.parametrize("text", ["0..8", "8..4", "a..b", "", "1,x", "-4"])
def test_bad_seq_ranges_exit_2(cli, text):
    r = cli("scan", "gpt2", "--seq", text)
    assert r.code == 2 and r.err.count("\n") == 1 and "--seq" in r.err


def test_scan_json_and_crossover_marks(cli):
    report = cli("scan", "gpt3", "--seq", "1024..131072", "--json").json()
    assert report["crossover_seq"] == {"scores_vs_ffn": 49_152, "attention_vs_ffn": 24_576}
    cfg = load("gpt3")
    for row in report["rows"]:
        assert row["forward_flops"] == count_flops.forward_flops(cfg, Workload(batch=1, seq=row["seq"]))
        assert row["kv_cache_bytes"] == count_memory.kv_cache_bytes(
            cfg, Workload(batch=1, seq=row["seq"], dtype="bf16")
        )
    below, above = [r for r in report["rows"] if r["seq"] in (32_768, 65_536)]
    assert below["attention_scores"] < below["ffn"] <= above["attention_scores"]
    table = cli("scan", "gpt3", "--seq", "1024..131072").out
    assert "◀ attention" in table and "◀ scores" in table and "T = 49,152" in table
    marked = [line.split()[0] for line in table.splitlines() if "◀" in line and line[0].isdigit()]
    assert marked == ["32,768*", "65,536*"]  # the first lengths past 24,576 and 49,152
    assert "beyond the context length" in table


def _png_size(path):
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    assert data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def test_scan_plot_writes_a_png_with_the_curves(cli, tmp_path):
    pytest.importorskip("matplotlib")
    out = tmp_path / "scan.png"
    r = cli("scan", "gpt3", "--plot", str(out))
    assert r.code == 0, r.err
    width, height = _png_size(out)
    assert width > 1000 and height > 400
    # the curves are really there: the figure has a line per component and the crossover markers
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    from tfcalc.cli.render import plot as plotting
    from tfcalc.report import resolve
    from tfcalc.report.scan import build_scan

    drawn = {}
    real_close = plt.close

    def keep(fig):
        drawn["fig"] = fig

    plt.close = keep
    try:
        report = build_scan(resolve("gpt3"), parse_seq_range("128..131072"))
        plotting.scan_plot(report.to_json(), tmp_path / "again.png")
    finally:
        plt.close = real_close
    flops_ax, mem_ax = drawn["fig"].axes
    labels = {line.get_label() for line in flops_ax.get_lines()}
    assert {"attention scores (QKᵀ, A·V)", "FFN", "attention projections (Q, K, V, O)", "LM head"} <= labels
    texts = " ".join(t.get_text() for t in flops_ax.texts)
    assert "T = 49,152" in texts and "T = 24,576" in texts
    assert {line.get_label() for line in mem_ax.get_lines()} >= {"KV cache (inference)", "activations (training)"}
    real_close(drawn["fig"])


def test_scan_plot_without_matplotlib_says_how_to_get_it(cli, tmp_path, monkeypatch):
    real_import = builtins.__import__

    def no_matplotlib(name, *args, **kwargs):
        if name == "matplotlib" or name.startswith("matplotlib."):
            raise ImportError("No module named 'matplotlib'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_matplotlib)
    r = cli("scan", "gpt2", "--plot", str(tmp_path / "x.png"))
    assert r.code == 2 and "pip install 'tfcalc[plot]'" in r.err


COLOUR = re.compile(r"\x1b\[(?:[0-9;]*;)?(?:3[0-7]|38;|9[0-7])")  # a foreground colour, not bold/italic/dim


def _run(env_changes):
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "FORCE_COLOR")}
    env.update(env_changes, TERM="xterm-256color")
    proc = subprocess.run([sys.executable, "-m", "tfcalc", "params", "gpt3-xl", "--no-measure"], capture_output=True,
                          text=True, env=env)
    assert proc.returncode == 0 and "1,517,123,584" in proc.stdout
    return proc.stdout


def test_piped_output_is_plain_and_no_color_is_respected():
    assert not COLOUR.search(_run({}))  # a pipe: no escape codes at all
    assert "\x1b[" not in _run({})
    assert COLOUR.search(_run({"FORCE_COLOR": "1"}))  # the yellow note, when a terminal is forced
    assert not COLOUR.search(_run({"FORCE_COLOR": "1", "NO_COLOR": "1"}))


def test_shell_completion_and_version(cli):
    r = cli("--help")
    assert "--install-completion" in r.out and "--version" in r.out


@pytest.mark.parametrize("model,dtype,expected", [
    ("gpt-oss-120b", "bf16", 65_248_815_744),  # experts stored as MXFP4 (docs/serving.md, "Experts as stored")
    ("llama2-7b", "int4", 3_889_307_648),  # int4 matrices with their scales and zero points, the rest bf16
    ("gpt2", "bf16", 248_879_616),
])
def test_scan_weights_are_the_stored_format_as_memory_counts_them(cli, model, dtype, expected):
    scan = cli("scan", model, "--dtype", dtype, "--json").json()
    memory = cli("memory", model, "--dtype", dtype, "--json").json()
    assert scan["weights_bytes"] == memory["weights_bytes"] == expected
