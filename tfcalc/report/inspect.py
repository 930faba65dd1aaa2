"""The report of `tfcalc.inspect(module, *inputs)` and `tfcalc params pkg.module:factory`: any nn.Module's
parameters, buffers, FLOPs and saved activations beside its module tree (tfcalc.measure.inspect_module).

A factory is a function of no arguments, named ``package.module:function`` as entry points are, that returns
the module, or ``(module, example_inputs)`` with the inputs a tuple (or one tensor) its forward takes: without
inputs only parameters and buffers are counted. The folder tfcalc runs in is importable, as for ``python -m``.
"""

from __future__ import annotations

import importlib
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from tfcalc.errors import InputError, shown
from tfcalc.report.display import Displayed

FACTORY = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")


def is_factory(spec: str) -> bool:
    """'pkg.module:factory' (and no file of that name: a path is a config)."""
    return isinstance(spec, str) and bool(FACTORY.match(spec)) and not Path(spec).exists()


@dataclass(frozen=True, repr=False)
class InspectReport(Displayed):
    label: str  # the factory's path, or the module's class
    inspection: Any  # tfcalc.measure.inspect_module.Inspection

    def headline(self) -> str:
        return f"{self.label}: {self.inspection.params:,} parameters"

    def to_json(self) -> dict[str, Any]:
        i = self.inspection
        return {
            "module": self.label, "class": i.kind, "device": i.device, "inputs": list(i.inputs),
            "empirical_total": i.params, "params": i.params, "param_bytes": i.param_bytes,
            "buffers": i.buffers, "buffer_bytes": i.buffer_bytes, "forward_flops": i.flops,
            "saved_activation_bytes": i.saved_bytes,
            "modules": [{"path": r.path, "class": r.kind, "depth": r.depth, "params": r.params, "buffers": r.buffers,
                         "forward_flops": r.flops, "saved_activation_bytes": r.saved_bytes} for r in i.rows],
        }


def build_inspect(module: Any, inputs: tuple = (), label: Optional[str] = None, loss=None,
                  kwargs: Optional[dict] = None) -> InspectReport:
    from tfcalc.measure.inspect_module import inspect_module

    inspection = inspect_module(module, *inputs, loss=loss, kwargs=kwargs)
    return InspectReport(label or inspection.kind, inspection)


def _call_factory(spec: str) -> Any:
    name, _, attribute = spec.partition(":")
    if "" not in sys.path and str(Path.cwd()) not in sys.path:
        sys.path.insert(0, str(Path.cwd()))  # the user's own module, where they run tfcalc (as python -m does)
    try:
        target: Any = importlib.import_module(name)
    except ImportError as e:
        raise InputError(f"{spec}: cannot import {name} ({' '.join(str(e).split())[:150]})") from None
    except Exception as e:  # the module's own code failed at import
        raise InputError(f"{spec}: importing {name} raised {type(e).__name__}: "
                         f"{' '.join(str(e).split())[:150]}") from None
    for part in attribute.split("."):
        if not hasattr(target, part):
            raise InputError(f"{spec}: {name} has no {attribute!r}")
        target = getattr(target, part)
    if not callable(target):
        raise InputError(f"{spec}: {attribute} is {shown(target)}, not a function that returns a module")
    try:
        return target()
    except Exception as e:
        raise InputError(f"{spec}: the factory raised {type(e).__name__}: {' '.join(str(e).split())[:150]}") from None


def from_factory(spec: str) -> InspectReport:
    """The report of the module a factory returns (module, or (module, example_inputs))."""
    import torch

    made = _call_factory(spec)
    module, inputs = made, ()
    if isinstance(made, tuple) and len(made) == 2 and isinstance(made[0], torch.nn.Module):
        module, inputs = made
        inputs = (inputs,) if isinstance(inputs, torch.Tensor) else inputs
        if not isinstance(inputs, (tuple, list)):
            raise InputError(f"{spec}: the example inputs must be a tuple of the forward's arguments (or one "
                             f"tensor); got {shown(inputs)}")
    if not isinstance(module, torch.nn.Module):
        raise InputError(f"{spec}: the factory returned {shown(made)}, not a torch.nn.Module (or (module, "
                         "example_inputs))")
    return build_inspect(module, tuple(inputs), spec)
