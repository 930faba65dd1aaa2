"""The only place that prints: reports as Rich tables, JSON, Markdown or CSV; errors and warnings on stderr.

Each command's renderer (a module here) turns its report into a neutral Doc; ``emit`` writes that Doc in
the format asked for, or the report's ``to_json()`` for --format json. Colour follows Rich's rules: none
when stdout is not a terminal, none when NO_COLOR is set. Piped output is 140 columns wide unless
COLUMNS says otherwise.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Sequence

if TYPE_CHECKING:
    from rich.console import Console

FORMATS = ("table", "json", "markdown", "csv")


@dataclass(frozen=True)
class Output:
    """How a command's answer is written: --format, --exact, --verbose."""

    format: str = "table"
    exact: bool = False
    verbose: bool = False
    table: str | None = None  # --table: the one table to write (csv: which; table, markdown: only it)

    @property
    def quiet(self) -> bool:
        """No progress display. Never, since issue 32: progress goes to stderr, and only at a terminal, so
        stdout holds the answer alone in every format (--format json piped to jq still shows the bar)."""
        return False


@lru_cache(maxsize=None)
def console() -> "Console":
    from rich.console import Console  # here, not at the top: JSON output never imports Rich

    class QuietOnBrokenPipe(Console):
        def on_broken_pipe(self) -> None:
            """Rich's own choice is SystemExit(1), the code of a failed check; tfcalc exits quietly with
            141 (tfcalc.cli.interrupts), so the error goes on up."""
            self.quiet = True
            raise BrokenPipeError(32, "Broken pipe")

    piped = not sys.stdout.isatty() and "COLUMNS" not in os.environ
    return QuietOnBrokenPipe(width=140 if piped else None, highlight=False)


MAX_MESSAGE = 280  # characters of an error or warning line, after "tfcalc: error: "


def one_line(message: object) -> str:
    """A message as one line of at most MAX_MESSAGE characters: the promise of every error, kept here even
    where a message quotes more of the user's input than it should (its start and end are kept)."""
    text = str(message)
    if len(text) > 4 * MAX_MESSAGE:  # cut before splitting: a message may be huge
        text = text[: 2 * MAX_MESSAGE] + " " + text[-MAX_MESSAGE:]
    text = " ".join(text.split())
    if len(text) > MAX_MESSAGE:
        text = f"{text[: MAX_MESSAGE - 60]} … {text[-50:]}"
    from tfcalc.cli.render.safe import safe  # escapes (\x1b) after the cut: a message is ~300 characters

    return safe(text, limit=10 * MAX_MESSAGE)


_status = {"shown": False}  # a "starting" line is on the terminal (starting()), to be cleared before more


def starting(text: str) -> None:
    """At a terminal, a line on stderr the moment a command starts ("tfcalc bench: starting (importing
    torch)"), before the imports that take seconds; cleared by the first progress bar, line or answer."""
    try:
        if sys.stderr is not None and sys.stderr.isatty():
            from tfcalc.cli.render.safe import safe

            sys.stderr.write(f"tfcalc {safe(text)}: starting (importing torch)…")
            sys.stderr.flush()
            _status["shown"] = True
    except (OSError, ValueError):
        pass


def clear_status() -> None:
    """Erase the starting line (carriage return, erase the line: ECMA-48 EL)."""
    if _status["shown"]:
        _status["shown"] = False
        try:
            sys.stderr.write("\r\x1b[2K")
            sys.stderr.flush()
        except (OSError, ValueError, AttributeError):
            pass


def _stderr(line: str) -> None:
    """One line on stderr, if there is a stderr: with it closed (2>&-) there is nowhere to say it, and the
    exit code must still be the one the line goes with (2 for bad input, not 1 for a crash)."""
    clear_status()
    try:
        if sys.stderr is not None:
            print(line, file=sys.stderr)
            sys.stderr.flush()
    except (OSError, ValueError):
        pass


def error(message: str) -> None:
    _stderr(f"tfcalc: error: {one_line(message)}")


def stopped(message: str) -> None:
    """Said when a signal stops tfcalc: 'tfcalc: interrupted' (not an error of the input)."""
    _stderr(f"tfcalc: {message}")


def _at_terminal(line: str) -> str:
    """A warning or note as a terminal shows it: wrapped at its width between words, the continuation lines
    indented, so no word is split ("2,048 to / kens"); piped or redirected, the one line it always is."""
    try:
        if sys.stderr is None or not sys.stderr.isatty():
            return line
    except (OSError, ValueError):
        return line
    import shutil

    from tfcalc.cli.render.wrap import indented

    return "\n".join(indented(line, shutil.get_terminal_size().columns, "  "))


def warn(message: str) -> None:
    _stderr(_at_terminal(f"tfcalc: warning: {one_line(message)}"))


def prepare_streams() -> None:
    """ASCII stand-ins on streams that cannot write tfcalc's few non-ASCII characters (render.ascii)."""
    from tfcalc.cli.render import ascii

    ascii.prepare_streams()


def does_not_fit(message: str) -> None:
    """--require-fit's line when the answer is no (exit 1): not an error of the input, the answer."""
    print(f"tfcalc: does not fit: {one_line(message)}", file=sys.stderr)


def note(message: str) -> None:
    """A line to read before a long run starts (what it will do, and the faster choice): not a warning."""
    from tfcalc.cli.render.safe import PROSE_LIMIT, safe

    _stderr(_at_terminal(f"tfcalc: note: {safe(str(message), PROSE_LIMIT)}"))


def finite(data: Any, path: str = "") -> tuple[Any, dict[str, str]]:
    """data with every NaN or infinite float replaced by None, and {JSON path: why} for each: JSON has no
    NaN or Infinity (RFC 8259, sec. 6), and a parser such as jq or JavaScript's JSON.parse refuses them.
    Inputs that would make a figure infinite are refused before (a device file's rates, --mfu); this is
    the last guard, so that the output is always valid JSON."""
    if isinstance(data, float) and not math.isfinite(data):
        return None, {path or "$": "NaN (undefined)" if math.isnan(data) else "infinite (too large for a float)"}
    if isinstance(data, dict):
        out, why = {}, {}
        for key, value in data.items():
            out[key], inner = finite(value, f"{path}.{key}" if path else str(key))
            why.update(inner)
        return out, why
    if isinstance(data, (list, tuple)):
        items = [finite(v, f"{path}[{i}]") for i, v in enumerate(data)]
        return [v for v, _ in items], {k: w for _, inner in items for k, w in inner.items()}
    return data, {}


def print_json(data: Any) -> None:
    data, why = finite(data)
    if why and isinstance(data, dict):
        data["null_because"] = why  # each null that stands for a non-finite figure, and the reason
    elif why and isinstance(data, list):
        for i, item in enumerate(data):
            mine = {k[len(f"[{i}]") + 1:]: w for k, w in why.items() if k.startswith(f"[{i}].")}
            if mine and isinstance(item, dict):
                item["null_because"] = mine
    sys.stdout.write(json.dumps(data, indent=2, allow_nan=False) + "\n")


def reports_json(reports: Sequence[Any]) -> Any:
    """The JSON contract: one object for one report, a list for several."""
    data = [r.to_json() for r in reports]
    return data[0] if len(data) == 1 else data


def emit(reports: Sequence[Any], output: Output, document: Callable[..., Any]) -> None:
    """Write reports: JSON from to_json(), the other formats from document(reports, verbose) -> Doc."""
    clear_status()
    if output.format == "json":
        print_json(reports_json(reports))
        return
    from tfcalc.cli.render import backends
    from tfcalc.cli.render.safe import safe_doc

    doc = safe_doc(document(reports, output.verbose))
    if output.format == "csv":
        sys.stdout.write(backends.write_csv(doc, output.table))
        return
    if output.table is not None:
        doc = type(doc)(list(backends.pick(doc, output.table)))
    if output.format == "markdown":
        sys.stdout.write(backends.write_markdown(doc, output.exact))
    else:
        backends.write_rich(doc, console(), output.exact)


class Progress:
    """What progress() yields: call it after each step (or each timed call). A bar counted in seconds
    (unit="s") shows the time spent and is told the time left with remaining(seconds), so its ETA is
    the work's own forecast; describe(text) names the step under way. Every method does nothing when the
    bar is not shown."""

    def __init__(self, bar: Any = None, task: Any = None, seconds: bool = False, title: str = ""):
        self.bar, self.task, self.seconds, self.title = bar, task, seconds, title
        self.started = time.monotonic()
        self.done = 0.0  # the largest fraction shown: the bar never moves back
        self.total = 0.0  # seconds: the last forecast of the whole run

    def __call__(self, steps: float = 1) -> None:
        if self.bar is None:
            return
        if self.seconds:  # time spent, never behind the place the bar has reached
            spent = time.monotonic() - self.started
            self.total = max(self.total, spent)
            self.done = max(self.done, spent / self.total if self.total > 0 else 1.0)
            self.bar.update(self.task, completed=self.done * self.total, total=self.total)
        else:
            self.bar.advance(self.task, steps)

    def remaining(self, seconds: float) -> None:
        """The work still to do takes this long (a bar in seconds): the total is what is spent plus it,
        so the ETA is the run's own forecast. Where a new forecast is longer than the last, the bar holds
        its place rather than move back (the ETA still grows)."""
        if self.bar is not None:
            spent = time.monotonic() - self.started
            left = max(0.0, seconds)
            total = self.total = spent + left
            self.done = max(self.done, spent / total if total > 0 else 1.0)
            # the bar at the largest fraction yet, the ETA the forecast itself (Rich's own ETA would
            # extrapolate from the bar's speed, which a held bar makes wrong)
            # the countdown column counts down from the forecast between forecasts (tfcalc.cli.render.eta)
            self.bar.update(self.task, completed=self.done * total, total=total, eta=f"ETA {clock(left)}",
                            deadline=time.monotonic() + left)

    def describe(self, text: str) -> None:
        """Say what is under way, in place of the bar's title."""
        if self.bar is not None:
            from tfcalc.cli.render.safe import safe

            self.bar.update(self.task, description=safe(text))

    def phase(self, text: str) -> None:
        """Name the phase under way after the bar's title: 'bench gpt2: round 2 of 3: seq 256: forward'."""
        self.describe(f"{self.title}: {text}" if self.title else text)


def clock(seconds: float) -> str:
    """'0:42', '1:02:03': a countdown as Rich writes one; the ETA of every progress bar, here and in
    tfcalc.cli.render.eta's countdown."""
    s = int(round(seconds))
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"


@contextmanager
def progress(description: str, total: float, enabled: bool = True, unit: str = "steps") -> Iterator[Progress]:
    """A progress bar with an ETA on stderr while work runs; yields the Progress to call after each step.
    unit="s": total and remaining() are seconds. Quiet when disabled (machine-readable output) or when
    stderr is not a terminal."""
    if not (enabled and sys.stderr.isatty()):
        yield Progress()
        return
    clear_status()
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress as Bar,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    from tfcalc.cli.render.eta import Countdown

    # markup=False: the description holds the model's label, which may hold brackets ("gpt2[v2]")
    if unit == "s":  # the ETA is the work's own forecast (Progress.remaining)
        columns = (TextColumn("{task.description}", markup=False), BarColumn(), TimeElapsedColumn(), Countdown())
    else:
        columns = (TextColumn("{task.description}", markup=False), BarColumn(), MofNCompleteColumn(),
                   TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn())
    from tfcalc.cli.render.safe import safe

    description = safe(description)
    with Bar(*columns, console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task(description, total=total, eta=f"ETA {clock(total)}" if unit == "s" else "",
                            deadline=time.monotonic() + float(total))
        shown = Progress(bar, task, seconds=unit == "s", title=description)
        shown.total = float(total)
        yield shown


@contextmanager
def ranks_progress(description: str, nproc: int, enabled: bool = True) -> Iterator[Callable[[Sequence[Any]], None]]:
    """One line per rank of a distributed run on stderr: 'rank 1: timed 3 of 10', a bar of its steps, and
    the time spent. Yields the callback tfcalc.measure.launch calls with the ranks' statuses
    (tfcalc.measure.rank_status: each rank's furthest step yet, so a line never moves back). Quiet when
    disabled or when stderr is not a terminal."""
    if not (enabled and sys.stderr.isatty()):
        yield lambda statuses: None
        return
    clear_status()
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress as Bar, TextColumn, TimeElapsedColumn

    from tfcalc.cli.render.safe import safe

    title = safe(description)
    columns = (TextColumn("{task.description}", markup=False), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Bar(*columns, console=Console(stderr=True), transient=True) as bar:
        tasks = [bar.add_task(f"{title}: rank {r}: starting (importing torch)", total=None) for r in range(nproc)]

        def show(statuses: Sequence[Any]) -> None:
            for s in statuses:
                if 0 <= s.rank < len(tasks):
                    bar.update(tasks[s.rank], description=safe(f"{title}: rank {s.rank}: {s.phase}"),
                               completed=s.done, total=s.total or None)

        yield show
