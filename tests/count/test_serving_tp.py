"""Tensor-parallel serving (tfcalc.count.serving.serving_tp, `infer --tp`): per-GPU weights against the plan's
sharding of the real tensors (tfcalc.count.training.shard, itself checked against DTensor), the worked example's
all-reduce time by hand, KV-head replication, the closed-form decode sum under TP, and the hostile cases
through the command line."""

from __future__ import annotations

import math

import pytest
from conftest import assert_one_line_error, tiny

import tfcalc
from tfcalc.count.model import quant
from tfcalc.count.model.memory import kv_cache_bytes
from tfcalc.count.serving import serving_tp, static as serving
from tfcalc.count.serving.roofline import Ceilings, decode_step
from tfcalc.count.training.shard import stage_tensors, tp_local_shape
from tfcalc.presets import load
from tfcalc.workload import Workload

FP16 = quant.plain("fp16")


@pytest.mark.parametrize("name,tp", [("llama2-70b", 4), ("llama2-70b", 8), ("llama2-7b", 2), ("gpt2", 4)])
def test_weights_per_gpu_equal_the_plans_shards(name, tp):
    """Megatron's split as the plan shards the real tensors (rank 0's torch.chunk block of each): the same
    bytes per GPU when T divides the KV heads (the plan splits an untied embedding by its hidden width,
    serving by its vocabulary: the same count)."""
    cfg = load(name)
    by_plan = sum(math.prod(tp_local_shape(t, tp)) * n for t, n in stage_tensors(cfg, 1, 0)) * 2
    assert serving_tp.weights_per_gpu(cfg, FP16, tp)["total"] == by_plan


def test_worked_example_all_reduces_by_hand():
    """The module docstring: Llama 2 70B, T = 4, batch 1, fp16, A100 NVLink (300 GB/s × 0.8): 161 ring
    all-reduces of 16,384 bytes (the embedding's and 2 per layer) and one all-gather of the 64,000 bytes of
    logits, each as NCCL's cost model (src/graph/tuning.cc) runs it: ring LL, latency 3.6 µs + 0.47 µs per
    step (6 for the all-reduce, 3 for the all-gather), the bytes sent (2·3/4, 3/4) at a quarter of the bus
    bandwidth (LL, all-reduce) and a third (LL, a one-node all-gather)."""
    cfg = load("llama2-70b")
    t = serving_tp.TensorParallel(4, "nvlink", 300e9, 2e-6, 0.8)
    by_hand = 161 * ((3.6 + 6 * 0.47) * 1e-6 + 24_576 / 60e9) + (3.6 + 3 * 0.47) * 1e-6 + 48_000 / 80e9
    assert serving_tp.comm_seconds(cfg, t, 1, 1, 2, decode=True) == pytest.approx(by_hand, rel=1e-12)
    assert by_hand == pytest.approx(1.10518e-3, rel=1e-5)
    r = tfcalc.infer("llama2-70b", batch=1, seq=128, gen=2, dtype="fp16", device_spec="a100-80gb", tp=4).to_json()
    assert r["tensor_parallel"]["decode_comm_s_per_step"] == pytest.approx(by_hand, rel=1e-12)
    assert r["tensor_parallel"]["allreduces_per_decode_step"] == 161
    assert r["predicted"]["overhead"]["decode_step"]["comm_s"] == pytest.approx(by_hand, rel=1e-12)


def test_kv_heads_replicated_when_tp_exceeds_them():
    """8 query heads, 2 KV heads, T = 4: each GPU holds 2 query heads and one KV head (each KV head on 2
    GPUs): K/V weights and cache are 1/2 per GPU, not 1/4; the query and FFN weights 1/4."""
    cfg = tiny(n_head=8, n_kv_head=2, d_model=64, n_layer=2, max_seq_len=64)
    assert serving_tp.kv_share(cfg, 4) == serving_tp.kv_share(cfg, 2) * 1 == pytest.approx(0.5)
    assert serving_tp.kv_replicated(cfg, 4) == 2 and serving_tp.kv_replicated(cfg, 2) == 1
    step = decode_step(cfg, 3, 20, FP16, "fp16")
    shard = serving_tp.shard_step(step, cfg, 4, 0)
    rows, whole = {r.component: r for r in shard.rows}, {r.component: r for r in step.rows}
    assert rows["attn_k"].weight_bytes * 2 == whole["attn_k"].weight_bytes
    assert rows["attn_q"].weight_bytes * 4 == whole["attn_q"].weight_bytes
    assert rows["attn_qk"].kv_bytes * 2 == whole["attn_qk"].kv_bytes
    assert rows["attn_qk"].flops * 4 == whole["attn_qk"].flops
    c = Ceilings(1e12, 1e12, "test")
    est = serving.estimate(cfg, Workload(batch=3, seq=10, gen=5), FP16, c, None,
                           serving_tp.TensorParallel(4, "nvlink", 300e9, 2e-6, 0.8))
    assert est.kv_cache_bytes * 2 == kv_cache_bytes(cfg, Workload(batch=3, seq=15, dtype="fp16"))


def test_tp_closed_form_equals_the_step_by_step_sum():
    cfg = tiny(n_head=8, n_kv_head=4, d_model=64, sliding_window=6, max_seq_len=256)
    c, t = Ceilings(2e12, 1e12, "test"), serving_tp.TensorParallel(2, "nvlink", 300e9, 2e-6, 0.8)
    est = serving.estimate(cfg, Workload(batch=2, seq=3, gen=60), FP16, c, None, t)
    other = serving_tp.weights_per_gpu(cfg, FP16, 2, decode=True)["other"]
    steps = [serving_tp.shard_step(decode_step(cfg, 2, 3 + j, FP16, "fp16"), cfg, 2, other) for j in range(1, 60)]
    assert est.decode_s_per_token == pytest.approx(sum(s.time_s(c) for s in steps) / 59, rel=1e-12)


def test_two_gpus_decode_faster_and_hold_half():
    one = tfcalc.infer("llama2-13b", batch=1, seq=512, gen=64, device_spec="h100-sxm").to_json()
    two = tfcalc.infer("llama2-13b", batch=1, seq=512, gen=64, device_spec="h100-sxm", tp=2).to_json()
    assert two["decode_s_per_token"] < one["decode_s_per_token"]
    assert two["weights_bytes"] < one["weights_bytes"] / 2 + 2**20  # norms replicated: a little over half
    assert two["kv_cache_bytes"] * 2 == one["kv_cache_bytes"]
    assert two["memory_bytes"] == one["memory_bytes"] - 512 * 2**20  # NCCL's buffers, named
    assert two["runtime_reserved_bytes"] == {"cuda_context": 714_670_080, "comm_buffers": 512 * 2**20}
    assert one["tensor_parallel"] is None and one["tp"] == 1


def test_tp_1_is_the_single_gpu_estimate():
    a = tfcalc.infer("gpt2", batch=[1, 8], seq=100, gen=20).to_json()
    b = tfcalc.infer("gpt2", batch=[1, 8], seq=100, gen=20, tp=1).to_json()
    assert a == b


@pytest.mark.parametrize("args,message", [
    (("--tp", "0"), "--tp must be a positive integer"),
    (("--tp", "-2"), "--tp must be a positive integer"),
    (("--tp", "16"), "more GPUs than one node holds (8)"),
    (("--tp", "3"), "does not divide llama2-7b's 32 query heads"),
    (("--tp", "2", "--measure", "--draft", "llama2-7b", "--accept-rate", "0.5"), "not measured"),
    (("--tp", "2", "--device-spec", "h100-nvl", "--tp", "4"), "more GPUs than one node holds (2)"),
])
def test_hostile_tp(cli, args, message):
    assert_one_line_error(cli("infer", "llama2-7b", "--seq", "16", "--gen", "4", *args), message)


def test_tp_that_neither_divides_nor_is_divided_by_the_kv_heads(cli, tmp_path):
    r = cli("infer", "llama2-7b", "--set", "n_kv_head=8", "--set", "n_head=48", "--set", "d_model=6144", "--tp", "6",
            "--seq", "16", "--gen", "4", "--device-spec", "h100-sxm")
    assert_one_line_error(r, "8 KV heads: one must divide the other")


def test_tp_not_a_number_is_a_usage_error(cli):
    assert_one_line_error(cli("infer", "gpt2", "--tp", "two"), "Invalid value for '--tp'")
