"""RoPE in complex numbers under torch.compile (tfcalc.count.perf.elementwise, 6) against the real thing.

The rotation as torchtitan's Llama writes it (models/llama/model.py, apply_rotary_emb: the heads' channel
pairs viewed as complex after a cast to fp32, multiplied by the complex table, viewed back as real and cast
to the input's dtype), written here from that description. Two references:

- Inductor's own output code (torch._inductor.utils.run_and_get_code) for its forward and backward: the
  complex product is left to an aten call (no generated kernel: Inductor does not generate code for complex
  tensors), once for Q and once for K each way, between generated casts -- the 3 kernels per Q and per K
  the model charges;
- the bytes of every aten op of the same function run eagerly under a TorchDispatchMode, forward and
  backward: per rotated element the model's complex_rope_bytes each way (the table's own reads, which do not
  grow with the tokens, cancel in the difference of batch 2 and batch 1, as in test_eager_traffic).
"""

from __future__ import annotations

import math

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from tfcalc import presets
from tfcalc.count.model import non_matmul
from tfcalc.count.perf import elementwise
from tfcalc.count.perf.hardware import perf_spec
from tfcalc.count.training.micro_batch_time import micro_batch_time
from tfcalc.workload import Layout

T, HEADS, KV_HEADS, HS = 16, 4, 2, 8


def rotate(q: torch.Tensor, k: torch.Tensor, table: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    # q (B, T, nh, hs), k (B, T, nkv, hs), table (T, hs / 2) complex64
    qc = torch.view_as_complex(q.float().reshape(*q.shape[:-1], -1, 2))
    kc = torch.view_as_complex(k.float().reshape(*k.shape[:-1], -1, 2))
    t = table.view(1, table.shape[0], 1, table.shape[1])
    return torch.view_as_real(qc * t).flatten(3).type_as(q), torch.view_as_real(kc * t).flatten(3).type_as(k)


def _inputs(batch: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    q = torch.randn(batch, T, HEADS, HS, generator=g, dtype=torch.bfloat16, requires_grad=True)
    k = torch.randn(batch, T, KV_HEADS, HS, generator=g, dtype=torch.bfloat16, requires_grad=True)
    table = torch.polar(torch.ones(T, HS // 2), torch.rand(T, HS // 2, generator=g))
    return q, k, table


def _moved(t: torch.Tensor) -> int:
    n = math.prod(size for size, stride in zip(t.shape, t.stride(), strict=True) if stride != 0)
    return n * t.element_size()


class Bytes(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.total = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if not (func._schema.is_mutable or func.is_view or func.__name__.split(".")[0] in ("detach", "alias")):
            ins = [a for a in tree_flatten((args, kwargs))[0] if isinstance(a, torch.Tensor)]
            outs = [o for o in tree_flatten(out)[0] if isinstance(o, torch.Tensor)]
            self.total += sum(_moved(t) for t in ins + outs)
        return out


def _eager_bytes(batch: int) -> tuple[int, int]:
    q, k, table = _inputs(batch)
    with Bytes() as fwd:
        a, b = rotate(q, k, table)
    grads = (torch.ones_like(a), torch.ones_like(b))
    with Bytes() as bwd:
        torch.autograd.backward((a, b), grads)
    return fwd.total, bwd.total


def test_bytes_per_rotated_element_match_the_ops():
    f2, b2 = _eager_bytes(2)
    f1, b1 = _eager_bytes(1)
    rotated = T * (HEADS + KV_HEADS) * HS  # one more sequence's elements of Q and K
    assert f2 - f1 == elementwise.complex_rope_bytes(2) * rotated == 20 * rotated
    assert b2 - b1 == elementwise.complex_rope_bytes(2) * rotated


def test_inductor_leaves_the_complex_product_to_aten():
    from torch._inductor.utils import run_and_get_code

    q, k, table = _inputs(2)

    def step():
        a, b = torch.compile(rotate, backend="inductor")(q, k, table)
        (a.float().sum() + b.float().sum()).backward()

    torch._dynamo.reset()
    _, codes = run_and_get_code(step)
    assert len(codes) == 2  # the forward graph and the backward graph
    for code in codes:  # the product of Q's and of K's, an aten call each, not a generated kernel
        assert code.count("torch.ops.aten.mul.Tensor(") == 2, code


@pytest.mark.parametrize("tp", [1, 2])
def test_the_step_charges_the_difference(tp):
    """The micro-batch's compute under compile: complex RoPE adds, per rotated element of the rank, the ops'
    bytes less the fused pricing's, forward (replayed under op recompute) and backward, plus the kernels."""
    cfg = presets.load("llama3-8b", {})
    perf = perf_spec("h100-sxm")
    bw = 3.35e12 * perf.bandwidth_efficiency
    base = dict(tp=tp, pp=1, dp=1, seq=1024, global_batch=1, micro_batch=1, recompute="op", kernels="compile")
    real = micro_batch_time(cfg, Layout(**base, rope="real"), 989e12, bw, perf)
    cplx = micro_batch_time(cfg, Layout(**base, rope="complex"), 989e12, bw, perf)
    rotated = 1024 * (cfg.n_head + cfg.n_kv_head) * cfg.head_dim * cfg.n_layer / tp
    per = elementwise.complex_rope_bytes(2)
    extra = rotated * ((per - 4) * 2 + (per - 8)) / bw + cfg.n_layer * (5 * 2 + 4) * perf.kernel_s
    assert (cplx.block_other_s - real.block_other_s) * cfg.n_layer == pytest.approx(extra, rel=1e-9)
    eager = Layout(**{**base, "kernels": "eager"})
    eager_real = Layout(**{**base, "kernels": "eager"}, rope="real")
    assert micro_batch_time(cfg, eager, 989e12, bw, perf) == micro_batch_time(cfg, eager_real, 989e12, bw, perf)
    rows = [e for e in non_matmul.non_matmul_entries(cfg, 1, 1024) if e.component == "rope"]
    assert sum(e.elements * e.copies for e in rows) == rotated * tp
