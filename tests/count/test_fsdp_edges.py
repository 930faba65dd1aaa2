"""ZeRO-3's collectives at the step's ends (tfcalc.count.training.fsdp_edges) against a hand derivation.

Llama 3.1 8B under FSDP2 on 8 ranks, one micro-batch, resharded after forward: the root unit holds the embedding
and the output layer (128,256 × 4,096 each) and the final norm (4,096); a block 218,112,000 elements (Q and O
4,096², K and V 4,096 × 1,024, gate, up and down 4,096 × 14,336, two norms of 4,096). Each rank's shards are an
eighth (every dimension divides by 8: no padding). The step's all-gathers move the root once and each block
twice, its reductions each unit once; the ends are the root and one block each way.
"""

from __future__ import annotations

import pytest

from tfcalc.count.training.comm import dp_collectives
from tfcalc.count.training.fsdp_edges import edge_s, edge_shares
from tfcalc.presets import load
from tfcalc.workload import Layout

ROOT = 2 * 128256 * 4096 + 4096
BLOCK = 2 * 4096 * 4096 + 2 * 4096 * 1024 + 3 * 4096 * 14336 + 2 * 4096


def test_shares_by_hand():
    first, last = edge_shares(32, 32 * BLOCK // 8, ROOT // 8, 1, True)
    assert first == pytest.approx((ROOT + BLOCK) / (2 * 32 * BLOCK + ROOT))
    assert last == pytest.approx((ROOT + BLOCK) / (32 * BLOCK + ROOT))
    # two micro-batches: only the first one's gathers and the last one's reductions are at the ends
    assert edge_shares(32, 32 * BLOCK // 8, ROOT // 8, 2, True)[1] == pytest.approx(last / 2)
    # kept gathered after forward: the backward gathers nothing again
    kept = edge_shares(32, 32 * BLOCK // 8, ROOT // 8, 1, False)[0]
    assert kept == pytest.approx((ROOT + BLOCK) / (32 * BLOCK + ROOT))


def test_llama3_8b_units_and_seconds():
    cfg = load("llama3-8b", {})
    layout = Layout(dp=8, zero=3, seq=8192, global_batch=8, micro_batch=1, grad_dtype="fp32")
    out = {(c.cause, c.op): c for c in dp_collectives(cfg, layout, 0, 0)}
    gather, reduce = out[("zero_params", "all_gather")], out[("dp_grads", "reduce_scatter")]
    assert gather.payload_bytes == 2 * (2 * 32 * BLOCK + ROOT)  # bf16, gathered: the units' whole tensors
    assert reduce.payload_bytes == 4 * (32 * BLOCK + ROOT)  # fp32 reductions
    assert gather.edge_share == pytest.approx((ROOT + BLOCK) / (2 * 32 * BLOCK + ROOT))
    assert reduce.edge_share == pytest.approx((ROOT + BLOCK) / (32 * BLOCK + ROOT))
    # priced at 1 s a byte-share: the ends' seconds are the shares of each collective's seconds
    assert edge_s(out.values(), lambda c: 1.0) == pytest.approx(gather.edge_share + reduce.edge_share)


def test_other_stages_have_no_ends():
    cfg = load("llama3-8b", {})
    ddp = Layout(dp=8, zero=1, seq=8192, global_batch=8, micro_batch=1)
    assert all(c.edge_share == 0.0 for c in dp_collectives(cfg, ddp, 0, 8_030_261_248))
