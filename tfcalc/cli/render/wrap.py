"""Lines wrapped at a width between words, continuation lines indented: the rows a narrow table moves below
itself, and warnings and notes at a terminal (no Rich: a warning of a JSON run must not import it)."""

from __future__ import annotations

import textwrap


def indented(line: str, width: int, indent: str = "    ") -> list[str]:
    """A line wrapped to width at spaces, its continuation lines indented under its start: a row moved below
    a table reads as one item, and no word is split (one longer than the width stands on a line of its own)."""
    lead = line[: len(line) - len(line.lstrip(" "))]
    return textwrap.wrap(line, width=max(20, width), initial_indent="", subsequent_indent=lead + indent,
                         break_long_words=False, break_on_hyphens=False, drop_whitespace=True) or [line]
