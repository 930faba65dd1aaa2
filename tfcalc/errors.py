"""The one exception family for bad input, shared by every layer (config, count, measure, report, cli).

An ``InputError`` is the user's mistake, not a bug: its message is one line meant for the user, and the
command line prints it on stderr and exits 2. Anything else that escapes is an internal error (exit 1).
Pure Python: no torch, typer or rich here.
"""

from __future__ import annotations

from itertools import islice


class InputError(ValueError):
    """Input no transformer, device or file can satisfy. The message is one line, meant for the user."""


SHOWN_WIDTH = 60  # characters of a user's value that a message quotes; the rest is cut and counted


def shown(value: object, width: int = SHOWN_WIDTH) -> str:
    """A user's value as an error message quotes it: short, whatever its size or shape.

    Never calls repr() on the whole value: a YAML alias bomb is a list of lists that shares its items, so
    its repr would be billions of characters (and take hours), and an integer past 4,300 digits has no
    repr at all. Long strings are cut and their length named; containers name their type and length and
    show their first items; huge integers are named by their number of digits."""
    if isinstance(value, bool) or value is None:
        return repr(value)
    if isinstance(value, int):
        if value.bit_length() <= 200:
            text = repr(value)
            return text if len(text) <= width else f"{text[:width]}… (a {len(text)}-digit integer)"
        return f"a {_digits(value)}-digit integer"
    if isinstance(value, (str, bytes)):
        if len(value) <= width:
            return repr(value)
        unit = "characters" if isinstance(value, str) else "bytes"
        return f"{value[:width]!r}… ({type(value).__name__} of {len(value):,} {unit})"
    if isinstance(value, (list, tuple, dict, set, frozenset)):
        first = list(islice(value.items() if isinstance(value, dict) else value, 3))
        inner = ", ".join(_item(x, width // 4) for x in first) + (", …" if len(value) > 3 else "")
        brackets = "[]" if isinstance(value, list) else "()" if isinstance(value, tuple) else "{}"
        text = f"{brackets[0]}{inner}{brackets[1]}"
        return text if len(value) <= 3 else f"{text} ({type(value).__name__} of {len(value):,} items)"
    text = repr(value)
    return text if len(text) <= width else f"{text[:width]}… ({type(value).__name__})"


def _digits(value: int) -> int:
    """Decimal digits of an integer too long for str() (past 4,300 digits it raises ValueError)."""
    n = abs(value)
    d = int(n.bit_length() * 0.30102999566398120) + 1  # log10(2): exact or one too many
    return d - 1 if d > 1 and 10 ** (d - 1) > n else d


def _item(x: object, width: int) -> str:
    """One item of a container, one level deep only (nested containers are named, not opened)."""
    if isinstance(x, tuple) and len(x) == 2:  # a dict's (key, value)
        return f"{_item(x[0], width)}: {_item(x[1], width)}"
    if isinstance(x, (list, tuple, dict, set, frozenset)):
        return f"<{type(x).__name__} of {len(x):,}>"
    return shown(x, width)


def shown_path(path: object, width: int = 120) -> str:
    """A path as a message names it: whole when short; else its start and its end (the file name)."""
    text = str(path)
    return text if len(text) <= width else f"{text[: width // 2]}…{text[-width // 3:]} ({len(text):,} characters)"
