"""Refuse, before allocating, a run the estimate says will not fit: one check for every measured run.

``require_fits`` is the one guard: every measured path calls it before it builds a model or starts a rank
(bench, bench decode, bench ranks, infer --measure with --tp, --draft or --rate, memory --measure (in its
child on CUDA, through ``tightest_limit``), plan --measure, params --measure and flops --measure; the last
two build on meta, where ``require_buildable`` bounds the Python objects).
The limit is the tightest of what the device can still give and what the process may take, read by
``read_limits`` (the one reader; tests replace it to fake a small machine):
- the device's free memory (CUDA: the driver's free bytes; CPU: MemAvailable, see tfcalc.measure.device);
- on a CPU, also the process's address-space limit (``ulimit -v``, RLIMIT_AS) less what it already maps
  and its data-segment limit (``ulimit -d``, RLIMIT_DATA, which counts private writable mappings: the
  heap and every tensor) less its data, and its cgroup's memory limit (v2 ``memory.max`` less
  ``memory.current``; v1 ``memory.limit_in_bytes`` less ``memory.usage_in_bytes``), which MemAvailable
  does not see.
A GPU's memory is not bound by either, so only its free memory counts there.
Ranks: N ranks on this host (gloo on the CPU) share its free memory and its cgroup, so the estimate per rank
times N is held against those; an rlimit binds each process alone (a rank inherits it), so the estimate per
rank is held against it. On CUDA each rank has its own GPU.
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
    per_process: bool = False  # an rlimit: each rank's own; free memory and a cgroup: shared by the ranks


def _read_int(path: Path) -> Optional[int]:
    try:
        text = path.read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        return None
    return int(text) if text.isascii() and text.isdigit() else None  # 'max' (no limit) and junk read as None


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


def _status_bytes(field: str) -> int:
    """A field of /proc/self/status in bytes: VmSize (what RLIMIT_AS counts), VmData (what RLIMIT_DATA
    counts); 0 when unreadable."""
    try:
        for line in Path("/proc/self/status").read_text(encoding="ascii").splitlines():
            if line.startswith(f"{field}:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError, UnicodeDecodeError):
        pass
    return 0


_RLIMITS = (("RLIMIT_AS", "VmSize", "address-space limit (ulimit -v)"),
            ("RLIMIT_DATA", "VmData", "data-segment limit (ulimit -d)"))


def rlimit_limits() -> list[Limit]:
    """The room under each rlimit that is set (RLIMIT_AS, RLIMIT_DATA): the limit less what this process
    already uses of it."""
    out = []
    for name, field, words in _RLIMITS:
        which = getattr(resource, name, None)
        if which is None:
            continue
        soft, _hard = resource.getrlimit(which)
        if soft != resource.RLIM_INFINITY:
            out.append(Limit(max(0, soft - _status_bytes(field)), f"room under the {words}", per_process=True))
    return out


def rlimit_room() -> Optional[int]:
    """Bytes this process may still map under its rlimits, or None when none is set."""
    return min((limit.bytes for limit in rlimit_limits()), default=None)


def read_limits(device_kind: str, free: Optional[int], device_name: str) -> list[Limit]:
    """Every known limit for a run on this device (see the module docstring): the one reader of them."""
    limits = [] if free is None else [Limit(free, f"free memory on {device_name}")]
    if device_kind == "cpu":
        limits += rlimit_limits()
        room = cgroup_room()
        if room is not None:
            limits.append(Limit(room, "room under the cgroup's memory limit"))
    return limits


def _share(limit: Limit, ranks: int) -> int:
    """The bytes of limit each of ranks processes on this host may take."""
    return limit.bytes if limit.per_process else limit.bytes // ranks


def tightest_limit(device_kind: str, free: Optional[int], device_name: str, ranks: int = 1) -> Optional[Limit]:
    """The limit that leaves each of ranks processes the least, or None when none is known."""
    return min(read_limits(device_kind, free, device_name), key=lambda limit: _share(limit, ranks), default=None)


def require_fits(needed: int, device: str, what: str, hint: str,
                 smaller: Optional[Callable[[int], Optional[str]]] = None, ranks: int = 1) -> None:
    """InputError, before anything is allocated, when needed exceeds the tightest limit on device.

    needed: the estimate of one process (one rank); ranks: how many such processes run on this host at
    once, sharing its memory (1: this process or its one measuring child);
    device: a name such as 'cpu' or 'cuda:0' (resolved here, so an absent device is refused too);
    hint: what would fit instead ('a smaller --batch or --seq', ...), named in the message;
    smaller: given the limit in bytes, a concrete smaller run that fits ('--batch 12'), or None."""
    from tfcalc.measure.device import free_memory, resolve_device

    where = resolve_device(device)
    limit = tightest_limit(where.kind, free_memory(where), where.name, ranks)
    if limit is not None and needed > _share(limit, ranks):
        raise refusal(needed, limit, what, hint, smaller, ranks)


def refusal(needed: int, limit: Limit, what: str, hint: str,
            smaller: Optional[Callable[[int], Optional[str]]] = None, ranks: int = 1) -> InputError:
    """require_fits's one-line refusal, for a limit read here or by a measuring child (memory --measure on
    CUDA reads the GPU's free memory in the child, so this process never starts CUDA)."""
    from tfcalc.units import nbytes

    fits = smaller(limit.bytes) if smaller is not None and ranks == 1 else None
    if fits is not None and fits.startswith(WHOLE_MODEL) and ("--batch" in hint or "--seq" in hint):
        # no batch or length helps, the model's own size is the cause: only a half-size dtype may
        hint = "--dtype bf16" if "--dtype bf16" in hint and needed // 2 <= limit.bytes else ""
    if ranks > 1 and not limit.per_process:
        need = f"{nbytes(needed * ranks)} ({ranks} ranks × {nbytes(needed)})"
    elif ranks > 1:
        need = f"{nbytes(needed)} per rank"
    else:
        need = nbytes(needed)
    return InputError(f"not running {what}: it needs an estimated {need} but the {limit.what} is "
                      f"{nbytes(limit.bytes)}; try {', or '.join(part for part in (fits, hint) if part)}")


WHOLE_MODEL = "a smaller model"


def smaller_run(need: Callable[[int, int], int], batch: int, seq: int) -> Callable[[int], Optional[str]]:
    """The `smaller` of require_fits for a run of (batch, seq) that needs need(batch, seq) bytes: the
    largest batch at this length that fits, else the longest length at batch 1, with what it needs; when
    not even one sequence of one token fits, the model itself is too large (its size fields, from the
    preset or --set: a shared expert of 10¹² wide), and the refusal says so rather than blame --batch."""
    from tfcalc.count.model.budget import largest_fitting
    from tfcalc.units import nbytes

    def suggest(limit: int) -> Optional[str]:
        floor = need(1, 1)
        if floor > limit:
            return f"{WHOLE_MODEL} (one token alone needs {nbytes(floor)}: its size fields, the preset's or --set's)"
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
    require_fits(per_rank, "cuda" if on_gpu else "cpu", f"{what} on {nproc} rank(s)",
                 "a smaller model (--set n_layer=2), --batch or --seq, or fewer --nproc", ranks=1 if on_gpu else nproc)


def require_serving_ranks_fit(cfg, tp: int, batch: int, seq: int, device: str, what: str) -> None:
    """InputError before any rank starts when tp serving ranks would not fit (tfcalc.measure.serving_tp):
    each builds the whole model in fp32 before DTensor shards it, then runs a forward of batch × seq tokens
    without gradients (the working set of tfcalc.count.model.memory.forward_working_set, in fp32)."""
    from tfcalc.count.model import memory as count_memory
    from tfcalc.workload import Workload

    per_rank = (count_memory.weights_bytes(cfg, "fp32")
                + count_memory.forward_working_set(cfg, Workload(batch=batch, seq=seq, dtype="fp32")))
    on_gpu = device != "cpu" and _cuda()
    require_fits(per_rank, "cuda" if on_gpu else "cpu", f"{what} on {tp} rank(s)",
                 "a smaller model (--set n_layer=2), --batch or --seq, or a smaller --tp", ranks=1 if on_gpu else tp)


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()
