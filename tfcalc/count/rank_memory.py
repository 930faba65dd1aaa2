"""Memory of one rank under a parallel layout: model states (ZeRO) and activations (Korthikanti et al.
2022). Pure arithmetic, no torch. Bytes throughout; ``e`` is bytes per activation element.

Model states, mixed-precision Adam (Rajbhandari et al. 2020, "ZeRO", sec. 3.1, K = 12): per parameter,
weights e_w (2 in bf16), gradients e_w, fp32 master weights 4 (only when e_w < 4) and fp32 moments 8:
16 bytes in bf16 and in fp32 alike (fp32 has no master copy but 4-byte weights and gradients). Ψ below is
the parameters this rank's tensor-parallel slice of its pipeline stage holds (``stage_params``).

1. ZeRO-0 (DDP): everything whole, 16Ψ.
2. ZeRO-1: optimizer states (master and moments) split over the N dp ranks: 4Ψ + 12Ψ/N (bf16).
3. ZeRO-2: gradients split too: 2Ψ + 14Ψ/N.
4. ZeRO-3: weights split too: 16Ψ/N.
   Llama 2 7B (Ψ = 6,738,415,616), N = 8: 107,814,649,856 / 37,061,285,888 / 25,269,058,560 /
   13,476,831,232 bytes.
Splitting conventions (what makes the plan equal a real run): ZeRO-1 and -2 split a flat buffer of all
Ψ parameters (DeepSpeed), ⌈Ψ/N⌉ per rank; ZeRO-3 splits every tensor along dim 0 as FSDP2 does, padded
to ⌈rows/N⌉ (tfcalc.count.shard.fsdp_shard) -- equal to Ψ/N whenever N divides every tensor's rows.
ZeRO-3 also holds gathered (unsharded) weights while a unit runs: FSDP2 keeps the running unit and
prefetches the next, 2 × the largest unit, in the weight dtype (``gathered``).

Activations per layer and token, the terms of Korthikanti et al. 2022, sec. 4.1 (their eq. 1 sums them
for a GPT block in 16-bit: 34·h + 5·a·s bytes), generalized to the attention width q = n_head·d_head, the
K/V width k (GQA), the FFN width f and a gated FFN:

5. kept whole on every TP rank -- the two norms' inputs 2e·h, the QKV and FFN inputs e·h each, two
   dropout masks 1·h each: 4e·h + 2h (10h at e = 2);
6. split by TP -- Q and K e·(q + k), V e·k, the attention output e·q, the FFN hidden tensors 2e·f
   (GELU input and output) or 4e·f gated (gate and up, the activation output, the product): 24h at
   e = 2 with q = k = h, f = 4h;
7. the attention scores, split by TP -- softmax output e·a·s, its dropout mask a·s, dropout output e·a·s:
   (2e + 1)·a·s (5as at e = 2).
   Per layer: s·b·(term 5 + term 6/t + term 7/t); sequence parallelism splits term 5 by t too, giving the
   paper's s·b·h·(34 + 5as/h)/t; selective recompute drops term 7 (rebuilt in the backward pass, as
   flash attention also does); full recompute keeps only each layer's input, e·h per token (divided by
   t under sequence parallelism, which checkpoints the sequence shard), and rebuilds one layer at a time:
   one layer's activations are added to the peak.
8. outside the blocks (paper, sec. 4.3): the first stage keeps the embedding-dropout mask, h bytes per
   token; the last stage keeps the final norm's and the LM head's inputs e·h each and the fp32 logits of
   the vocabulary-parallel loss, 4·V/t; the h-wide terms are split by t under sequence parallelism.
9. Pipeline (1F1B, Narayanan et al. 2021, sec. 2.2): stage i holds min(p − i, m) micro-batches in
   flight, so the first stage holds p micro-batches of its L/p layers -- the activations of L layers,
   whatever p is (Korthikanti et al. 2022, sec. 4.2.3).
This is the paper's estimate (with dropout and stored scores), not tfcalc's exact single-device count
(tfcalc.count.memory), which models the real module's saved tensors.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tfcalc.config import ModelConfig
from tfcalc.count.dtypes import BITS_PER_ELEMENT
from tfcalc.count.layout import Layout
from tfcalc.count.memory import activation_element_bytes
from tfcalc.count.shard import (
    block_units,
    fsdp_shard,
    module_tensors,
    stage_blocks,
    stage_tensors,
    total_blocks,
    tp_local_shape,
)

FP32 = 4
ADAM_MOMENTS = 2 * FP32  # exp_avg and exp_avg_sq, fp32


@dataclass(frozen=True)
class RankMemory:
    """Bytes one rank holds: model states, activations, and ZeRO-3's gathered weights."""

    stage: int
    params: int  # parameters of the rank's TP slice of its stage (Ψ above), before ZeRO
    weights: int
    grads: int
    optimizer: int  # fp32 master weights (below fp32) and the Adam moments
    activations: int
    gathered: int  # ZeRO-3 only: unsharded weights of the running and the prefetched unit

    @property
    def states(self) -> int:
        return self.weights + self.grads + self.optimizer

    @property
    def total(self) -> int:
        return self.states + self.activations + self.gathered


def weight_element_bytes(dtype: str) -> int:
    return BITS_PER_ELEMENT[dtype] // 8


def optimizer_element_bytes(dtype: str) -> int:
    """fp32 master copy (only below fp32) and the two fp32 moments, per parameter."""
    return (FP32 if weight_element_bytes(dtype) < FP32 else 0) + ADAM_MOMENTS


def _local_shapes(cfg: ModelConfig, layout: Layout, stage: int) -> list[tuple[tuple[int, ...], int]]:
    """(TP rank 0's shape, copies) of every tensor on the stage."""
    return [(tp_local_shape(t, layout.tp), n) for t, n in stage_tensors(cfg, layout.pp, stage)]


def stage_params(cfg: ModelConfig, layout: Layout, stage: int) -> int:
    """Ψ: parameters of TP rank 0's slice of the stage."""
    return sum(n * math.prod(shape) for shape, n in _local_shapes(cfg, layout, stage))


def model_states(cfg: ModelConfig, layout: Layout, stage: int) -> tuple[int, int, int, int]:
    """(Ψ, weights, grads, optimizer) bytes of one rank of the stage (steps 1-4)."""
    psi = stage_params(cfg, layout, stage)
    ew, eo, N = weight_element_bytes(layout.dtype), optimizer_element_bytes(layout.dtype), layout.dp
    flat = -(-psi // N)  # ZeRO-1/2: a flat buffer split N ways
    if layout.zero == 0:
        return psi, ew * psi, ew * psi, eo * psi
    if layout.zero == 1:
        return psi, ew * psi, ew * psi, eo * flat
    if layout.zero == 2:
        return psi, ew * psi, ew * flat, eo * flat
    shard = sum(n * fsdp_shard(shape, N) for shape, n in _local_shapes(cfg, layout, stage))
    return psi, ew * shard, ew * shard, eo * shard


def gathered_bytes(cfg: ModelConfig, layout: Layout) -> int:
    """ZeRO-3: 2 × the largest FSDP unit (one block, or the root's tensors), unsharded, TP-local."""
    if layout.zero != 3:
        return 0
    def size(t) -> int:
        return t.copies * math.prod(tp_local_shape(t, layout.tp))

    block = max(sum(size(t) for t in unit) for unit in block_units(cfg))  # the largest block kind
    root = sum(size(t) for t in module_tensors(cfg) if not t.per_block)
    return 2 * weight_element_bytes(layout.dtype) * max(block, root)


def layer_terms(cfg: ModelConfig, layout: Layout) -> tuple[int, int, int]:
    """(whole, split, scores) bytes per token of one layer: terms 5, 6 and 7 of the module docstring."""
    e, h, q, k, f = activation_element_bytes(layout.dtype), cfg.d_model, cfg.q_dim, cfg.kv_dim, cfg.ffn_dim
    whole = 4 * e * h + 2 * h
    split = e * (q + k) + e * k + e * q + (4 if cfg.gated_ffn else 2) * e * f
    scores = (2 * e + 1) * cfg.n_head * layout.seq
    return whole, split, scores


def layer_activation_bytes(cfg: ModelConfig, layout: Layout, stored: bool = True) -> int:
    """One layer, one micro-batch, per TP rank: what is kept (stored=True) or, with stored=False, the
    activations of the layer itself (what full recompute rebuilds)."""
    t, sp = layout.tp, layout.sequence_parallel
    tokens = layout.micro_batch * layout.seq
    whole, split, scores = layer_terms(cfg, layout)
    if stored and layout.recompute == "full":
        e = activation_element_bytes(layout.dtype)
        return tokens * e * cfg.d_model // (t if sp else 1)
    keep_scores = layout.recompute == "none" or not stored
    return tokens * (whole // (t if sp else 1) + split // t + (scores // t if keep_scores else 0))


def end_activation_bytes(cfg: ModelConfig, layout: Layout, first: bool, last: bool) -> tuple[int, int]:
    """(first stage's embedding mask, last stage's head terms) per micro-batch (step 8)."""
    t, sp = layout.tp, layout.sequence_parallel
    e, h, tokens = activation_element_bytes(layout.dtype), cfg.d_model, layout.micro_batch * layout.seq
    div = t if sp else 1
    emb = tokens * h // div if first else 0
    head = 0
    if last:
        head = tokens * ((2 * e * h if cfg.final_norm else e * h) // div)
        head += tokens * (FP32 * -(-cfg.vocab_size // t) if cfg.lm_head else 0)
    return emb, head


def stage_activations(cfg: ModelConfig, layout: Layout, stage: int, blocks: int) -> int:
    """Activation bytes of one rank of the stage at its peak (steps 5-9)."""
    p, m = layout.pp, layout.micro_batches
    in_flight = min(p - stage, m)
    emb, head = end_activation_bytes(cfg, layout, stage == 0, stage == p - 1)
    stored = in_flight * (blocks * layer_activation_bytes(cfg, layout) + emb) + head
    rebuilt = layer_activation_bytes(cfg, layout, stored=False) if layout.recompute == "full" else 0
    return stored + rebuilt


def rank_memory(cfg: ModelConfig, layout: Layout) -> RankMemory:
    """The rank with the largest total: over pipeline stages, TP rank 0 (the largest blocks)."""
    gathered = gathered_bytes(cfg, layout)
    best = None
    for stage, blocks in enumerate(stage_blocks(total_blocks(cfg), layout.pp)):
        psi, w, g, o = model_states(cfg, layout, stage)
        mem = RankMemory(stage, psi, w, g, o, stage_activations(cfg, layout, stage, blocks), gathered)
        if best is None or mem.total > best.total:
            best = mem
    return best
