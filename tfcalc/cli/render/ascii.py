"""ASCII stand-ins for the few non-ASCII characters tfcalc writes, for terminals and pipes that take ASCII
only (PYTHONIOENCODING=ascii, an old locale): ✓ -> ok, · -> ., ² -> ^2, 2¹⁰ -> 2^10, × -> x, — -> --.

A codec error handler, registered once and set on stdout and stderr when their encoding cannot write
these characters: every write path (print, Rich, the YAML of `tfcalc show`) gets the same stand-ins,
where the default would raise UnicodeEncodeError half-way through a table or an error message. Rich
sees the ASCII encoding itself and draws its boxes in ASCII.
"""

from __future__ import annotations

import codecs
import sys

HANDLER = "tfcalc-ascii"
_SUPERSCRIPTS = dict(zip("⁰¹²³⁴⁵⁶⁷⁸⁹ᵀᵗ", "0123456789Tt", strict=True))
_STAND_INS = {
    "·": ".", "×": "x", "−": "-", "—": "--", "–": "-", "…": "...", "√": "sqrt", "✓": "ok", "✗": "X",
    "≈": "~", "≤": "<=", "≥": ">=", "→": "->", "←": "<-", "◀": "<", "▶": ">", "÷": "/", "µ": "u", "β": "beta",
    "γ": "gamma", "σ": "sigma", "π": "pi", "ε": "eps", "₂": "_2", "█": "#", "▓": "#", "▒": "=", "░": "-",
    "━": "-", "─": "-", "│": "|", "\u0302": "", "\u00a0": " ", "’": "'", "‘": "'", "“": '"', "”": '"',
}


def to_ascii(text: str) -> str:
    """text with tfcalc's stand-ins; a run of superscripts becomes one '^' group (2¹⁰ -> 2^10)."""
    out, i = [], 0
    while i < len(text):
        ch = text[i]
        if ch in _SUPERSCRIPTS:
            j = i
            while j < len(text) and text[j] in _SUPERSCRIPTS:
                j += 1
            out.append("^" + "".join(_SUPERSCRIPTS[c] for c in text[i:j]))
            i = j
            continue
        out.append(ch if ord(ch) < 128 else _STAND_INS.get(ch, "?"))
        i += 1
    return "".join(out)


def _handler(error: UnicodeError) -> tuple[str, int]:
    if not isinstance(error, UnicodeEncodeError):
        raise error
    return to_ascii(error.object[error.start:error.end]), error.end


codecs.register_error(HANDLER, _handler)


def _needs_help(stream) -> bool:
    try:
        "✓·²×".encode(getattr(stream, "encoding", None) or "utf-8")
    except (UnicodeEncodeError, LookupError):
        return True
    return False


def prepare_streams() -> None:
    """Give stdout and stderr the stand-ins where their encoding cannot write tfcalc's characters."""
    for stream in (sys.stdout, sys.stderr):
        if stream is not None and _needs_help(stream) and hasattr(stream, "reconfigure"):
            try:
                stream.reconfigure(errors=HANDLER)
            except (ValueError, OSError):  # a stream that cannot be reconfigured keeps its own rule
                pass
