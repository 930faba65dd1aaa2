"""How a report shows itself in a notebook: a one-line repr (what was asked, the headline figure),
``_repr_markdown_`` and ``_repr_html_`` with the same tables as the command line, ``to_dict()``, and
``to_frame()`` (the main table as a pandas DataFrame, where pandas is installed; not a dependency).

The tables are drawn by tfcalc.cli.render, which sits above this package (imports go cli -> report):
tfcalc.notebook registers its writers in VIEWS when the public API (tfcalc.params(), ...) first runs,
so nothing here imports upward. A report built without the API shows its one-line repr until then.
"""

from __future__ import annotations

from typing import Any, Callable

VIEWS: dict[str, Callable[[Any], Any]] = {}  # "markdown", "html", "frame" -> writer(report)


class Displayed:
    """Mixed into every report (its dataclass takes repr=False, so this repr is the one shown)."""

    def headline(self) -> str:  # each report says what was asked and its answer
        return getattr(getattr(self, "model", None), "label", "")

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.headline()}>"

    def to_dict(self) -> dict[str, Any]:
        """The --json answer as a dict; a report of several rows (lengths, batches) as {'rows': [...]}."""
        data = self.to_json()  # type: ignore[attr-defined]
        return data if isinstance(data, dict) else {"rows": data}

    def _view(self, kind: str) -> Any:
        writer = VIEWS.get(kind)
        return None if writer is None else writer(self)

    def _repr_markdown_(self) -> Any:
        return self._view("markdown")

    def _repr_html_(self) -> Any:
        return self._view("html")

    def to_frame(self) -> Any:
        """The main table (as --format csv writes it: raw values, a header row) as a pandas DataFrame."""
        if "frame" not in VIEWS:  # imported by the API; a report built by hand needs it imported once
            raise RuntimeError("to_frame(): `import tfcalc.notebook` first (tfcalc.params() and the rest do)")
        return self._view("frame")
