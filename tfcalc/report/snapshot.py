"""Snapshots of every count, for CI regression: write them once, recompute and compare later.

A snapshot is JSON: the tfcalc version, the conventions the numbers follow, and one entry per model
(the spec it was loaded from, any --set overrides, and its figures). ``check`` reloads each entry the
same way, recomputes the figures and lists every leaf that moved. Pure arithmetic: no torch. The
figures are read from the params, flops and memory reports' to_json() (SNAPSHOT_FIELDS).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tfcalc import __version__, reading, writing
from tfcalc.errors import InputError, shown, shown_path
from tfcalc.report.flops import build_flops
from tfcalc.report.memory import estimate_memory
from tfcalc.report.model_ref import ModelRef, resolve
from tfcalc.report.params import build_params
from tfcalc.report.snapshot_cause import accept_command, cause, pinned_config
from tfcalc.workload import Workload

FORMAT = 1
CONVENTIONS = {
    "flop": "one floating-point operation; a multiply-add is 2 FLOPs; matmul (m,k)@(k,n) = 2·m·k·n",
    "forward_flops": "matmul FLOPs, attention scores over the full T×T square, LM head over all T positions",
    "params": "parameters shared between modules (tied embedding and LM head) count once",
    "flops_at": "batch 1, the model's context length; training = 3 × forward (no recompute)",
    "decode_flops": "one token per sequence against the context's cached keys; latent attention (DeepSeek's MLA) "
    "in its absorbed form (W_UK into the query, W_UV into the output, no expansion of the cached latents), the "
    "forward in the naive form",
    "bytes": "bytes of the named dtype; memory figures at batch 1, the context length, bf16, "
    "training with mixed-precision Adam (16 bytes/param) and tfcalc's default attention",
}
FIGURES_DTYPE = "bf16"

# Where each pinned figure comes from: a path into the to_json() of the report of the same name, so a
# snapshot is a subset of what `tfcalc params|flops|memory --json` print, never a second computation.
SNAPSHOT_FIELDS: dict[str, dict[str, tuple[str, ...]]] = {
    "params": {"total": ("analytic_total",), "breakdown": ("breakdown",)},
    "flops": {
        "seq": ("seq",), "forward_flops": ("forward_flops",), "forward_flops_causal": ("forward_flops_causal",),
        "training_flops": ("training_flops",), "breakdown": ("breakdown",),
        "decode_flops_per_token": ("decode", "flops"), "crossover_seq": ("crossover_seq",),
    },
    "memory": {
        "dtype": ("dtype",), "seq": ("seq",), "weights_bytes": ("weights_bytes",),
        "kv_cache_bytes": ("kv_cache_bytes",), "activation_bytes": ("activation_bytes",),
        "training_bytes": ("training_bytes",),
    },
}


def _pick(data: Any, path: tuple[str, ...]) -> Any:
    for key in path:
        if data is None:
            return None  # e.g. an encoder's decode: null, so its decode_flops_per_token is null
        data = data[key]
    return data


def report_json(model: ModelRef) -> dict[str, dict[str, Any]]:
    """The to_json() of the params, flops and memory reports at the snapshot's workload: batch 1, the
    model's context length, bf16 bytes, nothing measured."""
    at_context = Workload(batch=1, seq=model.cfg.max_seq_len, dtype=FIGURES_DTYPE)
    return {
        "params": build_params(model, measure=False).to_json(),
        "flops": build_flops(model, at_context).to_json(),
        "memory": estimate_memory(model, at_context).to_json(),
    }


def figures(model: ModelRef) -> dict[str, Any]:
    """Every number a snapshot pins for one model (None where a figure does not apply)."""
    reports = report_json(model)
    return {kind: {key: _pick(reports[kind], path) for key, path in fields.items()}
            for kind, fields in SNAPSHOT_FIELDS.items()}


def entry(spec: str, overrides: list[str]) -> dict[str, Any]:
    """One model's figures, and its resolved config (what `check` names when a figure moves: snapshot_cause)."""
    model = resolve(spec, overrides)
    return {"preset": model.name, "spec": spec, "overrides": list(overrides), **figures(model),
            "config": pinned_config(model.cfg)}


def build(specs: list[str], overrides: list[str]) -> dict[str, Any]:
    return {
        "tfcalc_version": __version__,
        "format": FORMAT,
        "conventions": CONVENTIONS,
        "entries": [entry(spec, overrides) for spec in specs],
    }


def to_text(data: dict[str, Any]) -> str:
    """The snapshot as strict JSON (RFC 8259 has no NaN or Infinity: a file others parse must not carry
    them); a figure that is not finite is refused in one line, before anything is written."""
    try:
        return json.dumps(data, indent=2, allow_nan=False) + "\n"
    except ValueError:
        raise InputError("a figure of the snapshot is not finite (NaN or infinite): a snapshot pins finite "
                         "figures only; check the model's sizes") from None


def write_atomic(path: Path, data: dict[str, Any]) -> Path:
    """Write the snapshot to path: atomically, through a symlink to its target, never over a special file
    (tfcalc.writing). Returns the file written."""
    return writing.write_atomic(path, to_text(data))


def _check_entry(where: str, i: int, e: Any) -> None:
    """InputError naming the entry when it is not what `tfcalc snapshot` writes (a hand-edited file)."""
    if not isinstance(e, dict):
        raise InputError(f"{where}: entry {i} is {shown(e)}, not an object with a 'spec'")
    if not isinstance(e.get("spec"), str):
        raise InputError(f"{where}: entry {i} has no 'spec' string (got {shown(e.get('spec'))})")
    if not isinstance(e.get("preset", ""), str):
        raise InputError(f"{where}: entry {i}: 'preset' must be a string, got {shown(e['preset'])}")
    overrides = e.get("overrides", [])
    if not isinstance(overrides, list) or not all(isinstance(o, str) for o in overrides):
        raise InputError(f"{where}: entry {i}: 'overrides' must be a list of KEY=VALUE strings, got {shown(overrides)}")
    for kind in SNAPSHOT_FIELDS:
        if kind in e and not isinstance(e[kind], dict):
            raise InputError(f"{where}: entry {i}: '{kind}' must be an object of figures, got {shown(e[kind])}")


def read(path: Path) -> dict[str, Any]:
    """The snapshot at path; InputError (one line) when it cannot be read or is not a snapshot."""
    where = shown_path(path)
    data = reading.read_json(path, "snapshot", reading.MAX_SNAPSHOT_BYTES)
    if not isinstance(data, dict) or not isinstance(data.get("entries"), list):
        raise InputError(f"{where}: not a tfcalc snapshot (no 'entries' list)")
    if data.get("format") != FORMAT:
        raise InputError(f"{where}: snapshot format {shown(data.get('format'))}, this tfcalc reads format {FORMAT}")
    if not data["entries"]:
        raise InputError(f"{where}: the snapshot has no entries, so there is nothing to check; write one with "
                         "`tfcalc snapshot -o FILE [MODEL...]`")
    for i, e in enumerate(data["entries"]):
        _check_entry(where, i, e)
    return data


@dataclass(frozen=True)
class Drift:
    preset: str
    field: str  # dotted path, e.g. params.breakdown.attn_q_weight
    expected: Any
    got: Any
    cause: str = ""  # why, where check can tell (tfcalc.report.snapshot_cause)

    @property
    def difference(self) -> float | None:
        if _is_number(self.expected) and _is_number(self.got):
            return self.got - self.expected
        return None


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _flatten(data: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(data, dict):
        out: dict[str, Any] = {}
        for key, value in data.items():
            out.update(_flatten(value, f"{prefix}.{key}" if prefix else str(key)))
        return out
    return {prefix: data}


def _same(expected: Any, got: Any, tolerance: float) -> bool:
    if _is_number(expected) and _is_number(got):
        if tolerance == 0:
            return expected == got
        return math.isclose(expected, got, rel_tol=tolerance, abs_tol=0)
    return expected == got


def compare(snapshot: dict[str, Any], tolerance: float = 0.0) -> list[Drift]:
    """Recompute every entry and list each figure that differs (beyond a relative tolerance), with its cause."""
    drifts = []
    for e in snapshot["entries"]:
        name = e.get("preset", e["spec"])
        try:
            model = resolve(e["spec"], e.get("overrides", []))
            fresh = figures(model)
        except InputError as err:
            drifts.append(Drift(name, "(config)", "loadable", str(err), cause(e, snapshot.get("tfcalc_version"), None)))
            continue
        expected = _flatten({k: v for k, v in e.items() if k in fresh})
        got = _flatten(fresh)
        why = None
        for key in list(expected) + [k for k in got if k not in expected]:
            if key not in got or key not in expected or not _same(expected[key], got[key], tolerance):
                why = why or cause(e, snapshot.get("tfcalc_version"), pinned_config(model.cfg))
                drifts.append(Drift(name, key, expected.get(key), got.get(key), why))
    return drifts


@dataclass(frozen=True)
class SnapshotReport:
    """What `tfcalc snapshot` wrote."""

    path: str
    data: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "tfcalc_version": self.data["tfcalc_version"], "format": self.data["format"],
                "models": [e["preset"] for e in self.data["entries"]]}


@dataclass(frozen=True)
class CheckReport:
    """What `tfcalc check` found: every figure that drifted from the snapshot."""

    path: str
    models: int
    drifts: tuple[Drift, ...]
    accept: str = ""  # the `tfcalc snapshot` command that pins today's figures in the same file

    def to_json(self) -> list[dict[str, Any]]:
        return [{"preset": d.preset, "field": d.field, "expected": d.expected, "got": d.got,
                 "difference": d.difference, "cause": d.cause, "accept": self.accept} for d in self.drifts]


def build_check(path: Path, tolerance: float = 0.0) -> CheckReport:
    if not (isinstance(tolerance, (int, float)) and math.isfinite(tolerance) and tolerance >= 0):
        raise InputError(f"--tolerance must be a finite number, 0 or more; got {tolerance}")
    data = read(path)
    return CheckReport(str(path), len(data["entries"]), tuple(compare(data, tolerance)),
                       accept_command(str(path), data["entries"]))
