"""FP8 recipes by name (issue 31; tfcalc.count.perf.fp8_recipes): each recipe's cast kernels and bytes against
torchao's own roofline model (torchao/testing/training/roofline_utils.py, get_tensor_memory_traffic_ovhd_s,
written out here kernel by kernel), rowwise_with_gw_hp's 16-bit weight gradient, the memory the recipes keep,
the published end-to-end speedups of torchao.float8 and torchtitan, and the refusals."""

import dataclasses

import pytest
from conftest import assert_one_line_error

import tfcalc
from tfcalc.count.perf.fp8_recipes import RECIPES, casts
from tfcalc.count.training.fp8 import fp8_cache_bytes
from tfcalc.count.training.layout import Layout
from tfcalc.count.training.plan import make_plan
from tfcalc.count.training.steptime import Hardware
from tfcalc.errors import InputError
from tfcalc.presets import load

M, K, N, E = 4096, 4096, 11008, 2  # Llama 2 7B's up projection, bf16

# torchao's roofline, unfused, per tensor role: a list of (pass, bytes per element) per kernel (bf16 2, fp8 1)
ROOFLINE = {
    "tensorwise": {"input": [("f", 2), ("f", 0), ("f", 2 + 1 + 1)],
                   "weight": [("f", 2), ("f", 0), ("f", 2 + 1), ("b", 2 + 1)],
                   "grad_output": [("b", 2), ("b", 0), ("b", 2 + 1 + 1)]},
    "rowwise": {"input": [("f", 2 + 1 + 2), ("b", 2 + 1)],
                "weight": [("f", 2 + 1), ("b", 2 * 2), ("b", 2 + 1)],
                "grad_output": [("b", 2 + 1 + 2), ("b", 2 + 1)]},
    "rowwise_with_gw_hp": {"input": [("f", 2 + 1)], "weight": [("f", 2 + 1), ("b", 0), ("b", 2 + 1)],
                           "grad_output": [("b", 2 + 1)]},
}
NUMEL = {"input": M * K, "weight": K * N, "grad_output": M * N}


@pytest.mark.parametrize("recipe", sorted(ROOFLINE))
def test_casts_are_torchaos_roofline_kernel_by_kernel(recipe):
    want = {"f": [0, 0], "b": [0, 0]}
    for role, kernels in ROOFLINE[recipe].items():
        for when, per in kernels:
            want[when][0] += per * NUMEL[role]
            want[when][1] += 1
    c = casts(recipe, M, K, N, E, E)
    assert (c.forward_bytes, c.forward_kernels) == tuple(want["f"])
    assert (c.backward_bytes, c.backward_kernels) == tuple(want["b"])


def test_delayed_is_transformer_engines_cast_transpose():
    """tfcalc.count.perf.fp8_time's worked example: 247,463,936 bytes forward, 180,355,072 backward."""
    c = casts("delayed", M, K, N, E, E)
    assert (c.forward_bytes, c.backward_bytes, c.forward_kernels, c.backward_kernels) == (
        247_463_936, 180_355_072, 2, 1)


def test_mxfp8_casts_each_tensor_along_both_dimensions():
    c = casts("mxfp8", M, K, N, E, E)
    per = 2 + 1 + 1 / 32  # read bf16, write one byte and a scale per 32
    assert c.forward_bytes == pytest.approx(per * (M * K + K * N))
    assert c.backward_bytes == pytest.approx(per * (M * K + K * N + 2 * M * N))
    assert (c.forward_kernels, c.backward_kernels) == (2, 4)


@pytest.mark.parametrize("recipe", ["tensorwise", "rowwise", "rowwise_with_gw_hp", "mxfp8"])
def test_fused_drops_the_first_read_of_input_and_output_gradient(recipe):
    """torchao's roofline with fuse_with_prev (torch.compile): those two tensors' first kernel reads nothing."""
    plain, fused = casts(recipe, M, K, N, E, E), casts(recipe, M, K, N, E, E, fused=True)
    assert plain.forward_bytes - fused.forward_bytes == E * M * K
    assert plain.backward_bytes - fused.backward_bytes == E * M * N
    assert plain.forward_kernels - fused.forward_kernels == (recipe == "tensorwise")


H100 = Hardware(989e12, 80 * 10**9, 450e9, 50e9, 8, fp8_peak_flops_per_s=1979e12)


def layout(**over) -> Layout:
    return Layout(**dict(dict(dp=8, zero=3, seq=8192, global_batch=8, recompute="op", kernels="fused",
                              compute_dtype="fp8"), **over))


def test_rowwise_with_gw_hp_runs_the_weight_gradient_at_the_16_bit_rate():
    cfg = load("llama3-8b", ["n_layer=2"])
    rowwise = make_plan(cfg, layout(fp8_recipe="rowwise"), H100, None).step
    hp = make_plan(cfg, layout(fp8_recipe="rowwise_with_gw_hp"), H100, None).step
    bf16 = make_plan(cfg, layout(compute_dtype=None), H100, None).step
    assert rowwise.matmul_s < hp.matmul_s < bf16.matmul_s
    # every other GEMM as rowwise's: the difference is the weight gradients' FP8 vs 16-bit time
    from tfcalc.count.training.steptime import micro_batch_at

    def w(L):
        return micro_batch_at(cfg, L, H100).block_weight_grad_s

    assert w(layout(fp8_recipe="rowwise_with_gw_hp")) == pytest.approx(w(layout(compute_dtype=None)))
    assert w(layout(fp8_recipe="rowwise")) < w(layout(compute_dtype=None))


def test_only_the_delayed_recipe_keeps_fp8_weights():
    cfg = load("llama3-8b", ["n_layer=2"])
    assert fp8_cache_bytes(cfg, layout(), 0) > 0
    for recipe in RECIPES[1:]:
        assert fp8_cache_bytes(cfg, layout(fp8_recipe=recipe), 0) == 0


GRAND_TETON = "benchmarks/devices/grand-teton-h100-500w.yaml"


def _rate(local: int, **over) -> float:
    r = tfcalc.plan("llama3-8b", dp=8, zero=3, global_batch=8 * local, micro_batch=local, seq=8192, recompute="op",
                    grad_dtype="fp32", device_spec=GRAND_TETON, kernels="fused", **over)
    return r.tokens_per_s


@pytest.mark.parametrize("recipe, local, published", [
    ("tensorwise", 1, 7689.5 / 6150),  # torchao/float8/README.md, Llama3-8b on 8 H100, "tensorwise ..."
    ("rowwise", 1, 6768 / 6150),  # same table, "rowwise with bfloat16 all-gather"
    ("tensorwise", 2, 8532 / 6667),  # torchtitan benchmarks/llama3_h100_202412_torchtitan.md, Table 1
])
def test_speedups_over_bf16_against_the_published(recipe, local, published):
    """The end-to-end speedup of Float8 over bf16, both predicted at the same settings (torch.compile, FSDP2
    on 8 GPUs, per-op SAC, seq 8,192): within [0.9, 1.1] of torchao's and torchtitan's own."""
    bf16 = _rate(local)
    fp8 = _rate(local, compute_dtype="fp8", fp8_recipe=recipe)
    assert 0.9 <= (fp8 / bf16) / published <= 1.1


def test_recipe_refusals(cli):
    with pytest.raises(InputError, match="--fp8-recipe must be one of"):
        make_plan(load("llama3-8b", ["n_layer=2"]), layout(fp8_recipe="blockwise"), H100, None)
    with pytest.raises(InputError, match="needs --compute-dtype fp8"):
        make_plan(load("llama3-8b", ["n_layer=2"]), dataclasses.replace(layout(compute_dtype=None),
                                                                        fp8_recipe="rowwise"), H100, None)
    assert_one_line_error(cli("plan", "llama3-8b", "--dp", "8", "--compute-dtype", "fp8", "--fp8-recipe", "mxfp8"),
                          "no MX rate")
    r = cli("plan", "llama3-8b", "--dp", "8", "--compute-dtype", "fp8", "--fp8-recipe", "MXFP8",
            "--device-spec", "b200", "--json")
    assert r.code == 0, r.err
    assert r.json()["layout"]["fp8_recipe"] == "mxfp8"
    assert any("MXFP8" in n for n in r.json()["notes"])


def test_nvfp4_kernels_as_the_recipe_lays_them_out():
    """pytorch/ao#3293's NVFP4 training kernels: every tensor an amax pass (read 2); the input 1×16 forward and
    Hadamard 16×1 backward, the weight one 16×16 cast, the output gradient 1×16 and Hadamard 16×1; each cast
    reads 2 bytes and writes 0.5 + 1/16."""
    q = 0.5 + 1 / 16
    c = casts("nvfp4", M, K, N, E, E)
    assert c.forward_bytes == pytest.approx((2 + 2 + q) * M * K + (2 + 2 + q) * K * N)
    assert c.backward_bytes == pytest.approx((2 + q) * M * K + (2 + 2 * (2 + q)) * M * N)
    assert (c.forward_kernels, c.backward_kernels) == (4, 4)


def test_compute_dtype_nvfp4_runs_at_the_fp4_rate_where_the_device_has_it(cli):
    args = ("plan", "llama3-8b", "--dp", "8", "--seq", "4096", "--global-batch", "8", "--kernels", "fused", "--json")
    fp8 = cli(*args, "--device-spec", "b200", "--compute-dtype", "fp8", "--fp8-recipe", "mxfp8").json()
    fp4 = cli(*args, "--device-spec", "b200", "--compute-dtype", "nvfp4").json()
    alias = cli(*args, "--device-spec", "b200", "--compute-dtype", "mxfp8").json()
    assert (fp4["layout"]["compute_dtype"], fp4["layout"]["fp8_recipe"]) == ("fp8", "nvfp4")
    assert alias["step_time_s"] == fp8["step_time_s"]  # --compute-dtype mxfp8 is fp8 with the mxfp8 recipe
    assert fp4["step"]["matmul_s"] < fp8["step"]["matmul_s"]  # the block linears at 9 PFLOP/s, not 4.5
    assert any("NVFP4 peak (9,000 TFLOP/s" in n for n in fp4["notes"])
    assert_one_line_error(cli("plan", "llama3-8b", "--dp", "8", "--compute-dtype", "nvfp4"), "no NVFP4 rate")


def test_rowwise_gemms_at_the_share_measured_on_the_h100():
    """benchmarks/results/h100-2026-11-27-fp8-ring.json: per-row scaled _scaled_mm against per-tensor, same shape."""
    import json
    from pathlib import Path

    from tfcalc.count.perf.fp8_recipes import gemm_share

    run = json.loads((Path(__file__).parents[2] / "benchmarks/results/h100-2026-11-27-fp8-ring.json").read_text())
    g = run["gemm"]
    assert gemm_share("rowwise") == gemm_share("rowwise_with_gw_hp") == pytest.approx(
        g["fp8_tensorwise_s"] / g["fp8_rowwise_s"], rel=1e-3)
    assert gemm_share("tensorwise") == gemm_share("delayed") == 1.0
    cfg = load("llama3-8b", ["n_layer=2"])
    tensorwise = make_plan(cfg, layout(fp8_recipe="tensorwise"), H100, None).step.matmul_s
    rowwise = make_plan(cfg, layout(fp8_recipe="rowwise"), H100, None).step.matmul_s
    assert rowwise > tensorwise
