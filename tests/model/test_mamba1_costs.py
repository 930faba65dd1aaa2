"""Mamba-1's costs outside the counts of FLOPs and saved activations (tfcalc.architecture.mamba1), each against what a
tiny model's forward actually does on torch, under a TorchDispatchMode:

- the prefill's working set (tfcalc.count.model.memory.forward_working_set): the peak of the bytes the storages its
  ops allocate hold at once (torch keeps no peak counter for CPU memory; each storage counted once, from the op
  that creates it until the last tensor on it dies), where the scan's two (T, I, N) tensors are fp32 whatever the
  activations' dtype.
"""

from __future__ import annotations

import weakref

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from tfcalc.workload import Workload

pytestmark = pytest.mark.filterwarnings("ignore")


class LiveBytes(TorchDispatchMode):
    """The peak of the bytes alive in storages that ops allocate: a storage counts from the first op output on it
    until the last tensor on it is gone (a finalizer per tensor); storages in ``skip`` (weights, the input) never."""

    def __init__(self, skip=()):
        super().__init__()
        self.skip, self.refs, self.size, self.live, self.peak = set(skip), {}, {}, 0, 0

    def _drop(self, ptr: int) -> None:
        self.refs[ptr] -= 1
        if not self.refs[ptr]:
            del self.refs[ptr]
            self.live -= self.size.pop(ptr)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            if not isinstance(t, torch.Tensor) or t.untyped_storage().data_ptr() in self.skip:
                continue
            ptr = t.untyped_storage().data_ptr()
            if ptr not in self.refs:
                self.refs[ptr], self.size[ptr] = 0, t.untyped_storage().nbytes()
                self.live += self.size[ptr]
                self.peak = max(self.peak, self.live)
            self.refs[ptr] += 1
            weakref.finalize(t, self._drop, ptr)
        return out


def _cfg(**changes):
    from tfcalc.config import from_mapping

    base = dict(n_layer=2, d_model=32, n_head=4, vocab_size=61, max_seq_len=512, pos_encoding="none", norm="rmsnorm",
                hybrid_pattern="MM", hybrid_m_mixer="mamba_one", ssm_inner=64, ssm_state_size=16)
    return from_mapping({**base, **changes})


@pytest.mark.parametrize("norm", ["none", "weighted"])
@pytest.mark.parametrize("dtype, e", [("bf16", 2), ("fp32", 4)])
@pytest.mark.parametrize("seq", [64, 200])
def test_prefill_working_set_is_the_measured_peak(norm, dtype, e, seq):
    """The no-grad forward's peak (LiveBytes) against forward_working_set, to the byte up to what the count's
    convention adds or leaves out by hand: its stage counts the block's output projection beside x and the norm
    output (3h; out_proj has not run at the scan's peak: e·h a token more), not the layer's A = -exp(A_log)
    (4·I·N bytes whatever the tokens), and with dt/B/C norms x_proj's output where the normed dt is already freed
    (e·R a token more). Peak: x and the norm output (2h), in_proj's, the convolution's and x_proj's outputs
    (2I + I + R + 2N) in e; dt, exp(dt·A) and the states, h·C, D·x, their sum and below fp32 x's copy in fp32
    (I + 2·I·N + 3I + I). Before: the count was 0.48x the peak in bf16 (the (T, I, N) tensors at 2 bytes)."""
    from tfcalc.count.model import memory as mem
    from tfcalc.model import build_model

    cfg = _cfg(ssm_bcdt_norm=norm)
    torch.manual_seed(0)
    model = build_model(cfg, "cpu").to(torch.bfloat16 if e == 2 else torch.float32).eval()
    idx = torch.randint(0, 61, (2, seq))
    skip = {t.untyped_storage().data_ptr() for t in [*model.parameters(), *model.buffers(), idx]}
    with torch.no_grad(), LiveBytes(skip) as live:
        model(idx)
    spec = cfg.architecture.output.layer(0).mixer
    h, i, n, r = cfg.d_model, spec.inner, spec.state_size, spec.dt_rank
    tokens = 2 * seq
    by_hand = e * tokens * h - 4 * i * n + (e * tokens * r if norm != "none" else 0)
    assert mem.forward_working_set(cfg, Workload(batch=2, seq=seq, dtype=dtype)) - live.peak == by_hand
