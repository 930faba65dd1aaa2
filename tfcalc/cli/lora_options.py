"""The LoRA options `tfcalc memory --training` and `tfcalc plan` share (tfcalc.count.model.lora, .qlora)."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

LoraRank = Annotated[Optional[int], typer.Option(
    "--lora-rank", help="LoRA fine-tuning (Hu et al. 2021) at rank r: the base frozen (its weights only, no gradients "
    "or optimizer state), each adapted linear W gains trained A (r × in), B (out × r); 0 or absent: off.",
    show_default=False, metavar="R")]
BaseDType = Annotated[Optional[str], typer.Option(
    "--base-dtype", help="nf4: QLoRA (Dettmers et al. 2023) -- the frozen base's block linears in 4-bit NormalFloat, "
    "double-quantized (4.127 bits a weight, bitsandbytes' storage), the rest in --dtype; needs --lora-rank "
    "[default: --dtype].", show_default=False, metavar="nf4")]
LoraTargets = Annotated[Optional[str], typer.Option(
    "--lora-targets", help="The linears LoRA adapts, comma-separated of q,k,v,o,gate,up,down, or all-linear "
    "[default: q,v: the paper's and PEFT's default for llama-like models].", show_default=False, metavar="LIST")]
