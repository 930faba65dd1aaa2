"""Writers of a Doc: a Rich table for people at a terminal, Markdown to paste, CSV to load.

Rich: where a table is wider than the console, columns are hidden in order of their priority number
(highest first) until it fits, text columns wrap at spaces, and the hidden cells are written below the
table row by row ('Label (Header: value)'), so every figure stays on screen at any width; no cell or
header is ever cut, so no digit or name is lost (see fit_columns). Titles and captions are lines of
their own, wrapped to the terminal's width. Markdown keeps every column
and formats cells as the table does. CSV is one rectangular table (RFC 4180): a header row and raw values
(exact integers), no title; the main table unless --table names another (write_csv).
"""

from __future__ import annotations

import csv
import io
from typing import Callable

from rich import box
from rich.cells import cell_len
from rich.console import Console
from rich.measure import Measurement
from rich.table import Table as RichTable
from rich.text import Text

from tfcalc.cli.render.ascii import to_ascii
from tfcalc.cli.render.doc import Cell, Column, Doc, Note, Rule, Table
from tfcalc.cli.render.wrap import indented
from tfcalc.errors import InputError
from tfcalc.units import format_cell

TEXT_WIDTH = 44  # a text column wraps past this, rather than pushing a number column off the screen
NOTE_STYLES = {"warning": "yellow", "dim": "dim", "ok": "green", "bad": "bold red", "": ""}


def _cell_text(cell, unit: str, exact: bool) -> tuple[str, str]:
    if isinstance(cell, Cell):
        return format_cell(cell.value, unit, exact), cell.style
    return format_cell(cell, unit, exact), ""


def cell_text(cell, unit: str, exact: bool = False) -> str:
    """A cell as its column shows it ('' for an empty one)."""
    return "" if cell is None else _cell_text(cell, unit, exact)[0]


def _same(text: str) -> str:
    return text


def _for(console: Console) -> Callable[[str], str]:
    """How strings reach this console: as they are, or with ASCII stand-ins where its encoding cannot
    write them (render.ascii). Applied before Rich measures a cell, so the columns stay aligned."""
    try:
        "✓·²×".encode(console.encoding)
    except (UnicodeEncodeError, LookupError):
        return to_ascii
    return _same


def _rich_table(table: Table, keep: list[int], exact: bool, fix: Callable[[str], str] = _same,
                squeeze: dict[int, int] | None = None) -> RichTable:
    """The Rich table of the kept columns; squeeze: {column: width} for text columns to wrap narrower."""
    squeeze = squeeze or {}
    # no title or caption here: write_rich prints them as lines of their own, which wrap to the terminal's
    # width (Rich wraps a table's title to the table's width, a narrow table's title to a narrow column)
    out = RichTable(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False)
    for i in keep:
        c = table.columns[i]
        wraps = c.unit == "text" and c.wrap
        out.add_column(Text(fix(c.header)), justify=c.justify, overflow="fold", no_wrap=not wraps,
                       max_width=squeeze.get(i, TEXT_WIDTH) if wraps else None)
    for row in table.rows:
        if row.rule:
            out.add_section()
        cells = []
        for i in keep:
            text, style = _cell_text(row.cells[i], table.columns[i].unit, exact)
            cells.append(Text(fix(text), style=" ".join(s for s in (row.style, style) if s)))
        out.add_row(*cells)
    return out


def fit_columns(console: Console, table: Table, exact: bool) -> tuple[RichTable, list[str]]:
    """The Rich table that fits the console, and the headers of the columns hidden (see _fit)."""
    rich_table, keep = _fit(console, table, exact)
    return rich_table, [c.header for i, c in enumerate(table.columns) if i not in keep]


def _fit(console: Console, table: Table, exact: bool) -> tuple[RichTable, list[int]]:
    """The Rich table with as many columns as fit the console, and the indices of those kept.

    Columns go by priority (the highest number first) until the table fits unwrapped. With only essential
    ones left, the text columns that may wrap are narrowed, at spaces, never below their longest word.
    Where even that cannot fit, Rich would crop cells and headers without a mark ('1,02' for '1,024', 'ba'
    for 'batch'), so essential columns go too, from the right, the first always kept: a hidden column is
    named, and a cut number would be a wrong one."""
    fix = _for(console)
    keep = list(range(len(table.columns)))
    while True:
        rich_table = _rich_table(table, keep, exact, fix)
        # measured unconstrained: Rich clamps a measurement to the console, which would hide every overflow
        width = Measurement.get(console, console.options.update(max_width=10_000), rich_table).maximum
        droppable = [i for i in keep if table.columns[i].priority > 0]
        if width <= console.width:
            return rich_table, keep
        if not droppable:
            squeeze = _squeeze(table, keep, exact, fix, width - console.width)
            if squeeze is not None:
                return _rich_table(table, keep, exact, fix, squeeze), keep
            if len(keep) == 1:
                return rich_table, keep
        worst = max(droppable, key=lambda i: (table.columns[i].priority, i)) if droppable else keep[-1]
        keep.remove(worst)


def _squeeze(
    table: Table, keep: list[int], exact: bool, fix: Callable[[str], str], excess: int
) -> dict[int, int] | None:
    """{column: width} narrowing the wrapping text columns by excess in all, the widest first, none below
    its longest word; None when they cannot give that much."""
    widths = {}
    for i in keep:
        c = table.columns[i]
        if c.unit != "text" or not c.wrap:
            continue
        texts = [fix(c.header)] + [fix(_cell_text(r.cells[i], c.unit, exact)[0]) for r in table.rows]
        widest = min(TEXT_WIDTH, max(cell_len(t) for t in texts))
        word = max((cell_len(w) for t in texts for w in t.split()), default=1)
        widths[i] = [widest, word]
    if sum(w - word for w, word in widths.values()) < excess:
        return None
    while excess > 0:
        i = max(widths, key=lambda k: widths[k][0] - widths[k][1])  # the most room to give
        widths[i][0] -= 1
        excess -= 1
    return {i: w for i, (w, _) in widths.items()}


def _hidden_lines(table: Table, keep: list[int], exact: bool) -> list[str]:
    """The hidden columns' cells, one line per row that has any: 'Label (Header: value; ...)'. What does not
    fit beside the table is written below it, so no figure of the answer is off screen at any width."""
    lines = []
    for row in table.rows:
        texts = [(table.columns[i].header, _cell_text(row.cells[i], table.columns[i].unit, exact)[0])
                 for i in range(len(table.columns)) if i not in keep and row.cells[i] is not None]
        parts = [f"{header}: {text}" for header, text in texts if text]
        if parts:
            label = _cell_text(row.cells[0], table.columns[0].unit, exact)[0] if row.cells[0] is not None else ""
            lines.append(f"  {label.strip()} ({'; '.join(parts)})")
    return lines


def write_rich(doc: Doc, console: Console, exact: bool = False) -> None:
    fix = _for(console)
    for block in doc.blocks:
        if isinstance(block, Rule):
            console.rule(style="dim")
            console.print()
            continue
        if isinstance(block, Note):
            console.print(Text(fix(block.text), style=NOTE_STYLES[block.style]))
            continue
        table = block.without_empty_columns()
        rich_table, keep = _fit(console, table, exact)
        hidden = [c.header for i, c in enumerate(table.columns) if i not in keep]
        if table.title:
            console.print(Text(fix(table.title), style="bold"))
        console.print(rich_table)
        if hidden:
            console.print(Text(f"(at {console.width} columns, {', '.join(hidden)} by row below; a wider terminal "
                               "shows them as columns)", style="dim"))
            for line in _hidden_lines(table, keep, exact):
                for part in indented(fix(line), console.width):
                    console.print(Text(part), overflow="ignore", crop=False)
        if table.caption:
            console.print(Text(fix(table.caption)))
        console.print()


def _md_escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")


def write_markdown(doc: Doc, exact: bool = False) -> str:
    lines: list[str] = []
    for block in doc.blocks:
        if isinstance(block, Rule):
            lines += ["---", ""]
            continue
        if isinstance(block, Note):
            lines += [_md_escape(block.text), ""]
            continue
        block = block.without_empty_columns()
        lines += [f"**{_md_escape(block.title)}**", ""]
        lines.append("| " + " | ".join(_md_escape(c.header) or " " for c in block.columns) + " |")
        lines.append("|" + "|".join("---:" if c.justify == "right" else ":---" for c in block.columns) + "|")
        for row in block.rows:
            cells = [_md_escape(_cell_text(cell, col.unit, exact)[0])
                     for cell, col in zip(row.cells, block.columns, strict=True)]
            if row.style == "bold" and cells[0]:
                cells[0] = f"**{cells[0]}**"
            lines.append("| " + " | ".join(cells) + " |")
        if block.caption:
            lines += ["", _md_escape(block.caption)]
        lines.append("")
    return "\n".join(lines)


def main_table(doc: Doc) -> str:
    """The table CSV writes without --table: the summary of several models, else the first."""
    names = doc.table_names()
    return "summary" if "summary" in names else names[0] if names else ""


def pick(doc: Doc, name: str | None) -> list[Table]:
    """The tables named name (the main one when None), less their empty columns; InputError for a name the
    report has not."""
    name = name or main_table(doc)
    if name not in doc.table_names():
        raise InputError(f"no table '{name}' in this report; it has: {', '.join(doc.table_names()) or 'none'}")
    return [t.without_empty_columns() for t in doc.tables() if t.name == name]


def _csv_header(c: Column) -> str:
    """The header, with the unit of the raw values ('Total (FLOP)'); 'item' where the table shows none."""
    return (c.header or "item") + ("" if c.unit in ("text", "int") else f" ({_CSV_UNITS[c.unit]})")


def csv_rows(doc: Doc, name: str | None = None) -> tuple[list[str], list[list[object]]]:
    """The header and rows write_csv writes: raw values, one rectangle. Tables of the same name from
    several models (the components of each) stack into one, a first column 'Table' naming each row's own."""
    tables = pick(doc, name)
    stacked = len(tables) > 1
    headers: list[str] = []
    for t in tables:
        headers += [h for h in map(_csv_header, t.columns) if h not in headers]
    rows = []
    for t in tables:
        where = {_csv_header(c): i for i, c in enumerate(t.columns)}
        for row in t.rows:
            values = [_raw(row.cells[where[h]]) if h in where else "" for h in headers]
            rows.append(([t.title] if stacked else []) + values)
    return (["Table"] if stacked else []) + headers, rows


def write_csv(doc: Doc, name: str | None = None) -> str:
    """One rectangular table (RFC 4180): a header row, then one row per row of the table, raw values
    (exact integers, full-precision floats), no title (csv_rows)."""
    header, rows = csv_rows(doc, name)
    buffer = io.StringIO()
    # RFC 4180 quoting and one record a line, each ended by \n rather than its \r\n: Unix tools (cut, awk)
    # keep a \r in the last field, and Python's csv and pandas read either
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(header)
    writer.writerows(rows)
    return buffer.getvalue()


def _raw(cell) -> object:
    value = (cell.value if cell.raw is None else cell.raw) if isinstance(cell, Cell) else cell
    return "" if value is None else value


# CSV holds raw values, so each numeric header names the unit of its raw value
_CSV_UNITS = {"params": "parameters", "flop": "FLOP", "flop_rate": "FLOP/s", "bytes": "bytes", "share": "fraction",
              "seconds": "s", "tokens_rate": "tokens/s", "ratio": "ratio", "rel": "fraction",
              "byte_rate": "bytes/s", "intensity": "FLOP/byte"}
