"""Options shared by several commands, defined once (Typer reads the help text from here)."""

from __future__ import annotations

import enum
from typing import Annotated, Optional

import typer

from tfcalc.count.dtypes import DTYPES

Models = Annotated[
    list[str],
    typer.Argument(
        help="Preset names or aliases (see `tfcalc presets`), or paths to YAML or Hugging Face config.json files.",
        show_default=False,
    ),
]
Model = Annotated[
    str,
    typer.Argument(
        help="A preset name or alias (see `tfcalc presets`), or a path to a YAML file or a Hugging Face config.json.",
        show_default=False,
    ),
]
Overrides = Annotated[
    Optional[list[str]],
    typer.Option(
        "--set",
        help="Override a config field, KEY=VALUE (repeatable), e.g. --set n_layer=2 --set d_head=128.",
        metavar="KEY=VALUE",
        show_default=False,
    ),
]
Json = Annotated[bool, typer.Option("--json", help="Print JSON (the stable contract) instead of tables.")]

# ---------- workload options: shared by memory (and the flops and bench commands) ----------

DTypeName = enum.Enum("DTypeName", {name: name for name in DTYPES}, type=str)  # fp32, tf32, ..., int4
Batch = Annotated[int, typer.Option("--batch", "-b", min=1, help="Batch size (sequences).")]
Seq = Annotated[
    Optional[int],
    typer.Option("--seq", "-s", min=1, help="Sequence length in tokens [default: the model's max_seq_len].",
                 show_default=False),
]
SrcSeq = Annotated[
    Optional[int],
    typer.Option("--src-seq", min=1, help="Encoder-decoder models only: source length S [default: the --seq value].",
                 show_default=False),
]
DType = Annotated[
    DTypeName,
    typer.Option("--dtype", help="Storage dtype of weights (and activations; int8/int4/fp8 compute in bf16)."),
]
Device = Annotated[str, typer.Option("--device", help="Device to measure on: cpu, cuda, cuda:N or mps.")]


def parse_lengths(text: str, option: str = "--seq") -> list[int]:
    """Sequence lengths as typed: '256,1024,4096' -> those, in that order; '128..1024' -> 128, 256, 512,
    1024 (doubling; the end is included even off the doubling). A one-line BadParameter otherwise."""
    try:
        if ".." in text:
            lo_text, hi_text = text.split("..", 1)
            lo, hi = int(lo_text), int(hi_text)
            if lo < 1 or hi < lo:
                raise typer.BadParameter(f"expected START..END with 1 <= START <= END, got '{text}'", param_hint=option)
            seqs = []
            while lo < hi:
                seqs.append(lo)
                lo *= 2
            return seqs + [hi]
        seqs = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise typer.BadParameter(
            f"expected integers separated by commas, or START..END, got '{text}'", param_hint=option
        ) from None
    if not seqs or any(s < 1 for s in seqs):
        raise typer.BadParameter(f"sequence lengths must be positive, got '{text}'", param_hint=option)
    return seqs
