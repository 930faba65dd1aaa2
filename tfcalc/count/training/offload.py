"""Offload to host memory (``--offload optimizer|activations``): what leaves the GPU, the PCIe traffic of a
step and its time. Pure arithmetic.

1. optimizer (ZeRO-Offload, Ren et al. 2021, "ZeRO-Offload: Democratizing Billion-Scale Model Training",
   sec. 4.1-4.2; DeepSpeed's ``offload_optimizer: {device: cpu}``): the fp32 master weights and Adam
   moments of the rank's ZeRO shard live in host memory and the Adam step runs on the CPU. Per step the
   rank copies its gradient shard to the host (in --grad-dtype, once, after the last micro-batch) and the
   host keeps it as fp32 (4 bytes an element, what CPU-Adam reads); the updated weights of the shard come
   back (in --dtype). On the GPU the optimizer states are gone; weights and gradients stay.
2. activations (Megatron-LM's --cpu-offloading, torchtitan/PyTorch's CPU offload of saved tensors):
   every block's saved activations are copied to the host as the forward pass leaves the block and copied
   back before its backward; the GPU keeps two blocks' worth (the block running and the one in transfer,
   double buffering), the host the rest, the other micro-batches in flight wholly: 1F1B's min(p − i, m) on
   rank i, the interleaved schedule's per chunk (its warm-up holds more: tfcalc.count.perf.pipeline).
3. Time: bytes over the GPU's host link, PCIe x16 per direction (H100/H200/B200: Gen5, 64 GB/s, "128
   GB/s" bidirectional on the NVIDIA datasheets; A100 and the others: Gen4, 32 GB/s), at the PCIe
   efficiency of the performance model (tfcalc.count.perf.hardware, 0.8). The optimizer's copies are not
   overlapped (the step waits for the last gradients, the CPU step and the weights; the CPU's own Adam
   time is not counted -- an unknown of the host, stated). Activation copies run on their own stream,
   overlapped: the forward's copies out behind the forward's compute (a third of the step's), the
   backward's copies in behind the backward's (two thirds); only what exceeds that is exposed.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from tfcalc import devices
from tfcalc.count.model.activations import Activations
from tfcalc.count.perf.pipeline import chunk_micro_batches
from tfcalc.count.training.rank_activations import layer_bytes
from tfcalc.count.training.shard import stage_ranges
from tfcalc.count.training.steptime import StepTime
from tfcalc.workload import Layout

FP32 = 4
GEN5 = 64e9  # PCIe Gen5 x16, per direction
GEN4 = 32e9
_GEN5_KEYS = ("h100", "h200", "b200", "gh200", "mi300x")  # MI300X: PCIe Gen5 x16 host interface (AMD datasheet)


def host_link_bytes_per_s(spec: devices.DeviceSpec) -> float:
    """The GPU's host link, one direction (step 3)."""
    return GEN5 if spec.key.startswith(_GEN5_KEYS) else GEN4


@dataclass(frozen=True)
class Offload:
    """What a rank offloads in one step."""

    host_bytes: int  # held in host memory
    optimizer_saved: int  # device bytes no longer held: the optimizer states
    activations_saved: int  # and the offloaded activations
    optimizer_pcie_bytes: int  # gradients down and weights up, per step
    activation_pcie_bytes: int  # saved activations down and back, per step


def _stored_blocks(acts: Activations, layout: Layout, stage: int) -> tuple[int, int, int]:
    """(the stage's blocks' stored bytes for one micro-batch, the largest block's, the stored bytes of every
    micro-batch in flight at the peak): each chunk's blocks times the micro-batches it holds -- 1F1B's
    min(p − i, m) for its one chunk, the interleaved schedule's count per chunk (tfcalc.count.perf.pipeline.
    chunk_micro_batches, the counts of PyTorch's ScheduleInterleaved1F1B)."""
    ranges = stage_ranges(acts.n_encoder_layer + acts.n_layer, layout.pp, stage, layout.virtual_stages,
                          layout.stage_split)
    per_chunk, largest = [], 0
    for r in ranges:
        each = [(n, layer_bytes(acts, layout, terms, layer_input=x)) for terms, n, x in acts.kinds_in(r.start, r.stop)]
        per_chunk.append(sum(n * b for n, b in each))
        largest = max([largest] + [b for _, b in each])
    held = sum(c * b for c, b in zip(chunk_micro_batches(layout, stage), per_chunk, strict=True))
    return sum(per_chunk), largest, held


def offload(layout: Layout, stage: int, acts: Activations, optimizer_bytes: int, optimizer_elements: int,
            weight_bytes: int, grad_bytes: int) -> Offload:
    """Steps 1 and 2 for one rank of the stage: ``optimizer_elements`` the parameters of its ZeRO shard,
    ``optimizer_bytes`` their states, ``acts`` the micro-batch's activation terms, ``weight_bytes`` and
    ``grad_bytes`` per element."""
    host = opt_saved = act_saved = opt_pcie = act_pcie = 0
    if layout.offload_optimizer:
        host += optimizer_bytes + FP32 * optimizer_elements
        opt_saved = optimizer_bytes
        opt_pcie = optimizer_elements * (grad_bytes + weight_bytes)
    if layout.offload_activations:
        blocks, largest, held = _stored_blocks(acts, layout, stage)
        act_saved = held - min(held, 2 * largest)  # the running micro-batch keeps 2
        host += act_saved
        act_pcie = 2 * layout.micro_batches * blocks
    return Offload(host, opt_saved, act_saved, opt_pcie, act_pcie)


def pcie_seconds(off: Offload, link_bytes_per_s: float, efficiency: float, compute_s: float) -> tuple[float, float]:
    """(PCIe seconds of the step, of them exposed) (step 3)."""
    rate = link_bytes_per_s * efficiency
    opt = off.optimizer_pcie_bytes / rate
    half = off.activation_pcie_bytes / 2 / rate  # out in the forward pass, back in the backward
    exposed = opt + max(0.0, half - compute_s / 3) + max(0.0, half - 2 * compute_s / 3)
    return opt + 2 * half, exposed


def with_pcie(step: StepTime, pcie_s: float, exposed_s: float, peak_flops_per_s: float, gpus: int) -> StepTime:
    """The step time with the offload's PCIe time added (``pcie`` in comm_s and exposed_s): all of it
    without overlap, the exposed part in the overlapped (physics) step; a step stated by --mfu stays."""
    physics = step.physics_s + exposed_s
    overlap = step.overlap_s if step.basis == "mfu" else physics
    return replace(step, comm_s={**step.comm_s, "pcie": pcie_s}, exposed_s={**step.exposed_s, "pcie": exposed_s},
                   no_overlap_s=step.no_overlap_s + pcie_s, physics_s=physics, overlap_s=overlap,
                   mfu=step.model_flops / (overlap * peak_flops_per_s * gpus))
