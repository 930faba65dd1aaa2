"""Option values converted without pydantic where the conversion is plain: a start-up shortcut.

Typer 0.29 converts every option's value through a pydantic ``TypeAdapter`` (typer/_coercion.py,
``build_runtime_param``; typer/_adapters.py): the first option a command converts imports pydantic and
pydantic-core (about 0.13 s), and each adapter built costs a few milliseconds more -- about 0.2 s of every
command, more than `tfcalc plan`'s arithmetic. The values tfcalc's options take are plain: text, lists of
text, integers, decimals, a choice among an Enum's values, or a value its own ``parser=`` converts. Those
are converted here, giving what typer's adapters give for the same input:

- str: the text itself; list[str] (repeated options, variadic arguments): a list of the texts; a tuple
  of fixed length (an option of two numbers): each value converted as below;
- int: ASCII digits with an optional sign and no leading zero (what ``int`` and pydantic read alike);
- float: a decimal, optionally with an exponent, that is finite;
- an Enum: typer's own ``coerce_cli_choice`` (typer/_param_types.py, which imports no pydantic);
- ``parser=``: the parser's result.

Anything else -- a path, a tuple, a value with bounds, and every value that does not convert cleanly
(a typo, an out-of-range number, a parser's error) -- goes to typer's own adapter, which then imports
pydantic and writes the error message it always wrote. So a value converts to the same thing and a bad
value fails with the same message as before; only the time differs.

The shortcut leans on typer's private parameter class (``_TyperParameter._runtime_param``, built lazily
by ``get_runtime_param``). Where a typer release lacks any of it, ``install`` leaves the parameters
alone and typer's plain path runs (tests/cli/test_startup.py simulates that).
"""

from __future__ import annotations

import math
import re
from enum import Enum
from typing import Any, get_args, get_origin

_INT = re.compile(r"[+-]?(?:0|[1-9][0-9]*)", re.ASCII)
_FLOAT = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?", re.ASCII)
_SLOW = object()  # "not converted here": typer's adapter converts it (or writes its error)


def _leaf(annotation: Any, info: Any, value: Any, ctx: Any) -> Any:
    """The converted value, or _SLOW."""
    if getattr(info, "parser", None) is not None:
        try:
            return info.parser(value)
        except Exception:  # typer's adapter calls the parser again and reports its error as it always did
            return _SLOW
    if annotation is str:
        return value if isinstance(value, str) else _SLOW
    if annotation is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        return int(value) if isinstance(value, str) and _INT.fullmatch(value) and len(value) < 100 else _SLOW
    if annotation is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            number = float(value)
        elif isinstance(value, str) and _FLOAT.fullmatch(value) and len(value) < 100:
            number = float(value)
        else:
            return _SLOW
        return number if math.isfinite(number) else _SLOW
    if isinstance(annotation, type) and issubclass(annotation, Enum):
        from typer._param_types import coerce_cli_choice

        try:
            return coerce_cli_choice(value, choices=tuple(annotation),
                                     case_sensitive=getattr(info, "case_sensitive", True), ctx=ctx)
        except ValueError:
            return _SLOW
    return _SLOW


class PlainValue:
    """Stands where typer keeps a parameter's converter (``_runtime_param``): converts plain values, hands
    the rest to the converter typer would have built."""

    def __init__(self, descriptor: Any, build: Any):
        self.descriptor, self._build, self._typer = descriptor, build, None

    def coerce(self, value: Any, param: Any, ctx: Any) -> Any:
        multi = param.multiple or param.nargs == -1
        if value is None:  # as typer's RuntimeParam.coerce
            return () if multi else None
        out = self._convert(value, multi, ctx)
        if out is _SLOW:
            if self._typer is None:
                self._typer = self._build(self.descriptor)
            return self._typer.coerce(value, param=param, ctx=ctx)
        return out

    def _convert(self, value: Any, multi: bool, ctx: Any) -> Any:
        annotation, info = self.descriptor.annotation, self.descriptor.parameter_info
        bounded = any(getattr(info, name, None) not in (None, False) for name in ("min", "max", "clamp"))
        if bounded or getattr(self.descriptor, "file_annotation", None) is not None:
            return _SLOW
        if get_origin(annotation) is list:
            args = get_args(annotation)
            parser = getattr(info, "parser", None)
            if not multi or args != (str,) or parser is not None or not isinstance(value, (list, tuple)):
                return _SLOW
            return list(value) if all(isinstance(v, str) for v in value) else _SLOW
        if get_origin(annotation) is tuple:  # a fixed number of values (nargs), each converted as a leaf
            args = get_args(annotation)
            if multi or Ellipsis in args or not isinstance(value, (list, tuple)) or len(value) != len(args):
                return _SLOW
            out = tuple(_leaf(a, info, v, ctx) for a, v in zip(args, value, strict=True))
            return _SLOW if any(v is _SLOW for v in out) else out
        return _SLOW if multi else _leaf(annotation, info, value, ctx)


def install(params: list) -> list:
    """Give each of typer's parameters that has not converted a value yet the plain converter; a no-op
    where typer's internals are not the ones this module was written against."""
    try:
        from typer._coercion import build_runtime_param
    except ImportError:
        return params
    for param in params:
        descriptor = getattr(param, "type_descriptor", None)
        if (getattr(param, "_runtime_param", False) is None and descriptor is not None
                and hasattr(descriptor, "parameter_info") and hasattr(descriptor, "annotation")):
            param._runtime_param = PlainValue(descriptor, build_runtime_param)
    return params
