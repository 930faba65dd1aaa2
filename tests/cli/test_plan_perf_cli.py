"""`tfcalc plan`'s performance model on the command line (issue 20): --mfu is the end-to-end MFU, a
separate --matmul-efficiency, the old flags unchanged, a 16,384-GPU search in under 2 s of CPU."""

import time

import pytest
from conftest import assert_one_line_error

import tfcalc

LAYOUT = ("llama2-7b", "--tp", "8", "--pp", "4", "--dp", "2", "--global-batch", "64", "--seq", "2048")


def test_mfu_is_the_printed_mfu(cli):
    """`plan ... --mfu 0.43` prints 43 %, and its JSON mfu is 0.43, bubble and communication notwithstanding
    (before: the MFU applied to executed FLOPs, then the bubble and TP/PP time added: 0.4 printed 25.8 %)."""
    r = cli("plan", *LAYOUT, "--mfu", "0.43")
    assert r.code == 0, r.err
    assert "MFU: 43.0%" in r.out
    j = cli("plan", *LAYOUT, "--mfu", "0.43", "--json").json()
    assert j["step"]["mfu"] == pytest.approx(0.43) and j["step"]["utilization"] == 0.43
    assert j["step"]["basis"] == "mfu" and j["step"]["physics_s"] > 0
    st = j["step"]
    assert j["step_time_s"] == pytest.approx(st["model_flops"] / (0.43 * 989e12 * 64))


def test_default_is_the_performance_model(cli):
    j = cli("plan", *LAYOUT, "--json").json()
    st = j["step"]
    assert st["basis"] == "physics" and st["utilization"] is None
    assert st["overlap_s"] == st["physics_s"] == j["step_time_s"] and 0.1 < st["mfu"] < 0.8
    assert st["perf"]["sm_count"] == 132 and st["perf"]["matmul_ceiling"] == 0.801


def test_matmul_efficiency_is_its_own_knob(cli):
    flat = cli("plan", *LAYOUT, "--matmul-efficiency", "0.5", "--json").json()["step"]
    assert flat["basis"] == "matmul-efficiency" and flat["matmul_efficiency"] == 0.5
    slower = cli("plan", *LAYOUT, "--matmul-efficiency", "0.25", "--json").json()["step"]
    assert slower["matmul_s"] == pytest.approx(2 * flat["matmul_s"])  # every matmul at a flat share of the peak
    assert flat["mfu"] < 0.5  # the rest (traffic, kernels, bubble, TP) on top


@pytest.mark.parametrize("args, message", [
    (("--matmul-efficiency", "0"), "--matmul-efficiency must be a number in [0.0001, 1]"),
    (("--matmul-efficiency", "1.5"), "--matmul-efficiency must be"),
    (("--mfu", "0.4", "--matmul-efficiency", "0.5"), "give one"),
    (("--mfu", "2"), "--mfu must be a number"),
    (("--bandwidth-efficiency", "-1"), "--bandwidth-efficiency must be")])
def test_bad_efficiencies_are_one_line(cli, args, message):
    assert_one_line_error(cli("plan", *LAYOUT, *args), message)


def test_old_flags_still_work(cli):
    r = cli("plan", "llama2-7b", "--gpus", "16", "--tp", "2", "--zero", "1", "--recompute", "selective",
            "--sequence-parallel", "--micro-batch", "2", "--mfu", "0.4", "--tokens", "1T", "--json")
    assert r.code == 0, r.err
    j = r.json()
    assert j["step"]["mfu"] == pytest.approx(0.4)
    assert {"step_time_s", "tokens_per_s", "training", "per_rank", "comm_bytes_per_step"} <= set(j)
    assert j["training"]["chinchilla_tokens"] > 20 * j["params"]  # Hoffmann et al. Table 3: 20.2+ above 1B


def test_search_over_16384_gpus_is_fast():
    tfcalc.plan("gpt3", gpus=64)  # warm the imports
    start = time.process_time()  # CPU time: the shared test machine's load does not count
    r = tfcalc.plan("gpt3", gpus=16384)
    assert time.process_time() - start < 2.0
    assert r.search == "layouts" and r.plan.step.basis == "physics"


def test_infer_takes_the_same_knobs(cli):
    """infer: --bandwidth-efficiency 1 is the datasheet bandwidth; --matmul-efficiency a flat share on every
    row; both refused with --measure (a measured device has its own ceilings)."""
    r = cli("infer", "llama2-7b", "--seq", "512", "--gen", "8", "--bandwidth-efficiency", "1",
            "--matmul-efficiency", "0.5", "--json").json()
    assert r["ceilings"]["bytes_per_s"] == 3.35e12
    assert {x["matmul_efficiency"] for x in r["roofline"]["prefill"] if x["flops"]} == {0.5}
    assert_one_line_error(cli("infer", "llama2-7b", "--measure", "--matmul-efficiency", "0.5"), "--measure")
