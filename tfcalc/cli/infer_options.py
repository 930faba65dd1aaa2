"""`tfcalc infer`'s options of issue 20's serving part: tensor-parallel serving, continuous batching and
speculative decoding (the shared options: tfcalc.cli.options)."""

from __future__ import annotations

from typing import Annotated

import typer

ServeTP = Annotated[int, typer.Option(
    "--tp", help="Tensor-parallel serving over T GPUs of one node: heads, FFN and vocabulary split T ways (KV heads "
    "replicated when T exceeds them), two all-reduces per layer on the node's link; figures per GPU.",
    metavar="T")]
