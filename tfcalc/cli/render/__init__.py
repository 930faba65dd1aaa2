"""The only place that prints: reports as Rich tables, JSON, Markdown or CSV; errors and warnings on stderr.

Each command's renderer (a module here) turns its report into a neutral Doc; ``emit`` writes that Doc in
the format asked for, or the report's ``to_json()`` for --format json. Colour follows Rich's rules: none
when stdout is not a terminal, none when NO_COLOR is set. Piped output is 140 columns wide unless
COLUMNS says otherwise.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Sequence

from rich.console import Console

FORMATS = ("table", "json", "markdown", "csv")


@dataclass(frozen=True)
class Output:
    """How a command's answer is written: --format, --exact, --verbose."""

    format: str = "table"
    exact: bool = False
    verbose: bool = False

    @property
    def quiet(self) -> bool:
        """No progress display: machine-readable output."""
        return self.format != "table"


@lru_cache(maxsize=None)
def console() -> Console:
    piped = not sys.stdout.isatty() and "COLUMNS" not in os.environ
    return Console(width=140 if piped else None, highlight=False)


def error(message: str) -> None:
    print(f"tfcalc: error: {message}", file=sys.stderr)


def warn(message: str) -> None:
    print(f"tfcalc: warning: {message}", file=sys.stderr)


def print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2) + "\n")


def reports_json(reports: Sequence[Any]) -> Any:
    """The JSON contract: one object for one report, a list for several."""
    data = [r.to_json() for r in reports]
    return data[0] if len(data) == 1 else data


def emit(reports: Sequence[Any], output: Output, document: Callable[..., Any]) -> None:
    """Write reports: JSON from to_json(), the other formats from document(reports, verbose) -> Doc."""
    if output.format == "json":
        print_json(reports_json(reports))
        return
    from tfcalc.cli.render import backends

    doc = document(reports, output.verbose)
    if output.format == "markdown":
        sys.stdout.write(backends.write_markdown(doc, output.exact))
    elif output.format == "csv":
        sys.stdout.write(backends.write_csv(doc))
    else:
        backends.write_rich(doc, console(), output.exact)


@contextmanager
def progress(description: str, total: int, enabled: bool = True) -> Iterator[Callable[[], None]]:
    """A progress bar with an ETA on stderr while work runs; yields the function to call after each step.
    Quiet when disabled (machine-readable output) or when stderr is not a terminal."""
    if not (enabled and sys.stderr.isatty()):
        yield lambda: None
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
               TextColumn("ETA"), TimeRemainingColumn())
    with Progress(*columns, console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task(description, total=total)
        yield lambda: bar.advance(task)
