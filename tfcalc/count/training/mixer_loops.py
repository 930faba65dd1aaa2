"""The loops a mixer runs position by position under autograd, priced in a training step
(tfcalc.count.training.micro_batch_time): Mamba-1's recurrence (tfcalc.architecture.mamba1, ``autograd_loop``:
3T kernels forward and 5T backward a layer, and its fp32 passes over (T, I, N), 11 forward and 26 backward), where
the count of non-matmul work has one kernel an entry and no such traffic. A mixer without ``autograd_loop`` has none.
The entry the mixer prices its scan's work in (``loop_entries``: Mamba-1's "exp(dt·A) and the decay") holds the
chunked scan's passes a prompt runs out of autograd (tfcalc.architecture.mamba1.scan_passes); a training step runs
the loop instead, whose bytes are every fp32 pass over (T, I, N) from dt·A to the stack, so the entry keeps its one
fused kernel (exp(dt·A): the loop's kernels are the recurrence's, the reads and the stacks) and no bytes
(``in_training``); before, both were priced under --kernels fused|compile.
The bytes split over the TP ranks (channels); the kernels run on every rank. Pure Python."""

from __future__ import annotations

from dataclasses import replace

from tfcalc.config import ModelConfig
from tfcalc.count.model.terms import NonMatmulEntry


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


def in_training(cfg: ModelConfig, entries: list[NonMatmulEntry]) -> list[NonMatmulEntry]:
    """The non-matmul entries of a training step: those a mixer's loop moves the bytes of (its ``loop_entries``,
    by label, a stack's prefix before it) with no bytes; the rest as they are."""
    labels = {label for _, block, _ in cfg.architecture.kinds() for label in getattr(block.mixer, "loop_entries", ())}
    if not labels:
        return entries
    return [replace(e, traffic=0) if e.component == "mixer" and any(e.label.endswith(x) for x in labels) else e
            for e in entries]
