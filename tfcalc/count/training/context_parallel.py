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
5. The ring's own work beside the block kernels (issue 31), as PyTorch's ring attention runs it
   (torch/distributed/tensor/experimental/_context_parallel/_attention.py: _templated_ring_attention, its
   backward and _SDPAMerger; torchtitan's context_parallel), per self-attention layer and micro-batch on one
   rank, N_q the rank's attention outputs (its s/C positions × heads × d_head / tp), N_kv its K and V elements:
   - forward: each of the C steps runs its own attention kernel on one block pair; its output and log-sum-exp
     are merged into fp32 accumulators (the first step converts, ``out.to(float32)``: read 2, write 4 bytes an
     element; each later step converts its block likewise and runs out − σ(lse_b − lse)·(out − out_b): three
     passes over fp32, 12 + 8 + 12 bytes, and the log-sum-exp's five small ones: 38 bytes an element, 9
     kernels); at the end the output goes back to 16 bits (read 4, write 2). The slowest rank paces the
     ring: under the load balancing (step 1) rank r's later steps merge whole (its r earlier sources) or
     "partial" (half the rows, then a cat back: 27 bytes an element of the whole), so the last rank merges
     every step whole. Bytes: N_q · (6 + 6 + 38·(C − 1)); kernels: (C − 1) · (9 + the block's attention).
     Measured on _SDPAMerger itself by tests/count/test_ring_costs.py (bytes each aten op reads and writes).
   - backward: each of the C steps runs the attention's backward kernel on its block pair and adds its dQ,
     dK and dV (16 bits) into fp32 accumulators (read 4 + 2, write 4: 10 bytes an element) and concatenates
     dK and dV into the buffer the ring passes on (read 4, write 4); at the end converts them back (6):
     N_q·(10·C + 6) + N_kv·(18·C + 6) bytes; kernels 4·C and C − 1 extra attention kernels. (The gradients'
     buffer travels in fp32, twice step 3's 16-bit bytes: not counted there.)
   Full recompute runs the forward's again. These are memory-bound kernels at the achievable bandwidth
   (tfcalc.count.training.micro_batch_time's non-matmul time); the K/V passes themselves are step 3's.
6. Rank order: tp, cp, dp, pp (Megatron-Core's default order "tp-cp-ep-dp-pp"): a CP group sits inside
   a node when tp × cp ≤ GPUs per node. GPUs = tp · cp · pp · dp.
"""

from __future__ import annotations

from tfcalc.config import ModelConfig
from tfcalc.count.model.dtypes import activation_element_bytes
from tfcalc.count.training.shard import stage_kinds
from tfcalc.workload import Layout


def kv_elements(cfg: ModelConfig, layout: Layout) -> int:
    """N_kv of step 5 over every block of the model: K and V elements of the rank's positions (a micro-batch)."""
    tokens = layout.micro_batch * (layout.seq // layout.cp)
    return sum(n * tokens * (kv_width(b) // layout.tp) for _, b, n in cfg.architecture.kinds())


def kv_width(block) -> int:
    """K and V elements per position of a block's self-attention (a latent attention's expanded heads): what
    its mixer's expanded state grows by per token (tfcalc.architecture.mixer)."""
    return sum(t.per_token for t in block.mixer.expanded_state())


MERGE_BYTES = 38  # a later step's whole merge, bytes per output element (step 5)
MERGE_KERNELS = 9  # ... its kernels: the conversion, three passes, the log-sum-exp's five
CONVERT = 6  # 16 bits to fp32 or back: read 2, write 4 (or read 4, write 2)
BACKWARD_KERNELS = 4  # dQ, dK, dV added into fp32 and dK, dV concatenated, each backward step (step 5)


def ring_merges(entries, layout: Layout, kv_elements: int) -> tuple[float, float, int, int]:
    """Step 5 over the whole model for one micro-batch on one rank: (forward bytes, backward bytes, forward
    kernels, backward kernels); ``entries`` the model's matmul entries (its attention's ·V products give N_q),
    ``kv_elements`` N_kv summed over the layers (K and V of every position of the rank)."""
    C = layout.cp
    if C == 1:
        return 0.0, 0.0, 0, 0
    n_q = layers = 0
    for e in entries:
        if e.mixing and e.component.endswith("av"):
            m, _, n = e.shape
            n_q += -(-m // C) * n * max(1, e.count // layout.tp) * e.copies
            layers += e.copies
    forward = n_q * (2 * CONVERT + MERGE_BYTES * (C - 1))
    backward = n_q * (10 * C + CONVERT) + kv_elements * (18 * C + CONVERT)
    return forward, backward, layers * (C - 1) * (MERGE_KERNELS + 1), layers * (BACKWARD_KERNELS * C + C - 1)


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
