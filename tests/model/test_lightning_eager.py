"""Lightning attention's eager ops (tfcalc.architecture.lightning_eager, ``Lightning.eager_ops``) against the aten ops
tfcalc's module (tfcalc.model.lightning.LightningModule) dispatches forward and backward on the CPU, under a
TorchDispatchMode, op for op in the order it runs them: each kernel's bytes read and written per token more from
10 to 14 tokens a sequence (weight-sized operands do not grow), less the matmuls (mm, bmm) and the block scan's
kernels: those on a block's tensors ((B, H, c, ·) with c the block's length, the (H, ·, ·) decays, the (B, H, d, d)
state), which the declaration leaves out (its docstring) and this test counts, so that what is left out is known."""

from __future__ import annotations

from functools import partial

import pytest
import torch
from eager_checks import Kernels, block_other_s, forward_backward, priced_s, seeded, tensors

from tfcalc.architecture.lightning import Lightning
from tfcalc.count.perf import eager

pytestmark = pytest.mark.filterwarnings("ignore")

MATMULS = {"mm", "addmm", "bmm"}
B, H, D, DM, BLOCK = 2, 3, 5, 7, 4  # w = 15, 3w = 45: H, d, d_model no length below, nor B
SHORT, LONG = 10, 14  # blocks of 4, 4, 2 and 4, 4, 4, 2


class Ops(Kernels):
    """(op, bytes, on (B, T, ·)) of every kernel but the views and the matmuls: its tensor inputs read (a list's
    too; every argument: no copy_ or out= runs here), its outputs written (new_zeros reads nothing); whether one
    of them is a (B, T, ·) tensor."""

    def __init__(self, T: int):
        super().__init__(MATMULS)
        self.T = T

    def record(self, name, args, kwargs, out):
        read = tensors([*args, *(kwargs or {}).values()]) if name != "new_zeros" else []  # it reads only q's dtype
        wrote = tensors(out if isinstance(out, (list, tuple)) else [out])
        self.ops.append((name, sum(t.numel() * t.element_size() for t in read + wrote),
                         any(t.dim() == 3 and t.shape[:2] == (B, self.T) for t in read + wrote)))


def _per_token(ops: list, forward: bool) -> list:
    """(op, bytes, per token): the block scan's kernels are, forward, those from S's new_zeros to the blocks' outputs'
    cat; backward, those from the first on no (B, T, ·) tensor (the gate's and the norm's are) to the first cat (dQ's,
    dK's, dV's blocks). A block's tensors are (B, H, c, ·), its decays (H, ·, ·), its state (B, H, d, d)."""
    names = [name for name, *_ in ops]
    first = names.index("new_zeros") if forward else next(i for i, (*_, bt) in enumerate(ops) if not bt)
    return [(name, b, not first <= i < names.index("cat")) for i, (name, b, _) in enumerate(ops)]


def _measure(dtype, T: int, block: int = BLOCK):
    from tfcalc.model.lightning import LightningModule

    m = seeded(lambda: LightningModule(Lightning(DM, H, D, block)), dtype)
    m.at_layer(1, 4)
    with torch.no_grad():  # the slopes, made once a module and device (LightningModule.slopes), not a step's
        m(torch.zeros(1, 1, DM, dtype=dtype))
    fwd, bwd = forward_backward(m, torch.randn(B, T, DM, dtype=dtype, requires_grad=True), partial(Ops, T))
    return _per_token(fwd, True), _per_token(bwd, False)


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


@pytest.mark.parametrize("T", [2, 4, 8, 10, 14, 18])
@pytest.mark.parametrize("dtype, a", [(torch.bfloat16, 2), (torch.float32, 4)])
def test_the_block_scans_ops_are_the_modules_op_for_op(T, dtype, a):
    """The block scan's kernels (one block, a short one, whole blocks, a short last one, several middle ones), each
    op's bytes whole as measured, the decays' and the weight-sized operands' included, in order: what
    ``scan_eager_ops`` declares, forward and backward (bf16: the decays' four casts; fp32: none)."""
    spec = Lightning(DM, H, D, BLOCK)
    measured = [[b for _, b, per_token in ops if not per_token] for ops in _measure(dtype, T)]
    terms = [(t.forward_kernels, t.backward_kernels, t.forward, t.backward) for t in
             (eager.mixer_terms([op], a)[0] if eager.mixer_terms([op], a) else eager.Term("", 0, 0, 0, 0)
              for op in spec.scan_eager_ops(B, T))]
    assert [f for kf, _, f, _ in terms if kf] == measured[0]
    assert [b for _, kb, _, b in terms if kb] == measured[1]


def test_the_ops_scale_with_the_tokens():
    spec = Lightning(6144, 64, 128)
    one, many = eager.mixer_terms(spec.eager_ops(1), 2), eager.mixer_terms(spec.eager_ops(4096), 2)
    assert [(t.forward * 4096, t.backward * 4096) for t in one] == [(t.forward, t.backward) for t in many]


def test_a_training_step_prices_them_under_eager(tmp_path):
    """plan's default --kernels eager: the micro-batch's non-matmul seconds rise by the declared ops' bytes at the
    bandwidth and their kernels at each kernel's cost (forward, backward; the forward again under full recompute),
    the per-token ops' and the block scan's, over the lightning layers alone (7 of MiniMax-Text-01's first 8; the
    softmax layer's attention declares its own)."""
    import json

    from test_minimax import TEXT_01

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
        silenced = {(arch.Lightning, "eager_ops"): lambda self, tokens, step=False: [],
                    (arch.Lightning, "scan_eager_ops"): lambda self, batch, seq: []}
        declared, without = block_other_s(cfg, layout, silenced, bw, perf)
        ops = spec.eager_ops(B_ * T) + spec.scan_eager_ops(B_, T)
        by_hand = layers * priced_s(ops, 2, recompute, bw, perf.kernel_s) / blocks
        assert declared - without == pytest.approx(by_hand, rel=1e-9)
