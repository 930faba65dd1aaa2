"""Devices and dtypes on the torch side: which device a name means, whether it is there, how much memory
it has free, and which torch dtype a tfcalc dtype name runs as. Shared by `tfcalc memory --measure`
and the benchmark. torch is imported inside the functions, so importing this module stays cheap.

Free memory: CUDA asks the driver (torch.cuda.mem_get_info: free bytes on the device, other processes
included); CPU reads MemAvailable from /proc/meminfo (the kernel's estimate of what can be allocated
without swapping, page cache it can drop included); elsewhere (MPS, or a CPU without /proc) it is
unknown (None).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional

from tfcalc.config import ConfigError
from tfcalc.count.model.dtypes import DTYPES

if TYPE_CHECKING:
    import torch

DEVICE_KINDS = ("cpu", "cuda", "mps")
# tfcalc dtype name -> torch dtype name. tf32 is stored as float32 (it is a matmul mode, and tfcalc runs
# it only to measure memory, which the mode does not change); fp8/int8/int4 are storage formats that
# tfcalc only counts.
_TORCH_DTYPES = {"fp32": "float32", "tf32": "float32", "bf16": "bfloat16", "fp16": "float16"}
RUNNABLE_DTYPES = tuple(_TORCH_DTYPES)


def torch_dtype(name: str) -> "torch.dtype":
    """The torch dtype a model runs in for a tfcalc dtype name; ConfigError for one that cannot run."""
    import torch

    if name not in DTYPES:
        raise ConfigError(f"unknown dtype '{name}'; choose one of {', '.join(DTYPES)}")
    if name not in _TORCH_DTYPES:
        raise ConfigError(
            f"{name} is counted, not run: a real model runs in {', '.join(RUNNABLE_DTYPES)}"
        )
    return getattr(torch, _TORCH_DTYPES[name])


@dataclass(frozen=True)
class Device:
    """A resolved, available device."""

    name: str  # as torch writes it: 'cpu', 'cuda:0', 'mps'
    kind: str  # 'cpu', 'cuda' or 'mps'
    description: str  # e.g. 'NVIDIA H100 80GB HBM3' or 'cpu (16 threads)'

    def torch(self) -> "torch.device":
        import torch

        return torch.device(self.name)


def device_kind(name: str) -> str:
    """'cpu', 'cuda' or 'mps' of a device name, read without asking torch (so without starting CUDA in this
    process: a measuring child may be the only one to touch the GPU); ConfigError for a name tfcalc does not
    know."""
    text = (name or "").strip().lower() if isinstance(name, str) else ""
    kind, _, index = text.partition(":")
    if kind not in DEVICE_KINDS or (index and (kind != "cuda" or not (index.isascii() and index.isdigit()))):
        raise ConfigError(f"unknown device '{name}'; use cpu, cuda, cuda:N or mps")
    return kind


def resolve_device(name: str) -> Device:
    """'cpu', 'cuda', 'cuda:1' or 'mps' -> Device; a one-line ConfigError when it is unknown or absent."""
    import torch

    kind = device_kind(name)
    index = name.strip().lower().partition(":")[2]
    if kind == "cpu":
        return Device("cpu", "cpu", f"cpu ({torch.get_num_threads()} threads)")
    if kind == "cuda":
        if not torch.cuda.is_available():
            raise ConfigError(f"device '{name}' asked for, but CUDA is not available here (torch {torch.__version__})")
        i = int(index) if index else torch.cuda.current_device()
        if i >= torch.cuda.device_count():
            raise ConfigError(f"device '{name}' asked for, but only {torch.cuda.device_count()} CUDA device(s) exist")
        return Device(f"cuda:{i}", "cuda", torch.cuda.get_device_name(i))
    if not torch.backends.mps.is_available():
        raise ConfigError(f"device '{name}' asked for, but MPS is not available here")
    return Device("mps", "mps", "Apple MPS")


def tf32_matmuls() -> bool:
    """Whether fp32 matmuls on CUDA run as TF32 (their peak is then the tf32 rate). PyTorch has two APIs
    for it: ``torch.backends.cuda.matmul.fp32_precision`` ('tf32', 'ieee', or 'none': defer to the
    legacy flag) and the legacy ``allow_tf32`` (also set by torch.set_float32_matmul_precision); reading
    the legacy flag after the new API was used raises a RuntimeError in torch 2.9+, so the new one is
    read first (PyTorch docs, "CUDA semantics", TensorFloat-32)."""
    import torch

    matmul = torch.backends.cuda.matmul
    precision = getattr(matmul, "fp32_precision", "none")
    if precision in ("tf32", "ieee"):
        return precision == "tf32"
    try:
        return bool(matmul.allow_tf32)
    except RuntimeError:  # the two APIs mixed: torch itself cannot say; the new flag said neither
        return False


def _meminfo_available(path: str = "/proc/meminfo") -> Optional[int]:
    try:
        with open(path, encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024  # the kernel writes kB meaning KiB
    except (OSError, ValueError, IndexError):
        return None
    return None


def free_memory(device: Device) -> Optional[int]:
    """Bytes that can still be allocated on the device, or None where that cannot be known."""
    if device.kind == "cpu":
        return _meminfo_available()
    if device.kind == "cuda":
        import torch

        free, _total = torch.cuda.mem_get_info(torch.device(device.name))
        return int(free)
    return None
