"""Lengths and counts as people type them: 2k, 4K, 32k, 1M for sequence lengths; 8, 1k, 2T for counts.

The rule (stated in --help): a sequence length's k is 1,024 and its M 1,048,576, as model cards mean a
"4k" or "32k context" (Llama 2's 4k is 4,096 positions, Mistral's 32k is 32,768: their config.json
files, max_position_embeddings); every other count (batch sizes, tokens) is decimal, k = 1,000,
M = 10⁶, B or G = 10⁹, T = 10¹² (a "2T-token" training run is 2·10¹² tokens). A number with a fraction
must come out whole (1.5k = 1,536 as a length). Case is ignored. Pure Python.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

from tfcalc.errors import InputError, shown

LENGTH = {"": 1, "k": 2**10, "m": 2**20}
COUNT = {"": 1, "k": 10**3, "m": 10**6, "b": 10**9, "g": 10**9, "t": 10**12}
# a sign is read, so that -5 reaches the range check of the option ("--seq must be between 1 and ...")
_AMOUNT = re.compile(r"\s*([+-]?[0-9]*\.?[0-9]+(?:e[0-9]+)?)\s*([a-z]?)\s*", re.IGNORECASE)
_EXAMPLES = {id(LENGTH): "4096, 4k, 32k, 1M", id(COUNT): "8, 1k, 2T"}


def parse(text: str, scale: dict[str, int], what: str = "a length") -> int:
    """text as a whole number, with a suffix of scale; InputError (one line) otherwise. An int is itself
    (Typer hands an option's default to its parser too)."""
    if isinstance(text, int) and not isinstance(text, bool):
        return text
    text = str(text)
    # plain ASCII digits: the option's range check names the size ('²'.isdigit() is true, and int() refuses it)
    if text.strip().isascii() and text.strip().isdigit() and len(text) <= 4000:
        return int(text)
    if len(text) > 40:  # no length or count has 40 digits; a longer one would cost time to read and print
        raise InputError(f"cannot read '{text[:20]}…' ({len(text):,} characters) as {what}")
    m = _AMOUNT.fullmatch(str(text))
    suffix = m.group(2).lower() if m else ""
    if not m or suffix not in scale:
        raise InputError(f"cannot read {shown(text)} as {what}: write e.g. {_EXAMPLES[id(scale)]}")
    try:
        value = Decimal(m.group(1)) * scale[suffix]
    except InvalidOperation:  # pragma: no cover - the pattern admits only decimal numbers
        raise InputError(f"cannot read {shown(text)} as {what}") from None
    if value != value.to_integral_value():
        raise InputError(f"{shown(text)} is not a whole number ({value:f})")
    return int(value)


def length(text: str) -> int:
    """A sequence length: 4k = 4,096."""
    return parse(text, LENGTH, "a sequence length")


def count(text: str) -> int:
    """A count: 1k = 1,000, 2T = 2·10¹²."""
    return parse(text, COUNT, "a count")
