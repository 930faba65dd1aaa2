"""`plan`'s options for expert parallelism, FP8 matmuls, FSDP variants, an fp32 gradient buffer and
offload (issue 20), defined once; their arithmetic: tfcalc.count.training.sharding, tfcalc.count.training.fp8,
tfcalc.count.training.offload, tfcalc.count.training.experts_parallel."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from tfcalc.cli.options import described
from tfcalc.count.training.sharding import OFFLOAD
from tfcalc.name_lists import name_list

EP = Annotated[Optional[int], described(
    "--ep", help="Expert-parallel degree: each mixture's routed experts split over E ranks of the data-parallel group "
    "(E divides dp and the experts), or folded over tp × cp × dp (--etp), tokens exchanged by all-to-all "
    "[default: 1; a search of a MoE model tries the largest E within a node].", metavar="E")]
ETP = Annotated[Optional[int], described(
    "--etp", help="Expert tensor-parallel degree (Megatron-Core's expert_tensor_parallel_size; MoE Parallel "
    "Folding, arXiv 2504.14960): the experts get a grid of their own, ETP × EP folded over the attention's "
    "tp × cp × dp ranks (EP·ETP divides them; each expert's hidden width split ETP ways; its gradients reduced over "
    "the tp·cp·dp / (EP·ETP) ranks that hold it), so EP may span TP ranks (EP 32 = TP 2 × DP 16). Needs --sp "
    "when tp > 1: each rank dispatches its own sequence shard [default: the legacy grid (EP within DP, experts "
    "whole on every TP rank), or 1 when --sp is given with experts, or when dp alone cannot hold E (E does not "
    "divide dp, or --cp) but tp × cp × dp can].", metavar="T")]
EPDispatch = Annotated[str, typer.Option(
    "--ep-dispatch", help="How expert parallelism's tokens travel: alltoall (one copy per token and expert, straight "
    "to its rank: Megatron's alltoall dispatcher, torchtitan), deepep (one copy per token and remote node over the "
    "network, forwarded over NVLink once per GPU: DeepSeek-V3's DeepEP; node-limited routing from the model's "
    "router groups), or auto: deepep where the EP group spans nodes, alltoall inside one.",
    metavar="auto|alltoall|deepep")]
ExpertImbalance = Annotated[Optional[str], described(
    "--expert-imbalance", help="With --ep: the fullest EP rank's routed tokens over the mean, which every rank's "
    "expert GEMMs wait on: uniform (the router's balancing loss leaves the routing's noise alone, the expected "
    "maximum over the EP ranks), eplb or none (TensorRT-LLM's measured spreads by rank, with and without "
    "DeepSeek's EPLB), or a fixed factor F (1.0 = balanced) [default: uniform].", metavar="uniform|eplb|none|F")]
ComputeDType = Annotated[Optional[str], described(
    "--compute-dtype", help="fp8: the blocks' linears run FP8 GEMMs (Transformer Engine's delayed scaling unless "
    "--fp8-recipe; attention and the LM head stay in --dtype, as do weights and master weights); mxfp8 and nvfp4 "
    "(where the device has the rate: b200) are fp8 with --fp8-recipe mxfp8 or nvfp4 [default: --dtype; a search "
    "never picks FP8 on its own: numerics are the user's choice].",
    metavar="fp8|mxfp8|nvfp4")]
FP8Recipe = Annotated[str, typer.Option(
    "--fp8-recipe", help="The FP8 recipe by name, with --compute-dtype fp8: delayed (Transformer Engine's delayed "
    "scaling), tensorwise, rowwise or rowwise_with_gw_hp (torchao.float8's dynamic recipes, as torchtitan runs "
    "them: their amax and cast kernels, rowwise_with_gw_hp's weight gradient in 16 bits), mxfp8 (a scale per 32 "
    "elements, where the device has the MX rate).", metavar="RECIPE")]
FP8AllGather = Annotated[bool, typer.Option(
    "--fp8-all-gather", help="ZeRO-3 with --compute-dtype fp8 --fp8-recipe tensorwise: all-gather the FP8 linears' "
    "weights cast to FP8 (torchao's enable_fsdp_float8_all_gather, torchtitan's --float8.enable_fsdp_float8_all_gather "
    "with precompute_float8_dynamic_scale_for_fsdp): half the gathered bytes, one all-reduce of the weights' amaxes "
    "a step, the weight's cast run on the shard.", metavar="")]
NoReshard = Annotated[bool, typer.Option(
    "--no-reshard-after-forward", help="ZeRO-3: keep each unit's gathered weights from its forward to its backward "
    "(FSDP2 reshard_after_forward=False): one all-gather per block and micro-batch, not two; more memory [a search "
    "tries it on the ZeRO-3 layouts that fit unless --hsdp, this flag or --zero is given].",
    metavar="")]
HSDP = Annotated[Optional[int], described(
    "--hsdp", help="Hybrid sharding (ZeRO-3): shard within groups of R data-parallel ranks, replicate across the "
    "dp / R groups (reduce-scatter and all-gather within, all-reduce across) [a search tries R = the dp ranks of one "
    "node on the ZeRO-3 layouts that fit].", metavar="R")]
GradDType = Annotated[Optional[str], described(
    "--grad-dtype", help="fp32: gradients accumulated and reduced in an fp32 buffer beside bf16 weights (Megatron's "
    "main_grad) [default: --dtype].", metavar="fp32")]
Offload = Annotated[Optional[list[str]], described(
    "--offload", help="Move to host memory over PCIe: optimizer (fp32 master and Adam states, stepped on the CPU), "
    "activations (saved activations, copied back for the backward pass), both (repeat the flag, or "
    "optimizer,activations; any case) or none [default: none; a search tries each only where nothing fits without "
    "offload, and says so].", metavar="optimizer|activations")]


def offload_parts(values: Optional[list[str]]) -> tuple[str, ...]:
    """--offload's values (repeated or comma-separated) by the rule of tfcalc.name_lists, as --overlap's."""
    return name_list("--offload", values, OFFLOAD)


def lower(value: Optional[str]) -> Optional[str]:
    """A dtype name as given, lower-cased (tfcalc.count.training.sharding checks it)."""
    return None if value is None else value.strip().lower()
