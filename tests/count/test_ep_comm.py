"""The MoE's exchange under attention DP (`infer --ep-comm`, tfcalc.count.serving.ep_all_to_all.comm_method and
allgather_reducescatter): TensorRT-LLM's allgather + reduce-scatter priced by hand, its rule for the default, and
the CLI's flag and JSON."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from conftest import assert_one_line_error

from tfcalc.count.serving import expert_parallel as ep
from tfcalc.errors import InputError
from tfcalc.presets import load

QWEN = load("qwen3-30b-a3b")  # 48 layers, 128 experts, top-k 8, d 2048
BW, ALPHA, EFF = 450e9, 2e-6, 0.8


def layout(E: int, comm: str = "allgather", per_node: int = 8) -> ep.ExpertLayout:
    return ep.ExpertLayout(E, 1, E, 0, per_node, "nvlink", BW, ALPHA, EFF, 50e9, 5e-6, 0.9, comm=comm)


def test_allgather_reducescatter_by_hand():
    """E = 4, t = 10 tokens a GPU, FP8: a gathered row is 2,048 FP8 bytes + 8 int32 ids + 8 fp32 weights = 2,112;
    a scattered row 2,048 bf16 = 4,096. Each GPU receives 3 × 10 rows and sends 3 × 10 per layer, 48 layers:
    48 × 30 × (2,112 + 4,096) = 8,939,520 bytes; 2 × 48 × 2 µs + bytes / (450 GB/s × 0.8)."""
    a = ep.all_to_all(QWEN, layout(4), 10, 2, fp8=True)
    assert a.how == "allgather"
    assert a.dispatch_bytes_per_token == 3 * 2112 and a.combine_bytes_per_token == 3 * 4096
    assert a.intra_bytes == 8_939_520 and a.network_bytes == 0
    assert a.seconds == pytest.approx(2 * 48 * ALPHA + 8_939_520 / (BW * EFF), rel=1e-12)
    bf16 = ep.all_to_all(QWEN, layout(4), 10, 2, fp8=False)  # the gathered row's activations bf16: 4,096 + 64
    assert bf16.dispatch_bytes_per_token == 3 * (4096 + 64)


def test_allgather_moves_every_row_alltoall_only_the_routed():
    """At E = 16 > top-k 8 inside one node (a 16-GPU node, for the arithmetic): the all-to-all sends a token's row to
    8 of 16 GPUs, 15/16 of them off the GPU (8 × 15/16 = 7.5 rows, FP8 rows of 2,048 + 16 fp32 scales = 2,112);
    the allgather sends it to all 15 others (rows of 2,112 with the ids and weights)."""
    a2a = ep.all_to_all(QWEN, layout(16, "alltoall", 16), 10, 2, fp8=True)
    ag = ep.all_to_all(QWEN, layout(16, "allgather", 16), 10, 2, fp8=True)
    assert a2a.dispatch_bytes_per_token == pytest.approx(7.5 * 2112)
    assert ag.dispatch_bytes_per_token == 15 * 2112
    assert a2a.combine_bytes_per_token == pytest.approx(7.5 * 4096) and ag.combine_bytes_per_token == 15 * 4096


def test_no_fullest_gpu_factor_for_the_allgather():
    """Every GPU receives every row under the allgather: the expert skew (step 7) does not stretch it."""
    a = ep.all_to_all(QWEN, layout(8), 100, 2, fp8=True)
    assert ep.fullest_all_to_all(a, QWEN, layout(8), 800) == a
    b = ep.all_to_all(QWEN, layout(8, "alltoall"), 100, 2, fp8=True)
    assert ep.fullest_all_to_all(b, QWEN, layout(8, "alltoall"), 800).seconds > b.seconds


@pytest.mark.parametrize("asked,E,D,expected", [
    ("auto", 8, 8, "allgather"),  # attention DP inside a node: no MNNVL, TensorRT-LLM's CUTLASS MoE allgathers
    ("auto", 8, 1, "alltoall"),  # attention TP 8 (D = 1): no attention DP
    ("auto", 16, 16, "alltoall"),  # across nodes: DeepEP's routes kept
    ("alltoall", 8, 8, "alltoall"), ("allgather", 16, 16, "allgather")])
def test_comm_method_rule(asked, E, D, expected):
    assert ep.comm_method(asked, E, D, 8) == expected


def test_comm_method_refuses_unknown():
    with pytest.raises(InputError, match="--ep-comm"):
        ep.comm_method("ring", 8, 8, 8)


def test_replace_keeps_the_rest_of_the_layout():
    assert replace(layout(8), comm="alltoall").comm == "alltoall"


def run(cli, *extra):
    return cli("infer", "qwen3-30b-a3b", "--device-spec", "h100-sxm", "--ep", "4", "--batch", "8", "--seq", "256",
               "--gen", "4", *extra)


def test_cli_json_names_the_method(cli):
    r = run(cli, "--json")
    assert r.code == 0, r.err
    x = json.loads(r.out)["expert_parallel"]
    assert x["ep_comm"]["method"] == "allgather" and x["decode_all_to_all"]["route"] == "allgather"
    r = run(cli, "--json", "--ep-comm", "alltoall")
    assert json.loads(r.out)["expert_parallel"]["decode_all_to_all"]["route"] == "alltoall"


def test_cli_bad_method_one_line(cli):
    assert_one_line_error(run(cli, "--ep-comm", "ring"), "--ep-comm")
    assert_one_line_error(cli("infer", "qwen3-30b-a3b", "--device-spec", "h100-sxm", "--ep-comm", "allgather"),
                          "--ep")
