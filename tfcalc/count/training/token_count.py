"""Token counts as the command line writes them (--tokens 2T, 300B, 1.4e12): ``parse_count``. Pure Python."""

from __future__ import annotations

import math
import re
from decimal import Decimal, InvalidOperation

from tfcalc.errors import InputError

_SUFFIX = {"": 1, "k": 10**3, "m": 10**6, "b": 10**9, "g": 10**9, "t": 10**12, "p": 10**15}
_COUNT = re.compile(r"\s*([0-9]*\.?[0-9]+(?:e[+-]?[0-9]+)?)\s*([kmbgtp]?)\s*", re.IGNORECASE)
MAX_TOKENS = 10**30  # a million times the largest training runs (~1e25 tokens would take every GPU for ages)


def parse_count(text: str, option: str = "--tokens") -> int:
    """'2T' -> 2·10¹², '300B' -> 3·10¹¹, '1.4e12', '500M', '1000'. Decimal suffixes, case ignored. At most
    MAX_TOKENS: the exponent is checked before any number is built ('1e999999' was a 31 s int())."""
    shown = text if len(text or "") <= 40 else text[:40] + "…"
    m = _COUNT.fullmatch(text or "") if len(text or "") <= 100 else None
    if not m:
        raise InputError(f"{option}: cannot read {shown!r} as a token count; write e.g. 2T, 300B, 1.4e12")
    mantissa, _, exponent = m.group(1).lower().partition("e")
    digits = len(mantissa.split(".")[0].lstrip("0"))
    if digits + int(exponent or 0) + len(str(_SUFFIX[m.group(2).lower()])) - 1 > 31:
        raise InputError(f"{option}: {shown!r} is more than {MAX_TOKENS:.0e} tokens")
    try:
        value = int(Decimal(m.group(1)) * _SUFFIX[m.group(2).lower()])
    except InvalidOperation:  # pragma: no cover - the pattern admits only decimal numbers
        raise InputError(f"{option}: cannot read {shown!r} as a token count") from None
    if value <= 0:
        raise InputError(f"{option}: a token count must be positive; got {shown!r}")
    if value > MAX_TOKENS:
        raise InputError(f"{option}: {shown!r} is more than {MAX_TOKENS:.0e} tokens")
    return value


CHINCHILLA_TOKENS_PER_PARAM = 20  # the usual rounding, kept for reference; chinchilla_tokens() reads Table 3
# Hoffmann et al. 2022, Table 3: (parameters, compute-optimal tokens), approach 1
CHINCHILLA_TABLE_3 = ((400e6, 8.0e9), (1e9, 20.2e9), (10e9, 205.1e9), (67e9, 1.5e12), (175e9, 3.7e12),
                      (280e9, 5.9e12), (520e9, 11.0e12), (1e12, 21.2e12), (10e12, 216.2e12))


def chinchilla_tokens(params: int) -> int:
    """Compute-optimal training tokens for a model of ``params`` parameters (step 7)."""
    table = [(math.log(n), d / n) for n, d in CHINCHILLA_TABLE_3]
    x = math.log(max(params, 1))
    if x <= table[0][0]:
        return round(params * table[0][1])
    for (x0, r0), (x1, r1) in zip(table, table[1:], strict=False):
        if x <= x1:
            return round(params * (r0 + (r1 - r0) * (x - x0) / (x1 - x0)))
    return round(params * table[-1][1])
