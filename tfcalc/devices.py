"""Datasheet peak dense matmul rates and memory bandwidth, keyed by the device name torch reports.

Pure data and lookup, no torch. MFU divides achieved FLOP/s by these peaks; a device that is not in the
table (every CPU among them) gets no MFU, and tfcalc says so rather than guessing. The measured matmul
ceiling (tfcalc.measure.bench.matmul_ceiling) is reported beside the peak on every device, because
datasheet peaks are rarely reached (boost clocks, power limits).

Sources: NVIDIA datasheets (H100, H200, A100, V100, T4), dense (no structured sparsity) tensor-core
rates; fp16 equals bf16 where both exist. tf32 is the fp32 matmul mode of Ampere and later.
"""

from __future__ import annotations

from dataclasses import dataclass

T = 1e12


@dataclass(frozen=True)
class DeviceSpec:
    name: str
    peak_flops: dict[str, float]  # dtype -> dense matmul FLOP/s
    bandwidth: float  # bytes/s
    source: str


# Most specific first: the first spec whose every keyword appears in the reported name wins.
_SPECS: list[tuple[tuple[str, ...], DeviceSpec]] = [
    (("H200",), DeviceSpec("NVIDIA H200", {"bf16": 989 * T, "fp16": 989 * T, "tf32": 495 * T, "fp32": 67 * T},
                           4.8e12, "NVIDIA H200 datasheet (same compute as H100 SXM)")),
    (("H100", "PCIE"), DeviceSpec("NVIDIA H100 PCIe", {"bf16": 756 * T, "fp16": 756 * T, "tf32": 378 * T, "fp32": 51 * T},
                                  2.0e12, "NVIDIA H100 datasheet, PCIe")),
    (("H100",), DeviceSpec("NVIDIA H100 SXM", {"bf16": 989 * T, "fp16": 989 * T, "tf32": 495 * T, "fp32": 67 * T},
                           3.35e12, "NVIDIA H100 datasheet, SXM")),
    (("A100", "PCIE"), DeviceSpec("NVIDIA A100 PCIe", {"bf16": 312 * T, "fp16": 312 * T, "tf32": 156 * T, "fp32": 19.5 * T},
                                  1.935e12, "NVIDIA A100 datasheet, PCIe 80GB")),
    (("A100",), DeviceSpec("NVIDIA A100 SXM", {"bf16": 312 * T, "fp16": 312 * T, "tf32": 156 * T, "fp32": 19.5 * T},
                           2.0e12, "NVIDIA A100 datasheet, SXM 80GB")),
    (("V100",), DeviceSpec("NVIDIA V100 SXM2", {"fp16": 125 * T, "fp32": 15.7 * T}, 0.9e12, "NVIDIA V100 datasheet")),
    (("T4",), DeviceSpec("NVIDIA T4", {"fp16": 65 * T, "fp32": 8.1 * T}, 0.32e12, "NVIDIA T4 datasheet")),
]


def lookup(device_name: str) -> DeviceSpec | None:
    """The spec for a name such as 'NVIDIA H100 80GB HBM3', or None when tfcalc does not know it."""
    upper = device_name.upper()
    for keywords, spec in _SPECS:
        if all(k in upper for k in keywords):
            return spec
    return None


def peak_flops(device_name: str, dtype: str, tf32_enabled: bool = False) -> float | None:
    """Datasheet peak for this device and dtype; fp32 matmuls run at the tf32 rate when tf32 is on."""
    spec = lookup(device_name)
    if spec is None:
        return None
    key = "tf32" if dtype == "fp32" and tf32_enabled and "tf32" in spec.peak_flops else dtype
    return spec.peak_flops.get(key)
