"""FSDP (ZeRO-3) under a pipeline, as PyTorch runs it: what a rank of a stage holds beyond its shards. Pure
arithmetic, no torch.

torch.distributed.pipelining runs each micro-batch's backward of an FSDP2 stage with gradient sync off
(``PipelineStage.backward_maybe_with_nosync``: ``set_requires_gradient_sync(False)``,
``set_reshard_after_backward(False)``; torch/distributed/pipelining/stage.py), and reduce-scatters once, after
the last micro-batch (the schedule's post-backward). So, between the first backward and the step's last:

1. Every FSDP unit of the stage stays unsharded after its backward (no reshard after backward): the whole
   stage's weights in the weight dtype, Ψ·e_w, whatever ``reshard_after_forward`` -- what
   ``reshard_after_forward=False`` holds anyway, and what torchtitan sets under PP ("For PP, do not reshard
   after forward to avoid per-microbatch all-gathers", torchtitan parallelize_llama.apply_fsdp).
2. Every unit's gradient accumulates unsharded, in FSDP2's reduce dtype: ``FSDPParam.to_accumulated_grad_if_
   needed`` upcasts the unsharded bf16 gradient to ``MixedPrecisionPolicy.reduce_dtype`` (fp32 under
   torchtitan's ``mixed_precision_reduce = "float32"``, tfcalc's --grad-dtype fp32) and
   ``accumulate_unsharded_grad_if_needed`` adds each later micro-batch's into it
   (torch/distributed/fsdp/_fully_shard/_fsdp_param.py): Ψ·e_g more, where the sharded model without a
   pipeline holds Ψ·e_g/N.
   Llama 3.1 405B at TP 8 × PP 8 (Ψ ≈ 6.3·10⁹ a rank): 12.7 GB of bf16 weights and 25.3 GB of fp32
   gradients, unsharded, on every rank -- beside 12.7 GB of sharded model states at FSDP 8.
The sharded gradients (1/N, ``grads``) are still counted beside: they are made unit by unit from the
unsharded ones at the step's last backward, so the figure is high by at most that shard.
Without a pipeline (pp 1) FSDP reduces each micro-batch's gradients as the backward goes: nothing here.
"""

from __future__ import annotations

from tfcalc.workload import Layout


def pipelined_fsdp(layout: Layout) -> bool:
    """Whether the layout runs FSDP (ZeRO-3) stages under a pipeline schedule (steps 1 and 2 apply)."""
    return layout.zero == 3 and layout.pp > 1


def stage_gathered(layout: Layout) -> bool:
    """Whether every unit of the stage is held unsharded at the peak: without resharding after forward, or
    under a pipeline (step 1)."""
    return not layout.reshard_after_forward or pipelined_fsdp(layout)


def accumulated_grad_bytes(layout: Layout, psi: int, grad_element: int) -> int:
    """Step 2: the stage's unsharded gradients in the reduce dtype (``grad_element`` bytes each: --grad-dtype,
    else the weights'), ``psi`` the parameters of the rank's TP slice of its stage(s); 0 without a pipeline."""
    return grad_element * psi if pipelined_fsdp(layout) else 0
