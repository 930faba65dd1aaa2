"""FSDP2 under a pipeline, measured on 2 gloo ranks (tests/measure/pipeline_fsdp_rank.py runs a stage's
micro-batches as torch.distributed.pipelining does) against tfcalc.count.training.pipeline_fsdp: after the
micro-batches' backwards every unit's gradient is held unsharded in the reduce dtype (fp32), Ψ·4 bytes, and
every unit's parameters unsharded in bf16, Ψ·2 bytes -- on each rank, whatever the sharding."""

import json
import sys
from pathlib import Path

import pytest

from tfcalc.count.training.pipeline_fsdp import accumulated_grad_bytes, stage_gathered
from tfcalc.count.training.rank_memory import fp32_master_shard, optimizer_element_bytes
from tfcalc.count.training.sharding import grad_element_bytes
from tfcalc.measure.launch import run_ranks
from tfcalc.workload import Layout

RANK = Path(__file__).with_name("pipeline_fsdp_rank.py")


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    folder = tmp_path_factory.mktemp("pipeline_fsdp")
    out, logs = folder / "out.json", [str(folder / f"rank{r}.log") for r in range(2)]
    run_ranks([sys.executable, str(RANK), str(out)], 2, logs, 180)
    return json.loads(out.read_text())


def test_unsharded_gradients_and_weights_are_the_derivation(measured):
    psi = 16 * 33 + 33 + 33 * 16 + 16 + 16 * 16  # the rank file's three linears: 1,361 parameters
    layout = Layout(pp=2, dp=measured["world"], zero=3, seq=8, global_batch=4, grad_dtype="fp32")
    assert measured["accumulated_dtypes"] == ["torch.float32"]
    assert measured["accumulated_grad_bytes"] == accumulated_grad_bytes(layout, psi, 4) == 4 * 1361  # exact
    assert stage_gathered(layout)
    # bf16, every unit still unsharded: a view of the all-gather's buffer, rows padded to a multiple of N (33 -> 34
    # in the first weight and bias: 17 elements more), which the plan's Ψ·e_w leaves out
    assert measured["unsharded_param_bytes"] == 2 * (psi + 17)


def test_fsdp2_mixed_precision_keeps_one_fp32_shard(measured):
    """rank_memory, step 4: under MixedPrecisionPolicy(bf16, reduce fp32) the shard is fp32 (the master), its
    gradient fp32, Adam's moments fp32: 16 bytes an element of the shard, no 16-bit shard beside it."""
    n = measured["shard_elements"]  # the padded shard: 1,378 / 2 = 689
    assert n == (psi_padded := 16 * 34 + 34 + 33 * 16 + 16 + 16 * 16) // measured["world"] and psi_padded == 1378
    assert (measured["shard_bytes"], measured["shard_grad_bytes"], measured["moment_bytes"]) == (4 * n, 4 * n, 8 * n)
    layout = Layout(dp=measured["world"], zero=3, seq=8, global_batch=4, grad_dtype="fp32")
    assert fp32_master_shard(layout)  # the plan's shard: no bf16 weights, fp32 gradients, master + moments
    assert grad_element_bytes(layout) + optimizer_element_bytes("bf16") == 16
