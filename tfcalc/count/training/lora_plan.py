"""LoRA fine-tuning under `tfcalc plan --lora-rank r` (the terms: tfcalc.count.model.lora). Pure arithmetic, no torch.

Modelled for data parallelism (ZeRO 0-2, --tp/--pp/--cp/--ep 1), the fused kernel without recompute, offload or
FP8; other layouts are refused in one line. Per rank, Ψ the base's parameters, A the adapters', N the dp ranks,
e_w, e_g, e_o bytes of a weight, a gradient and a parameter's optimizer state (tfcalc.count.training.rank_memory):

1. Memory: the frozen base whole in its dtype, e_w·Ψ, no gradient and no optimizer state (ZeRO has nothing of it
   to split); the adapters' weights e_w·A, their gradients e_g·A (ZeRO-2: ⌈A/N⌉) and optimizer states e_o·A
   (ZeRO-1 and -2: ⌈A/N⌉); activations: one micro-batch's full fine-tuning terms plus LoRA's delta (step 3).
2. Collectives: the gradient reduction, and ZeRO-1/2's all-gather of updated parameters, of the adapters only --
   tfcalc.count.training.comm.dp_collectives over A parameters instead of Ψ.
3. Compute: the matmuls of the base run forward and input-gradient only (tfcalc.count.model.lora, step 4): the
   step's matmul seconds times (base forward + backward FLOPs) / (3 × forward), the non-matmul work unchanged
   (norms, activations and attention's softmax still run forward and backward). The adapters' GEMMs are rank-r
   thin: at 2r/e FLOPs a byte they are memory-bound on every device (an H100 needs ≈ 300), so each is priced
   at the bandwidth: three passes (forward, input gradient, weight gradient), each moving its input and output,
   e·(d_in + d_out) a token. MFU counts the FLOPs LoRA runs (≈ 4N + adapters a token), not 6N.
4. The optimizer steps the adapters' shard alone (tfcalc.count.perf.optimizer, through _plan's pricing).
"""

from __future__ import annotations

from dataclasses import replace

from tfcalc.config import ModelConfig
from tfcalc.count.model import lora
from tfcalc.count.model.dtypes import activation_element_bytes
from tfcalc.count.model.flops import matmul_entries
from tfcalc.count.training.comm import dp_collectives
from tfcalc.count.training.rank_activations import micro_batch
from tfcalc.count.training.rank_memory import (
    RankMemory,
    layout_activations,
    optimizer_element_bytes,
    weight_element_bytes,
)
from tfcalc.count.training.sharding import grad_element_bytes
from tfcalc.count.training.steptime import StepTime
from tfcalc.errors import InputError
from tfcalc.workload import Layout


def check_lora_layout(layout: Layout) -> None:
    L = layout
    if L.tp > 1 or L.pp > 1 or L.cp > 1 or L.ep > 1 or L.zero == 3:
        raise InputError("plan --lora-rank is modelled for data parallelism with ZeRO 0-2 (--tp, --pp, --cp, --ep 1; "
                         "not --zero 3)")
    if L.offload_optimizer or L.offload_activations or L.compute_dtype or L.zero_engine != "flat" or L.dropout:
        raise InputError("plan --lora-rank is modelled without --offload, --compute-dtype, --zero-engine or --dropout")
    if L.recompute != "none" or L.attention != "flash":
        raise InputError("plan --lora-rank is modelled for --attention flash without --recompute")


def lora_memory(cfg: ModelConfig, layout: Layout, full: RankMemory, spec: lora.LoraSpec) -> RankMemory:
    """Step 1, from the full fine-tuning rank's memory ``full`` (its activations) of the same layout."""
    A, psi, N = lora.trainable_params(cfg, spec), full.params, layout.data_ranks
    ew, eg, eo = weight_element_bytes(layout.dtype), grad_element_bytes(layout), optimizer_element_bytes(layout.dtype)
    shard = -(-A // N)
    w = micro_batch(layout)
    acts = layout_activations(cfg, layout)
    delta = lora.activation_delta(cfg, acts.per_layer, acts.head, w.batch * w.seq, activation_element_bytes(w.dtype),
                                  spec)
    return replace(full, weights=ew * (psi + A), grads=eg * (A if layout.zero < 2 else shard),
                   optimizer=eo * (A if layout.zero == 0 else shard),
                   activations=full.activations + sum(delta.values()), gathered=0)


def lora_collectives(cfg: ModelConfig, layout: Layout, spec: lora.LoraSpec) -> list:
    """Step 2."""
    return dp_collectives(cfg, layout, 0, lora.trainable_params(cfg, spec))


def lora_step(cfg: ModelConfig, layout: Layout, step: StepTime, spec: lora.LoraSpec, bandwidth: float,
              peak_flops_per_s: float) -> StepTime:
    """Step 3 on the full fine-tuning step of the layout (its collectives already LoRA's): the matmuls scaled, the
    adapters' seconds added, on one GPU and pipeline stage (pp = 1: no bubble stretches them)."""
    m, T = layout.micro_batches, layout.micro_batch * layout.seq
    flops = lora.training_flops(cfg, matmul_entries(cfg, layout.micro_batch, layout.seq), T, spec)
    base = (flops.base_forward + flops.base_backward) / flops.full_training
    e = activation_element_bytes(layout.dtype)
    adapters = m * sum(3 * e * T * (d_in + d_out) * n for _, d_in, d_out, n in lora.adapted(cfg, spec)) / bandwidth
    saved = step.matmul_s * (1 - base) - adapters
    model = flops.total * m * layout.dp
    physics = step.physics_s - saved
    overlap = physics if step.basis != "mfu" else step.overlap_s * model / step.model_flops
    return replace(step, model_flops=model, executed_flops=model, compute_s=step.compute_s - saved,
                   matmul_s=step.matmul_s * base + adapters, physics_s=physics, no_overlap_s=step.no_overlap_s - saved,
                   overlap_s=overlap, mfu=model / (overlap * peak_flops_per_s * layout.gpus))


def lora_json(cfg: ModelConfig, spec) -> dict | None:
    """The plan's "lora" key: null without --lora-rank."""
    if spec is None:
        return None
    return {"rank": spec.rank, "targets": list(spec.targets), "trainable_params": lora.trainable_params(cfg, spec)}


def lora_notes(cfg: ModelConfig, spec) -> list[str]:
    if spec is None:
        return []
    return [f"LoRA rank {spec.rank} on {', '.join(spec.targets)}: {lora.trainable_params(cfg, spec):,} trained "
            "parameters; the base frozen (no gradients, no optimizer state, no weight-gradient matmuls), only the "
            "adapters' gradients reduced (tfcalc.count.training.lora_plan)"]
