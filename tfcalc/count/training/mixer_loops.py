"""The loops a mixer runs position by position under autograd, priced in a training step
(tfcalc.count.training.micro_batch_time): Mamba-1's recurrence (tfcalc.architecture.mamba1, ``autograd_loop``:
3T kernels forward and 5T backward a layer, and its fp32 passes over (T, I, N), 11 forward and 23 backward), where
the count of non-matmul work has one kernel an entry and no such traffic. A mixer without ``autograd_loop`` has none.
The bytes split over the TP ranks (channels); the kernels run on every rank. Pure Python."""

from __future__ import annotations

from tfcalc.config import ModelConfig


def loop_costs(cfg: ModelConfig, batch: int, seq: int, tp: int = 1) -> tuple[float, float, int, int]:
    """(forward bytes, backward bytes, forward kernels, backward kernels) of every layer's loop for one
    micro-batch of ``batch`` sequences of ``seq`` tokens, on one TP rank."""
    fwd = bwd = 0.0
    kf = kb = 0
    for _, block, layers in cfg.architecture.kinds():
        loop = getattr(block.mixer, "autograd_loop", None)
        if loop is None:
            continue
        f, b, k_f, k_b = loop(batch, seq)
        fwd, bwd = fwd + layers * f / tp, bwd + layers * b / tp
        kf, kb = kf + layers * k_f, kb + layers * k_b
    return fwd, bwd, kf, kb
