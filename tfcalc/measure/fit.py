"""Refuse, before allocating, a run the estimate says will not fit: one check for every measured run.

The limit is the tightest of what the device can still give and what this process may take:
- the device's free memory (CUDA: the driver's free bytes; CPU: MemAvailable, see tfcalc.measure.device);
- on a CPU, also the process's address-space limit (``ulimit -v``, RLIMIT_AS) less what it already maps,
  and its cgroup's memory limit (v2 ``memory.max`` less ``memory.current``; v1 ``memory.limit_in_bytes``
  less ``memory.usage_in_bytes``), which MemAvailable does not see.
A GPU's memory is not bound by either, so only its free memory counts there.
"""

from __future__ import annotations

import resource
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

from tfcalc.errors import InputError

_CGROUP_V2 = ("memory.max", "memory.current")
_CGROUP_V1 = ("memory.limit_in_bytes", "memory.usage_in_bytes")


@dataclass(frozen=True)
class Limit:
    bytes: int
    what: str  # "free memory on cpu", "the address-space limit (ulimit -v)", ...


def _read_int(path: Path) -> Optional[int]:
    try:
        text = path.read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        return None
    return int(text) if text.isdigit() else None  # 'max' (no limit) and junk read as None


def _cgroup_dirs(proc_cgroup: Path = Path("/proc/self/cgroup"), root: Path = Path("/sys/fs/cgroup")) -> list[Path]:
    """The memory cgroup folders of this process (v2 unified, or v1 memory controller), innermost first."""
    try:
        lines = proc_cgroup.read_text(encoding="ascii").splitlines()
    except (OSError, UnicodeDecodeError):
        return []
    dirs = []
    for line in lines:
        _, controllers, path = (line.split(":", 2) + ["", ""])[:3]
        if controllers == "" or "memory" in controllers.split(","):
            base = root if controllers == "" else root / "memory"
            dirs.append(base / path.lstrip("/"))
            dirs.append(base)  # inside a container the process's own cgroup is often mounted as the root
    return dirs


def cgroup_room(proc_cgroup: Path = Path("/proc/self/cgroup"), root: Path = Path("/sys/fs/cgroup")) -> Optional[int]:
    """Bytes the cgroup still allows (limit − usage), or None when no limit is set or readable."""
    for folder in _cgroup_dirs(proc_cgroup, root):
        for limit_name, usage_name in (_CGROUP_V2, _CGROUP_V1):
            limit = _read_int(folder / limit_name)
            if limit is not None and limit < 2**60:  # v1 writes a huge number for 'no limit'
                return max(0, limit - (_read_int(folder / usage_name) or 0))
    return None


def _mapped_bytes() -> int:
    """This process's virtual size (VmSize), what RLIMIT_AS counts against."""
    try:
        for line in Path("/proc/self/status").read_text(encoding="ascii").splitlines():
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError, UnicodeDecodeError):
        pass
    return 0


def rlimit_room() -> Optional[int]:
    """Bytes of address space this process may still map under RLIMIT_AS, or None when unlimited."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_AS)
    if soft == resource.RLIM_INFINITY:
        return None
    return max(0, soft - _mapped_bytes())


def tightest_limit(device_kind: str, free: Optional[int], device_name: str) -> Optional[Limit]:
    """The smallest of the known limits for a run on this device, or None when none is known."""
    limits = [] if free is None else [Limit(free, f"free memory on {device_name}")]
    if device_kind == "cpu":
        room = rlimit_room()
        if room is not None:
            limits.append(Limit(room, "room under the address-space limit (ulimit -v)"))
        room = cgroup_room()
        if room is not None:
            limits.append(Limit(room, "room under the cgroup's memory limit"))
    return min(limits, key=lambda limit: limit.bytes, default=None)


def require_fits(needed: int, device: str, what: str, hint: str,
                 smaller: Optional[Callable[[int], Optional[str]]] = None) -> None:
    """InputError, before anything is allocated, when needed exceeds the tightest limit on device.

    device: a name such as 'cpu' or 'cuda:0' (resolved here, so an absent device is refused too);
    hint: what would fit instead ('a smaller --batch or --seq', ...), named in the message;
    smaller: given the limit in bytes, a concrete smaller run that fits ('--batch 12'), or None."""
    from tfcalc.measure.device import free_memory, resolve_device

    where = resolve_device(device)
    limit = tightest_limit(where.kind, free_memory(where), where.name)
    if limit is not None and needed > limit.bytes:
        raise refusal(needed, limit, what, hint, smaller)


def refusal(needed: int, limit: Limit, what: str, hint: str,
            smaller: Optional[Callable[[int], Optional[str]]] = None) -> InputError:
    """require_fits's one-line refusal, for a limit read here or by a measuring child (memory --measure on
    CUDA reads the GPU's free memory in the child, so this process never starts CUDA)."""
    from tfcalc.units import nbytes

    fits = smaller(limit.bytes) if smaller is not None else None
    return InputError(f"not running {what}: it needs an estimated {nbytes(needed)} but the {limit.what} is "
                      f"{nbytes(limit.bytes)}; try {fits + ', or ' if fits else ''}{hint}")


def smaller_run(need: Callable[[int, int], int], batch: int, seq: int) -> Callable[[int], Optional[str]]:
    """The `smaller` of require_fits for a run of (batch, seq) that needs need(batch, seq) bytes: the
    largest batch at this length that fits, else the longest length at batch 1, with what it needs."""
    from tfcalc.count.model.budget import largest_fitting
    from tfcalc.units import nbytes

    def suggest(limit: int) -> Optional[str]:
        b = largest_fitting(lambda n: need(n, seq), limit, batch - 1) if batch > 1 else 0
        if b:
            return f"--batch {b} (an estimated {nbytes(need(b, seq))})"
        t = largest_fitting(lambda n: need(1, n), limit, seq - 1) if seq > 1 else 0
        if t:
            return f"--batch 1 --seq {t} (an estimated {nbytes(need(1, t))})"
        return None

    return suggest


# Building a module costs Python objects even on meta: measured ~10 ms and ~22 KB per block on 2 loaded
# CPU cores. A build past MAX_MODULES would run for minutes. A layer's experts are grouped tensors in a
# few modules whatever their number (tfcalc.model.experts), so the experts add no modules per expert.
MAX_MODULES = 20_000
MODULE_BYTES = 8 * 1024


def modules_built(cfg, blocks: int) -> int:
    """Roughly how many nn.Modules building `blocks` blocks of cfg creates (norms, linears, experts)."""
    per_block = 12 + (8 if cfg.n_expert else 4) + (4 if cfg.arch == "encoder-decoder" else 0)
    return 16 + blocks * per_block


def require_buildable(cfg, blocks: int, what: str, hint: str) -> None:
    """InputError, before building, when the module would have more than MAX_MODULES submodules (a
    build of minutes), or when their Python objects would not fit in this process's memory."""
    require_storable(cfg, what)
    n = modules_built(cfg, blocks)
    if n > MAX_MODULES:
        raise InputError(f"not building {what}: {blocks:,} block(s) make about "
                         f"{n:,} PyTorch modules, more than the {MAX_MODULES:,} tfcalc builds (minutes of work); "
                         f"try {hint}")
    require_fits(n * MODULE_BYTES, "cpu", f"{what} (building {n:,} modules)", hint)


TORCH_STORAGE_BYTES = 2**63 - 1  # a tensor's storage size is an int64 of bytes, even on meta (c10's overflow check)


def require_storable(cfg, what: str) -> None:
    """InputError, before building, when a parameter tensor would be larger than a PyTorch storage can be
    at 8 bytes an element (the widest dtype built): 2**40 grouped experts overflowed it on meta. Names the
    field: n_expert for a layer's grouped experts (one tensor of n_expert × rows × cols: tfcalc.model.experts)."""
    import math

    from tfcalc.count.training.shard import module_tensors
    from tfcalc.count.training.sharding import routed_expert

    for t in module_tensors(cfg):
        grouped = routed_expert(t.name)
        elements = (t.copies if grouped else 1) * math.prod(t.shape)
        if 8 * elements > TORCH_STORAGE_BYTES:
            field = f"n_expert {cfg.n_expert:,} × " if grouped else ""
            raise InputError(f"not building {what}: its {t.name} ({field}{' × '.join(map(str, t.shape))}) is past "
                             "a PyTorch storage's 2^63 bytes")


def require_ranks_fit(cfg, layout, nproc: int, device: str | None, what: str) -> None:
    """InputError before any rank starts when the ranks together would not fit: each builds the whole
    model in the layout's dtype before sharding it (tfcalc.measure.distributed.Trainer), then holds its
    planned share of the training state and activations (tfcalc.count.training.rank_memory). On the CPU the ranks
    share this machine's memory; on CUDA each has its own GPU."""
    from tfcalc.count.model.dtypes import weight_bytes
    from tfcalc.count.model.params import total
    from tfcalc.count.training.rank_memory import rank_memory

    per_rank = weight_bytes(total(cfg), layout.dtype) + rank_memory(cfg, layout).total
    on_gpu = device != "cpu" and _cuda()
    require_fits(per_rank if on_gpu else per_rank * nproc, "cuda" if on_gpu else "cpu",
                 f"{what} on {nproc} rank(s)", "a smaller model (--set n_layer=2), --batch or --seq, or fewer --nproc")


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()
