"""The report of `tfcalc devices`: the datasheet table of tfcalc.devices, every entry with its source."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tfcalc import devices


@dataclass(frozen=True)
class DevicesReport:
    specs: tuple[devices.DeviceSpec, ...]

    def to_json(self) -> list[dict[str, Any]]:
        return [devices.as_dict(s) | {"ridge_bf16_flops_per_byte": s.ridge("bf16")} for s in self.specs]


def build_devices() -> DevicesReport:
    return DevicesReport(devices.SPECS)
