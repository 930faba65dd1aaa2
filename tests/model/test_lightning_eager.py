"""Lightning attention's eager ops (tfcalc.architecture.lightning_eager, ``Lightning.eager_ops``) against the aten ops
tfcalc's module (tfcalc.model.lightning.LightningModule) dispatches forward and backward on the CPU, under a
TorchDispatchMode, op for op in the order it runs them: each kernel's bytes read and written per token more from
10 to 14 tokens a sequence (weight-sized operands do not grow), less the matmuls (mm, bmm) and the block scan's
kernels: those on a block's tensors ((B, H, c, ·) with c the block's length, the (H, ·, ·) decays, the (B, H, d, d)
state), which the declaration leaves out (its docstring) and this test counts, so that what is left out is known."""

from __future__ import annotations

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from tfcalc.architecture.lightning import Lightning
from tfcalc.count.perf import eager

pytestmark = pytest.mark.filterwarnings("ignore")

VIEWS = {"view", "_unsafe_view", "unflatten", "slice", "select", "expand", "unsqueeze", "squeeze", "split",
         "split_with_sizes", "chunk", "t", "transpose", "permute", "detach", "alias", "as_strided", "lift_fresh",
         "_reshape_alias", "unbind"}
MATMULS = {"mm", "addmm", "bmm"}
B, H, D, DM, BLOCK = 2, 3, 5, 7, 4  # w = 15, 3w = 45: no size equal to a length below or to another
SHORT, LONG = 10, 14  # blocks of 4, 4, 2 and 4, 4, 4, 2


class Ops(TorchDispatchMode):
    """(op, bytes, per token) of every kernel but the views and the matmuls: its tensor inputs read (a list's too),
    its outputs written; per token: one of its tensors spans the sequence's T tokens, (B, T, ·) or (B, H, T, ·)."""

    def __init__(self, T: int):
        super().__init__()
        self.T, self.ops = T, []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        name = func.__name__.split(".")[0]
        if name in VIEWS or name in MATMULS:
            return out
        read = [*args, *(kwargs or {}).values()]
        read = [u for t in read for u in (t if isinstance(t, (list, tuple)) else [t]) if isinstance(u, torch.Tensor)]
        wrote = [t for t in (out if isinstance(out, (list, tuple)) else [out]) if isinstance(t, torch.Tensor)]
        spans = any(t.dim() >= 3 and t.shape[0] == B and self.T in (t.shape[1], t.shape[2]) for t in read + wrote)
        self.ops.append((name, sum(t.numel() * t.element_size() for t in read + wrote),
                         spans and name != "new_zeros"))  # new_zeros: the zero state, (B, H, d, d), q only its model
        return out


def _measure(dtype, T: int):
    from tfcalc.model.lightning import LightningModule

    torch.manual_seed(0)
    m = LightningModule(Lightning(DM, H, D, BLOCK))
    for p in m.parameters():
        torch.nn.init.normal_(p, std=0.1)
    m = m.to(dtype)
    m.at_layer(1, 4)
    x = torch.randn(B, T, DM, dtype=dtype, requires_grad=True)
    with Ops(T) as fwd:
        y = m(x)
    grad = torch.randn_like(y)
    with Ops(T) as bwd:
        y.backward(grad)
    return fwd.ops, bwd.ops


@pytest.mark.parametrize("dtype, a", [(torch.bfloat16, 2), (torch.float32, 4)])
def test_the_declared_ops_are_the_modules_op_for_op(dtype, a):
    """Forward and backward, the per-token kernels in order: the bytes each moves per token more from SHORT to LONG
    tokens a sequence is what its EagerOp prices (tfcalc.count.perf.eager.mixer_terms at a bytes an activation)."""
    spec = Lightning(DM, H, D, BLOCK)
    short, long = _measure(dtype, SHORT), _measure(dtype, LONG)
    grown = []
    for s, L in zip(short, long, strict=True):
        s, L = [o for o in s if o[2]], [o for o in L if o[2]]
        assert [name for name, *_ in s] == [name for name, *_ in L]  # the same per-token kernels at every length
        grown.append([(b2 - b1) / (B * (LONG - SHORT)) for (_, b1, _), (_, b2, _) in zip(s, L, strict=True)])
    ops = spec.eager_ops(1)
    declared = [(t.forward_kernels, t.backward_kernels, t.forward, t.backward) for t in
                (eager.mixer_terms([op], a)[0] if eager.mixer_terms([op], a) else eager.Term("", 0, 0, 0, 0)
                 for op in ops)]
    assert [f for kf, _, f, _ in declared if kf] == grown[0]
    assert [b for _, kb, _, b in declared if kb] == grown[1]
    assert all(kf + kb == (0 if a == 4 and op.kind == "cast" else 1)
               for (kf, kb, _, _), op in zip(declared, ops, strict=True))
    # what is left out: the block scan's kernels, a fixed number a block (and the decays' per block length)
    loop = [sum(not o[2] for o in ops) for ops in short], [sum(not o[2] for o in ops) for ops in long]
    assert loop[1][0] - loop[0][0] == 6 and loop[1][1] - loop[0][1] > 0  # forward: 6 a block more; backward more


def test_the_ops_scale_with_the_tokens():
    spec = Lightning(6144, 64, 128)
    one, many = eager.mixer_terms(spec.eager_ops(1), 2), eager.mixer_terms(spec.eager_ops(4096), 2)
    assert [(t.forward * 4096, t.backward * 4096) for t in one] == [(t.forward, t.backward) for t in many]


def test_a_training_step_prices_them_under_eager(tmp_path):
    """plan's default --kernels eager: the micro-batch's non-matmul seconds rise by the declared ops' bytes at the
    bandwidth and their kernels at each kernel's cost (forward, backward; the forward again under full recompute),
    over the lightning layers alone (MiniMax-Text-01's 70 of 80; the softmax layers' attention declares its own)."""
    import json

    from tests.test_minimax import TEXT_01
    from tfcalc.architecture import lightning as arch
    from tfcalc.count.perf.hardware import perf_spec
    from tfcalc.count.training import micro_batch_time as mbt
    from tfcalc.presets import load
    from tfcalc.workload import Layout

    (tmp_path / "config.json").write_text(json.dumps({**TEXT_01, "num_hidden_layers": 8,
                                                      "layer_types": TEXT_01["layer_types"][:8]}))
    cfg, perf = load(str(tmp_path / "config.json")), perf_spec("h100-sxm")
    spec = next(b.mixer for _, b, _ in cfg.architecture.kinds() if isinstance(b.mixer, arch.Lightning))
    layers = sum(n for _, b, n in cfg.architecture.kinds() if isinstance(b.mixer, arch.Lightning))
    assert layers == 7
    B_, T, bw = 1, 2048, 3e12
    blocks = mbt.total_blocks(cfg)
    for recompute in ("none", "full"):
        layout = Layout(seq=T, global_batch=8, micro_batch=B_, recompute=recompute)
        eager.terms.cache_clear()
        step = mbt.micro_batch_time.__wrapped__(cfg, layout, 1e15, bw, perf)
        real = arch.Lightning.eager_ops
        try:
            arch.Lightning.eager_ops = lambda self, tokens, step=False: []
            eager.terms.cache_clear()
            without = mbt.micro_batch_time.__wrapped__(cfg, layout, 1e15, bw, perf)
        finally:
            arch.Lightning.eager_ops = real
            eager.terms.cache_clear()
        again = recompute == "full"
        terms = eager.mixer_terms(spec.eager_ops(B_ * T), 2)
        f, b = sum(t.forward for t in terms), sum(t.backward for t in terms)
        kf, kb = sum(t.forward_kernels for t in terms), sum(t.backward_kernels for t in terms)
        by_hand = layers * ((f * (1 + again) + b) / bw + (kf * (1 + again) + kb) * perf.kernel_s) / blocks
        assert step.block_other_s - without.block_other_s == pytest.approx(by_hand, rel=1e-9)
