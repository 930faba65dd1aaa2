"""LoRA fine-tuning under `tfcalc plan --lora-rank r` (the terms: tfcalc.count.model.lora). Pure arithmetic, no torch.

Modelled for data parallelism (ZeRO 0-3, --tp/--pp/--cp/--ep 1, no HSDP), the fused kernel without recompute,
offload or FP8; other layouts are refused in one line. Per rank, Ψ the base's parameters, A the adapters', N the
dp ranks, e_w, e_g, e_o bytes of a weight, a gradient and a parameter's optimizer state
(tfcalc.count.training.rank_memory):

1. Memory: the frozen base in its dtype, e_w·Ψ (ZeRO-3: its FSDP2 shards, e_w·S), no gradient and no optimizer
   state; the adapters' weights e_w·A, their gradients e_g·A (ZeRO-2: ⌈A/N⌉) and optimizer states e_o·A (ZeRO-1
   and -2: ⌈A/N⌉). ZeRO-3 shards each adapter tensor along dim 0 as it does every tensor (A: ⌈r/N⌉ rows, B:
   ⌈d_out/N⌉), its weights, gradients and states alike, and gathers a block's adapters with the block: 2 × the
   largest unit, adapters in. Activations: one micro-batch's full fine-tuning terms plus LoRA's delta (step 3).
2. Collectives: the gradient reduction, and ZeRO-1/2's all-gather of updated parameters, of the adapters only --
   tfcalc.count.training.comm.dp_collectives over A parameters instead of Ψ. ZeRO-3 still gathers the frozen
   weights before each block's forward and (resharded) its backward, the adapters' shards with them; its
   reduce-scatter carries the adapters' gradient shards alone, one call a block and micro-batch (the root unit,
   embeddings and head, has nothing to reduce).
3. Compute: the matmuls of the base run forward and input-gradient only (tfcalc.count.model.lora, step 4): the
   step's matmul seconds times (base forward + backward FLOPs) / (3 × forward), the non-matmul work unchanged
   (norms, activations and attention's softmax still run forward and backward). The adapters' GEMMs are rank-r
   thin: at 2r/e FLOPs a byte they are memory-bound on every device (an H100 needs ≈ 300), so each is priced
   at the bandwidth: three passes (forward, input gradient, weight gradient), each moving its input and output,
   e·(d_in + d_out) a token. MFU counts the FLOPs LoRA runs (≈ 4N + adapters a token), not 6N. Under ZeRO-3 the
   gathers hide behind the whole step's compute (tfcalc.count.training.steptime, step 4's window), now shorter:
   their exposure is priced again against it. Under ZeRO 0-2 only the adapters' small reduction travels, behind
   full fine-tuning's backward window (left as it was).
4. The optimizer steps the adapters' shard alone (tfcalc.count.perf.optimizer, through _plan's pricing).
5. QLoRA (--base-dtype nf4, ZeRO 0-2): the base's weights as tfcalc.count.model.qlora stores them, its largest
   linear dequantized beside the activations; each block linear is dequantized (bitsandbytes' MatMul4Bit) in
   the forward and again for the input gradient: two passes a micro-batch, each reading the NF4 tensor and
   writing its e_w copy, priced at the bandwidth on the compute stream.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Optional

from tfcalc.config import ModelConfig
from tfcalc.count.model import lora, qlora
from tfcalc.count.model.dtypes import activation_element_bytes
from tfcalc.count.model.flops import matmul_entries
from tfcalc.count.training.comm import dp_collectives
from tfcalc.count.training.fsdp_edges import edge_s, edge_shares
from tfcalc.count.training.rank_activations import micro_batch
from tfcalc.count.training.rank_memory import (
    RankMemory,
    fp32_master_shard,
    layout_activations,
    optimizer_element_bytes,
    weight_element_bytes,
)
from tfcalc.count.training.shard import fsdp_shard, module_tensors, total_blocks, units
from tfcalc.count.training.sharding import grad_element_bytes
from tfcalc.count.training.steptime import Hardware, StepTime, collective_seconds
from tfcalc.errors import InputError
from tfcalc.workload import Layout


def check_lora_layout(layout: Layout, spec: Optional[lora.LoraSpec] = None) -> None:
    L = layout
    if L.tp > 1 or L.pp > 1 or L.cp > 1 or L.ep > 1 or L.hsdp is not None:
        raise InputError("plan --lora-rank is modelled for data parallelism, ZeRO 0-3 (--tp, --pp, --cp, --ep 1; "
                         "no --hsdp)")
    if L.offload_optimizer or L.offload_activations or L.compute_dtype or L.zero_engine != "flat" or L.dropout:
        raise InputError("plan --lora-rank is modelled without --offload, --compute-dtype, --zero-engine or --dropout")
    if L.recompute != "none" or L.attention != "flash":
        raise InputError("plan --lora-rank is modelled for --attention flash without --recompute")
    if getattr(L, "optimizer", "adam") != "adam":  # --optimizer muon: its per-matrix state is not priced here
        raise InputError("plan --lora-rank is priced with Adam: drop --optimizer or --lora-rank")
    if spec is not None and spec.base_dtype and L.zero == 3:
        raise InputError("plan --base-dtype nf4 is modelled for ZeRO 0-2 (FSDP's sharding of NF4 storage is not)")


def adapter_tensors(cfg: ModelConfig, spec: lora.LoraSpec) -> list[tuple[int, int]]:
    """(rows, columns) of one block's adapter tensors, A (r × d_in) and B (d_out × r) of each target."""
    return [shape for _, d_in, d_out, _ in lora.adapted(cfg, spec) for shape in ((spec.rank, d_in), (d_out, spec.rank))]


def adapter_shards(cfg: ModelConfig, layout: Layout, spec: lora.LoraSpec) -> int:
    """ZeRO-3: the adapters' elements one rank stores, every block (step 1)."""
    blocks = total_blocks(cfg)
    return blocks * sum(fsdp_shard(shape, layout.data_ranks) for shape in adapter_tensors(cfg, spec))


def lora_memory(cfg: ModelConfig, layout: Layout, full: RankMemory, spec: lora.LoraSpec) -> RankMemory:
    """Step 1, from the full fine-tuning rank's memory ``full`` (its activations, ZeRO-3's shards) of the layout."""
    A, psi, N = lora.trainable_params(cfg, spec), full.params, layout.data_ranks
    ew, eg, eo = weight_element_bytes(layout.dtype), grad_element_bytes(layout), optimizer_element_bytes(layout.dtype)
    w = micro_batch(layout)
    acts = layout_activations(cfg, layout)
    delta = lora.activation_delta(cfg, acts.per_layer, acts.head, w.batch * w.seq, activation_element_bytes(w.dtype),
                                  spec)
    activations = full.activations + sum(delta.values())
    if layout.zero == 3:
        base, mine = full.grads // eg, adapter_shards(cfg, layout, spec)  # the base's shards: what it had gradients of
        ws = 0 if fp32_master_shard(layout) else ew  # the adapters' fp32 shard is their master (rank_memory, 4)
        return replace(full, weights=ew * base + ws * mine, grads=eg * mine, optimizer=eo * mine,
                       activations=activations, gathered=_gathered(cfg, layout, spec, psi + A))
    shard, base = -(-A // N), ew * psi
    if spec.base_dtype == "nf4":  # step 5
        base = qlora.base_bytes(lora.linears(cfg), psi, ew)
        activations += qlora.dequantized_bytes(lora.linears(cfg), ew)
    return replace(full, weights=base + ew * A, grads=eg * (A if layout.zero < 2 else shard),
                   optimizer=eo * (A if layout.zero == 0 else shard), activations=activations, gathered=0)


def _gathered(cfg: ModelConfig, layout: Layout, spec: lora.LoraSpec, params: int) -> int:
    """ZeRO-3's unsharded weights (rank_memory.gathered_bytes): 2 × the largest unit, a block with its adapters or
    the root; without resharding, all of them."""
    ew = weight_element_bytes(layout.dtype)
    if not layout.reshard_after_forward:
        return ew * params
    adapters = sum(rows * cols for rows, cols in adapter_tensors(cfg, spec))
    block = max(sum(t.numel * t.copies for t in tensors) for tensors, _ in units(cfg)) + adapters
    root = sum(t.numel for t in module_tensors(cfg) if not t.per_block)
    return 2 * ew * max(block, root)


def lora_collectives(cfg: ModelConfig, layout: Layout, psi: int, spec: lora.LoraSpec) -> list:
    """Step 2 (``psi``: the base's parameters, Ψ)."""
    if layout.zero != 3:
        return dp_collectives(cfg, layout, 0, lora.trainable_params(cfg, spec))
    m, N, blocks = layout.micro_batches, layout.data_ranks, total_blocks(cfg)
    ew, eg = weight_element_bytes(layout.dtype), grad_element_bytes(layout)
    mine, again = adapter_shards(cfg, layout, spec), 2 if layout.reshard_after_forward else 1
    out = []
    for c in dp_collectives(cfg, layout, 0, psi):  # the frozen weights' gathers, the adapters' shards beside them
        if c.op == "all_gather":
            out.append(replace(c, payload_bytes=c.payload_bytes + N * m * again * ew * mine))
        elif c.op == "reduce_scatter":
            last = edge_shares(blocks, mine, 0, m, layout.reshard_after_forward)[1]
            out.append(replace(c, payload_bytes=eg * N * m * mine, calls=m * blocks, edge_share=last))
    return out


def lora_step(cfg: ModelConfig, layout: Layout, step: StepTime, spec: lora.LoraSpec, hw: Hardware,
              collectives) -> StepTime:
    """Step 3 on the full fine-tuning step of the layout (its ``collectives`` already LoRA's): the matmuls scaled,
    the adapters' seconds added, on one GPU and pipeline stage (pp = 1: no bubble stretches them)."""
    bandwidth, peak_flops_per_s = hw.bandwidth_bytes_per_s * hw.perf.bandwidth_efficiency, hw.peak_flops_per_s
    m, T = layout.micro_batches, layout.micro_batch * layout.seq
    flops = lora.training_flops(cfg, matmul_entries(cfg, layout.micro_batch, layout.seq), T, spec)
    base = (flops.base_forward + flops.base_backward) / flops.full_training
    e = activation_element_bytes(layout.dtype)
    adapters = m * sum(3 * e * T * (d_in + d_out) * n for _, d_in, d_out, n in lora.adapted(cfg, spec)) / bandwidth
    saved = step.matmul_s * (1 - base) - adapters
    if spec.base_dtype == "nf4":  # step 5: two dequantizations of every block linear a micro-batch
        saved -= m * 2 * sum((qlora.nf4_bytes(n) + e * n) * k for n, k in lora.linears(cfg)) / bandwidth
    model, compute = flops.total * m * layout.dp, step.compute_s - saved
    physics, exposed = step.physics_s - saved, dict(step.exposed_s)
    if layout.zero == 3 and "dp" in exposed:  # the gathers' window is the step's compute (steptime, step 4)
        last = edge_s(collectives, lambda c: collective_seconds(c, layout, hw))
        exposed["dp"] = max(0.0, step.comm_s["dp"] - last - compute) + last
        physics += exposed["dp"] - step.exposed_s["dp"]
    overlap = physics if step.basis != "mfu" else step.overlap_s * model / step.model_flops
    return replace(step, model_flops=model, executed_flops=model, compute_s=compute, exposed_s=exposed,
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
