"""What one rank of a distributed training run holds, in bytes: the distinct storages behind its tensors
(a DTensor by its local shard, FSDP2's padded shard storage, DDP's gradient buckets), its optimizer's state
tensors, and the activations autograd saves for backward. Shared by the plain ranks
(tfcalc.measure.distributed) and the pipeline's (tfcalc.measure.pipeline)."""

from __future__ import annotations

import torch


def plain(t: torch.Tensor) -> list[torch.Tensor]:
    """The plain tensors that hold a tensor's data: a DTensor's local shard, the inner tensors of other
    wrapper subclasses (functional collectives' AsyncCollectiveTensor), else the tensor itself."""
    from torch.distributed.tensor import DTensor

    if isinstance(t, DTensor):
        return plain(t._local_tensor)
    if type(t) in (torch.Tensor, torch.nn.Parameter) or not hasattr(t, "__tensor_flatten__"):
        return [t]
    inner = [getattr(t, name) for name in t.__tensor_flatten__()[0]]
    return [x for i in inner if isinstance(i, torch.Tensor) for x in plain(i)]


def storage_bytes(tensors) -> int:
    """Bytes of the distinct storages behind tensors (DTensors by their local shard), 0-d ones left out."""
    seen: dict[int, int] = {}
    for t in tensors:
        if t is None or t.dim() == 0:
            continue
        for local in plain(t):
            storage = local.untyped_storage()
            seen[storage.data_ptr() or id(storage)] = storage.nbytes()
    return sum(seen.values())


def optimizer_tensors(opt):
    opt = getattr(opt, "optim", opt)  # ZeroRedundancyOptimizer keeps its rank's Adam as .optim
    return [v for state in opt.state.values() for v in state.values() if isinstance(v, torch.Tensor)]


class SavedBytes:
    """saved_tensors_hooks that add up the distinct storages autograd packs, parameters excluded: those
    the model holds at the moment of packing (FSDP2 swaps in gathered, unsharded parameters while a unit
    runs)."""

    def __init__(self, model):
        self.model = model
        self.seen: dict[int, int] = {}

        self.live: dict[int, int] = {}  # storage -> packed tensors that hold it and are not yet freed
        self.now = self.peak = 0

    def storages(self, t) -> list[tuple[int, int]]:
        """(address, bytes) of the storages behind a packed tensor that count: not a parameter's."""
        if not (t.is_floating_point() and t.dim() > 0):
            return []
        params = {s.untyped_storage().data_ptr() for p in self.model.parameters() for s in plain(p)}
        return [(s.data_ptr(), s.nbytes()) for s in (local.untyped_storage() for local in plain(t))
                if s.data_ptr() not in params]

    def pack(self, t):
        self.seen.update(self.storages(t))
        return t

    def pack_live(self, t) -> "_Held":
        """pack, and the bytes held at once: a storage counts from its first packing until autograd frees the
        last packed tensor that holds it (after its backward, or its weight gradient's), so ``peak`` is the
        most the rank held in flight (a schedule that runs more micro-batches than it keeps)."""
        keys = self.storages(t)
        self.seen.update(keys)
        for ptr, nbytes in keys:
            self.live[ptr] = self.live.get(ptr, 0) + 1
            self.now += nbytes * (self.live[ptr] == 1)
        self.peak = max(self.peak, self.now)
        return _Held(t, keys, self)

    def free(self, keys: list[tuple[int, int]]) -> None:
        for ptr, nbytes in keys:
            self.live[ptr] -= 1
            if not self.live[ptr]:
                del self.live[ptr]
                self.now -= nbytes

    @property
    def total(self) -> int:
        return sum(self.seen.values())


class _Held:
    """A packed tensor under SavedBytes.pack_live: autograd drops it when it frees the saved tensor."""

    def __init__(self, t, keys, owner: SavedBytes):
        self.t, self.keys, self.owner = t, keys, owner

    def __del__(self):
        self.owner.free(self.keys)
