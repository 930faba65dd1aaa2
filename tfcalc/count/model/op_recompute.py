"""Op-level selective activation checkpointing (``--recompute op``): what a block keeps, what it runs again.
Pure arithmetic.

The policy is torchtitan's "op" selective AC (torchtitan/distributed/activation_checkpoint.py,
``_apply_op_sac``, on PyTorch's ``torch.utils.checkpoint.create_selective_checkpoint_contexts``): every
block is checkpointed; inside it the outputs of the ops in its save list -- ``aten.mm`` and the fused
attention kernels (``_scaled_dot_product_flash_attention`` and its kin) -- are saved, "except every
second mm", counted in the block's forward order; every other op (norms, RoPE, activations, products,
residual adds) is recomputed in the backward pass from the block's input and what was saved.

On tfcalc's module (tfcalc.model) a block multiplies, in order: the fused QKV projection (mm 1: saved),
the O projection (mm 2: recomputed), the fused FFN up [gate | up] projection (mm 3: saved) and the down
projection (mm 4: recomputed). So a block keeps, per token (tfcalc.count.model.activation_terms' notation):

1. its input, e·h (the checkpoint's input, as full recompute keeps);
2. the QKV output, e·(q + k + v);
3. the attention kernel's outputs: its output e·o and the log-sum-exp, 4·a (fp32);
4. the FFN up output: gated 2·e·f (gate and up), else e·f.
Rebuilt one block at a time in the backward pass, as under full recompute: the largest block's terms are
added to the peak. Extra FLOPs: the O and down projections' forward once more (2·b·s·o·h + 2·b·s·f·h per
layer), and the non-matmul ops' traffic once more -- the whole block replayed (checkpoint without early
stop; with PyTorch's early stop the replay may end before the down projection, whose output no backward
op reads: then only O runs again, and this is an upper bound).

Modelled for blocks with a fused (flash) attention kernel and bias-free linears (a biased Linear runs
``aten.addmm``, outside the save list), without a mixture of experts (the experts' grouped GEMMs and the
router change the mm order), cross-attention, latent attention, soft-capped scores or sinks (written-out
score products are mms of their own); the others are refused, one line each. Checked against the bytes
PyTorch's SAC caches on the real module under that policy: tests/count/test_op_recompute.py.
"""

from __future__ import annotations

from typing import Optional

from tfcalc.architecture import Block

RECOMPUTED = ("attn_o", "ffn_down")  # matmul entries (tfcalc.count.model.flops) the policy runs again


def unsupported(block: Block) -> Optional[str]:
    """Why the policy's model does not cover the block, or None."""
    if block.is_moe:
        return "a mixture of experts"
    if block.cross_attention is not None:
        return "cross-attention"
    if block.mixer.capabilities.op_recompute is not None:  # declared by the mixer (tfcalc.architecture.mixer)
        return block.mixer.capabilities.op_recompute
    biased = any(e.work == "bias" for e in block.mixer.elementwise(1, 1))
    if biased or block.ffn.bias:  # a biased Linear runs aten.addmm, not aten.mm
        return "linears with biases (they run as addmm, which the policy's save list leaves out)"
    return None


def kept_terms(block: Block, terms: dict[str, int], tokens_e: int) -> dict[str, int]:
    """Steps 2-4 for one block (its terms as tfcalc.count.model.activations prices them, times its tokens;
    ``tokens_e`` tokens × bytes per element), keyed as those terms are (so TP shares them the same way)."""
    ffn = block.ffn
    return {"qkv": terms["qkv"], "softmax_stats": terms["softmax_stats"], "attn_output": terms["attn_output"],
            "ffn_hidden": tokens_e * ffn.d_ff * (2 if ffn.gated else 1)}
