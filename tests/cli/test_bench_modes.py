"""bench's three modes as commands, each with only its options: `tfcalc bench` (forward passes),
`tfcalc bench decode` (generation), `tfcalc bench ranks` (a training step on local ranks); `tfcalc devices`
for the datasheet table. The old spellings (`bench --decode N`, `bench --nproc N`) still run, with one note."""

from __future__ import annotations

import pytest
from conftest import assert_one_line_error

TINY = ("--set", "n_layer=1", "--set", "d_model=48", "--set", "vocab_size=64", "--set", "max_seq_len=64")
FAST = ("--warmup", "1", "--repeat", "2")


def _options(cli, *command) -> set[str]:
    text = cli(*command, "--help").out.replace("│", " ")
    return {w.strip(",") for w in text.split() if w.startswith("--")}


def test_each_mode_lists_only_its_options(cli):
    forward, decode, ranks = _options(cli, "bench"), _options(cli, "bench", "decode"), _options(cli, "bench", "ranks")
    assert {"--min-time", "--rounds", "--compile", "--n-layer", "--weights"} <= forward
    assert not {"--decode", "--nproc", "--tp", "--zero", "--fsdp", "--copy-size"} & forward  # 25 options once
    assert {"--steps", "--copy-size", "--matmul-size"} <= decode and not {"--nproc", "--min-time", "--tp"} & decode
    assert {"--nproc", "--tp", "--zero", "--fsdp"} <= ranks and not {"--steps", "--min-time", "--copy-size"} & ranks
    root = cli("--help").out
    assert "bench decode" in root and "bench ranks" in root and "devices" in root


def test_bench_decode_and_its_old_spelling_agree(cli):
    new = cli("bench", "decode", "gpt2", *TINY, "--steps", "3", "--seq", "8", *FAST, "--copy-size", "1MiB", "--json")
    old = cli("bench", "gpt2", *TINY, "--decode", "3", "--seq", "8", *FAST, "--copy-size", "1MiB", "--json")
    assert new.code == old.code == 0, (new.err, old.err)
    assert new.json()["decode_steps"] == old.json()["decode_steps"] == 3 and new.err == ""
    assert old.err.count("\n") == 1 and "is now `tfcalc bench decode --steps 3`" in old.err
    assert_one_line_error(cli("bench", "decode", "gpt2", "--min-time", "1"), "No such option: --min-time")


@pytest.mark.parametrize("spelling", [("bench", "ranks", "gpt2", "--nproc", "2"), ("bench", "gpt2", "--nproc", "2")],
                         ids=["new", "old"])
def test_bench_ranks_and_its_old_spelling(cli, spelling):
    r = cli(*spelling, *TINY, "--seq", "8", *FAST, "--json")
    assert r.code == 0, r.err
    assert r.json()["nproc"] == 2 and len(r.json()["ranks"]) == 2
    if "ranks" in spelling:
        assert "note" not in r.err
    else:
        assert "is now `tfcalc bench ranks --nproc 2`" in r.err


@pytest.mark.parametrize("mode", [("bench",), ("bench", "decode")], ids=["forward", "decode"])
def test_bench_without_a_model_times_gpt2_on_the_named_device(cli, mode):
    """`tfcalc bench --device cpu` (issue 32): no 'Missing argument', but gpt2, said in one line with how to
    choose, on the device that was named."""
    extra = ("--steps", "2", "--copy-size", "1MiB") if "decode" in mode else ("--min-time", "0")
    r = cli(*mode, "--device", "cpu", "--set", "n_layer=1", "--seq", "8", *FAST, *extra, "--json")
    assert r.code == 0, r.err
    assert r.json()["preset"] == "gpt2" and r.json()["device"] == "cpu"
    notes = [line for line in r.err.splitlines() if "no model named" in line]
    assert len(notes) == 1 and "timing gpt2" in notes[0] and "on cpu" in notes[0]
    assert f"`tfcalc {' '.join(mode)} llama2-7b --device cpu`" in notes[0]
    named = cli(*mode, "gpt2", "--set", "n_layer=1", "--seq", "8", *FAST, *extra, "--json")
    assert named.code == 0 and "no model named" not in named.err


def test_bench_times_the_sublayers_a_model_has(cli):
    """A model of Mamba2 layers alone (Codestral Mamba: no FFN anywhere, block 0 a mixer alone) is timed: its
    mixer sub-layer from the first block that has one, an FFN time of nothing (no FFN to run); it stopped on an
    internal error before, block 0's FFN being None."""
    r = cli("bench", "codestral-mamba-7b", "--n-layer", "2", "--seq", "16", "--warmup", "0", "--repeat", "1",
            "--json")
    assert r.code == 0, r.err
    c = r.json()["components"]
    assert c["attention_s"] > 0 and c["ffn_s"] >= 0 and c["ffn_s"] < c["attention_s"]
