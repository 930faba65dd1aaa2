"""The bytes of every collective a training step runs, recorded from inside PyTorch's dispatcher.

``CollectiveLog`` records through PyTorch's own ``CommDebugMode`` (torch.distributed.tensor.debug), which sees
every collective: the c10d ops that DDP's reducer and FSDP2 call (``c10d.allreduce_``,
``c10d._allgather_base_``, ``c10d._reduce_scatter_base_`` ...) and the functional collectives that DTensor
emits for tensor parallelism (``_c10d_functional.all_reduce`` ...). CommDebugMode counts calls; the
subclass also records, for each call, the bytes of its tensors, its process group and the phase of the
step the training loop is in. No hook, no guess: DDP's gradient all-reduce is seen with its real bucket.

Bytes follow tfcalc.count.training.comm's convention: an all-reduce's payload is its tensor, an all-gather's its
gathered output, a reduce-scatter's its input. The process group is read from the op's arguments (a
ProcessGroup object for c10d ops, a group name for functional ones) and named by the device mesh
dimension it belongs to (``dp`` or ``tp``).

Cause (the same names as the plan's): on the dp group, all-reduce and reduce-scatter are ``dp_grads``
and all-gather ``zero_params``; on the tp group, ``tp_loss`` in the loss phase; under sequence
parallelism an all-reduce elsewhere is ``tp_norm_grads`` (activations then travel by all-gather and
reduce-scatter only; the partial norm gradients are all-reduced by the loop after the backward pass, or
by FSDP2 during it); everything else on the tp group is ``tp_activations``.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch
from torch.distributed.tensor import DTensor
from torch.distributed.tensor.debug import CommDebugMode
from torch.distributed.tensor.debug._comm_mode import NATIVE_TO_PY_MAPPING, c10d_collective_ops

from tfcalc.count.training.comm import Collective

# the op, named as tfcalc.count.training.comm names it, by the name PyTorch gives its overload packet
_OPS = {
    "allreduce_": "all_reduce", "allreduce_coalesced_": "all_reduce", "all_reduce": "all_reduce",
    "all_reduce_coalesced": "all_reduce",
    "_allgather_base_": "all_gather", "allgather_": "all_gather", "allgather_into_tensor_coalesced_": "all_gather",
    "all_gather_into_tensor": "all_gather", "all_gather_into_tensor_coalesced": "all_gather",
    "_reduce_scatter_base_": "reduce_scatter", "reduce_scatter_": "reduce_scatter",
    "reduce_scatter_tensor_coalesced_": "reduce_scatter", "reduce_scatter_tensor": "reduce_scatter",
    "reduce_scatter_tensor_coalesced": "reduce_scatter",
    "broadcast_": "broadcast", "broadcast": "broadcast",
    "alltoall_base_": "all_to_all", "all_to_all_single": "all_to_all",  # expert parallelism's token exchange
}


@dataclass(frozen=True)
class Call:
    op: str
    group: str
    phase: str
    payload_bytes: int


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def _payload(op: str, tensors: list[torch.Tensor], group_size: int) -> int:
    """All-reduce: the tensor(s). All-gather: the gathered output -- the larger tensor of a c10d op,
    which takes output and input; a functional one takes only its input, times the group's size.
    Reduce-scatter: the input, the larger tensor (a functional one takes only its input)."""
    if op == "all_reduce":
        return sum(_nbytes(t) for t in tensors)
    if op == "all_to_all":  # c10d's (output, input, ...): the input handed over; a functional one takes only it
        return _nbytes(tensors[-1])
    if op == "all_gather" and len(tensors) == 1:
        return _nbytes(tensors[0]) * group_size
    return max(_nbytes(t) for t in tensors)


def _group_name(args, kwargs) -> str:
    for a in torch.utils._pytree.tree_leaves((args, kwargs)):
        if isinstance(a, torch.ScriptObject) and a._type().qualified_name().endswith(".ProcessGroup"):
            return torch._C._distributed_c10d.ProcessGroup.unbox(a).group_name
    strings = [a for a in (*args, *(kwargs or {}).values()) if isinstance(a, str)]
    return strings[-1] if strings else "?"


def _tolerate_repeated_modules(mode: CommDebugMode) -> None:
    """CommDebugMode's module tracker registers a forward hook each time a module runs and removes only
    the last; a module run twice in one section (an encoder-decoder's shared token embedding, looked up
    by both stacks) then pops its parent list once too often and raises IndexError. Only the attribution
    of calls to modules depends on that list -- never the counts recorded here -- so the pop is skipped
    once nothing but the root is left. Where the tracker's internals differ (another torch), nothing is
    changed: the plain CommDebugMode runs."""
    tracker = getattr(mode, "advanced_module_tracker", None)
    pop = getattr(tracker, "_fw_set_module_hook", None)
    if pop is None or not isinstance(getattr(tracker, "parent_list", None), list):
        return

    def tolerant(mod, inputs, output):
        if len(tracker.parent_list) > 1 or getattr(tracker, "is_bw", False):
            pop(mod, inputs, output)

    tracker._fw_set_module_hook = tolerant


class _Section(CommDebugMode):
    """CommDebugMode over one section of a step, adding each call to a CollectiveLog."""

    def __init__(self, log: "CollectiveLog"):
        super().__init__()
        self.log = log
        _tolerate_repeated_modules(self)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        packet = getattr(func, "_overloadpacket", None)
        is_comm = packet is not None and (packet in self.comm_registry or packet in c10d_collective_ops
                                          or packet in NATIVE_TO_PY_MAPPING)
        if is_comm and not any(issubclass(t, DTensor) for t in types):
            self.log.add(packet.__name__, args, kwargs)
        return super().__torch_dispatch__(func, types, args, kwargs)


class CollectiveLog:
    """Every collective of the sections recorded (see the module docstring).

    One CommDebugMode per section -- a micro-batch's forward and backward, the gradient sync, the
    optimizer step -- because CommDebugMode's module tracker registers a forward hook each time a
    module runs and removes only the last: a module run twice in one context (a second micro-batch)
    breaks it."""

    def __init__(self, groups: dict[str, tuple[str, int]], sequence_parallel: bool = False):
        self.groups = groups  # process group name -> ('dp' or 'tp', its size)
        self.sequence_parallel = sequence_parallel
        self.phase = "forward"
        self.calls: list[Call] = []
        self.counts: dict[str, int] = {}  # CommDebugMode's own call counts, by op

    def add(self, name: str, args, kwargs) -> None:
        op = _OPS.get(name, name)
        tensors = [a for a in torch.utils._pytree.tree_leaves((args, kwargs)) if isinstance(a, torch.Tensor)]
        group, size = self.groups.get(_group_name(args, kwargs), ("?", 0))
        if op == "all_to_all":  # expert parallelism's (tfcalc.measure.experts_parallel): counts or tokens
            group = "ep"
            phase = "counts" if not tensors[-1].is_floating_point() else "tokens"
            self.calls.append(Call(op, group, phase, _payload(op, tensors, size)))
            return
        self.calls.append(Call(op, group, self.phase, _payload(op, tensors, size)))

    @contextlib.contextmanager
    def section(self, phase: str):
        self.phase = phase
        mode = _Section(self)
        with mode:
            yield self
        for op, n in mode.get_comm_counts().items():
            self.counts[str(op)] = self.counts.get(str(op), 0) + n

    def collectives(self) -> list[Collective]:
        """The calls summed by (cause, op), as tfcalc.count.training.comm.Collective."""
        group_sizes = dict(self.groups.values())
        sums: dict[tuple[str, str, str], list[int]] = {}
        for call in self.calls:
            key = (cause(call, self.sequence_parallel), call.op, call.group)
            total = sums.setdefault(key, [0, 0])
            total[0] += call.payload_bytes
            total[1] += 1
        size = {**group_sizes, "ep": group_sizes.get("dp", 0)}  # the run's EP group is its dp group
        return [Collective(c, op, group, size.get(group, 0), payload, calls)
                for (c, op, group), (payload, calls) in sums.items()]


def cause(call: Call, sequence_parallel: bool) -> str:
    """The plan's name for why a call happened (see the module docstring)."""
    if call.group in ("dp", "dp_shard"):  # HSDP's shard group gathers and reduce-scatters as FSDP's dp group
        return "zero_params" if call.op in ("all_gather", "broadcast") else "dp_grads"
    if call.group == "dp_replicate":  # and all-reduces each shard across the replicas
        return "dp_grads"
    if call.group == "ep":
        return f"ep_{call.phase}"
    if call.group == "tp":
        if call.phase == "loss":
            return "tp_loss"
        return "tp_norm_grads" if sequence_parallel and call.op == "all_reduce" else "tp_activations"
    return f"unknown_{call.group}"
