"""The eager non-matmul traffic of tfcalc.count.perf.eager against the real module: every aten op that is
not a matmul, an attention kernel or a view, summed under a TorchDispatchMode over a forward and a
loss.backward() of tfcalc's own model (tiny configs, CPU).

How the bytes are read: each tensor an op takes or returns counts its distinct elements × its item size
(a stride-0 broadcast dimension counts once: an expand reads its source, not its shape); views
(``OpOverload.is_view``, detach) move nothing; copies (cat, _to_copy, index_select) are kernels and
count. One block's work is the difference of a 2-layer and a 1-layer model (embeddings, head and the
test's own loss cancel), and the work that grows with the tokens the difference of batch 4 and batch 2
(weights, biases and RoPE tables are read once whatever the batch: the model leaves them out). What is
left is compared with the analytic figure at batch 2, exactly.

The one residue, stated: LayerNorm. The model prices CUDA's kernels (tfcalc.count.perf.eager, 2): its
backward reads the gradient and the input twice, once for the input's gradient and once for γ's and β's
(2a per element more, one kernel more), and its per-row mean and rstd are fp32. ATen's CPU backward is one
kernel, and keeps the statistics in the input's dtype: the GPT-2 checks add that difference back by hand.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from conftest import VASWANI_LIKE, tiny
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from tfcalc.count.perf import eager
from tfcalc.model import build_model

MATMULS = {"mm", "addmm", "bmm", "baddbmm", "_grouped_mm"}
VIEWS = {"detach", "_unsafe_view", "_reshape_alias", "alias"}  # share their input's storage (not all is_view)


def _moved(t: torch.Tensor) -> int:
    """Bytes of a tensor's distinct elements (stride-0 dimensions count once)."""
    n = math.prod(size for size, stride in zip(t.shape, t.stride(), strict=True) if stride != 0)
    return n * t.element_size()


class Traffic(TorchDispatchMode):
    """Bytes and kernels of every non-matmul, non-attention, non-view aten op run under it."""

    def __init__(self):
        super().__init__()
        self.bytes = 0
        self.kernels = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        name = func.overloadpacket.__name__
        if func.is_view or name in MATMULS or "scaled_dot_product" in name or name in VIEWS:
            return out
        tensors = [t for t in tree_flatten((args, kwargs, out))[0] if isinstance(t, torch.Tensor)]
        self.bytes += sum(_moved(t) for t in tensors)
        self.kernels += 1
        return out


def _step(cfg, batch: int, dtype: torch.dtype) -> Traffic:
    model = build_model(cfg, "cpu", dtype).train()
    idx = torch.randint(0, cfg.vocab_size, (batch, 8), generator=torch.Generator().manual_seed(0))
    with Traffic() as mode:
        model(idx).float().sum().backward()
    return mode


def _per_block(cfg, dtype: torch.dtype) -> tuple[int, int]:
    """(bytes of one block's work that grows with the batch, at batch 2; kernels of one block)."""
    def block(batch: int) -> Traffic:
        two, one = _step(tiny(**cfg, n_layer=2), batch, dtype), _step(tiny(**cfg, n_layer=1), batch, dtype)
        return two.bytes - one.bytes, two.kernels - one.kernels

    (b4, _), (b2, k2) = block(4), block(2)
    return b4 - b2, k2


def _analytic(cfg, dtype: torch.dtype) -> tuple[float, int]:
    a = torch.empty((), dtype=dtype).element_size()
    c = tiny(**cfg, n_layer=1)
    (block, _), = c.architecture.output.kinds()
    terms = eager.block_terms(block, 2, 8, None, a)
    return sum(t.forward + t.backward for t in terms), sum(t.forward_kernels + t.backward_kernels for t in terms)


LLAMA = dict(pos_encoding="rope", norm="rmsnorm", norm_bias=False, attn_bias=False, ffn_bias=False, gated_ffn=True,
             activation="silu", d_ff=48, n_kv_head=2)
GPT2 = dict()  # LayerNorm with biases, GELU, biased Linears, learned positions
QWEN3 = dict(LLAMA, qk_norm=True)  # RMSNorm over each head's Q and K before RoPE
VASWANI = VASWANI_LIKE  # encoder-decoder, post-norm, sinusoids, ReLU, cross-attention
GPT_OSS = dict(LLAMA, swiglu_limit=7.0, swiglu_alpha=1.702)  # the clamped SwiGLU
APERTUS = dict(LLAMA, gated_ffn=False, activation="xielu", qk_norm=True)  # xIELU, its learned scalars
NEOX = dict(pos_encoding="rope", rope_fraction=0.5, parallel_block="two_norms")  # partial rotary, parallel block
# MiniMax-01's layout: the residual after the norm, scaled (residual_alpha), the sub-layer scaled too
MINIMAX = dict(LLAMA, norm_placement="normed_residual", residual_alpha=1.5, residual_multiplier=0.75)


@pytest.mark.parametrize("fields,dtype", [(LLAMA, torch.bfloat16), (LLAMA, torch.float32), (GPT2, torch.float32),
                                          (QWEN3, torch.bfloat16), (NEOX, torch.float32), (GPT_OSS, torch.bfloat16),
                                          (APERTUS, torch.bfloat16), (APERTUS, torch.float32),
                                          (MINIMAX, torch.bfloat16), (MINIMAX, torch.float32)],
                         ids=["llama-bf16", "llama-fp32", "gpt2-fp32", "qwen3-bf16", "neox-fp32", "clamped-bf16",
                              "xielu-bf16", "xielu-fp32", "normed-residual-bf16", "normed-residual-fp32"])
def test_one_block_moves_what_the_model_says(fields, dtype):
    measured, kernels = _per_block(fields, dtype)
    analytic, analytic_kernels = _analytic(fields, dtype)
    if fields.get("norm", "layernorm") == "layernorm":  # CUDA's second backward kernel for γ and β (module
        # docstring): 2a per element, 1 kernel
        rows, a = 2 * 8 * 2, torch.empty((), dtype=dtype).element_size()  # batch 2 × 8 positions × two LayerNorms
        measured, kernels = measured + rows * 32 * 2 * a, kernels + 2
    assert (measured, kernels) == (analytic, analytic_kernels)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=["bf16", "fp32"])
def test_a_moe_block_moves_what_the_model_says_but_the_routing_indices(dtype):
    """A mixture of experts (4 experts, top-2, widths the grouped GEMM takes): the module sorts the pairs and
    runs each projection as one grouped GEMM (tfcalc.model.experts), so its kernels are the model's plus
    the routing's index work, which the model leaves out (tfcalc.count.perf.eager, 8): the int64 sort and
    gathers of the pairs' ids, the groups' ends, the zero-filled output -- 4-5 % of the block here. (The
    module that looped over the experts, a launch per expert, measured 18-25 % above the model.)"""
    fields = dict(LLAMA, n_expert=4, n_expert_active=2)
    (measured, kernels), (analytic, analytic_kernels) = _per_block(fields, dtype), _analytic(fields, dtype)
    assert 1.0 < measured / analytic < 1.05
    assert analytic_kernels < kernels <= analytic_kernels + 14


def test_gpt2_bf16_differs_only_by_cpu_layernorm_statistics():
    measured, kernels = _per_block(GPT2, torch.bfloat16)
    analytic, analytic_kernels = _analytic(GPT2, torch.bfloat16)
    rows = 2 * 8 * 2  # batch 2 × 8 positions × the block's two LayerNorms (d = 32)
    assert kernels + 2 == analytic_kernels  # CUDA's γ/β kernel, one per LayerNorm
    # CUDA's γ/β kernel reads the gradient and input again (2a per element), and CUDA keeps mean and rstd in
    # fp32 where CPU keeps bf16: 2 statistics × (4 - 2) bytes, written forward and read back
    assert measured + rows * 32 * 2 * 2 + rows * 2 * 2 * (4 - 2) == analytic


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=["bf16", "fp32"])
def test_the_loss_moves_what_the_model_says(dtype):
    """Cross-entropy over fp32 logits, as torchtitan's cross_entropy_loss (pred.float()) and nanoGPT run it.
    The residue, stated: nll_loss_forward takes the (N, V) log-probabilities but reads only the N target
    entries (a gather), and nll_loss_backward takes them for their shape alone (it writes a zeroed (N, V)
    gradient and scatters N values): 2 × 4 bytes per logit the dispatch sees and the GPU does not move,
    and the int64 targets each reads (16 bytes a row)."""
    V = 61

    def run(batch: int) -> Traffic:
        logits = torch.randn(batch, 8, V, dtype=dtype, requires_grad=True)
        targets = torch.randint(0, V, (batch * 8,))
        with Traffic() as mode:
            F.cross_entropy(logits.float().flatten(0, 1), targets).backward()
        return mode

    measured = run(4).bytes - run(2).bytes
    a = torch.empty((), dtype=dtype).element_size()
    (loss,) = [t for t in eager.head_terms(tiny(vocab_size=V, tie_embeddings=False), 2 * 8, a) if t.component == "loss"]
    rows = 2 * 8
    assert measured - rows * V * 2 * 4 - rows * 16 == loss.forward + loss.backward
    assert run(2).kernels == loss.forward_kernels + loss.backward_kernels + 1  # + ones_like: backward's seed


def _whole(cfg, batch: int, dtype: torch.dtype) -> Traffic:
    model = build_model(cfg, "cpu", dtype).train()
    g = torch.Generator().manual_seed(0)
    stacks = 1 + (cfg.arch == "encoder-decoder")  # source and target ids
    ids = [torch.randint(0, cfg.vocab_size, (batch, 8), generator=g) for _ in range(stacks)]
    targets = torch.randint(0, cfg.vocab_size, (batch * 8,), generator=g)
    with Traffic() as mode:
        F.cross_entropy(model(*ids).float().flatten(0, 1), targets).backward()
    return mode


@pytest.mark.parametrize("fields,dtype", [(LLAMA, torch.bfloat16), (GPT2, torch.float32), (VASWANI, torch.float32)],
                         ids=["llama-bf16", "gpt2-fp32", "vaswani-fp32"])
def test_the_whole_step_moves_what_the_model_says(fields, dtype):
    """Embeddings, blocks, final norm, head and loss together (eager.terms), against a training step of the
    real model. Residues, stated: the token lookup's dispatch reads the whole table (which cancels with the
    batch) where the GPU reads the N gathered rows (a·d per token), and its int64 ids are read forward and
    back (16 bytes a token); the loss's nll_loss reads (test above); GPT-2's LayerNorms as above."""
    cfg = tiny(**fields, n_layer=2)
    measured = _whole(cfg, 4, dtype).bytes - _whole(cfg, 2, dtype).bytes
    a = torch.empty((), dtype=dtype).element_size()
    tokens, d, V, stacks = 2 * 8, cfg.d_model, cfg.vocab_size, 1 + (cfg.arch == "encoder-decoder")
    measured += stacks * (tokens * d * a - tokens * 16) - tokens * V * 2 * 4 - tokens * 16
    # LayerNorms: GPT-2 2 per block and the final one; the encoder-decoder (post-norm) 2 per encoder block, 3
    # per decoder block
    measured += {id(GPT2): 5, id(VASWANI): 10}.get(id(fields), 0) * tokens * d * 2 * a
    assert measured == sum(t.forward + t.backward for t in eager.terms(cfg, 2, 8, a))
