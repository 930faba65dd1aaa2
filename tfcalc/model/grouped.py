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
2. Gathered weights (``_Gathered``): each row's expert matrix gathered, (P, out, in), and one batched
   matmul of (P, 1, in) rows -- what gpt-fast and transformers' ``batched_mm`` run for decode. It runs
   wherever 1 cannot: CUDA other than bf16 on sm80+ (a decode step there gathers k matrices per token),
   odd widths, fp64, meta in fp32 (FLOP counts of every preset). It is an autograd Function that keeps
   only its input rows for backward (the gathered copies are remade there), so autograd saves what the
   grouped GEMM saves, byte for byte; it works in chunks of rows so the copies stay under
   ``GATHER_ELEMENTS``. FlopCounterMode sees its ``bmm``: 2·P·in·out. Copying a matrix per row costs
   P·in·out of traffic, so a long prefill this way is slow (P/E times the weights): the grouped GEMM is
   preferred wherever it runs, decode included -- on this CPU (one thread, E = 32, 512 -> 1024) it took
   0.06/0.17/1.0 ms for 1/4/8 rows against 0.09/0.35/5.1 ms gathered (benchmarks/moe_cpu.py has the layer).
"""

from __future__ import annotations

import torch
from torch._subclasses.fake_tensor import FakeTensor
from torch.torch_version import TorchVersion
from torch.utils.flop_counter import flop_registry, register_flop_formula

GATHER_ELEMENTS = 1 << 24  # gathered weight elements per chunk (64 MiB in fp32)
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
    return _Gathered.apply(x, weight, experts)


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


def _chunks(rows: int, weight: torch.Tensor) -> range:
    per = max(1, GATHER_ELEMENTS // max(1, weight.shape[1] * weight.shape[2]))
    return range(0, rows, per)


class _Gathered(torch.autograd.Function):
    """Row i times its expert's gathered weight (module docstring, 2); keeps the rows and the ids only."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor, experts: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(x, weight, experts)
        if x.shape[0] == 0:
            return x.new_empty(0, weight.shape[1])
        outs, step = [], _chunks(x.shape[0], weight).step
        for i in _chunks(x.shape[0], weight):
            e = experts[i:i + step]
            w = weight.index_select(0, e)  # (p, out, in): the rows' expert matrices
            outs.append(torch.bmm(x[i:i + e.shape[0], None, :], w.mT)[:, 0])  # (p, out): 2·p·in·out FLOPs
        return torch.cat(outs) if len(outs) != 1 else outs[0]

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        x, weight, experts = ctx.saved_tensors
        grad_x = grad_w = None
        if x.shape[0] == 0:
            return torch.zeros_like(x), torch.zeros_like(weight), None
        if ctx.needs_input_grad[1]:
            grad_w = torch.zeros_like(weight)
        parts, step = [], _chunks(x.shape[0], weight).step
        for i in _chunks(x.shape[0], weight):
            e = experts[i:i + step]
            g = grad[i:i + e.shape[0]]
            if ctx.needs_input_grad[0]:
                parts.append(torch.bmm(g[:, None, :], weight.index_select(0, e))[:, 0])  # (p, in)
            if grad_w is not None:  # each row's outer product, summed into its expert: (p, out, in)
                grad_w.index_add_(0, e, torch.bmm(g[:, :, None], x[i:i + e.shape[0], None, :]))
        if ctx.needs_input_grad[0]:
            grad_x = torch.cat(parts) if len(parts) != 1 else parts[0]
        return grad_x, grad_w, None


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


if torch.ops.aten._grouped_mm not in flop_registry:  # a later PyTorch may register its own
    register_flop_formula(torch.ops.aten._grouped_mm)(_grouped_mm_flop)
