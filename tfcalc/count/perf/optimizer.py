"""The optimizer step's time on one rank: Adam(W) over the rank's shard of the parameters, memory-bound.
Pure arithmetic.

PyTorch's Adam/AdamW (torch/optim/adam.py, the ``foreach`` and ``fused`` implementations; Megatron's and
DeepSpeed's fused Adam alike) update every parameter in one pass that reads the fp32 parameter (the
master copy under mixed precision), its gradient and the two fp32 moments, and writes the parameter and
the moments back: 4 + g + 4 + 4 read, 4 + 4 + 4 written, g the gradient's bytes. Under mixed precision
the 16-bit working weight is written from the master (w bytes). Before it, gradient clipping
(torch.nn.utils.clip_grad_norm_, the usual max-norm 1.0 of the runs in the calibration set) reads every
gradient for the global norm and multiplies each by the clip coefficient (a read and a write): 3g.

bytes per parameter = 24 + 4g + (w under mixed precision): bf16 weights and gradients 34, an fp32
gradient buffer beside bf16 weights (--grad-dtype fp32) 42, fp32 training 40.

The step runs after the last gradient reduction, on nothing else: its seconds add to the step. Which
parameters: the rank's optimizer shard (all of its stage's under ZeRO-0; 1/N under ZeRO-1 and up), as
the plan's memory counts them (optimizer bytes ÷ optimizer bytes per parameter); with --offload optimizer
the step runs on the CPU and is not timed here.

Worked example (tests/count/test_optimizer_time.py): Llama 2 7B, 6,738,415,616 parameters, bf16, ZeRO-0 on
one rank: 6,738,415,616 × 34 = 229,106,130,944 bytes at 0.85 of an H100's 3.35 TB/s = 80.5 ms.
"""

from __future__ import annotations

FP32 = 4


def adam_bytes_per_param(weight_bytes: int, grad_bytes: int) -> int:
    """The module docstring's bytes per parameter."""
    return 6 * FP32 + 4 * grad_bytes + (weight_bytes if weight_bytes < FP32 else 0)


def optimizer_seconds(params: int, weight_bytes: int, grad_bytes: int, bandwidth: float) -> float:
    """Seconds of one optimizer step over ``params`` parameters at ``bandwidth`` achievable bytes/s."""
    return params * adam_bytes_per_param(weight_bytes, grad_bytes) / bandwidth
