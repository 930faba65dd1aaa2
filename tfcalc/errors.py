"""The one exception family for bad input, shared by every layer (config, count, measure, report, cli).

An ``InputError`` is the user's mistake, not a bug: its message is one line meant for the user, and the
command line prints it on stderr and exits 2. Anything else that escapes is an internal error (exit 1).
Pure Python: no torch, typer or rich here.
"""

from __future__ import annotations


class InputError(ValueError):
    """Input no transformer, device or file can satisfy. The message is one line, meant for the user."""
