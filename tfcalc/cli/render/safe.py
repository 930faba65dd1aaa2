"""Text from a file, a name or a flag made safe for a terminal before it is printed (issue 23, cause 4).

A tensor name, a model name, a ``--set name=...`` value or a device file's name reaches the output as the
user (or a downloaded checkpoint) wrote it. Printed raw, ``\\x1b[2J`` clears the screen, ``\\x1b]0;...\\x07``
sets the window title, a newline forges an output line, U+202E reverses the text after it, and a 10 MB
name floods the terminal. So every string a document holds (titles, headers, cells, notes, captions) and
every message on stderr passes through ``safe``:

- control characters (C0 but the space, DEL, C1) and the invisible format characters that reorder or
  hide text (zero-width ones, the bidirectional overrides and isolates, U+2028/U+2029, the BOM) are
  written as escapes a reader sees: ``\\x1b``, ``\\n``, ``\\u202e``;
- a string longer than the limit is cut, and says how long it was: ``abc… (10,000,000 characters)``.
Rich markup needs nothing here: the Rich backend wraps every string in ``rich.text.Text`` (literal).
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

CELL_LIMIT = 300  # characters of a title, header or cell; a model name is ~20, a path ~100
PROSE_LIMIT = 4000  # of a note or caption, which tfcalc writes around the names it quotes

_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u200b-\u200f\u2028-\u202e\u2060-\u2064\u2066-\u2069\ufeff]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(match: re.Match) -> str:
    c = match.group(0)
    return _NAMED.get(c) or (f"\\x{ord(c):02x}" if ord(c) < 0x100 else f"\\u{ord(c):04x}")


def safe(text: str, limit: int = CELL_LIMIT) -> str:
    """text with control and invisible format characters escaped and cut past limit (see the docstring)."""
    if len(text) > limit:
        text = f"{text[: limit - 40]}… ({len(text):,} characters)"
    return _UNSAFE.sub(_escape, text)


def _value(value: Any) -> Any:
    from tfcalc.cli.render.doc import Cell

    if isinstance(value, str):
        return safe(value)
    if isinstance(value, Cell) and isinstance(value.value, str):
        return replace(value, value=safe(value.value))
    return value


def safe_doc(doc):
    """The document with every string made safe, in place (titles, headers, cells, notes, captions)."""
    from tfcalc.cli.render.doc import Note, Table

    for i, block in enumerate(doc.blocks):
        if isinstance(block, Note):
            doc.blocks[i] = replace(block, text=safe(block.text, PROSE_LIMIT))
        elif isinstance(block, Table):
            block.title = safe(block.title, PROSE_LIMIT)
            block.caption = safe(block.caption, PROSE_LIMIT)
            block.columns = [replace(c, header=safe(c.header)) for c in block.columns]
            for row in block.rows:
                row.cells = [_value(v) for v in row.cells]
    return doc
