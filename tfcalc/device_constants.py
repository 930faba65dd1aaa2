"""The performance model's per-device constants in a user's device file (issue 31): ``inherits:`` names the
table device (tfcalc.devices.SPECS) whose constants the file takes, ``perf:`` states its own
(tfcalc.count.perf.hardware.PerfSpec's fields of the same names); whatever a file neither states nor inherits
takes the model's named default (hardware.DEFAULT_FROM), and plan and infer say so. Checked here, one line
naming the file and the field on error; no torch, nothing of tfcalc but its errors and suggestions."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

from tfcalc.errors import InputError, shown, shown_path

PERF_FIELDS = ("sm_count", "matmul_ceiling", "fp8_ceiling", "sustained_clock", "flash_efficiency", "kernel_s",
               "static_power_w", "gpu_variation")
MAX_STATIC_W = 10_000  # W: a B200 is rated 1,000; ten times that is a typo (count.training.overlap_costs)
MAX_KERNEL_S = 1e-3  # seconds: a kernel's fixed cost is microseconds (count.perf.hardware); a millisecond is a typo
# a fused attention kernel by name: its Hopper efficiencies are tfcalc.count.perf.hardware.HOPPER_ATTENTION's
ATTENTION_KERNELS = ("fa2", "cudnn", "fa3")
MAX_SMS = 1_000_000  # B200 has 148 SMs, MI300X 304 CUs; a million is a typo


def check_inherits(path: Path, data: dict[str, Any], keys: list[str]) -> Optional[str]:
    """The built-in device a file takes its performance-model constants from: ``inherits:``, else a ``key:``
    naming a table device (the older spelling, kept); None when it names neither."""
    where = shown_path(path)
    key = data.get("key") or path.stem  # a file's key defaults to its name (spec_from_mapping)
    own = key.strip().lower() if isinstance(key, str) and key.strip().lower() in keys else None
    if data.get("inherits") is None:
        return own
    named = data["inherits"]
    if not isinstance(named, str):
        raise InputError(f"{where}: field 'inherits' must name a device of the table ({', '.join(keys)}); "
                         f"got {shown(named)}")
    base = named.strip().lower()
    if base not in keys:
        from tfcalc.config import suggest

        raise InputError(f"{where}: field 'inherits': unknown device {shown(named)}{suggest(base[:100], keys)}; "
                         f"choose one of {', '.join(keys)}")
    if own is not None and own != base:
        raise InputError(f"{where}: 'key: {own}' and 'inherits: {base}' name two devices; give one")
    return base


def _fraction(path: Path, name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 1e-4 <= value <= 1:
        raise InputError(f"{shown_path(path)}: field 'perf.{name}' must be a number in [0.0001, 1]; got {shown(value)}")
    return float(value)


def check_perf(path: Path, perf: Any) -> tuple[tuple[str, Any], ...]:
    """The performance-model constants a file states (``perf: {sm_count: 132, matmul_ceiling: 0.8, ...}``)."""
    from tfcalc.config import suggest

    where = shown_path(path)
    if perf is None:
        return ()
    if not isinstance(perf, dict):
        raise InputError(f"{where}: field 'perf' must map constants to values, e.g. {{sm_count: 132}}; "
                         f"names: {', '.join(PERF_FIELDS)}")
    out = []
    for name, value in perf.items():
        if name == "attention_kernel":
            if not isinstance(value, str) or value.strip().lower() not in ATTENTION_KERNELS:
                raise InputError(f"{where}: field 'perf.attention_kernel' must be one of "
                                 f"{', '.join(ATTENTION_KERNELS)}; got {shown(value)}")
            if "flash_efficiency" in perf:
                raise InputError(f"{where}: perf: 'attention_kernel' and 'flash_efficiency' both set the attention "
                                 "kernel's efficiency; give one")
            out.append((name, value.strip().lower()))
            continue
        if name not in PERF_FIELDS:
            names = PERF_FIELDS + ("attention_kernel",)
            raise InputError(f"{where}: perf: unknown constant {shown(name)}{suggest(str(name)[:100], names)}; "
                             f"choose from {', '.join(names)}")
        if name == "sm_count":
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_SMS:
                raise InputError(f"{where}: field 'perf.sm_count' must be an integer from 1 to {MAX_SMS:,}; "
                                 f"got {shown(value)}")
        elif name == "kernel_s":
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= MAX_KERNEL_S:
                raise InputError(f"{where}: field 'perf.kernel_s' must be seconds per kernel from 0 to "
                                 f"{MAX_KERNEL_S:g}, e.g. 4.0e-6; got {shown(value)}")
            value = float(value)
        elif name == "static_power_w":
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < MAX_STATIC_W:
                raise InputError(f"{where}: field 'perf.static_power_w' must be watts from 0 to {MAX_STATIC_W:,}, "
                                 f"e.g. 88; got {shown(value)}")
            value = float(value)
        elif name == "gpu_variation":  # a spread, 0 allowed (tfcalc.count.perf.slowest_rank)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1:
                raise InputError(f"{where}: field 'perf.gpu_variation' must be a fraction in [0, 1), e.g. 0.08; "
                                 f"got {shown(value)}")
            value = float(value)
        elif name == "flash_efficiency":
            if not isinstance(value, list) or len(value) != 2:
                raise InputError(f"{where}: field 'perf.flash_efficiency' must be [forward, backward], "
                                 f"e.g. [0.35, 0.3]; got {shown(value)}")
            value = tuple(_fraction(path, f"flash_efficiency[{i}]", v) for i, v in enumerate(value))
        else:
            value = _fraction(path, name, value)
        out.append((name, value))
    return tuple(out)
