"""The work around the matmuls: memory traffic of the non-matmul kernels, the fixed cost of every kernel,
and dequantizing weight-only int8/int4 weights. Pure arithmetic.

1. Non-matmul kernels are memory-bound: each reads its input and writes its output once (fused as
   PyTorch's and Megatron's kernels are), so its traffic is 2 · elements · activation bytes, elements
   from tfcalc.count.model.non_matmul (norms, activations, RoPE, residual and bias adds, ...), or what a mixer
   says its kernels move (``Elementwise.traffic``: Mamba-1's fp32 scan, tfcalc.architecture.mamba1). Under tensor
   parallelism the FFN hidden, RoPE and per-head terms are split t ways; the (B·T, d) terms (norms,
   residuals) only under sequence parallelism. The backward pass moves about twice the forward's
   (each kernel reads the gradient and its saved input and writes a gradient).
2. Attention's softmax and score-level terms: with a fused kernel ("flash") the T × T scores never
   reach memory (0 bytes here; the kernel's own efficiency is tfcalc.count.perf.hardware's
   ``flash_efficiency``); with "math" attention the scores are written by Q·Kᵀ, read and written by the
   softmax, and read by ·V: SCORE_PASSES = 4 passes over B·H·T² elements (6 with dropout: its read,
   write and 1-byte mask), as Megatron-LM's fused scale-mask-softmax runs (Korthikanti et al. 2022,
   sec. 4.1, count the same tensors as stored activations).
3. Kernels: every matmul and every non-matmul entry is one kernel per layer (a fused attention, one for
   its Q·Kᵀ, softmax and ·V), each paying ``kernel_s``; a backward pass runs about twice as many.
4. Dequantization (weight-only int8/int4, the GPTQ/AWQ and gpt-fast kernels): each weight is unpacked
   and scaled once per matmul call on the CUDA cores, ``dequant_ops_per_weight`` instructions each.
   The kernels work on pairs of 16-bit values (half2/bf16x2 instructions), two weights per instruction,
   and the lanes issue one instruction per clock: fp32 FLOP/s / 2 instructions (the datasheet counts an
   FMA as 2 FLOPs) × 2 weights = the fp32 FLOP rate in weight-instructions per second. Not hidden
   behind the weight stream -- gpt-fast's own bandwidth column (1,397 GB/s in bf16, 1,069 in int8, 863
   in int4 on an A100) shows the cost.
5. torch.compile as torchtitan applies it (--kernels compile): each TransformerBlock compiled on its own
   (pytorch/torchtitan, parallelize_llama.py ``apply_compile``: "Apply torch.compile to each TransformerBlock,
   which makes compilation efficient due to repeated structure"; OLMo-core's ``apply_compile`` likewise), so
   Inductor fuses the blocks' norms, activations, RoPE and residual adds (step 1's traffic), while the work
   outside the blocks -- the token embedding, the final norm, the LM head's cast to fp32 and the
   cross-entropy (torchtitan's ``cross_entropy_loss``: ``pred.flatten(0, 1).float()``, outside the compiled
   region until torchtitan compiled the loss in 2025) -- runs op by op as eager PyTorch runs it
   (tfcalc.count.perf.eager, ``edges_only``), once forward and once backward: activation checkpointing wraps
   the blocks only, so no recompute replays it. The GEMMs and the fused attention are the same kernels in
   both modes (Inductor leaves aten.mm and SDPA's flash kernel to their libraries).
6. RoPE in complex numbers under torch.compile (``rope="complex"``, the default; "real" for rotate-half
   RoPE, which Inductor fuses as step 1 prices it): torchtitan's Llama rotates Q and K as complex products
   (models/llama/model.py ``apply_rotary_emb``: ``torch.view_as_complex(xq.float()...)`` × ``freqs_cis``,
   ``view_as_real``, ``type_as``), and Inductor generates no code for complex tensors
   (torch/_inductor/lowering.py: ``make_fallback(aten.view_as_complex)``, ``unsupported_input_tensor``
   warns "Torchinductor does not support code generation for complex operators"), so the product runs as
   an aten kernel between two generated casts. Seen in Inductor's output code for that function (TORCH_LOGS=
   output_code, torch 2.13; tests/count/test_complex_rope.py compiles it): per Q and per K, forward: a cast
   kernel bf16 → fp32 (a + F bytes per rotated element), ``aten.mul`` on complex64 (F in, F out; the table
   read once), a cast back (F + a), 2a + 4F = 20 bytes and 3 kernels where step 1 prices 2a and one kernel
   for Q and K together; backward the same three over the gradient (× conj(freqs_cis)), 20 bytes and 3
   kernels where step 1 prices 2 · 2a and two. COMPLEX_ROPE is the difference, per rotated element.
"""

from __future__ import annotations

from tfcalc.count.model.terms import NonMatmulEntry

SCORE_PASSES = 4
DROPOUT_SCORE_PASSES = 2  # + a 1-byte mask per element, counted apart
SCORE_LEVEL = ("softmax", "softcap_scores", "positions_scores")
SPLIT_BY_TP = ("activation", "rope", "bias", "moe")  # widths TP splits (bias: mostly the column-split outputs)
BACKWARD_TRAFFIC = 2.0
BACKWARD_KERNELS = 2.0


F32 = 4
COMPLEX_ROPE_KERNELS = 6  # step 6: per layer each way, a cast, the complex product and a cast, for Q and for K
ROPE_KINDS = ("complex", "real")


def complex_rope_bytes(act_bytes: int) -> int:
    """Step 6: bytes per rotated element, each way: the casts to fp32 and back (none in fp32) and the complex
    product (F in, F out per real element)."""
    return 2 * F32 + (2 * (act_bytes + F32) if act_bytes != F32 else 0)


def complex_rope_extra(entries: list[NonMatmulEntry], act_bytes: int, tp: int = 1) -> tuple[float, float, int, int]:
    """Step 6: (forward bytes, backward bytes, forward kernels, backward kernels) that complex RoPE under
    torch.compile adds to step 1's fused pricing, over one forward and backward pass on one TP rank (RoPE's
    widths are split t ways)."""
    rotated = sum(e.elements * e.copies for e in entries if e.component == "rope") / tp
    layers = sum(e.copies for e in entries if e.component == "rope")
    per = complex_rope_bytes(act_bytes)
    return (rotated * (per - 2 * act_bytes), rotated * max(0.0, per - BACKWARD_TRAFFIC * 2 * act_bytes),
            layers * (COMPLEX_ROPE_KERNELS - 1), layers * (COMPLEX_ROPE_KERNELS - int(BACKWARD_KERNELS)))


def is_score_level(e: NonMatmulEntry) -> bool:
    """Work on the T × T scores (softmax, score soft-capping, ALiBi/relative bias): fused away by flash."""
    return e.component == "softmax" or (e.component in ("softcap", "positions") and "score" in e.label)


def is_outside_blocks(e: NonMatmulEntry) -> bool:
    """Work of the embeddings, the final norm and the head (step 5: what a per-block compile leaves eager)."""
    return (e.component in ("final_norm", "pooler", "head", "embeddings")
            or any(s in e.label for s in ("positions added", "embedding ", "LM head", "logit soft-capping")))


def forward_traffic(entries: list[NonMatmulEntry], act_bytes: int, tp: int = 1, sp: bool = False,
                    blocks_only: bool = False) -> float:
    """Step 1: bytes the non-matmul kernels of one forward pass move on one TP rank (score-level work left
    out: step 2); ``blocks_only``: the blocks' work alone (step 5)."""
    total = 0.0
    for e in entries:
        if is_score_level(e) or (blocks_only and is_outside_blocks(e)):
            continue
        split = tp if (e.component in SPLIT_BY_TP or sp) else 1
        moved = 2 * e.elements * act_bytes if e.traffic is None else e.traffic  # a mixer's own passes (fp32 scans)
        total += moved * e.copies / split
    return total


def score_traffic(score_elements: int, act_bytes: int, dropout: bool = False) -> float:
    """Step 2, "math" attention: bytes the T × T scores move in one forward pass (elements over all layers
    and heads of the rank)."""
    passes = SCORE_PASSES + (DROPOUT_SCORE_PASSES if dropout else 0)
    return score_elements * (passes * act_bytes + (1 if dropout else 0))


def dequant_seconds(quantized_weights: int, dtype: str, ops_per_weight: dict[str, float], fp32_flops: float) -> float:
    """Step 4: seconds to dequantize ``quantized_weights`` weights once."""
    ops = ops_per_weight.get(dtype, 0.0)
    return quantized_weights * ops / fp32_flops if ops else 0.0
