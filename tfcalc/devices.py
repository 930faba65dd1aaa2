"""Datasheet figures of accelerators: peak dense matmul rates per dtype, memory bandwidth and size, and
the interconnect, each entry with its source. Pure data and lookup, no torch.

Who reads what:
- MFU divides achieved FLOP/s by ``peak_flops``; a device that is not in the table (every CPU among them)
  gets no MFU, and tfcalc says so rather than guessing. The measured matmul ceiling
  (tfcalc.measure.bench.matmul_ceiling) is shown beside the peak, because datasheet peaks are rarely
  reached (boost clocks, power limits).
- The roofline (tfcalc.count.serving.roofline) divides FLOPs by ``peak_flops`` and bytes by
  ``bandwidth_bytes_per_s``; their ratio is the ridge point. ``memory_bytes`` bounds what fits.
- Parallel plans read ``intra_node_bytes_per_s`` (NVLink / Infinity Fabric / PCIe between the GPUs of
  one node), ``inter_node_bytes_per_s`` (the network) and ``gpus_per_node``.

Conventions of every entry:
- Rates are dense (no 2:4 structured sparsity): NVIDIA's datasheets print sparse figures with an
  asterisk, and the dense rate is half of it. fp16 equals bf16 wherever both exist (fp32 accumulate).
  tf32 is the fp32 matmul mode of Ampere and later; "fp32" is the non-tensor-core rate. int8 is in
  operations per second, like the others.
- Sizes and rates are decimal as datasheets print them: 80 GB = 80·10⁹ bytes, 3.35 TB/s = 3.35·10¹²
  bytes/s. What a program can allocate is less (CUDA context, allocator reserve).
- ``host_memory_bytes`` is the CPU memory of one node (binary, as vendors size DIMMs and clouds print GiB),
  what offload (tfcalc.count.training.offload) fills; each with its source in ``host_memory_source``. A node of the
  table is the configuration ``node`` names (HGX/DGX H100: 2 TiB).
- Interconnect figures are per GPU and per direction (datasheets print NVLink bidirectional: H100's
  "900 GB/s" is 450 GB/s each way). ``gpus_per_node`` counts the GPUs that reach each other at
  ``intra_node_bytes_per_s``; ``node`` names the node configuration the network figure assumes.

A user's own device: a YAML file with the same field names (see ``load_spec``), passed wherever a key
is (``--device-spec my-gpu.yaml``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Optional

from tfcalc.device_constants import check_inherits, check_perf
from tfcalc.errors import InputError, shown, shown_path

# The dtypes a datasheet rates (tfcalc.count.model.dtypes names the same ones; this module sits below count).
RATED_DTYPES = ("fp32", "tf32", "bf16", "fp16", "fp8", "int8", "int4")
T = 1e12
G = 1e9
# Per-direction byte rates of the links named in the table.
NVLINK4 = 450 * G  # H100/H200 SXM: 18 links, 900 GB/s bidirectional
NVLINK5 = 900 * G  # B200: 1.8 TB/s bidirectional
NVLINK3 = 300 * G  # A100 SXM: 600 GB/s bidirectional
PCIE4_X16 = 32 * G  # 64 GB/s bidirectional
PCIE5_X16 = 64 * G  # 128 GB/s bidirectional
NDR_400G = 50 * G  # one ConnectX-7 400 Gb/s InfiniBand NIC per GPU (DGX/HGX H100, H200, B200)
HDR_200G = 25 * G  # one ConnectX-6 200 Gb/s NIC per GPU (DGX A100)
AWS_100G_8GPU = 100 / 8 / 8 * G  # 100 Gb/s per instance shared by its 8 GPUs (g5/g6.48xlarge)


@dataclass(frozen=True)
class DeviceSpec:
    key: str  # short name for --device-spec, e.g. 'h100-sxm'
    name: str  # what the datasheet calls it
    peak_flops: dict[str, float]  # dtype -> dense matmul FLOP/s (see the module docstring)
    bandwidth_bytes_per_s: float  # memory (HBM/GDDR) bandwidth
    memory_bytes: int  # memory size, decimal as printed
    intra_node_bytes_per_s: Optional[float]  # GPU to GPU inside a node, per GPU, one direction
    inter_node_bytes_per_s: Optional[float]  # network, per GPU, one direction, in the ``node`` config
    gpus_per_node: int  # GPUs that reach each other at intra_node_bytes_per_s
    source: str  # datasheet citation
    node: str = ""  # the node configuration the interconnect figures assume
    match: tuple[str, ...] = field(default=(), compare=False)  # tokens of torch's device name
    host_memory_bytes: Optional[int] = None  # CPU memory of one node (None: not known, not checked)
    host_memory_source: str = ""
    # A user's file (issue 31): the built-in device whose performance-model constants it takes (``inherits:``,
    # or a ``key:`` of the table), and the constants it states itself (``perf:``), as (name, value) pairs.
    inherits: Optional[str] = field(default=None, compare=False)
    perf: tuple[tuple[str, Any], ...] = field(default=(), compare=False)

    def peak(self, dtype: str, tf32_enabled: bool = False) -> Optional[float]:
        """Peak FLOP/s for a dtype; fp32 matmuls run at the tf32 rate when tf32 is on."""
        key = "tf32" if dtype == "fp32" and tf32_enabled and "tf32" in self.peak_flops else dtype
        return self.peak_flops.get(key)

    def ridge(self, dtype: str) -> Optional[float]:
        """FLOPs per byte at which the peak rate and the bandwidth meet (the roofline's ridge point)."""
        peak = self.peak(dtype)
        return None if peak is None else peak / self.bandwidth_bytes_per_s


def _nvidia(key, name, rates, bandwidth, memory, intra, inter, gpus, source, node, match) -> DeviceSpec:
    return DeviceSpec(key, name, {k: v * T for k, v in rates.items()}, bandwidth, int(memory), intra, inter, gpus,
                      source, node, match)


_HOPPER = {"fp32": 67, "tf32": 495, "bf16": 989, "fp16": 989, "fp8": 1979, "int8": 1979}
_A100 = {"fp32": 19.5, "tf32": 156, "bf16": 312, "fp16": 312, "int8": 624}

# Most specific first: the first spec whose every match token is a token of the reported name wins.
SPECS: tuple[DeviceSpec, ...] = (
    _nvidia("h100-nvl", "NVIDIA H100 NVL 94GB",
            {"fp32": 60, "tf32": 417.5, "bf16": 835.5, "fp16": 835.5, "fp8": 1670.5, "int8": 1670.5},
            3.9e12, 94e9, 300 * G, 25 * G, 2,
            "NVIDIA H100 Tensor Core GPU datasheet (H100 NVL column; sparse rates halved)",
            "NVLink bridge between the 2 GPUs of a pair (600 GB/s bidirectional); pairs talk over PCIe Gen5; "
            "network assumed one 200 Gb/s NIC per GPU", ("H100", "NVL")),
    _nvidia("h100-pcie", "NVIDIA H100 PCIe 80GB",
            {"fp32": 51, "tf32": 378, "bf16": 756, "fp16": 756, "fp8": 1513, "int8": 1513},
            2.0e12, 80e9, PCIE5_X16, 25 * G, 8,
            "NVIDIA H100 Tensor Core GPU datasheet (H100 PCIe column; sparse rates halved)",
            "8 cards over PCIe Gen5 x16 (no NVLink bridges assumed); network assumed one 200 Gb/s NIC per GPU",
            ("H100", "PCIE")),
    _nvidia("h100-sxm", "NVIDIA H100 SXM5 80GB", _HOPPER, 3.35e12, 80e9, NVLINK4, NDR_400G, 8,
            "NVIDIA H100 Tensor Core GPU datasheet (H100 SXM column; sparse rates halved)",
            "HGX H100: 8 GPUs on NVLink 4 / NVSwitch, one ConnectX-7 400 Gb/s NIC per GPU", ("H100",)),
    _nvidia("h200", "NVIDIA H200 SXM 141GB", _HOPPER, 4.8e12, 141e9, NVLINK4, NDR_400G, 8,
            "NVIDIA H200 Tensor Core GPU datasheet (H200 SXM column: the compute of H100 SXM)",
            "HGX H200: 8 GPUs on NVLink 4 / NVSwitch, one 400 Gb/s NIC per GPU", ("H200",)),
    _nvidia("b200", "NVIDIA B200 (HGX, 1000 W)",
            {"fp32": 80, "tf32": 1100, "bf16": 2250, "fp16": 2250, "fp8": 4500, "mxfp8": 4500, "nvfp4": 9000,
             "int8": 4500}, 8.0e12, 180e9, NVLINK5, NDR_400G, 8,
            "NVIDIA HGX B200 datasheet (1,440 GB and 64 TB/s per 8 GPUs; dense rates per GPU at 1000 W)",
            "HGX/DGX B200: 8 GPUs on NVLink 5 / NVSwitch, one ConnectX-7 400 Gb/s NIC per GPU", ("B200",)),
    _nvidia("a100-pcie", "NVIDIA A100 PCIe 80GB", _A100, 1.935e12, 80e9, PCIE4_X16, HDR_200G, 8,
            "NVIDIA A100 Tensor Core GPU datasheet (A100 80GB PCIe column)",
            "8 cards over PCIe Gen4 x16 (no NVLink bridges assumed); one 200 Gb/s NIC per GPU",
            ("A100", "PCIE", "80GB")),
    _nvidia("a100-40gb", "NVIDIA A100 SXM4 40GB", _A100, 1.555e12, 40e9, NVLINK3, HDR_200G, 8,
            "NVIDIA A100 Tensor Core GPU datasheet (A100 40GB column)",
            "DGX A100: 8 GPUs on NVLink 3 / NVSwitch, one ConnectX-6 200 Gb/s NIC per GPU", ("A100", "40GB")),
    _nvidia("a100-80gb", "NVIDIA A100 SXM4 80GB", _A100, 2.039e12, 80e9, NVLINK3, HDR_200G, 8,
            "NVIDIA A100 Tensor Core GPU datasheet (A100 80GB SXM column)",
            "DGX A100: 8 GPUs on NVLink 3 / NVSwitch, one ConnectX-6 200 Gb/s NIC per GPU", ("A100",)),
    _nvidia("l40s", "NVIDIA L40S 48GB",
            {"fp32": 91.6, "tf32": 183, "bf16": 362.05, "fp16": 362.05, "fp8": 733, "int8": 733},
            864e9, 48e9, PCIE4_X16, 25 * G, 8,
            "NVIDIA L40S datasheet (sparse rates halved)",
            "8 cards over PCIe Gen4 x16 (no NVLink); network assumed one 200 Gb/s NIC per GPU", ("L40S",)),
    _nvidia("l4", "NVIDIA L4 24GB",
            {"fp32": 30.3, "tf32": 60, "bf16": 121, "fp16": 121, "fp8": 242.5, "int8": 242.5},
            300e9, 24e9, PCIE4_X16, AWS_100G_8GPU, 8,
            "NVIDIA L4 Tensor Core GPU datasheet (sparse rates halved)",
            "AWS g6.48xlarge: 8 L4 over PCIe Gen4 x16, 100 Gb/s for the instance", ("L4",)),
    _nvidia("a10g", "NVIDIA A10G 24GB",
            {"fp32": 35, "tf32": 35, "bf16": 70, "fp16": 70, "int8": 140},
            600e9, 24e9, PCIE4_X16, AWS_100G_8GPU, 8,
            "NVIDIA A10G figures as AWS and NVIDIA quote them (no public datasheet; compiled in Baseten, "
            "'NVIDIA A10 vs A10G for ML model inference'): 24 GB GDDR6 at 600 GB/s",
            "AWS g5.48xlarge: 8 A10G over PCIe Gen4 x16, 100 Gb/s for the instance", ("A10G",)),
    _nvidia("rtx-4090", "NVIDIA GeForce RTX 4090",
            {"fp32": 82.6, "tf32": 82.6, "bf16": 165.2, "fp16": 165.2, "fp8": 330.3, "int8": 660.6},
            1008e9, 24e9, PCIE4_X16, 10 / 8 / 4 * G, 4,
            "NVIDIA Ada Lovelace architecture whitepaper, Appendix A (RTX 4090; fp16/bf16 with fp32 accumulate)",
            "a 4-GPU workstation over PCIe Gen4 x16 (no NVLink, no peer-to-peer on GeForce), 10 GbE per node",
            ("RTX", "4090")),
    DeviceSpec("mi300x", "AMD Instinct MI300X 192GB",
               {k: v * T for k, v in
                {"fp32": 163.4, "tf32": 653.7, "bf16": 1307.4, "fp16": 1307.4, "fp8": 2614.9, "int8": 2614.9}.items()},
               5.3e12, int(192e9), 448 * G, NDR_400G, 8,
               "AMD Instinct MI300X data sheet (dense matrix rates; 7 Infinity Fabric links, 896 GB/s aggregate)",
               "8 GPUs fully connected by Infinity Fabric: 64 GB/s each way to each of 7 peers, 448 GB/s in all; "
               "one 400 Gb/s NIC per GPU", ("MI300X",)),
    _nvidia("v100", "NVIDIA V100 SXM2 32GB", {"fp32": 15.7, "fp16": 125}, 900e9, 32e9, 150 * G, 100 / 8 / 2 * G, 8,
            "NVIDIA V100 Tensor Core GPU datasheet (SXM2)",
            "DGX-1: 8 GPUs on NVLink 2 (300 GB/s bidirectional), 4 × 100 Gb/s InfiniBand per node", ("V100",)),
    _nvidia("t4", "NVIDIA T4 16GB", {"fp32": 8.1, "fp16": 65, "int8": 130}, 320e9, 16e9, 16 * G, 50 / 8 / 4 * G, 4,
            "NVIDIA T4 Tensor Core GPU datasheet",
            "AWS g4dn.12xlarge: 4 T4 over PCIe Gen3 x16, 50 Gb/s for the instance", ("T4",)),
)


TiB = 2**40
GiB = 2**30
# Host (CPU) memory of the node each entry's ``node`` names, and where the figure is printed.
_HOST_MEMORY = {
    "h100-nvl": (640 * GiB, "Azure NC80adis H100 v5 (2 H100 NVL): 640 GiB (Microsoft Learn, NCads H100 v5 sizes)"),
    "h100-pcie": (1 * TiB, "assumed: 1 TiB, a common 8-card PCIe server (no vendor node to cite; give your own "
                  "in a device file)"),
    "h100-sxm": (2 * TiB, "NVIDIA DGX H100 datasheet: 2 TB system memory (32 × 64 GB DDR5); AWS p5.48xlarge: "
                 "2,048 GiB"),
    "h200": (2 * TiB, "NVIDIA DGX H200 datasheet: 2 TB system memory"),
    "b200": (2 * TiB, "NVIDIA DGX B200 datasheet: 2 TB system memory (4 TB optional)"),
    "a100-pcie": (1 * TiB, "assumed: 1 TiB, a common 8-card PCIe server (no vendor node to cite)"),
    "a100-40gb": (1 * TiB, "NVIDIA DGX A100 datasheet: 1 TB system memory (the 320 GB system)"),
    "a100-80gb": (2 * TiB, "NVIDIA DGX A100 datasheet: 2 TB system memory (the 640 GB system)"),
    "l40s": (1536 * GiB, "AWS g6e.48xlarge (8 L40S): 1,536 GiB (Amazon EC2 G6e instance types)"),
    "l4": (768 * GiB, "AWS g6.48xlarge (8 L4): 768 GiB (Amazon EC2 G6 instance types)"),
    "a10g": (768 * GiB, "AWS g5.48xlarge (8 A10G): 768 GiB (Amazon EC2 G5 instance types)"),
    "rtx-4090": (256 * GiB, "assumed: 256 GiB, a 4-GPU workstation's 8 × 32 GiB DIMMs"),
    "mi300x": (1850 * GiB, "Azure ND MI300X v5 (8 MI300X): 1,850 GiB (Microsoft Learn, ND MI300X v5 sizes)"),
    "v100": (512 * GiB, "NVIDIA DGX-1 datasheet (V100): 512 GB system memory"),
    "t4": (192 * GiB, "AWS g4dn.12xlarge (4 T4): 192 GiB (Amazon EC2 G4 instance types)"),
}
SPECS = tuple(replace(s, host_memory_bytes=_HOST_MEMORY[s.key][0], host_memory_source=_HOST_MEMORY[s.key][1])
              for s in SPECS)


def keys() -> list[str]:
    return [s.key for s in SPECS]


def by_key(key: str) -> DeviceSpec:
    """The spec of a table key such as 'h100-sxm'; InputError naming the close ones otherwise."""
    text = key.strip().lower()
    for spec in SPECS:
        if spec.key == text:
            return spec
    from tfcalc.config import suggest

    raise InputError(f"unknown device spec '{key}'{suggest(text, keys())}; "
                     f"choose one of {', '.join(keys())}, or give a YAML file (`tfcalc devices` shows them)")


def _tokens(device_name: str) -> set[str]:
    """'NVIDIA A100-SXM4-80GB' -> {'NVIDIA', 'A100', 'SXM4', '80GB'}."""
    return set("".join(c if c.isalnum() else " " for c in device_name.upper()).split())


def lookup(device_name: str) -> Optional[DeviceSpec]:
    """The spec for a name as torch reports it ('NVIDIA H100 80GB HBM3'), or None when tfcalc does not
    know the device. Names are matched by whole tokens, so 'L4' never matches 'L40S'."""
    tokens = _tokens(device_name)
    for spec in SPECS:
        if spec.match and all(t in tokens for t in spec.match):
            return spec
    return None


def peak_flops(device_name: str, dtype: str, tf32_enabled: bool = False) -> Optional[float]:
    """Datasheet peak for the device torch names and a dtype; None when either is unknown."""
    spec = lookup(device_name)
    return None if spec is None else spec.peak(dtype, tf32_enabled)


def resolve(text: str) -> DeviceSpec:
    """A table key, or a path to a YAML file describing a device (a path ends in .yaml/.yml or holds a /)."""
    if not isinstance(text, (str, Path)):
        raise InputError(f"--device-spec must be a table key or a file name; got {shown(text)}")
    text = str(text)
    if text.lower().endswith((".yaml", ".yml")) or "/" in text:
        return load_spec(text)
    return by_key(text)


# ---------- a user's own device, from YAML ----------

_REQUIRED = ("name", "peak_flops", "bandwidth_bytes_per_s", "memory_bytes")
_OPTIONAL = ("key", "intra_node_bytes_per_s", "inter_node_bytes_per_s", "gpus_per_node", "source", "node",
             "host_memory_bytes", "inherits", "perf")
MIN_HOST_BYTES = 2**20  # a node's host memory below a MiB is a unit slip (2 for 2 TiB)


MAX_RATE = 1e21  # bytes, bytes/s or FLOP/s: a thousand times today's largest figures (~1e18 FLOP/s per GPU)
MAX_GPUS_PER_NODE = 65_536  # NVL576 racks hold 576 GPUs; a node of more is a typo (1e9)


def _positive(path: Path, name: str, value: Any, low: float = 1.0, unit: str = "") -> float:
    """A finite number in [low, MAX_RATE]; YAML strings such as '3.35e12' (PyYAML reads them as strings)
    too. An integer of 400 digits is refused here, not left to overflow a float later; a rate below 1 (per
    second) would make times infinite, memory below 1 byte round to 0 and divide by zero."""
    where = f"{shown_path(path)}: field '{name}'"
    try:
        number = float(value) if isinstance(value, (str, int)) and not isinstance(value, bool) else value
    except OverflowError:
        number = math.inf
    except ValueError:
        number = None
    if isinstance(number, bool) or not isinstance(number, float) or math.isnan(number) or number <= 0:
        raise InputError(f"{where} must be a positive number; got {shown(value)}")
    if number > MAX_RATE:
        raise InputError(f"{where} must be at most {MAX_RATE:g}; got {shown(value)}")
    if number < low:
        raise InputError(f"{where} must be at least {low:g}{unit}; got {shown(value)}")
    return number


def _text(path: Path, name: str, value: Any) -> str:
    if not isinstance(value, str):
        raise InputError(f"{shown_path(path)}: field '{name}' must be a string; got {shown(value)}")
    return value


def spec_from_mapping(data: dict[str, Any], path: Path) -> DeviceSpec:
    """Check a device mapping field by field (one line naming the file and the field on error)."""
    from tfcalc.config import suggest

    where = shown_path(path)
    for name in data:
        if name not in _REQUIRED + _OPTIONAL:
            raise InputError(f"{where}: unknown field {shown(name)}{suggest(str(name)[:100], _REQUIRED + _OPTIONAL)}")
    for name in _REQUIRED:
        if name not in data:
            raise InputError(f"{where}: missing required field '{name}'")
    peaks = data["peak_flops"]
    if not isinstance(peaks, dict) or not peaks:
        raise InputError(f"{where}: field 'peak_flops' must map dtypes to FLOP/s, e.g. {{bf16: 989.0e12}}")
    for dtype in peaks:
        if dtype not in RATED_DTYPES:
            raise InputError(f"{where}: peak_flops: unknown dtype {shown(dtype)}; "
                             f"choose from {', '.join(RATED_DTYPES)}")
    optional = {n: _positive(path, n, data[n]) if data.get(n) is not None else None
                for n in ("intra_node_bytes_per_s", "inter_node_bytes_per_s")}
    gpus = data.get("gpus_per_node", 1)
    if isinstance(gpus, bool) or not isinstance(gpus, int) or not 1 <= gpus <= MAX_GPUS_PER_NODE:
        raise InputError(f"{where}: field 'gpus_per_node' must be an integer from 1 to {MAX_GPUS_PER_NODE:,}; "
                         f"got {shown(gpus)}")
    memory = int(_positive(path, "memory_bytes", data["memory_bytes"], unit=" byte"))
    inherits = check_inherits(path, data, keys())
    perf = check_perf(path, data.get("perf"))
    host = data.get("host_memory_bytes")
    if host is not None:
        host = int(_positive(path, "host_memory_bytes", host, low=MIN_HOST_BYTES, unit=" bytes"))
    return DeviceSpec(
        key=_text(path, "key", data.get("key") or path.stem), name=_text(path, "name", data["name"]),
        peak_flops={d: _positive(path, f"peak_flops.{d}", v) for d, v in peaks.items()},
        bandwidth_bytes_per_s=_positive(path, "bandwidth_bytes_per_s", data["bandwidth_bytes_per_s"]),
        memory_bytes=memory,
        gpus_per_node=gpus, source=_text(path, "source", data.get("source") or f"user file {path}"),
        node=_text(path, "node", data.get("node") or ""), **optional,
        host_memory_bytes=host, host_memory_source="" if host is None else f"user file {path}",
        inherits=inherits, perf=perf,
    )


def load_spec(path: str | Path) -> DeviceSpec:
    """A DeviceSpec from a YAML file: the fields of DeviceSpec, numbers in bytes, bytes/s and FLOP/s,
    e.g. ``name: My GPU``, ``peak_flops: {bf16: 200.0e12}``, ``bandwidth_bytes_per_s: 1.0e12``,
    ``memory_bytes: 48.0e9``; ``key`` defaults to the file name, the interconnect to unknown. The performance
    model's constants: ``perf: {sm_count: 132, ...}``, the rest from ``inherits: h100-sxm`` (or a table ``key:``),
    else named defaults that plan and infer print (tfcalc.device_constants).

    Read as config files are (tfcalc.yaml_load.read_mapping): regular
    files only (a FIFO is refused without blocking), at most 1 MiB, no alias bombs, no nesting past 64
    levels, no key given twice."""
    from tfcalc.yaml_load import read_mapping

    path = Path(path)
    return spec_from_mapping(read_mapping(path), path)


def as_dict(spec: DeviceSpec) -> dict[str, Any]:
    """The JSON (and YAML) form of a spec: the fields a user file takes."""
    return {
        "key": spec.key, "name": spec.name, "peak_flops": dict(spec.peak_flops),
        "bandwidth_bytes_per_s": spec.bandwidth_bytes_per_s, "memory_bytes": spec.memory_bytes,
        "intra_node_bytes_per_s": spec.intra_node_bytes_per_s, "inter_node_bytes_per_s": spec.inter_node_bytes_per_s,
        "gpus_per_node": spec.gpus_per_node, "node": spec.node, "source": spec.source,
        "host_memory_bytes": spec.host_memory_bytes,
    }


def perf_basis(spec: DeviceSpec) -> Optional[str]:
    """The table device whose performance-model constants a spec takes where it states none: itself for a
    table device, the file's ``inherits:`` (or table ``key:``) for a user's file, None when it names none."""
    if spec.inherits is not None:
        return spec.inherits
    return spec.key if spec.key in keys() else None


# ---------- what a program can use: the driver's total less the runtime's share ----------

# An "80 GB" GPU's memory is 80 GiB of HBM less what the driver keeps back (ECC, reserved pages): torch reports
# total_memory=81089MB (MiB) on an "NVIDIA H100 80GB HBM3" (torch.cuda.get_device_properties, printed in public
# logs, e.g. stas00/ml-engineering's network benchmarks), 0.9899 of 80 GiB: 79.19 GiB. We take that fraction of
# the datasheet figure read in GiB for every table device (H200's 141 GB: 139.6 GiB).
DRIVER_FRACTION = 81089 / 81920
# The CUDA context and cuBLAS/cuDNN workspaces of one process (memory the caching allocator does not see):
# 714,670,080 bytes measured on an H100, torch 2.11 (benchmarks/results/h100-2026-11-26-report-tests.json,
# "CUDA context and cuBLAS workspace"; 512 MiB before). NCCL's buffers, NCCL_BUFFSIZE 4 MiB per channel and peer.
CUDA_CONTEXT_BYTES = 714_670_080
COMM_BUFFER_BYTES = 512 * 2**20


def driver_bytes(spec: DeviceSpec) -> int:
    """What the driver reports for a table device (see DRIVER_FRACTION); a user's file: its memory_bytes."""
    if spec.key not in keys() or by_key(spec.key) != spec:
        return spec.memory_bytes
    return int(spec.memory_bytes / 1e9 * 2**30 * DRIVER_FRACTION)


def usable_bytes(spec: DeviceSpec, communicating: bool = True) -> int:
    """The driver's total less the CUDA context and, for a parallel plan, NCCL's buffers (a user's file
    states its own usable memory: taken as given)."""
    if spec.key not in keys() or by_key(spec.key) != spec:
        return spec.memory_bytes
    return driver_bytes(spec) - CUDA_CONTEXT_BYTES - (COMM_BUFFER_BYTES if communicating else 0)


def intra_link(spec: DeviceSpec) -> str:
    """The link kind between the GPUs of a node: 'pcie' for the PCIe-only nodes of the table, else 'nvlink'
    (NVLink, NVSwitch, Infinity Fabric)."""
    return "pcie" if spec.intra_node_bytes_per_s in (PCIE4_X16, PCIE5_X16, 16 * G) else "nvlink"


def intra_link_name(spec: DeviceSpec) -> str:
    """How plan's output names the link between a node's GPUs, by its kind: 'PCIe' on the PCIe-only nodes
    (h100-pcie, a100-pcie, l40s, ...), 'Infinity Fabric' on AMD's, 'NVLink' on NVIDIA's NVLink nodes, and
    'intra-node link' on a user's own device that is not PCIe (its file does not say which)."""
    if intra_link(spec) == "pcie":
        return "PCIe"
    if spec.key not in keys() or by_key(spec.key) != spec:
        return "intra-node link"
    return "Infinity Fabric" if spec.name.startswith("AMD") else "NVLink"
