"""Options shared by several commands, defined once (Typer reads the help text from here)."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

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
