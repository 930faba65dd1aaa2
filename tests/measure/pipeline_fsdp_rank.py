"""One gloo rank of tests/measure/test_pipeline_fsdp_measured.py: an FSDP2 stage (bf16 parameters, fp32
reduction, resharded after forward) run as torch.distributed.pipelining runs a stage's micro-batches: each
backward with ``set_is_last_backward(False)``, ``set_reshard_after_backward(False)`` and
``set_requires_gradient_sync(False)`` (PipelineStage.backward_maybe_with_nosync), two micro-batches. Then
what FSDP2 holds, read from its own parameter records: the unsharded gradients accumulated and the unsharded
parameters still allocated; then the last micro-batch with sync on and an Adam step: the shards, their
gradients and the moments. Rank 0 writes them to the JSON file named by argv[1]."""

import json
import sys

import torch
import torch.distributed as dist
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard


def held(model) -> dict:
    """Bytes of the unsharded accumulated gradients and of the unsharded parameters' storage, over every unit."""
    acc = params = 0
    for module in model.modules():
        state = fully_shard.state(module) if hasattr(module, "set_requires_gradient_sync") else None
        group = state._fsdp_param_group if state is not None else None
        for p in group.fsdp_params if group is not None else ():
            g = p.unsharded_accumulated_grad
            acc += g.numel() * g.element_size() if g is not None else 0
            params += p._unsharded_param.untyped_storage().nbytes()
    return {"accumulated_grad_bytes": acc, "unsharded_param_bytes": params,
            "accumulated_dtypes": sorted({str(p.unsharded_accumulated_grad.dtype) for m in model.modules()
                                          if hasattr(m, "set_requires_gradient_sync")
                                          for p in (fully_shard.state(m)._fsdp_param_group.fsdp_params
                                                    if fully_shard.state(m)._fsdp_param_group else ())
                                          if p.unsharded_accumulated_grad is not None})}


def main(path: str) -> None:
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    # an odd first dimension (FSDP2 pads it on 2 ranks) beside even ones; biases too
    model = torch.nn.Sequential(torch.nn.Linear(16, 33), torch.nn.ReLU(), torch.nn.Linear(33, 16), torch.nn.ReLU(),
                                torch.nn.Linear(16, 16, bias=False))
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for layer in (model[0], model[2], model[4]):
        fully_shard(layer, mp_policy=mp)
    fully_shard(model, mp_policy=mp)
    model.set_is_last_backward(False)
    model.set_reshard_after_backward(False)
    model.set_requires_gradient_sync(False)
    for _ in range(2):  # two micro-batches, gradients accumulated unsharded
        model(torch.randn(4, 16)).float().pow(2).sum().backward()
    out = dict(held(model), world=dist.get_world_size())
    # the step's last micro-batch as the schedule ends it: gradients reduce-scattered into the fp32 shards, then Adam
    model.set_is_last_backward(True)
    model.set_reshard_after_backward(True)
    model.set_requires_gradient_sync(True)
    model(torch.randn(4, 16)).float().pow(2).sum().backward()
    opt = torch.optim.AdamW(model.parameters(), foreach=False)
    opt.step()
    local = [p.to_local() for p in model.parameters()]  # the shards, as FSDP2 stores them
    out["shard_elements"] = sum(t.numel() for t in local)
    out["shard_bytes"] = sum(t.numel() * t.element_size() for t in local)
    out["shard_grad_bytes"] = sum(p.grad.to_local().numel() * p.grad.to_local().element_size()
                                  for p in model.parameters())
    out["moment_bytes"] = sum(s.to_local().numel() * s.to_local().element_size() for st in opt.state.values()
                              for k, s in st.items() if k in ("exp_avg", "exp_avg_sq"))
    if dist.get_rank() == 0:
        with open(path, "w", encoding="utf-8") as f:
            json.dump(out, f)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])
