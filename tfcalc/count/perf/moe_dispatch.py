"""A mixture of experts' work around its matmuls: the router's top-k and the token dispatch (permute and
unpermute), as memory-bound kernels. Pure arithmetic.

The expert GEMMs already run at their per-expert shape (tfcalc.count.training.micro_batch_time.tp_shape:
M = the routed rows / the rank's experts, one grouped GEMM of E_local problems, each at the tile, wave and
loop efficiency of tfcalc.count.perf.gemm for that M), and the softmax of the router logits and the
weighting of the experts' outputs are non-matmul entries (tfcalc.count.model.non_matmul). What runs
beside them, per MoE layer and micro-batch, on N tokens of the rank, k experts each, P = N·k pairs of
width d, a bytes per activation element, b bytes per router logit:

1. Top-k (torch.topk on the (N, E) logits: tfcalc.model.experts.MixtureOfExperts.route; Megatron-LM
   megatron/core/transformer/moe/moe_utils.py, topk_softmax_with_capacity; torchtitan's TokenChoiceTopKRouter):
   reads N·E·b, writes the k values (b) and int64 indices (8) per token: N·E·b + N·k·(b + 8), one kernel.
   Its backward scatters the k gradients into a zeroed (N, E): N·E·b written, N·k·(b + 8) read and N·k·b
   written, two kernels. b = 4 where the scores are taken in fp32 (softmax before top-k, DeepSeek's
   sigmoid), else a (the top k of the raw logits, Mixtral's).
2. Index work (tfcalc.model.experts.routed; Megatron's permute builds the same sorted_indices by a
   masked_select of the (E, N) routing map): the P expert ids sorted (a stable radix sort of int64 keys with
   an int64 permutation: CUB's onesweep, which torch.sort calls on CUDA (aten/src/ATen/native/cuda/
   Sort.cu -> cub DeviceRadixSort::SortPairs), reads and writes keys and values once per 8-bit digit:
   SORT_PASSES · 32 bytes per pair), then the sorted ids, the pairs' tokens (a division) and their routing
   weights gathered (3 ops of 24 (ids and index read, ids written), 16 and 8 + 2a (index read, weights
   read and written) bytes per pair), and the experts' ends by a search of the sorted ids
   (tfcalc.model.grouped.expert_ends: reads P·8): 56 + 2a bytes per pair beside the sort. Forward only;
   SORT_KERNELS + 4 kernels. (On the CPU torch.sort moves the keys in and the keys and permutation out
   once, 24 bytes per pair: the test measures the rest of this step exactly.)
3. Permute and unpermute (Megatron-LM moe_utils.permute / unpermute, not fused by default
   (moe_permute_fusion false); tfcalc.model.experts._dropless; torchtitan's MoE
   (torchtitan/models/moe.py): index_select of the routed rows (read and write P·d·a: 2a per pair element),
   the experts' outputs × their weights (2a), then a zeroed (N, d) output (N·d·a written) and a
   scatter_add / index_add of the P rows into it (read the row, read and write the output: 3a): 7a per
   pair element + a per token element forward. Backward: the output's gradient gathered back to the pairs
   (2a), the product's two gradients (grad · w: 2a; the weight's, grad · y summed over d: 2a), the input's
   gradient index_add-ed into a zeroed (N, d) (3a + a per token element): 9a + a, 5 kernels forward, ...
   Under kernels="eager" tfcalc.count.perf.eager (step 8) already charges the 7a / 9a: here only the zeroed
   outputs; under "fused" the weighting (2a, twice that back) is non_matmul's entry: here the other 5a / 5a
   and the zeroed outputs.
4. Expert parallelism with several experts per rank: the received rows arrive grouped by source rank and
   are sorted by local expert before the GEMMs and back after (Megatron-LM megatron/core/transformer/moe/
   token_dispatcher.py, MoEAlltoAllTokenDispatcher: sort_chunks_by_idxs in dispatch_postprocess and
   combine_preprocess): two more gathers of P rows, 2a each per pair element, and their backward the same.

5. Serving (kernels="serving": tfcalc.count.perf.inference, step 3b): vLLM's fused MoE (vllm/model_executor/
   layers/fused_moe/fused_moe.py) runs the top-k as one kernel (csrc/moe/topk_softmax_kernels.cu: step 1's
   bytes), sorts the pairs by expert in one counting-sort kernel (csrc/moe/moe_align_sum_kernels.cu,
   moe_align_block_size: the int32 ids read, the sorted pair ids written, 8 bytes per pair) and gathers each
   expert's rows inside its GEMM (no permute of its own); the weighted sum of the k outputs (moe_sum) is
   non_matmul's weighting. Forward only, 2 kernels a layer.

Worked example (tests/count/perf/test_moe_dispatch.py): Mixtral 8x7B (d 4096, E 8, k 2, top-k of the raw
bf16 logits), N = 4096 tokens, fused kernels, no EP. Top-k 4096·8·2 + 8192·10 = 147,456 B forward. Index
work 8192·(8·32 + 56 + 4) = 2,588,672 B. Dispatch 5·2·8192·4096 + 2·4096·4096 = 369,098,752 B
forward. 372 MB at an H100's 2.85 TB/s is 0.13 ms per layer forward; beside the layer's expert GEMMs
(2·3·8192·4096·14336 = 2.9 TFLOP, 3.6 ms at 792 TFLOP/s) it is a few per cent: the dispatch weighs when
d·f per expert is small against d (fine-grained experts) or when kernels are many.
"""

from __future__ import annotations

from dataclasses import dataclass

from tfcalc.architecture import MoE

F32 = 4
INT64 = 8
SORT_PASSES = 8  # 8-bit digits of a 64-bit key (step 2); a module constant the API may override
SORT_KERNELS = 3  # CUB onesweep: the histogram, the digit passes (one launch each counted as one), the scan
INDEX_PAIR_BYTES = 24 + 16 + 8 + 8  # step 2: the ids' gather, the division, the weights' index, the ends' search
PERMUTE = (7, 9)  # step 3, × a per pair element, forward / backward
PERMUTE_KERNELS = (5, 6)  # index_select, ×w, zeros, index_add (+ the weights' gather); back + the weight grad
FUSED_CHARGED = (2, 4)  # of PERMUTE: non_matmul's "weight and add the expert outputs" (elementwise: 2a, × 2 back)
EAGER_CHARGED = (7, 9)  # of PERMUTE: tfcalc.count.perf.eager, step 8
ALIGN_PAIR_BYTES = 8  # step 5: vLLM's moe_align_block_size, int32 ids in, sorted pair ids out
SORT_CHUNKS = 2  # step 4: × a per pair element, each way, per chunk sort (two per layer)


@dataclass(frozen=True)
class Dispatch:
    """One MoE layer's router top-k, index work and permutes on one rank: bytes and kernels each way."""

    forward_bytes: float
    backward_bytes: float
    forward_kernels: int
    backward_kernels: int

    def __add__(self, o: "Dispatch") -> "Dispatch":
        return Dispatch(self.forward_bytes + o.forward_bytes, self.backward_bytes + o.backward_bytes,
                        self.forward_kernels + o.forward_kernels, self.backward_kernels + o.backward_kernels)

    def scaled(self, n: float) -> "Dispatch":
        return Dispatch(self.forward_bytes * n, self.backward_bytes * n, round(self.forward_kernels * n),
                        round(self.backward_kernels * n))


def topk(tokens: int, n_expert: int, k: int, b: int) -> Dispatch:
    """Step 1: torch.topk over (N, E) scores of b bytes, and its backward."""
    return Dispatch(tokens * n_expert * b + tokens * k * (b + INT64),
                    tokens * n_expert * b + tokens * k * (2 * b + INT64), 1, 2)


def index_work(pairs: int, a: int) -> Dispatch:
    """Step 2: sort the P pairs by expert and gather their ids, tokens and weights (a bytes each); the
    experts' ends."""
    return Dispatch(pairs * (SORT_PASSES * 4 * INT64 + INDEX_PAIR_BYTES + 2 * a), 0.0, SORT_KERNELS + 4, 0)


def permute(tokens: int, pairs: int, d: int, a: int, kernels: str) -> Dispatch:
    """Step 3, less what the kernels mode already charges (tfcalc.count.perf.eager, step 8, under "eager";
    non_matmul's weighting under "fused")."""
    charged = EAGER_CHARGED if kernels == "eager" else FUSED_CHARGED
    fwd = (PERMUTE[0] - charged[0]) * pairs * d * a + tokens * d * a  # + the zeroed (N, d) output
    bwd = (PERMUTE[1] - charged[1]) * pairs * d * a + tokens * d * a
    if kernels == "eager":  # eager's step 8 counts 3 / 5 kernels: here the zero fills
        return Dispatch(fwd, bwd, 1, 1)
    return Dispatch(fwd, bwd, PERMUTE_KERNELS[0] - 1, PERMUTE_KERNELS[1] - 2)


def serving(tokens: int, moe: MoE, b: int) -> Dispatch:
    """Step 5: a serving step's top-k and counting sort, forward only."""
    t = topk(tokens, moe.n_expert, moe.top_k, b)
    return Dispatch(t.forward_bytes + tokens * moe.top_k * ALIGN_PAIR_BYTES, 0.0, 2, 0)


def sort_chunks(pairs: int, d: int, a: int) -> Dispatch:
    """Step 4: the received rows sorted by local expert and back, forward and backward."""
    return Dispatch(2 * SORT_CHUNKS * pairs * d * a, 2 * SORT_CHUNKS * pairs * d * a, 2, 2)


def layer(moe: MoE, tokens: int, a: int, kernels: str = "fused", ep: int = 1) -> Dispatch:
    """Steps 1-4 for one MoE layer on ``tokens`` tokens of the rank (a the activation bytes; ``kernels`` the
    training kernels mode, "eager" or "fused"), or step 5's under "serving"."""
    pairs = tokens * moe.top_k
    fp32_scores = not moe.renormalize or not moe.routing.is_default or moe.sigmoid_input
    if kernels == "serving":
        return serving(tokens, moe, F32 if fp32_scores else a)
    out = topk(tokens, moe.n_expert, moe.top_k, F32 if fp32_scores else a)
    out = out + index_work(pairs, a) + permute(tokens, pairs, moe.dispatch_width, a, kernels)
    if ep > 1 and moe.n_expert // ep > 1:
        out = out + sort_chunks(pairs, moe.dispatch_width, a)
    return out
