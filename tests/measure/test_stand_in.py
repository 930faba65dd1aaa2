"""Stand-in matmuls (tfcalc.measure.stand_in) keep every byte of a memory measurement: the same ops make
the same tensors (shapes, strides, dtypes) in the same order, and autograd saves the same bytes."""

import pytest
import torch
from conftest import BERT_LIKE, VASWANI_LIKE, tiny
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from tfcalc.measure import memory, stand_in
from tfcalc.workload import Workload


class Trace(TorchDispatchMode):
    """Every op dispatched, with the layout of each tensor it returns."""

    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        layouts = tuple((tuple(t.shape), t.stride(), t.dtype) for t in tree_flatten(out)[0]
                        if isinstance(t, torch.Tensor))
        self.ops.append((str(func), layouts))
        return out


def _training_step(cfg, dtype, with_stand_in):
    """One measured training run (memory.run_model), traced; the stand-in below the trace, so the trace
    sees each matmul op and what it returned, not how the stand-in made it."""
    torch.manual_seed(0)
    swap = stand_in.MatmulStandIn() if with_stand_in else None
    trace = Trace()
    if swap is not None:
        swap.__enter__()
    try:
        with trace:
            saved = memory.run_model(cfg, Workload(batch=2, seq=12, dtype=dtype), "cpu", True, "adam-mixed")
    finally:
        if swap is not None:
            swap.__exit__(None, None, None)
    return trace.ops, saved, swap


KINDS = {"gpt2-like": {},
         "gqa-rope": dict(n_kv_head=2, pos_encoding="rope", norm="rmsnorm", norm_bias=False, gated_ffn=True,
                          activation="silu"),
         "bert-like": BERT_LIKE, "vaswani-like": VASWANI_LIKE, "odd-vocab": dict(vocab_size=61)}


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
@pytest.mark.parametrize("kind", KINDS, ids=list(KINDS))
def test_stand_in_matmuls_leave_every_tensor_and_saved_byte_unchanged(kind, dtype):
    cfg = tiny(**KINDS[kind])
    real_ops, real_saved, _ = _training_step(cfg, dtype, with_stand_in=False)
    fake_ops, fake_saved, swap = _training_step(cfg, dtype, with_stand_in=True)
    assert swap.stood_in > 0  # the forward and backward matmuls were stood in for
    assert fake_saved == real_saved
    assert fake_ops == real_ops  # op by op: the same tensors, in the same order, so the same bytes at every point


def test_stand_in_answers_only_matmuls_and_writes_its_output():
    a, b = torch.randn(3, 4, dtype=torch.float16), torch.randn(4, 5, dtype=torch.float16)
    with stand_in.MatmulStandIn() as swap:
        c = a @ b
        d = torch.addmm(torch.zeros(5, dtype=torch.float16), a, b)
        e = torch.bmm(a[None], b[None])
        f = a + 1
    assert swap.stood_in == 3
    assert c.shape == (3, 5) and d.shape == (3, 5) and e.shape == (1, 3, 5) and c.dtype == torch.float16
    assert bool(((c >= -1) & (c < 1)).all())  # written: noise in [-1, 1), not uninitialized memory
    assert torch.equal(f, a + 1)


def test_probe_calls_a_dtype_slow_below_half_of_fp32():
    slow = stand_in.Probe("fp16", 1.5e9, 45e9)
    assert slow.slow and "--dtype fp32 is the faster choice" in slow.note() and "\n" not in slow.note()
    assert not stand_in.Probe("bf16", 90e9, 45e9).slow
    assert stand_in.probe("fp32", "cpu") is None and stand_in.probe("bf16", "cuda") is None
    measured = stand_in.probe("bf16", "cpu")
    assert measured.rate > 0 and measured.fp32_rate > 0


def test_a_slow_dtype_is_said_before_the_run_and_recorded(monkeypatch):
    from dataclasses import asdict

    monkeypatch.setattr(stand_in, "probe", lambda dtype, kind: stand_in.Probe(dtype, 1e9, 1e11))
    events = []
    request = dict(config=asdict(tiny()), workload=dict(batch=1, seq=8, dtype="fp16"), device="cpu",
                   training=True, optimizer="adam-mixed")
    answer = memory.measure_in_process(request, lambda kind, text: events.append((kind, text)))
    assert events[0][0] == "note" and "fp16 matmuls are slow" in events[0][1]
    assert [text for kind, text in events if kind == "step"] == list(memory.run_steps(True)[1:])
    assert answer["stand_in"] and "stood in" in answer["method"]
