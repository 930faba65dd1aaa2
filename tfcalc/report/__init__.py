"""Reports: one frozen dataclass per command, built eagerly by one builder each.

A report holds every figure its command shows, computed when it is built; ``to_json()`` is the JSON
contract (DESIGN.md) and the CLI's ``--json`` output. Nothing here prints: tfcalc.cli.render formats
reports. Layers, one way: cli -> report -> measure -> count -> config.
"""

from tfcalc.report.model_ref import ModelRef, ModelSpec, resolve

__all__ = ["ModelRef", "ModelSpec", "resolve"]
