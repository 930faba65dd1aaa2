"""What `plan --measure` runs (no ranks started here): the small copy, the layout reduced to N ranks,
and how recorded calls are named and sized."""

import dataclasses

import pytest
import torch

from tfcalc.count.model.params import total
from tfcalc.count.training.layout import Layout, check_layout
from tfcalc.count.training.shard import check_tp
from tfcalc.measure.collectives import Call, _payload, cause
from tfcalc.presets import load
from tfcalc.report.plan_check import MEASURE_PARAMS, measured_layout, small_copy


@pytest.mark.parametrize("preset", ["llama2-70b", "llama2-7b", "gpt2", "bert-base"])
@pytest.mark.parametrize("tp", [1, 2, 4])
def test_small_copy_keeps_the_architecture_and_splits_evenly(preset, tp):
    cfg = load(preset)
    small = small_copy(cfg, tp)
    check_tp(small, tp)
    assert total(small) < MEASURE_PARAMS
    assert (small.kv_heads < small.n_head) == (cfg.kv_heads < cfg.n_head)  # GQA stays GQA
    for field in ("norm", "activation", "gated_ffn", "attn_bias", "ffn_bias", "pos_encoding", "tie_embeddings",
                  "arch", "pooler", "lm_head", "final_norm"):
        assert getattr(small, field) == getattr(cfg, field), field
    assert small.vocab_size % 2 == 1  # uneven torch.chunk blocks and FSDP2 padding show


def test_measured_layout_on_n_ranks():
    planned = Layout(tp=8, pp=2, dp=4, seq=4096, global_batch=1024, micro_batch=4, zero=3, recompute="selective",
                     sequence_parallel=True)
    ran = measured_layout(planned, 4)
    assert (ran.tp, ran.pp, ran.dp, ran.zero, ran.recompute, ran.sequence_parallel) == (4, 1, 1, 0, "none", True)
    assert (ran.seq, ran.micro_batch, ran.micro_batches, ran.dtype) == (64, 2, 2, "fp32")
    ran = measured_layout(dataclasses.replace(planned, tp=2, dp=16), 4)
    assert (ran.tp, ran.dp, ran.zero) == (2, 2, 3)
    check_layout(small_copy(load("llama2-70b"), ran.tp), ran)


def test_payload_and_cause_of_recorded_calls():
    t = torch.empty(4, 8)  # 128 bytes
    assert _payload("all_reduce", [t], 2) == 128
    assert _payload("all_gather", [t], 4) == 512  # a functional gather names only its input
    assert _payload("all_gather", [torch.empty(16, 8), t], 4) == 512  # a c10d gather: output and input
    assert _payload("reduce_scatter", [torch.empty(16, 8), t], 4) == 512  # the scattered input
    assert cause(Call("all_gather", "dp", "forward", 1), False) == "zero_params"
    assert cause(Call("reduce_scatter", "dp", "backward", 1), False) == "dp_grads"
    assert cause(Call("all_reduce", "tp", "loss", 1), True) == "tp_loss"
    assert cause(Call("all_reduce", "tp", "backward", 1), True) == "tp_norm_grads"
    assert cause(Call("all_reduce", "tp", "backward", 1), False) == "tp_activations"
