"""Snapshots of every count, for CI regression: write them once, recompute and compare later.

A snapshot is JSON: the tfcalc version, the conventions the numbers follow, and one entry per model
(the spec it was loaded from, any --set overrides, and its figures). ``check`` reloads each entry the
same way, recomputes the figures and lists every leaf that moved. Pure arithmetic: no torch.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tfcalc import __version__
from tfcalc.config import ConfigError, ModelConfig
from tfcalc.count import flops as count_flops
from tfcalc.count import memory as count_memory
from tfcalc.count import params as count_params
from tfcalc.presets import load

FORMAT = 1
CONVENTIONS = {
    "flop": "one floating-point operation; a multiply-add is 2 FLOPs; matmul (m,k)@(k,n) = 2·m·k·n",
    "forward_flops": "matmul FLOPs, attention scores over the full T×T square, LM head over all T positions",
    "params": "parameters shared between modules (tied embedding and LM head) count once",
    "flops_at": "batch 1, the model's context length; training = 3 × forward (no recompute)",
    "bytes": "bytes of the named dtype; memory figures at batch 1, the context length, bf16, "
    "training with mixed-precision Adam (16 bytes/param) and tfcalc's default attention",
}
FIGURES_DTYPE = "bf16"


def figures(cfg: ModelConfig) -> dict[str, Any]:
    """Every number a snapshot pins for one model, as nested dicts of ints (None where a figure does not
    apply: an encoder has no decode step)."""
    seq = cfg.max_seq_len
    flops = count_flops.breakdown(cfg, 1, seq)
    crossover = count_flops.crossover_seq(cfg)
    return {
        "params": {
            "total": count_params.total(cfg),
            "breakdown": count_params.breakdown(cfg),
        },
        "flops": {
            "seq": seq,
            "forward_flops": flops.forward,
            "forward_flops_causal": flops.forward_causal,
            "training_flops": count_flops.training_flops(cfg, 1, seq),
            "breakdown": flops.totals(),
            "decode_flops_per_token": None if cfg.arch == "encoder" else count_flops.decode_flops(cfg, 1, seq),
            "crossover_seq": {"scores_vs_ffn": crossover.scores_vs_ffn, "attention_vs_ffn": crossover.attention_vs_ffn},
        },
        "memory": {
            "dtype": FIGURES_DTYPE,
            "seq": seq,
            "weights_bytes": count_memory.weights_bytes(cfg, FIGURES_DTYPE),
            "kv_cache_bytes": count_memory.kv_cache_bytes(cfg, 1, seq, FIGURES_DTYPE),
            "activation_bytes": count_memory.activations(cfg, 1, seq, FIGURES_DTYPE).total,
            "training_bytes": count_memory.training_bytes(cfg, 1, seq, FIGURES_DTYPE),
        },
    }


def entry(spec: str, overrides: list[str]) -> dict[str, Any]:
    cfg = load(spec, overrides)
    return {"preset": cfg.name, "spec": spec, "overrides": list(overrides), **figures(cfg)}


def build(specs: list[str], overrides: list[str]) -> dict[str, Any]:
    return {
        "tfcalc_version": __version__,
        "format": FORMAT,
        "conventions": CONVENTIONS,
        "entries": [entry(spec, overrides) for spec in specs],
    }


def write_atomic(path: Path, data: dict[str, Any]) -> None:
    """Write JSON to a temporary file beside path, flush it to disk, then rename it over path:
    a crash leaves either the old file or the new one, never half of one."""
    path = Path(path)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent or ".")
    except OSError as e:
        raise ConfigError(f"{path}: cannot write there ({e.strerror or e})") from None
    try:
        os.chmod(tmp, _mode_for(path))  # mkstemp makes 0600 files; a snapshot is an ordinary file
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=2)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as e:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(e, OSError):  # disk full, a directory in the way, permissions
            raise ConfigError(f"{path}: cannot write ({e.strerror or e}); the old file, if any, is intact") from None
        raise


def _mode_for(path: Path) -> int:
    """The existing file's permissions, or what a plain open() would give under the umask."""
    try:
        return path.stat().st_mode & 0o777
    except FileNotFoundError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


def read(path: Path) -> dict[str, Any]:
    """The snapshot at path; ConfigError (one line) when it cannot be read or is not a snapshot."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"{path}: cannot be read ({e})") from None
    except json.JSONDecodeError as e:
        raise ConfigError(f"{path}: not valid JSON at line {e.lineno}, column {e.colno}: {e.msg}") from None
    if not isinstance(data, dict) or not isinstance(data.get("entries"), list):
        raise ConfigError(f"{path}: not a tfcalc snapshot (no 'entries' list)")
    if data.get("format") != FORMAT:
        raise ConfigError(f"{path}: snapshot format {data.get('format')!r}, this tfcalc reads format {FORMAT}")
    for i, e in enumerate(data["entries"]):
        if not isinstance(e, dict) or not isinstance(e.get("spec"), str) or not isinstance(e.get("overrides", []), list):
            raise ConfigError(f"{path}: entry {i} has no 'spec' string")
    return data


@dataclass(frozen=True)
class Drift:
    preset: str
    field: str  # dotted path, e.g. params.breakdown.attn_q_weight
    expected: Any
    got: Any

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
    """Recompute every entry and list each figure that differs (beyond a relative tolerance)."""
    drifts = []
    for e in snapshot["entries"]:
        name = e.get("preset", e["spec"])
        try:
            fresh = figures(load(e["spec"], e.get("overrides", [])))
        except ConfigError as err:
            drifts.append(Drift(name, "(config)", "loadable", str(err)))
            continue
        expected = _flatten({k: v for k, v in e.items() if k in fresh})
        got = _flatten(fresh)
        for key in list(expected) + [k for k in got if k not in expected]:
            if key not in got or key not in expected or not _same(expected[key], got[key], tolerance):
                drifts.append(Drift(name, key, expected.get(key), got.get(key)))
    return drifts
