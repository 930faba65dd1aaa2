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

    def pack(self, t):
        if t.is_floating_point() and t.dim() > 0:
            params = {s.untyped_storage().data_ptr() for p in self.model.parameters() for s in plain(p)}
            for local in plain(t):
                storage = local.untyped_storage()
                if storage.data_ptr() not in params:
                    self.seen[storage.data_ptr()] = storage.nbytes()
        return t

    @property
    def total(self) -> int:
        return sum(self.seen.values())
