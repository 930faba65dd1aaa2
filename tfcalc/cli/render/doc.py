"""A rendering-neutral document: what a command shows, before any format is chosen.

Each per-command renderer turns its report into a ``Doc`` (tables and notes of raw values); the backends
(tfcalc.cli.render.backends) then write it as a Rich table, Markdown or CSV. Cells hold raw values
(ints, floats, strings), never pre-formatted numbers: each column names its unit, and the unit's formatter
(tfcalc.cli.render.units) makes the one text a column shows -- human-scaled, or exact with --exact. CSV
writes the raw values, so a spreadsheet gets exact numbers.

Every string here is plain text: the Rich backend wraps each in ``rich.text.Text``, so brackets in a
user's model name or path ("[v2]") are shown as typed and never read as markup.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Union

Unit = Literal[
    "text",  # a string as given
    "int",  # a plain integer, thousands separated (batch, seq, layers)
    "params",  # a count of parameters: 124.4M (exact: 124,439,808)
    "flop",  # FLOPs: 291.6 GFLOP (exact: 291,648,307,200)
    "flop_rate",  # FLOP/s: 152.3 GFLOP/s
    "bytes",  # bytes in binary units: 474.7 MiB (exact: 497,758,976)
    "share",  # a fraction shown as a percentage: 31.6%
    "seconds",  # a duration: 4.83 ms
    "tokens_rate",  # tokens per second: 21,204 tok/s
    "ratio",  # a dimensionless ratio: 0.998×
    "rel",  # a signed relative difference: +0.43%
    "byte_rate",  # bandwidth, decimal as datasheets print it: 3.35 TB/s
    "intensity",  # arithmetic intensity: 0.983 FLOP/byte
]


@dataclass(frozen=True)
class Column:
    header: str
    unit: Unit = "text"
    # 0 is essential; where a table is wider than the terminal, the Rich backend hides the columns of the
    # highest priority number first and says which it hid (Markdown and CSV keep every column).
    priority: int = 0
    wrap: bool = True  # a text column may wrap at spaces; False keeps each cell on one line (bars, marks)

    @property
    def justify(self) -> str:
        return "left" if self.unit == "text" else "right"


@dataclass(frozen=True)
class Cell:
    """A value with a style of its own (a green check, a red mismatch)."""

    value: Any
    style: str = ""
    raw: Any = None  # what CSV writes where value is text formatted per row (compare: each row its own unit)


@dataclass
class Row:
    cells: list[Any]  # raw values, Cell, or None (an empty cell)
    style: str = ""  # "bold", "dim", ...: applies to the whole row
    rule: bool = False  # a horizontal rule before this row (a new section of the table)


@dataclass
class Table:
    title: str
    columns: list[Column]
    rows: list[Row] = field(default_factory=list)
    caption: str = ""
    name: str = ""  # what --table picks it by (tfcalc.cli.render.backends.write_csv), one word per kind of table

    def without_empty_columns(self) -> "Table":
        """The table less the columns no row fills (the shapes of a table shown without --verbose)."""
        keep = [i for i in range(len(self.columns)) if any(row.cells[i] is not None for row in self.rows)]
        rows = [Row([row.cells[i] for i in keep], row.style, row.rule) for row in self.rows]
        return Table(self.title, [self.columns[i] for i in keep], rows, self.caption, self.name)

    def add(self, *cells: Any, style: str = "", rule: bool = False) -> None:
        if len(cells) != len(self.columns):
            raise ValueError(f"{len(cells)} cells for {len(self.columns)} columns in {self.title!r}")
        self.rows.append(Row(list(cells), style, rule))


@dataclass(frozen=True)
class Note:
    text: str
    style: str = ""  # "warning" (yellow), "dim", "ok" (green), "bad" (red)


@dataclass(frozen=True)
class Rule:
    """A line between the reports of several models (Markdown: a thematic break; CSV: nothing)."""


Block = Union[Table, Note, Rule]


@dataclass
class Doc:
    blocks: list[Block] = field(default_factory=list)

    def table(self, title: str, *columns: Column, caption: str = "", name: str = "") -> Table:
        t = Table(title, list(columns), caption=caption, name=name)
        self.blocks.append(t)
        return t

    def note(self, text: str, style: str = "") -> None:
        self.blocks.append(Note(text, style))

    def separate(self) -> None:
        """A rule before what comes next, where something came before (the next model's report)."""
        if self.blocks and not isinstance(self.blocks[-1], Rule):
            self.blocks.append(Rule())

    def tables(self) -> list[Table]:
        return [b for b in self.blocks if isinstance(b, Table)]

    def table_names(self) -> list[str]:
        """The names --table takes, in the order the tables come, each once."""
        return list(dict.fromkeys(t.name for t in self.tables()))

    def extend(self, other: "Doc") -> None:
        self.blocks.extend(other.blocks)
