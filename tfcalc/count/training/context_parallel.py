"""Context parallelism (``--cp C``): ring attention as Megatron-Core runs it (its context_parallel
package, docs/source/api-guide/context_parallel.rst; Transformer Engine's AttnFuncWithCPAndKVP2P) and as
torchtitan's context_parallel does. Pure arithmetic.

1. The sequence: each of the C ranks of a CP group holds s/C positions of every sequence -- cut into 2C
   chunks, rank r holding chunks r and 2C − 1 − r, so causal attention's work is even over the ranks
   (Megatron-Core's load balancing). So every per-token figure is divided by C: the linears' rows, the
   activations (each rank keeps its own positions' terms only), the non-matmul traffic, the TP and PP
   messages; and causal attention's query-key pairs: s²/(2C) per rank and head.
2. K and V: every query needs every earlier position's K and V. They are all-gathered in the forward
   pass and again in the backward pass (each rank keeps only its own chunk's, to save memory), and the
   K/V gradients are reduce-scattered, each as C − 1 ring steps of point-to-point sends ("all-gather and
   reduce-scatter are transformed to point-to-point communications in ring topology"). So per
   self-attention layer and micro-batch a rank sends its K/V chunk C − 1 times forward (again when
   recompute reruns attention: selective or full) and 2(C − 1) times backward (K/V, then their
   gradients). A K/V chunk: b · (s/C) · (K + V widths)/t · e bytes -- GQA's few KV heads make it small;
   latent attention passes the K and V heads its latent expands to.
3. Overlap: each ring step's transfer runs while attention computes on the block the rank already holds
   (Transformer Engine's implementation, which Megatron-Core calls): exposed only where the transfers
   outlast the attention kernel (tfcalc.count.perf.pipeline).
4. Weights are whole on every CP rank: their gradients are reduced, and ZeRO's states sharded, over the
   dp × cp ranks (Megatron-Core's data-parallel group "with context parallel"; ``Layout.data_ranks``).
5. Rank order: tp, cp, dp, pp (Megatron-Core's default order "tp-cp-ep-dp-pp"): a CP group sits inside
   a node when tp × cp ≤ GPUs per node. GPUs = tp · cp · pp · dp.
"""

from __future__ import annotations

from tfcalc.config import ModelConfig
from tfcalc.count.model.dtypes import activation_element_bytes
from tfcalc.count.training.shard import stage_kinds
from tfcalc.workload import Layout


def kv_width(block) -> int:
    """K and V elements per position of a block's self-attention (a latent attention's expanded heads): what
    its mixer's expanded state grows by per token (tfcalc.architecture.mixer)."""
    return sum(t.per_token for t in block.mixer.expanded_state())


def kv_ring(cfg: ModelConfig, layout: Layout, stage: int) -> tuple[int, int]:
    """(bytes, sends) of step 2 on one rank of the stage in one step of m micro-batches; (0, 0) without CP."""
    C = layout.cp
    if C == 1:
        return 0, 0
    e = activation_element_bytes(layout.dtype)
    tokens = layout.micro_batch * (layout.seq // C)
    passes = 1 + (layout.recompute != "none") + 2  # forward (and its rerun), then K/V and their gradients
    per_mb = sum(n * tokens * (kv_width(b) // layout.tp) * e
                 for b, _, n in stage_kinds(cfg, layout.pp, stage, layout.virtual_stages, layout.stage_split))
    layers = sum(n for _, _, n in stage_kinds(cfg, layout.pp, stage, layout.virtual_stages, layout.stage_split))
    m = layout.micro_batches
    return m * passes * (C - 1) * per_mb, m * passes * (C - 1) * layers
