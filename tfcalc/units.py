"""One formatter per unit: how every number tfcalc prints is written, in one place.

Human-scaled by default (three or four significant digits and a named unit); ``exact=True`` writes
counts, FLOPs and bytes as whole integers with thousands separators. FLOPs are written FLOP, kFLOP,
MFLOP, GFLOP, TFLOP, PFLOP (powers of 10); bytes in binary units (KiB = 2¹⁰ bytes, MiB, GiB, TiB), the
units memory is allocated in, and "bytes" below 1 KiB; bandwidths in decimal GB/s and TB/s, as datasheets
print them; never a bare "B" for either (a "B" is only ever
the billions of a parameter count, as papers write 7B).
"""

from __future__ import annotations

import math
from typing import Any

_DECIMAL = ("", "k", "M", "G", "T", "P", "E", "Z")
_PARAMS = ("", "K", "M", "B", "T", "Q")  # parameter counts as papers write them: 124.4M, 174.6B
_BINARY = ("B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB")


def _scaled(value: float, base: int, prefixes: tuple[str, ...]) -> tuple[float, str]:
    """(value scaled below base, its prefix); past the last prefix the value unscaled, without one, for
    _sig to write in scientific notation (1e+40, not 10000000000000000905969664Q)."""
    i, original = 0, value
    while abs(value) >= base and i < len(prefixes) - 1:
        value, i = value / base, i + 1
    return (original, prefixes[0]) if abs(value) >= base else (value, prefixes[i])


def _sig(value: float, digits: int = 4) -> str:
    """At most 4 significant digits, no exponent, no trailing zeros: 291.6, 1.812, 12.5, 2, 1000."""
    if value == 0 or not math.isfinite(value):
        return f"{value:g}"
    if abs(value) >= 10**6:  # only past the largest prefix (see _scaled)
        return f"{value:.{digits}g}"
    decimals = max(0, digits - 1 - math.floor(math.log10(abs(value))))
    text = f"{value:.{decimals}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text  # 2.000 -> 2, 12.50 -> 12.5


def count(n: int) -> str:
    return f"{n:,}"


def params(n: int, exact: bool = False) -> str:
    if exact or abs(n) < 1000:
        return f"{n:,}"
    value, prefix = _scaled(float(n), 1000, _PARAMS)
    return f"{_sig(value)}{prefix}"


def flop(n: float, exact: bool = False) -> str:
    if exact and float(n).is_integer():
        return f"{int(n):,}"
    value, prefix = _scaled(float(n), 1000, _DECIMAL)
    return f"{_sig(value)} {prefix}FLOP"


def flop_rate(x: float) -> str:
    value, prefix = _scaled(float(x), 1000, _DECIMAL)
    return f"{_sig(value)} {prefix}FLOP/s"


def nbytes(n: float, exact: bool = False) -> str:
    if exact and float(n).is_integer():
        return f"{int(n):,}"
    value, unit = _scaled(float(n), 1024, _BINARY)
    if unit == "B":
        return f"{int(value)} bytes" if abs(value) < 1024 else f"{_sig(value)} bytes"
    return f"{_sig(value)} {unit}"


def byte_rate(x: float) -> str:
    """Bandwidth in decimal units, as datasheets print it: 3.35e12 -> '3.35 TB/s'."""
    value, prefix = _scaled(float(x), 1000, _DECIMAL)
    return f"{_sig(value, 3)} {prefix}B/s" if prefix else f"{_sig(value, 3)} bytes/s"


def intensity(x: float) -> str:
    """Arithmetic intensity: 0.983 -> '0.983 FLOP/byte'."""
    return f"{_sig(x, 3)} FLOP/byte"


def share(fraction: float) -> str:
    """0.316 -> '31.6%'; a non-zero share too small for one decimal reads '<0.1%', not '0.0%'."""
    return "<0.1%" if 0 < fraction < 0.0005 else f"{fraction:.1%}"


def seconds(s: float) -> str:
    """0.00123 -> '1.23 ms'."""
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6)):
        if abs(s) >= scale:
            return f"{_sig(s / scale, 3)} {unit}"
    return f"{_sig(s / 1e-9, 3)} ns"


def tokens_rate(x: float) -> str:
    return f"{x:,.0f} tok/s" if x >= 100 else f"{_sig(x, 3)} tok/s"


def rel(x: float) -> str:
    """A signed relative difference: +0.43%."""
    return f"{x:+.2%}"


def ratio(x: float) -> str:
    return f"{_sig(x, 3)}×"


def format_cell(value: Any, unit: str, exact: bool = False) -> str:
    """The text a table cell shows. Strings pass through (a label in a numeric column), None is empty."""
    if value is None:
        return ""
    if isinstance(value, str) or isinstance(value, bool) or unit == "text":
        return str(value)
    if unit == "int":
        return count(value)
    if unit == "params":
        return params(value, exact)
    if unit == "flop":
        return flop(value, exact)
    if unit == "bytes":
        return nbytes(value, exact)
    formatter = {"flop_rate": flop_rate, "share": share, "seconds": seconds, "tokens_rate": tokens_rate,
                 "ratio": ratio, "rel": rel, "byte_rate": byte_rate, "intensity": intensity}[unit]
    return formatter(value)
