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
     buffer travels in fp32: step 2's bytes under torchtitan's ring, step 7.)
   Full recompute runs the forward's again. These are memory-bound kernels at the achievable bandwidth
   (tfcalc.count.training.micro_batch_time's non-matmul time); the K/V passes themselves are step 3's.
6. Rank order: tp, cp, dp, pp (Megatron-Core's default order "tp-cp-ep-dp-pp"): a CP group sits inside
   a node when tp × cp ≤ GPUs per node. GPUs = tp · cp · pp · dp.
7. torchtitan's ring (``--kernels compile``, torchtitan's torch.compile of each block; issue 31), as its code at the
   commit of its H100 benchmarks (pytorch/torchtitan 9dec370, December 2024) and PyTorch's ring run it:
   - the heads: torchtitan's Attention repeats K and V to the query heads before SDPA (models/llama/model.py,
     ``repeat_kv``), so the ring carries and accumulates n_head K and V heads, not GQA's n_kv_head: steps 2 and
     5's K/V elements × n_head / n_kv_head (Llama 3 8B: × 4);
   - the gradients: PyTorch's backward accumulates dK and dV in fp32 (_ContextParallelOptions.convert_to_f32,
     True) and passes that fp32 buffer at each of its C steps (its dK/dV rotater exchanges after every step and
     the owner takes the last: _templated_ring_attention_backward): step 2's gradient pass is C sends of 4-byte
     elements, not C − 1 of 16-bit ones. K and V travel C − 1 times each pass (the default rotate method,
     all-gather, moves the same bytes; torchtitan's --experimental.context_parallel_rotate_method "allgather");
   - the overlap: apply_compile wraps each block in torch.compile(fullgraph=True) (parallelize_llama.py), so the
     ring, called inside the block, is traced; a traced functional collective waits where it is issued
     (torch/distributed/_functional_collectives.py, ``_maybe_wrap_tensor``: ``wait_tensor`` when tracing) and
     Inductor keeps that order (torch._inductor.config.reorder_for_compute_comm_overlap, False by default, and
     in torch 2.13 aten_distributed_optimizations.enable_overlap_scheduling, False too). So
     the all-gather completes before the first block's kernel and each fp32 gradient pass before the next step:
     step 3's overlap does not happen, the ring's transfers are on the critical path (``--overlap cp`` states
     them hidden, e.g. under Inductor's reordering). Measured by tests/count/test_ring_costs.py on gloo ranks:
     the bytes each rank's collectives send per pass, the query-key pairs of each rank's kernels, and the traced
     ring's all-gather followed at once by its wait.
   - the merges: traced with the block, Inductor fuses each step's merge into one pass over its distinct tensors
     (read the fp32 running output and the block's 16-bit one, write fp32: 10 bytes an element, 2 kernels with
     the log-sum-exp's) and each backward step's additions into the buffers they fill (dQ, dK, dV: read 4 + 2,
     write 4: 10 bytes an element, the concatenation written in place; 2 kernels): step 5's bytes with 10 for
     its 38 and 18. The conversions at the ends stay.
   Load balancing (step 1) holds there: _ContextParallelOptions.enable_load_balance is True by default (then and
   now), and each rank's kernels cover s²/(2C) pairs (measured the same way).
"""

from __future__ import annotations

from tfcalc.config import ModelConfig
from tfcalc.count.model.dtypes import activation_element_bytes
from tfcalc.count.training.shard import stage_kinds
from tfcalc.workload import Layout


def kv_elements(cfg: ModelConfig, layout: Layout) -> int:
    """N_kv of step 5 over every block of the model: K and V elements of the rank's positions (a micro-batch)."""
    tokens = layout.micro_batch * (layout.seq // layout.cp)
    return sum(n * tokens * (ring_width(b, layout) // layout.tp) for _, b, n in cfg.architecture.kinds())


def torchtitan_ring(layout: Layout) -> bool:
    """Step 7: the ring as torchtitan runs it -- its blocks under torch.compile (``--kernels compile``)."""
    return layout.kernels == "compile"


def ring_exposed(layout: Layout) -> bool:
    """Step 7: the ring's transfers on the critical path (traced by torch.compile), unless --overlap cp."""
    return torchtitan_ring(layout) and "cp" not in layout.overlap


def ring_width(block, layout: Layout) -> int:
    """K and V elements per position as the ring carries them: kv_width, or -- where torchtitan's Attention repeats
    K and V to the query heads before SDPA (step 7) -- the K and V operands of the mixer's own attention matmuls,
    per key at the query heads (Q·Kᵀ's copies × its head width, attention·V's copies × its value width): GQA's
    kv_width × n_head / n_kv_head, a latent attention's expanded heads unchanged."""
    if torchtitan_ring(layout):
        by_name = {mm.name: mm for mm in block.mixer.mixing(1, 1)}
        if "qk" in by_name and "av" in by_name:
            qk, av = by_name["qk"], by_name["av"]
            return qk.copies * qk.shape[1] + av.copies * av.shape[2]
    return kv_width(block)


def kv_width(block) -> int:
    """K and V elements per position of a block's self-attention (a latent attention's expanded heads): what
    its mixer's expanded state grows by per token (tfcalc.architecture.mixer)."""
    return sum(t.per_token for t in block.mixer.expanded_state())


MERGE_BYTES = 38  # a later step's whole merge, bytes per output element (step 5)
MERGE_KERNELS = 9  # ... its kernels: the conversion, three passes, the log-sum-exp's five
CONVERT = 6  # 16 bits to fp32 or back: read 2, write 4 (or read 4, write 2)
GRAD_BYTES = 4  # torch's ring accumulates and passes dK, dV in fp32 (step 7)
BACKWARD_KERNELS = 4  # dQ, dK, dV added into fp32 and dK, dV concatenated, each backward step (step 5)
KV_ADD_BYTES = 18  # ... dK, dV: added (read 4 + 2, write 4), then concatenated (read 4, write 4)
# compiled (step 7): one pass over each tensor's distinct inputs and outputs, the log-sum-exp's row beside it
FUSED_MERGE_BYTES = 10  # read the fp32 running output and the block's 16-bit one, write fp32
FUSED_MERGE_KERNELS = 2  # the output's update and the log-sum-exp's
FUSED_ADD_BYTES = 10  # an fp32 accumulator plus a 16-bit gradient (read 4 + 2, write 4), the cat written in place
FUSED_BACKWARD_KERNELS = 2  # dQ's addition, dK's and dV's into the buffer the ring passes


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
    if torchtitan_ring(layout):  # compiled with the block: each step's merge and additions fused (step 7)
        merge, merge_k, kv_add, bwd_k = FUSED_MERGE_BYTES, FUSED_MERGE_KERNELS, FUSED_ADD_BYTES, FUSED_BACKWARD_KERNELS
    else:
        merge, merge_k, kv_add, bwd_k = MERGE_BYTES, MERGE_KERNELS, KV_ADD_BYTES, BACKWARD_KERNELS
    forward = n_q * (2 * CONVERT + merge * (C - 1))
    backward = n_q * (FUSED_ADD_BYTES * C + CONVERT) + kv_elements * (kv_add * C + CONVERT)
    return forward, backward, layers * (C - 1) * (merge_k + 1), layers * (bwd_k * C + C - 1)


def kv_ring(cfg: ModelConfig, layout: Layout, stage: int) -> tuple[int, int]:
    """(bytes, sends) of step 2 on one rank of the stage in one step of m micro-batches; (0, 0) without CP."""
    C = layout.cp
    if C == 1:
        return 0, 0
    e = activation_element_bytes(layout.dtype)
    tokens = layout.micro_batch * (layout.seq // C)
    passes = 1 + (layout.recompute != "none") + 1  # forward (and its rerun), then K/V again backward
    grads, grad_bytes = (C, GRAD_BYTES) if torchtitan_ring(layout) else (C - 1, e)  # their gradients (step 7)
    kinds = stage_kinds(cfg, layout.pp, stage, layout.virtual_stages, layout.stage_split)
    per_mb = sum(n * tokens * (ring_width(b, layout) // layout.tp) for b, _, n in kinds)  # K/V elements
    layers = sum(n for _, _, n in kinds)
    m = layout.micro_batches
    return m * per_mb * (passes * (C - 1) * e + grads * grad_bytes), m * layers * (passes * (C - 1) + grads)
