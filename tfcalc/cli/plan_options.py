"""`tfcalc plan`'s options for the pipeline schedule, overlap and context parallelism (issue 20), defined
once here beside tfcalc.cli.options: names fixed by the issue so scripts can rely on them."""

from __future__ import annotations

import enum
from typing import Annotated, Optional

import typer

from tfcalc.count.perf.pipeline import OVERLAPS, SCHEDULES
from tfcalc.count.training.layout import KERNEL_MODES
from tfcalc.count.training.shard import SPLIT_COUNTS
from tfcalc.name_lists import name_list

ScheduleName = enum.Enum("ScheduleName", {name.replace("-", "_"): name for name in SCHEDULES}, type=str)

Schedule = Annotated[Optional[ScheduleName], typer.Option(
    "--schedule", help="Pipeline schedule: 1f1b (PipeDream-Flush), interleaved (V virtual stages a rank, bubble / V, "
    "V × the sends; Narayanan et al. 2021), zero-bubble (ZB-H1, Qi et al. 2024: bubble (p−1)(F+B−W), 1F1B's "
    "memory), dualpipe (DeepSeek-V3 report, Table 2: bubble (p/2−1)(F&B+B−3W), 2× parameters a rank, p+1 "
    "micro-batches' activations; even pp, an even count of micro-batches ≥ 2 × pp) or dualpipev (DualPipe cut in "
    "half, PyTorch's ScheduleDualPipeV: 2 × pp stages in a V, one copy of the parameters, bubble "
    "(p−1)/2·(F+2B−W), 2p+1 half-stage micro-batches' activations; micro-batches ≥ 2 × pp; what --measure runs "
    "for both) [default: 1f1b; a search also tries interleaved].",
    show_default=False, metavar="1f1b|interleaved|zero-bubble|dualpipe|dualpipev")]
VirtualStages = Annotated[Optional[int], typer.Option(
    "--virtual-stages", help="Interleaved schedule: model chunks per pipeline rank (blocks divisible by pp × V, "
    "micro-batches a multiple of pp) [default: 1; 2 with --schedule interleaved].", show_default=False,
    metavar="V")]
Overlap = Annotated[Optional[list[str]], typer.Option(
    "--overlap", help="Communication hidden behind compute: tp (TP all-gathers/reduce-scatters under the GEMMs, as "
    "Megatron's --tp-comm-overlap; needs --sp), pp (pipeline sends but the fill's and drain's), ep (expert "
    "parallelism's all-to-alls under another micro-batch's compute, as DualPipe or Megatron's "
    "--overlap-moe-expert-parallel-comm, at the cost of the SMs they hold; needs --ep), cp (the context-parallel "
    "ring's K/V passes behind attention even under --kernels compile, where torch.compile traces the ring and "
    "waits for each at once; without compile they are always hidden; needs --cp), any of them (tp,pp,ep,cp) or "
    "none [default: none; repeat the flag or separate by commas, any case].", show_default=False,
    metavar="tp,pp,ep,cp")]
PPSplitCounts = Annotated[Optional[list[str]], typer.Option(
    "--pp-split-counts", help="Count the embedding and/or the LM head (with the loss) as one block each when the "
    "blocks are divided over the pp × V pipeline chunks (Megatron-LM's --account-for-embedding/loss-in-pipeline-"
    "split; Llama 3 405B: 126 blocks + 2 = 16 stages × V 8): embedding, head, both (embedding,head) or none "
    "[default: none; a search counts them only where that makes interleaving possible].", show_default=False,
    metavar="embedding,head")]
PPLayers = Annotated[Optional[str], typer.Option(
    "--pp-layers", help="Each pipeline stage's blocks, comma-separated, one count per stage summing to the model's "
    "blocks: uneven stages, as Megatron-LM's --decoder-first/last-pipeline-num-layers or torchtitan's manual split "
    "(DeepSeek-V3's 61 layers over 8 stages: 7,8,8,8,8,8,8,6). Needs --pp; 1F1B or zero-bubble [default: the "
    "blocks divided evenly, the first stages one more].", show_default=False, metavar="a,b,...")]
CP = Annotated[Optional[int], typer.Option(
    "--cp", help="Context-parallel degree: the sequence split over C ranks (ring attention, Megatron-Core CP); GPUs "
    "= tp · cp · pp · dp, rank order tp, cp, dp, pp [default: 1; a search tries it for long sequences].",
    show_default=False, metavar="C")]
KernelMode = enum.Enum("KernelMode", {name: name for name in KERNEL_MODES}, type=str)
Kernels = Annotated[Optional[KernelMode], typer.Option(
    "--kernels", help="The non-matmul kernels the step runs: eager (PyTorch op by op, each norm, RoPE, activation "
    "and add its own kernels, fp32 where the module upcasts: what runs without torch.compile, as torchtitan's "
    "published runs), fused (one read and one write per element: Megatron-LM/Transformer Engine's fused kernels) or "
    "compile (torch.compile of each block, as torchtitan applies it: the blocks' norms, activations, RoPE and adds "
    "fused, the embedding, final norm and loss left eager) [default: eager; fused for a model with a Mamba, gated "
    "DeltaNet or lightning-attention mixer, whose published training runs its own fused kernels].",
    show_default=False)]
RopeKind = Annotated[str, typer.Option(
    "--rope", help="How the blocks rotate Q and K, priced under --kernels compile: complex (torchtitan's "
    "apply_rotary_emb, view_as_complex: Inductor generates no code for complex tensors, so a cast to fp32, an aten "
    "complex product and a cast back, each way) or real (rotate-half, fused by Inductor).", metavar="KIND")]


def split_count_names(values: Optional[list[str]]) -> Optional[tuple[str, ...]]:
    """--pp-split-counts' values by the rule of tfcalc.name_lists; None when the flag is not given."""
    return None if values is None else name_list("--pp-split-counts", values, SPLIT_COUNTS)


def overlap_names(values: Optional[list[str]]) -> tuple[str, ...]:
    """--overlap's values (repeated or comma-separated) by the rule of tfcalc.name_lists, as --offload's."""
    return name_list("--overlap", values, OVERLAPS)
