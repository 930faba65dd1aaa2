"""The experts' matmuls without the host: rows sorted by expert, multiplied group by group in one call.

A mixture of experts hands its experts P = N·k rows (each token once per chosen expert), sorted by expert
on the device (tfcalc.model.experts). ``grouped_matmul`` multiplies row i by the weight of its expert
``experts[i]``; the groups' ends are a device tensor (``expert_ends``: a binary search of the sorted
expert ids, no count read back), so no shape depends on the routing and nothing waits for the host.

Two ways, chosen per call from the device, dtype and layout; both exact (each row meets its expert's
weight once, in the dtype of the model) and both cost 2·P·in·out FLOPs:

1. PyTorch's grouped GEMM (aten ``_grouped_mm``, ``torch.nn.functional.grouped_mm``): one call over all
   groups, each expert's weight read in place. It runs where it needs no host read: on CUDA in bf16 on
   sm80 and later (its CUTLASS kernels; transformers' integrations/moe.py, ``_can_use_grouped_mm``, takes
   it there from torch 2.9 on, under torch.compile and CUDA graphs too); on the CPU in fp32/bf16/fp16 (a
   loop over the groups inside the kernel, which reads the offsets there -- host memory, no device to wait
   for). Other CUDA dtypes and devices fall
   back inside PyTorch to a loop that copies ``offs`` to the host (aten/src/ATen/native/GroupedMMUtils.h,
   ``_grouped_mm_fallback``), a synchronisation, so they take 2. Both operands' strides must be multiples
   of 16 bytes (the kernel's check), and so must the output's width: the kernel pads an odd one to the
   next 16 bytes, and autograd would keep the padding too. Its shape-only kernel (meta, FakeTensor,
   torch.compile's tracing) asks bf16. PyTorch registers no FLOP formula for it (FlopCounterMode would
   count 0), so one is registered here (``_grouped_mm_flop``) for the forward and the two grouped
   matmuls of its backward.
2. Gathered weights (``gathered_mm``, an op of tfcalc's own: torch.library): each row's expert matrix
   gathered and one batched matmul of (P, 1, in) rows when there are no more rows than experts -- what
   gpt-fast and transformers' ``batched_mm`` run for decode; with more rows, each expert's rows padded
   with zero rows to whole blocks of ``BLOCK`` and one matrix gathered per block, (nb, BLOCK, in) times
   (nb, in, out), nb <= P / BLOCK + E, so the copies are about the weights once more, not P matrices.
   It runs wherever 1 cannot: CUDA other than bf16 on sm80+, odd widths, fp64, meta in fp32 (the FLOP
   counts of every preset). Being one op, FlopCounterMode counts it by its registered formula,
   2·P·in·out (4·P·in·out for its backward op), not the padding rows inside; it keeps only its input
   rows for backward (the copies are remade there), so autograd saves what the grouped GEMM saves, byte
   for byte. Gathers go in chunks so the copies stay under ``GATHER_ELEMENTS``. The grouped GEMM is
   preferred wherever it runs, decode included: on this CPU (one thread, E = 32, 512 -> 1024) it took
   0.06/0.17/1.0 ms for 1/4/8 rows against 0.09/0.35/5.1 ms for one gathered matrix per row
   (benchmarks/moe_cpu.py times the layer).
"""

from __future__ import annotations

import torch
from torch._subclasses.fake_tensor import FakeTensor
from torch.torch_version import TorchVersion
from torch.utils.flop_counter import flop_registry, register_flop_formula

GATHER_ELEMENTS = 1 << 24  # gathered weight elements per chunk (64 MiB in fp32)
BLOCK = 64  # rows of one expert per gathered matrix when there are more rows than experts
_GROUPED_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
_VERSION = TorchVersion(torch.__version__.split("+")[0])


def expert_ends(experts: torch.Tensor, n_expert: int) -> torch.Tensor:
    """(P,) expert ids sorted ascending -> (E,) int32: the end row of each expert's group (a cumulative
    count), found by binary search on the device: no count is read back."""
    ids = torch.arange(n_expert, device=experts.device, dtype=experts.dtype)
    return torch.searchsorted(experts, ids, right=True, out_int32=True)


def grouped_matmul(x: torch.Tensor, weight: torch.Tensor, ends: torch.Tensor, experts: torch.Tensor) -> torch.Tensor:
    """(P, in) rows sorted by expert, (E, out, in) weights -> (P, out): row i times weight[experts[i]]ᵀ."""
    if _grouped_mm_runs(x, weight):
        return torch._grouped_mm(x, weight.mT, offs=ends)  # (P, out): 2·P·in·out FLOPs
    return torch.ops.tfcalc.gathered_mm(x, weight, experts, ends)


def _grouped_mm_runs(x: torch.Tensor, weight: torch.Tensor) -> bool:
    """Whether PyTorch's grouped GEMM takes these operands without a host read (module docstring, 1)."""
    if x.dtype != weight.dtype or x.dtype not in _GROUPED_DTYPES or x.shape[0] == 0:
        return False
    align = 16 // x.element_size()
    if x.stride(-1) != 1 or weight.stride(-1) != 1 or x.stride(0) % align or weight.stride(1) % align:
        return False
    if weight.stride(0) % align or weight.shape[1] % align:  # an odd output width gets a padded row stride
        return False
    fake = isinstance(x, FakeTensor) or x.device.type == "meta"
    if fake and x.dtype != torch.bfloat16:  # the shape-only kernel (torch._meta_registrations) asks bf16
        return False
    if x.device.type == "cpu":  # a CPU kernel since 2.9; before 2.11 it asks 16-byte-aligned data
        return _VERSION >= "2.9" and (fake or _VERSION >= "2.11" or x.data_ptr() % 16 == weight.data_ptr() % 16 == 0)
    if x.device.type == "cuda":
        return x.dtype == torch.bfloat16 and torch.cuda.get_device_capability(x.device) >= (8, 0)
    return x.device.type == "meta"


def _per_chunk(weight: torch.Tensor) -> int:
    """Weight matrices gathered at once, so the copies stay under GATHER_ELEMENTS."""
    return max(1, GATHER_ELEMENTS // max(1, weight.shape[1] * weight.shape[2]))


def _blocks(experts: torch.Tensor, ends: torch.Tensor, n_rows: int) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Each expert's rows padded to whole blocks of BLOCK: (each row's place in the padded rows (P,), each
    block's expert (nb,), nb). nb = ceil((P + E·(BLOCK - 1)) / BLOCK) whatever the routing: a static shape."""
    E = ends.shape[0]
    ends = ends.long()
    counts = torch.diff(ends, prepend=ends.new_zeros(1))  # (E,)
    padded = (counts + BLOCK - 1).div(BLOCK, rounding_mode="floor") * BLOCK
    padded_ends = padded.cumsum(0)
    first = (padded_ends - padded).index_select(0, experts)  # (P,): the first padded row of each row's expert
    place = first + torch.arange(n_rows, device=experts.device) - (ends - counts).index_select(0, experts)
    nb = -(-(n_rows + E * (BLOCK - 1)) // BLOCK)
    starts = torch.arange(nb, device=experts.device) * BLOCK
    block_expert = torch.searchsorted(padded_ends, starts, right=True).clamp_(max=E - 1)  # (nb,): spare: 0 rows
    return place, block_expert, nb


def _gathered_forward(x: torch.Tensor, weight: torch.Tensor, experts: torch.Tensor,
                      ends: torch.Tensor) -> torch.Tensor:
    """(P, in) -> (P, out). Few rows (P <= E): each row's matrix gathered. More: blocks of BLOCK rows of one
    expert each (zero rows pad each expert's group), a matrix gathered per block: nb <= P / BLOCK + E."""
    P, E = x.shape[0], weight.shape[0]
    step = _per_chunk(weight)
    if P <= E:
        return torch.cat([torch.bmm(x[i:i + step, None, :], weight.index_select(0, experts[i:i + step]).mT)[:, 0]
                          for i in range(0, P, step)])  # (P, out)
    place, block_expert, nb = _blocks(experts, ends, P)
    rows = x.new_zeros(nb * BLOCK, x.shape[1]).index_copy_(0, place, x).view(nb, BLOCK, -1)
    y = torch.cat([torch.bmm(rows[i:i + step], weight.index_select(0, block_expert[i:i + step]).mT)
                   for i in range(0, nb, step)])  # (nb, BLOCK, out)
    return y.view(nb * BLOCK, -1).index_select(0, place)


def _gathered_backward(grad: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, experts: torch.Tensor,
                       ends: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The input's gradient (grad times each row's matrix) and the weight's (each row's outer product,
    summed into its expert), by the forward's rows or blocks."""
    P, E = x.shape[0], weight.shape[0]
    step, grad_w = _per_chunk(weight), torch.zeros_like(weight)
    if P <= E:
        parts = []
        for i in range(0, P, step):
            e, g = experts[i:i + step], grad[i:i + step]
            parts.append(torch.bmm(g[:, None, :], weight.index_select(0, e))[:, 0])  # (p, in)
            grad_w.index_add_(0, e, torch.bmm(g[:, :, None], x[i:i + step, None, :]))  # (p, out, in)
        return torch.cat(parts), grad_w
    place, block_expert, nb = _blocks(experts, ends, P)
    rows = x.new_zeros(nb * BLOCK, x.shape[1]).index_copy_(0, place, x).view(nb, BLOCK, -1)
    grads = grad.new_zeros(nb * BLOCK, grad.shape[1]).index_copy_(0, place, grad).view(nb, BLOCK, -1)
    parts = []
    for i in range(0, nb, step):
        e = block_expert[i:i + step]
        parts.append(torch.bmm(grads[i:i + step], weight.index_select(0, e)))  # (b, BLOCK, in)
        grad_w.index_add_(0, e, torch.bmm(grads[i:i + step].mT, rows[i:i + step]))  # (b, out, in)
    return torch.cat(parts).view(nb * BLOCK, -1).index_select(0, place), grad_w


@torch.library.custom_op("tfcalc::gathered_mm", mutates_args=())
def gathered_mm(x: torch.Tensor, weight: torch.Tensor, experts: torch.Tensor, ends: torch.Tensor) -> torch.Tensor:
    """Row i of (P, in) times weight[experts[i]]ᵀ, gathered (module docstring, 2): one op, so that
    FlopCounterMode counts it by its formula (2·P·in·out), not the padded blocks inside."""
    if x.shape[0] == 0:
        return x.new_empty(0, weight.shape[1])
    return _gathered_forward(x, weight, experts, ends)


@gathered_mm.register_fake
def _(x, weight, experts, ends):
    return x.new_empty(x.shape[0], weight.shape[1])


@torch.library.custom_op("tfcalc::gathered_mm_backward", mutates_args=())
def gathered_mm_backward(grad: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, experts: torch.Tensor,
                         ends: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    if x.shape[0] == 0:
        return torch.zeros_like(x), torch.zeros_like(weight)
    return _gathered_backward(grad, x, weight, experts, ends)


@gathered_mm_backward.register_fake
def _(grad, x, weight, experts, ends):
    return torch.empty_like(x), torch.empty_like(weight)


def _setup_context(ctx, inputs, output) -> None:
    ctx.save_for_backward(*inputs)  # the rows, the weight (a parameter: no new bytes), the ids and ends


def _backward(ctx, grad: torch.Tensor):
    x, weight, experts, ends = ctx.saved_tensors
    grad_x, grad_w = torch.ops.tfcalc.gathered_mm_backward(grad.contiguous(), x, weight, experts, ends)
    return grad_x, grad_w, None, None


gathered_mm.register_autograd(_backward, setup_context=_setup_context)


def _grouped_mm_flop(a_shape, b_shape, *args, out_shape=None, **kwargs) -> int:
    """FLOPs of aten._grouped_mm, from shapes: each row (or column) of the jagged operand meets one group's
    matrix once, so the count is that of one matmul over the whole jagged dimension, 2·M·K·N:
    a (M, K) × b (G, K, N), rows jagged (the forward and grad_input);  a (K, M) × b (M, N), the
    contraction jagged, out (G, K, N) (grad_weight);  a (G, M, K) × b (K, N), columns jagged;
    a (G, M, K) × b (G, K, N), a batched matmul."""
    if len(a_shape) == 2:
        return 2 * a_shape[0] * a_shape[1] * b_shape[-1]
    if len(b_shape) == 2:
        return 2 * a_shape[1] * a_shape[2] * b_shape[1]
    return 2 * a_shape[0] * a_shape[1] * a_shape[2] * b_shape[2]


@register_flop_formula(torch.ops.tfcalc.gathered_mm)
def _gathered_mm_flop(x_shape, weight_shape, *args, out_shape=None, **kwargs) -> int:
    """2·P·in·out: each row meets its own expert's matrix once (the padding rows inside are not the model's)."""
    return 2 * x_shape[0] * x_shape[1] * weight_shape[1]


@register_flop_formula(torch.ops.tfcalc.gathered_mm_backward)
def _gathered_mm_backward_flop(grad_shape, x_shape, weight_shape, *args, out_shape=None, **kwargs) -> int:
    """The input's gradient and the weight's: 2·P·in·out each."""
    return 4 * x_shape[0] * x_shape[1] * weight_shape[1]


if torch.ops.aten._grouped_mm not in flop_registry:  # a later PyTorch may register its own
    register_flop_formula(torch.ops.aten._grouped_mm)(_grouped_mm_flop)
