"""Which sub-layers a runtime step lets add their output into the residual stream (layers.add_projection).

The answer belongs to the class whose forward runs: a subclass that writes its own forward must declare it
again, so it cannot inherit a fold its forward does not do (block._forward_adds_residual)."""
from __future__ import annotations

import torch

from tfcalc.model import build_model
from tfcalc.model.block import _forward_adds_residual
from tfcalc.model.ffn import FeedForward
from tfcalc.model.kv_shared import ReaderAttention
from tfcalc.model.layers import Attention, add_projection
from tfcalc.model.parallel_hybrid import ParallelMixersModule
from tfcalc.presets import load


def test_the_classes_that_fold_say_so_and_a_subclass_with_its_own_forward_does_not_inherit_it():
    for cls in (Attention, FeedForward, ReaderAttention):
        assert vars(cls)["adds_residual"] is True
    assert "adds_residual" not in vars(ParallelMixersModule)

    class Plain(Attention):  # inherits Attention's forward: the fold is Attention's
        pass

    class OwnForward(Attention):  # a new forward that takes no residual
        def forward(self, x, rope=None, mask=None, store=None):
            return x

    model = build_model(load("gpt2", ["n_layer=1", "d_model=32", "n_head=2", "vocab_size=64",
                                      "max_seq_len=16"]), device="meta")
    attn = model.blocks[0].attn
    assert _forward_adds_residual(attn)
    attn.__class__ = Plain
    assert _forward_adds_residual(attn)
    attn.__class__ = OwnForward
    assert not _forward_adds_residual(attn)


def test_the_fold_adds_into_the_stream_as_a_sum_apart_would():
    torch.manual_seed(0)
    lin = torch.nn.Linear(8, 6, bias=False)
    y, stream = torch.randn(2, 3, 8), torch.randn(2, 3, 6)
    want = stream + lin(y)
    with torch.no_grad():
        got = add_projection(stream.clone(), lin, y)
    torch.testing.assert_close(got, want)
