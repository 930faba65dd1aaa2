"""The report of `tfcalc devices`: the datasheet table of tfcalc.devices, every entry with its source."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tfcalc import devices
from tfcalc.report.display import Displayed


@dataclass(frozen=True, repr=False)
class DevicesReport(Displayed):
    specs: tuple[devices.DeviceSpec, ...]

    def headline(self) -> str:
        return "the devices --device-spec knows"

    def to_json(self) -> list[dict[str, Any]]:
        """memory_bytes: the datasheet's (decimal); driver_memory_bytes: what torch reports, the figure shown;
        usable_memory_bytes: that less the CUDA context, the one-GPU limit `infer` uses (tfcalc.devices)."""
        return [devices.as_dict(s) | {"ridge_bf16_flops_per_byte": s.ridge("bf16"),
                                      "driver_memory_bytes": devices.driver_bytes(s),
                                      "usable_memory_bytes": devices.usable_bytes(s, communicating=False)}
                for s in self.specs]


def build_devices() -> DevicesReport:
    return DevicesReport(devices.SPECS)
