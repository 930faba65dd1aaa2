"""Every command that can take long shows progress on a terminal (stderr) and nothing when piped or
machine-readable: the bar is asked for, advanced and described by each long command, and shown only
where stderr is a terminal."""

from contextlib import contextmanager

import pytest

from tfcalc.cli import render

TINY = ["--set", "n_layer=1", "--set", "d_model=32", "--set", "n_head=4", "--set", "n_kv_head=4",
        "--set", "d_head=8", "--set", "d_ff=64", "--set", "vocab_size=64"]
LONG = {  # command -> arguments that run it for real, quickly
    "memory": ["memory", "gpt2", *TINY, "--seq", "16", "--measure", "--training"],
    "flops": ["flops", "gpt2", *TINY, "--seq", "16", "--measure", "--training"],
    "bench": ["bench", "gpt2", *TINY, "--seq", "16", "--min-time", "0.05", "--matmul-size", "32"],
    "params": ["params", "gpt2", "llama2-7b"],
    "scan": ["scan", "gpt2", "--seq", "128..512", "--plot", "{tmp}/scan.png"],
    "plan": ["plan", "llama2-7b", "--gpus", "auto"],  # gpt-oss-120b's: ~0.2 s since the bound
}


class Recorder:
    def __init__(self):
        self.bars = []

    @contextmanager
    def progress(self, description, total, enabled=True, unit="steps"):
        bar = {"description": description, "total": total, "enabled": enabled, "unit": unit, "ticks": 0,
               "described": [], "remaining": []}
        self.bars.append(bar)

        class Handle:
            def __call__(self, steps=1):
                bar["ticks"] += steps

            def describe(self, text):
                bar["described"].append(text)

            def remaining(self, seconds):
                bar["remaining"].append(seconds)

        yield Handle()


def _run(cli, monkeypatch, tmp_path, name, *extra):
    recorder = Recorder()
    monkeypatch.setattr(render, "progress", recorder.progress)
    r = cli(*[a.format(tmp=tmp_path) for a in LONG[name]], *extra)
    assert r.code == 0, r.err
    return recorder.bars


@pytest.mark.parametrize("name", LONG)
def test_long_commands_ask_for_a_bar_and_advance_it(name, cli, monkeypatch, tmp_path):
    bars = _run(cli, monkeypatch, tmp_path, name)
    assert bars and bars[-1]["enabled"] and bars[-1]["ticks"] > 0


@pytest.mark.parametrize("name", LONG)
def test_machine_readable_output_shows_the_bar_on_stderr_too(name, cli, monkeypatch, tmp_path):
    """Issue 32: progress in every format (stderr at a terminal; stdout holds the JSON alone)."""
    bars = _run(cli, monkeypatch, tmp_path, name, "--json")
    assert bars and bars[-1]["enabled"] and bars[-1]["ticks"] > 0


def test_memory_names_every_step_of_the_measured_run(cli, monkeypatch, tmp_path):
    from tfcalc.measure.memory import run_steps

    bar = _run(cli, monkeypatch, tmp_path, "memory")[-1]
    assert [text.split(": ", 1)[1] for text in bar["described"]] == list(run_steps(True))
    assert bar["ticks"] == bar["total"] == len(run_steps(True))


def test_bench_counts_seconds_and_forecasts_the_rest(cli, monkeypatch, tmp_path):
    bar = _run(cli, monkeypatch, tmp_path, "bench")[-1]
    assert bar["unit"] == "s" and bar["remaining"] and bar["remaining"][-1] == 0


def test_the_bar_is_drawn_on_a_terminal_only(monkeypatch, capsys):
    with render.progress("work", 2) as advance:  # stderr captured: not a terminal
        advance()
        advance.describe("step two")
        advance.remaining(1.0)
    assert capsys.readouterr().err == ""
    monkeypatch.setattr(render.sys.stderr, "isatty", lambda: True)
    for unit in ("steps", "s"):
        with render.progress("work", 2, unit=unit) as advance:
            advance.describe("step two")
            advance()
            advance.remaining(0.5)
    assert "step two" in capsys.readouterr().err
    with render.progress("work", 3, enabled=False) as advance:  # --json on a terminal
        advance()
    assert capsys.readouterr().err == ""


def test_a_gpus_auto_search_names_each_gpu_count_it_tries(cli, monkeypatch, tmp_path):
    bar = _run(cli, monkeypatch, tmp_path, "plan")[-1]
    tried = [int(text.split("trying ")[1].split(" GPUs")[0].replace(",", "")) for text in bar["described"]]
    assert tried and tried == sorted(tried) and tried[0] >= 1
    assert f"{tried[-1]:,} GPUs" in cli("plan", "llama2-7b", "--gpus", "auto").out  # the last tried is the answer
