"""What `tfcalc check` says beyond the figures that moved: why they moved where it can tell, how to accept
them, and whether the presets it counted are the ones in front of the user.

- Cause, per model: a snapshot written by this tfcalc pins each model's resolved config beside its figures
  (``config``), so a config that changed is named field by field; else tfcalc's version is compared with the
  snapshot's. A snapshot without a config (written before) can tell only the version.
- Accepting: the `tfcalc snapshot` command that writes the same file again from the same specs and --set.
- The checkout: after a non-editable ``pip install .``, tfcalc counts its installed copy of the presets; a
  preset edited in the checkout (a folder with tfcalc's pyproject.toml and presets/) is not what was checked.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any, Optional

from tfcalc import __version__
from tfcalc.presets import preset_dir, preset_names

MAX_FIELDS_NAMED = 3


def pinned_config(cfg: Any) -> dict[str, Any]:
    """The config a snapshot pins: the resolved fields that are set (nulls left out, to keep it short)."""
    return {k: v for k, v in cfg.resolved().items() if v is not None}


def _shown(value: Any) -> str:
    text = repr(value) if isinstance(value, str) else str(value)
    return text if len(text) <= 40 else text[:39] + "…"


def cause(entry: dict[str, Any], snapshot_version: Any, now: Optional[dict[str, Any]]) -> str:
    """Why a model's figures moved, in words; ``now`` its config as loaded today (None: it did not load)."""
    if now is None:
        return "the config no longer loads"
    then = entry.get("config")
    if isinstance(then, dict) and then != now:
        changed = [k for k in list(then) + [k for k in now if k not in then] if then.get(k) != now.get(k)]
        named = "; ".join(f"{k} {_shown(then.get(k))} → {_shown(now.get(k))}" for k in changed[:MAX_FIELDS_NAMED])
        more = f" and {len(changed) - MAX_FIELDS_NAMED} more" if len(changed) > MAX_FIELDS_NAMED else ""
        return f"the config changed: {named}{more}"
    if snapshot_version != __version__:
        return f"tfcalc's version changed: {snapshot_version} → {__version__}"
    if isinstance(then, dict):
        return f"the config and tfcalc's version ({__version__}) are as pinned: tfcalc's counting changed"
    return (f"the config or tfcalc's counting changed (tfcalc {__version__} as pinned; this snapshot does not pin "
            "the configs: write it again and check will tell which)")


def accept_command(path: str, entries: list[dict[str, Any]]) -> str:
    """The `tfcalc snapshot` command that pins today's figures in the same file: the same specs, the same
    --set (one command per set of overrides; no specs when they are every packaged preset)."""
    groups: dict[tuple[str, ...], list[str]] = {}
    for e in entries:
        groups.setdefault(tuple(e.get("overrides", [])), []).append(e["spec"])
    commands = []
    for overrides, specs in groups.items():
        models = [] if len(groups) == 1 and specs == preset_names() else specs
        sets = [x for o in overrides for x in ("--set", o)]
        commands.append(shlex.join(["tfcalc", "snapshot", *models, *sets, "-o", path]))
    if len(commands) > 1:  # several --set groups: one file cannot be written by one command
        return " ; ".join(commands) + " (then join the entries into one file)"
    return commands[0]


def _checkout(start: Path) -> Optional[Path]:
    """The tfcalc checkout holding ``start``, by its pyproject.toml and presets/ folder, or None."""
    for folder in (start, *start.parents):
        project = folder / "pyproject.toml"
        try:
            if (folder / "presets").is_dir() and project.is_file() and 'name = "tfcalc"' in project.read_text(
                    errors="replace")[:4096]:
                return folder
        except OSError:
            return None
    return None


def checkout_differences(*starts: Path) -> Optional[str]:
    """A warning when a tfcalc checkout around ``starts`` (the working folder, the snapshot's) holds presets
    other than those tfcalc counts (its installed copy); None when they agree or there is no checkout."""
    installed = preset_dir().resolve()
    for start in starts:
        root = _checkout(start.resolve())
        if root is None:
            continue
        local = (root / "presets").resolve()
        if local == installed:
            return None  # an editable install: the checkout's presets are the ones counted
        names = {p.name for p in local.glob("*.yaml")} | {p.name for p in installed.glob("*.yaml")}
        differ = sorted(n for n in names if _read(local / n) != _read(installed / n))
        if not differ:
            return None
        listed = ", ".join(differ[:5]) + (f" and {len(differ) - 5} more" if len(differ) > 5 else "")
        # what differs and what to do first, the paths last: a message is cut to one line of 280 characters
        # (render.one_line), and an installed package's path in a virtual environment is long
        return (f"the presets in the checkout differ from the installed tfcalc's: {listed}; check counted the "
                f"installed ones (`pip install -e .` counts the checkout's); checkout {local}, installed {installed}")
    return None


def _read(path: Path) -> Optional[bytes]:
    try:
        return path.read_bytes()
    except OSError:
        return None
