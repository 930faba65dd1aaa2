"""Round 4 (issue 33), causes 1, 3, 8 and 9: the measured runs' hostile cases, in the table of test_hostile.py.

1. a run that cannot fit is refused before any rank starts or anything is allocated, on a machine made small
   by replacing the one reader of the limits (tfcalc.measure.fit.read_limits);
3. every count of a measured run is bounded (tfcalc.measure.bounds), refused at parse in one line;
8. no command writes over a file it reads, by any name (a symlink, a hard link);
9. each refusal names the flag or field the user wrote, in one line, before any work (no note before it)."""

from __future__ import annotations

import os
from pathlib import Path

GiB = 2**30
BIG_SHARED = "shared_expert_d_ff=100000000000"  # a shared expert 10^11 wide: petabytes of weights

CASES = [
    # ---- 1: one guard before any rank or allocation ----
    ("infer-tp-measure-too-big", ["infer", "llama2-7b", "--tp", "2", "--measure"], 2,
     "not running llama2-7b serving (fp32) on 2 rank(s): it needs an estimated"),
    ("infer-tp-measure-ranks-share", ["infer", "gpt2", "--tp", "2", "--measure", "--seq", "8", "--gen", "2"], 2,
     "(2 ranks × "),
    ("bench-ranks-too-big", ["bench", "ranks", "llama2-7b", "--seq", "8"], 2,
     "not running bench llama2-7b on 2 rank(s)"),
    ("plan-measure-too-big", ["plan", "llama2-7b", "--dp", "2", "--measure", "--seq", "8"], 2,
     "not running the plan of llama2-7b on 2 rank(s)"),
    ("infer-measure-too-big", ["infer", "llama2-7b", "--measure", "--seq", "8", "--gen", "4"], 2,
     "not running llama2-7b decoding"),
    ("infer-draft-measure-too-big", ["infer", "llama2-7b", "--measure", "--draft", "llama2-7b", "--accept-rate", "0.5",
                                     "--seq", "8", "--gen", "4"], 2,
     "not running speculative decoding of llama2-7b with draft llama2-7b"),
    ("bench-decode-too-big", ["bench", "decode", "llama2-7b", "--seq", "8"], 2, "not running llama2-7b decoding"),
    ("memory-measure-small-machine", ["memory", "llama2-7b", "--measure", "--seq", "8"], 2,
     "not running llama2-7b (forward pass)"),
    ("flops-measure-small-machine", ["flops", "llama2-7b", "--measure", "--device", "cpu", "--seq", "8"], 2,
     "not running llama2-7b on cpu"),
    ("bench-small-machine", ["bench", "llama2-7b", "--n-layer", "1", "--seq", "8"], 2, "not running llama2-7b"),
    # ---- 3: one bound on every count ----
    ("bench-decode-repeat-1e9", ["bench", "decode", "gpt2", "--repeat", "1000000000"], 2,
     "--repeat must be between 1 and 100,000 (a 0.9 s call timed that often takes a day); got 1,000,000,000"),
    ("bench-ranks-repeat-1e9", ["bench", "ranks", "gpt2", "--repeat", "1000000000"], 2,
     "--repeat must be between 1 and 100,000"),
    ("infer-measure-repeat-1e9", ["infer", "gpt2", "--measure", "--repeat", "1000000000"], 2,
     "--repeat must be between 1 and 100,000"),
    ("infer-measure-warmup-1e9", ["infer", "gpt2", "--measure", "--warmup", "1e9"], 2,
     "--warmup must be between 0 and 10,000"),
    ("bench-decode-steps-1e7", ["bench", "decode", "gpt2", "--steps", "10000000"], 2,
     "--steps must be between 1 and 1,000,000"),
    ("bench-rounds-1e9", ["bench", "gpt2", "--rounds", "1000000000"], 2, "--rounds must be between 1 and 1,000"),
    ("bench-warmup-1e9", ["bench", "gpt2", "--warmup", "1000000000"], 2, "--warmup must be between 0 and 10,000"),
    ("bench-repeat-1e9", ["bench", "gpt2", "--repeat", "1000000000"], 2, "--repeat must be between 1 and 100,000"),
    ("infer-requests-1e9", ["infer", "gpt2", "--rate", "5", "--mean-input", "4", "--mean-output", "4", "--measure",
                            "--requests", "1000000000"], 2, "--requests must be between 1 and 100,000"),
    ("infer-max-time-1e9", ["infer", "gpt2", "--rate", "5", "--mean-input", "4", "--mean-output", "4", "--measure",
                            "--max-time", "1e9"], 2, "--max-time must be a positive number of seconds, at most 86,400"),
    ("infer-measure-gen-1e9", ["infer", "gpt2", "--measure", "--gen", "1000000000"], 2,
     "--gen must be between 1 and 1,000,000 (a million tokens timed; at 86 ms a step, a day)"),
    ("infer-copy-size-1TB", ["infer", "gpt2", "--measure", "--copy-size", "1TB"], 2,
     "--copy-size must be between 1 byte and 64 GiB"),
    # ---- 9: the flag the user wrote, one line, before any work ----
    ("bench-decode-steps-0", ["bench", "decode", "gpt2", "--steps", "0"], 2, "--steps must be between 1 and"),
    ("bench-decode-steps-negative", ["bench", "decode", "gpt2", "--steps", "-1"], 2, "--steps must be between 1 and"),
    ("bench-decode-steps-name", ["bench", "decode", "gpt2", "--steps", "name"], 2,
     "--steps: cannot read 'name' as a count"),
    ("bench-decode-no-model-steps-0", ["bench", "decode", "--steps", "0"], 2, "--steps must be between 1 and"),
    ("bench-decode-no-model-too-big", ["bench", "decode", "--batch", "100000", "--seq", "8"], 2,
     "not running gpt2 decoding (batch 100000"),
    ("bench-no-model-too-big", ["bench", "--batch", "100000", "--seq", "512"], 2,
     "not running gpt2 (12 blocks, batch 100000, seq 512, fp32)"),
    # the old spelling of bench ranks without a model: the refusal alone, the default model's note not before it
    ("bench-nproc-no-model-too-big", ["bench", "--nproc", "2", "--seq", "8"], 2,
     "not running bench gpt2 on 2 rank(s)"),
    ("bench-decode-matmul-1e6", ["bench", "decode", "gpt2", "--matmul-size", "1e6"], 2,
     "--matmul-size must be between 1 and 32,768"),
    ("bench-matmul-1e6", ["bench", "gpt2", "--matmul-size", "1e6"], 2, "--matmul-size must be between 1 and 32,768"),
    ("bench-decode-copy-size-1TB", ["bench", "decode", "gpt2", "--copy-size", "1TB"], 2,
     "--copy-size must be between 1 byte and 64 GiB (the bandwidth is flat from a few hundred MiB); got 931.3 GiB"),
    ("bench-decode-copy-size-junk", ["bench", "decode", "gpt2", "--copy-size", "1XB"], 2,
     "cannot read --copy-size '1XB' as a size"),
    ("bench-decode-steps-past-context", ["bench", "decode", "gpt2", "--seq", "8", "--steps", "2000"], 2,
     "--seq 8 + --steps 2,000 = 2,008 tokens is past gpt2's 1,024 learned positions"),
    ("bench-ranks-seq-list", ["bench", "ranks", "gpt2", "--seq", "8,16"], 2, "bench ranks times one --seq at a time"),
    ("memory-measure-absurd-shared-expert", ["memory", "qwen3-30b-a3b", "--measure", "--set", BIG_SHARED], 2,
     "try a smaller model (one token alone needs"),
    ("bench-decode-absurd-shared-expert", ["bench", "decode", "qwen3-30b-a3b", "--set", BIG_SHARED], 2,
     "try a smaller model (one token alone needs"),
    ("pattern-16-digit-repeat", ["params", "gpt2", "--set", "layer_pattern=(full, full)*1234567890123456"], 2,
     "layer_pattern: a repeat '*n' must be at most 1,099,511,627,776 (the most layers a model has); got "
     "1,234,567,890,123,456"),
    # ---- 8: no command writes over a file it reads ----
    ("snapshot-over-its-model", ["snapshot", "{d}/tiny.yaml", "-o", "{d}/tiny.yaml"], 2,
     "/tiny.yaml: that is a file this command reads; writing there would replace it"),
    ("snapshot-over-its-model-by-symlink", ["snapshot", "{d}/tiny.yaml", "-o", "{d}/tiny-link.yaml"], 2,
     "that is a file this command reads (as "),
    ("snapshot-over-its-model-by-hard-link", ["snapshot", "{d}/tiny.yaml", "-o", "{d}/tiny-hard.yaml"], 2,
     "that is a file this command reads (as "),
    ("snapshot-over-its-config-json", ["snapshot", "{d}/ckpt_tiny", "-o", "{d}/ckpt_tiny/config.json"], 2,
     "that is a file this command reads"),
    ("snapshot-over-a-preset", ["snapshot", "gpt2", "-o", "{presets}/gpt2.yaml"], 2,
     "that is a file this command reads"),
    ("scan-plot-over-its-model", ["scan", "{d}/tiny.yaml", "--plot", "{d}/tiny-hard.png"], 2,
     "--plot {d}/tiny-hard.png: that is a file this command reads"),
]


def write(folder: Path) -> None:
    """The links of cause 8: a symlink and hard links to tiny.yaml (one named like a plot)."""
    os.symlink("tiny.yaml", folder / "tiny-link.yaml")
    os.link(folder / "tiny.yaml", folder / "tiny-hard.yaml")
    os.link(folder / "tiny.yaml", folder / "tiny-hard.png")


def _small_machine(gib: float):
    """A machine with gib GiB free, through the one reader of the limits; no rank may start."""
    def setup(monkeypatch, tmp_path) -> None:
        from tfcalc.measure import fit, launch

        monkeypatch.setattr(fit, "read_limits", lambda kind, free, name: [fit.Limit(int(gib * GiB),
                                                                                    f"free memory on {name}")])

        def no_ranks(*args, **kwargs):
            raise AssertionError("a rank started")

        monkeypatch.setattr(launch, "run_ranks", no_ranks)
    return setup


PATCHED = {case: _small_machine(4) for case, *_ in CASES[:10]}
PATCHED["bench-decode-no-model-too-big"] = PATCHED["bench-no-model-too-big"] = _small_machine(4)
PATCHED["bench-nproc-no-model-too-big"] = _small_machine(0.001)  # gpt2's ranks need far more than 1 MB
PATCHED["infer-tp-measure-ranks-share"] = _small_machine(0.5)  # gpt2 in fp32: 0.5 GiB a rank, 1 GiB for two
PATCHED["plan-measure-too-big"] = _small_machine(0.001)  # plan --measure runs a copy of 0.7 MB a rank
PATCHED["bench-small-machine"] = _small_machine(0.5)  # one block of llama2-7b and its embeddings: over 1 GiB
