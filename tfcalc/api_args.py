"""The public API's argument rules (tfcalc/__init__.py's functions): sizes read as the command line reads
them ('4k'), each argument's type checked before any work, and errors in the Python argument's name."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Sequence

if TYPE_CHECKING:
    from tfcalc.report.model_ref import ModelRef, ModelSpec


# The API's arguments that the command line reads with a unit rule (tfcalc.amounts): a length's k is 1,024
# ("4k" = 4,096, as model cards count context), a count's 1,000. A list of them where the API takes several.
_LENGTHS = ("seq", "src_seq", "gen", "mean_input", "mean_output")
_COUNTS = ("batch", "global_batch", "micro_batch", "requests")


def _amount(name: str, value: Any) -> Any:
    """'4k' -> 4096 for a length, 4000 for a count; '256..4k' or '256,1k' (scan, bench) as the command line
    reads them; anything else unchanged, for the one check of the command line downstream."""
    from tfcalc import amounts

    if isinstance(value, (list, tuple)):
        return type(value)(_amount(name, v) for v in value)
    if not isinstance(value, str):
        return value
    from tfcalc.errors import InputError

    if "," in value or ".." in value:
        from tfcalc.cli.options import parse_lengths  # the command line's one reader of several sizes

        return parse_lengths(value, "--batch" if name in _COUNTS else "--seq")
    try:
        return amounts.length(value) if name in _LENGTHS else amounts.count(value)
    except InputError as e:
        raise InputError(f"{name}: {e}") from None


def _checked(name: str, annotation: Any, value: Any) -> Any:
    """The command line's type rule for one argument, in its Python name, before any work (issue 33, cause
    6): a switch is True or False (not 'no', which is truthy), a name is a string, a whole number an int, a
    fraction a finite number; ``budget`` a size such as '24GB' or a positive number of bytes, as --budget
    reads (tfcalc.count.model.budget.parse_bytes). Ranges are the command line's own checks, downstream.
    Annotations of several types (Union) are left to those checks too, but for sizes (one or a list); a
    fraction given as text is left to the range check, which names the range."""
    import math

    from tfcalc.errors import InputError, shown

    rule = str(annotation).replace("Optional[", "").rstrip("]") if str(annotation).startswith("Optional[") \
        else str(annotation)
    if value is None and (str(annotation).startswith("Optional[") or name == "budget"):
        return value
    if name == "budget":
        from tfcalc.count.model.budget import parse_bytes

        if isinstance(value, str):
            return parse_bytes(value, "budget")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 1:
            raise InputError(f"budget must be a size such as '24GB' or a number of bytes, 1 or more; "
                             f"got {shown(value)}")
        return int(value)  # a fraction of a byte rounds down, as parse_bytes reads one
    if name == "device" and type(value).__name__ == "device":  # a torch.device: written as the command line takes it
        return str(value)
    if name in _LENGTHS + _COUNTS and rule.startswith("Union[") and not isinstance(value, str):
        several = value if isinstance(value, (list, tuple)) else [value]  # one size, or several
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in several):
            raise InputError(f"{name} must be an integer or a list of integers; got {shown(value)}")
        return value
    if rule == "str" and isinstance(value, os.PathLike):
        value = os.fspath(value)  # a path where a file is named (device_spec, weights)
    if rule == "bool" and not isinstance(value, bool):
        raise InputError(f"{name} must be True or False; got {shown(value)}")
    # an optional name: 0, False or [] would read as "not given" (``dtype or default``), so they are refused
    # here; any other non-string meets the command line's own check of the allowed names, which lists them
    optional = str(annotation).startswith("Optional[")
    if rule == "str" and not isinstance(value, str) and ((optional and not value) or name == "device"):
        raise InputError(f"{name} must be a string; got {shown(value)}")
    if rule == "int" and not isinstance(value, (int, float)):  # True, 2.0 left to the range checks, which name them
        raise InputError(f"{name} must be an integer; got {type(value).__name__}")
    if rule == "int" and isinstance(value, float) and not math.isfinite(value):  # the command line reads no nan
        raise InputError(f"{name} must be an integer; got {shown(value)}")
    if rule == "float" and (isinstance(value, bool) or isinstance(value, float) and not math.isfinite(value)):
        raise InputError(f"{name} must be a finite number; got {shown(value)}")
    return value


def _python_names(message: str, names: Sequence[str]) -> str:
    """An error in the Python argument's name: '--seq must be ...' -> 'seq must be ...' where the function
    takes ``seq`` (the command line's words are shared; its flags are not what a notebook user typed)."""
    import re

    def python(flag: str) -> str:
        return _FLAG_ARGUMENTS.get(flag, flag.replace("-", "_"))

    return re.sub(r"--([a-z][a-z0-9-]*)", lambda m: python(m.group(1)) if python(m.group(1)) in names
                  else m.group(0), message)


# flags whose Python argument is not their own name with "_" for "-"
_FLAG_ARGUMENTS = {"copy-size": "copy_bytes"}


def public(function):
    """Decorate each function of tfcalc's public API (tfcalc/__init__.py) with these rules: it reads '4k' where
    the command line does, checks each argument's type before any work, and names its own arguments in errors."""
    import functools
    import inspect

    signature = inspect.signature(function)
    names = tuple(signature.parameters)

    @functools.wraps(function)
    def call(*args: Any, **kwargs: Any) -> Any:
        from tfcalc.errors import InputError

        try:
            bound = signature.bind(*args, **kwargs)  # a missing or unknown argument: Python's own TypeError
        except TypeError:
            return function(*args, **kwargs)
        try:
            for name in set(bound.arguments) & set(_LENGTHS + _COUNTS):
                bound.arguments[name] = _amount(name, bound.arguments[name])
            for name in bound.arguments:
                if name in signature.parameters and name != "model":
                    bound.arguments[name] = _checked(name, signature.parameters[name].annotation,
                                                     bound.arguments[name])
            return function(*bound.args, **bound.kwargs)
        except InputError as e:
            raise InputError(_python_names(str(e), names)) from None

    return call


def _override_text(key: str, value: Any) -> str:
    shown = "null" if value is None else str(value).lower() if isinstance(value, bool) else str(value)
    return f"{key}={shown}"


def resolve_model(model: "ModelSpec", overrides: dict[str, Any]) -> "ModelRef":
    """The model a public function was given (a preset, a file, a ModelConfig), its keyword overrides turned
    into the --set texts a command reads (``n_layer=6``; True -> ``true``, None -> ``null``)."""
    import tfcalc.notebook  # noqa: F401 - the reports' tables in a notebook (_repr_html_, _repr_markdown_)
    from tfcalc.report.model_ref import resolve

    return resolve(model, [_override_text(k, v) for k, v in overrides.items()])
