"""Every CUDA path of tfcalc, run for real on a GPU (issue 20, part G). Marked ``gpu``: skipped, with the
reason, where torch.cuda.is_available() is false (tests/conftest.py); the logic these paths share with the
CPU is tested there with torch.cuda faked (tests/measure/test_cuda_paths.py).

What is checked, and within what:
- bench --device cuda, fp32 and bf16: the forward pass timed with CUDA events, MFU in (0, 1] against the
  datasheet peak of the device-table entry that torch's device name matches; the matmul ceiling at most
  1.1× the datasheet peak (H100 SXM's 989 TFLOP/s is counted at 1.83 GHz, below its 1.98 GHz boost);
- the events time what the host sees: N back-to-back matmuls timed by events and by a synchronized host
  clock agree within [0.8, 1.25] (events recorded on another stream, or read early, would not);
- bench decode --device cuda: MBU in (0, 1], against the measured bandwidth ceiling and the datasheet's;
- memory --measure --device cuda: the caching allocator's peak (max_memory_allocated above a baseline)
  within [0.85, 1.3] of tfcalc's estimate -- the CPU's tolerance (tests/count/test_memory.py: 0.9-1.3)
  widened below for the allocator's 512-byte rounding and kernels that free early; and, training in bf16,
  the bytes autograd saves equal the estimate to the byte, as on the CPU;
- infer --measure --device cuda: prefill and decode timed, the prediction from the measured ceilings beside;
- plan --measure over NCCL on 2 GPUs (skipped with fewer, saying so): model-state and collective bytes
  exact, each rank on its own GPU (cuda:LOCAL_RANK);
- a run that does not fit is refused, in one line with exit 2, before anything is allocated on the GPU.
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")

BENCH = ("llama2-7b", "--n-layer", "2", "--seq", "1024", "--min-time", "1", "--repeat", "5", "--device", "cuda")


def _table_entry():
    from tfcalc import devices

    return devices.lookup(torch.cuda.get_device_name(0))


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_bench_on_cuda_reports_an_mfu_in_0_1(cli, dtype):
    from tfcalc import devices

    r = cli("bench", *BENCH, "--dtype", dtype, "--json")
    assert r.code == 0, r.err
    j = r.json()
    assert j["device"].startswith("cuda:") and j["device_name"] == torch.cuda.get_device_name(0)
    assert 0 < j["p10_s"] <= j["median_s"] <= j["p90_s"]
    assert j["peak_memory_bytes"] >= j["weights_bytes"] > 0
    spec = _table_entry()
    if spec is None:
        assert j["mfu"] is None and j["peak_flops_per_s"] is None
        pytest.skip(f"{j['device_name']} is not in tfcalc's device table: no datasheet peak, no MFU")
    assert j["peak_flops_per_s"] == devices.peak_flops(j["device_name"], dtype, tf32_enabled=j["tf32"])
    assert 0 < j["mfu"] <= 1
    assert 0 < j["matmul_ceiling_flops_per_s"] <= 1.1 * j["peak_flops_per_s"]


def test_cuda_events_time_what_the_host_waits_for():
    from tfcalc.measure import bench

    device = torch.device("cuda", 0)
    call = bench.ceiling_call(device, torch.bfloat16, 8192)  # ~1 ms on an H100: launch costs negligible
    events = bench.time_calls(call, device, warmup=3, repeat=20)
    n = 20
    host = bench.host_seconds(lambda: [call() for _ in range(n)], device) / n
    assert 0.8 <= events.median / host <= 1.25


@pytest.mark.skipif(torch.cuda.is_available() and torch.cuda.device_count() < 2,
                    reason="timing on cuda:1 from a process whose current device is 0 needs 2 GPUs")
def test_events_on_a_second_gpu_time_that_gpu():
    from tfcalc.measure import bench

    torch.cuda.set_device(0)
    medians = []
    for index in (0, 1):
        device = torch.device("cuda", index)
        medians.append(bench.time_calls(bench.ceiling_call(device, torch.bfloat16, 8192), device, 3, 10).median)
    assert 0.5 <= medians[1] / medians[0] <= 2  # cuda:0's idle stream would read ~0 for cuda:1's work


def test_bench_decode_on_cuda_reports_an_mbu_in_0_1(cli):
    r = cli("bench", "decode", "llama2-7b", "--dtype", "bf16", "--seq", "256", "--steps", "32", "--device", "cuda",
            "--json")
    assert r.code == 0, r.err
    j = r.json()
    assert j["decode_s_per_token"] > 0 and j["prefill_s"] > 0 and j["bytes_per_token"] > 13e9
    assert 0 < j["mbu"] <= 1  # against the bandwidth ceiling measured beside it
    if _table_entry() is not None:
        assert 0 < j["mbu_datasheet"] <= 1
        assert j["peak_bandwidth_bytes_per_s"] == _table_entry().bandwidth_bytes_per_s


@pytest.mark.parametrize(("dtype", "training"), [("bf16", False), ("fp32", False), ("bf16", True)])
def test_memory_measured_on_cuda_against_the_estimate(cli, dtype, training):
    args = ["memory", "gpt2", "--batch", "8", "--seq", "1024", "--dtype", dtype, "--measure", "--device", "cuda",
            "--json"] + (["--training"] if training else [])
    r = cli(*args)
    assert r.code == 0, r.err
    j = r.json()
    assert "max_memory_allocated" in j["measure_method"]
    assert j["measured_peak_bytes"] > j["weights_bytes"]
    assert 0.85 <= j["measured_ratio"] <= 1.3, (j["measured_peak_bytes"], j["estimated_peak_bytes"])
    if training:
        assert j["measured_saved_activation_bytes"] == j["activations"]["stored_bytes"]  # to the byte


def test_infer_measured_on_cuda(cli):
    r = cli("infer", "gpt2-medium", "--batch", "1", "--seq", "256", "--gen", "32", "--measure", "--device", "cuda",
            "--json")
    assert r.code == 0, r.err
    j = r.json()
    assert j["device"].startswith("cuda") and j["measured"] is True
    assert j["prefill_s"] > 0 and j["decode_s_per_token"] > 0
    assert j["predicted"]["decode_s_per_token"] > 0 and j["ratio"]["decode"] > 0
    assert 0 < j["mbu"] <= 1


def _two_gpus():
    if torch.cuda.device_count() < 2:
        pytest.skip(f"plan --measure over NCCL runs one rank per GPU and needs 2 GPUs; "
                    f"{torch.cuda.device_count()} here")


@pytest.mark.parametrize("layout", [("--tp", "2"), ("--dp", "2", "--zero", "3")])
def test_plan_measured_over_nccl_agrees_exactly(cli, layout):
    _two_gpus()
    r = cli("plan", "gpt2", *layout, "--seq", "256", "--measure", "--nproc", "2", "--json")
    assert r.code == 0, r.err
    m = r.json()["measured"]
    assert m["backend"] == "nccl" and m["world_size"] == 2 and m["device"] == "cuda:0"
    assert m["states_exact"] and m["collectives_exact"]


def test_each_rank_runs_on_its_own_gpu():
    _two_gpus()
    import tfcalc

    report = tfcalc.plan("gpt2", tp=2, seq=128, measure=True, nproc=2)
    assert [a["device"] for a in report.measured.ranks] == ["cuda:0", "cuda:1"]
    assert {a["backend"] for a in report.measured.ranks} == {"nccl"}


@pytest.mark.parametrize("args", [
    ("bench", "llama2-70b", "--dtype", "fp32", "--seq", "4096", "--device", "cuda"),
    ("bench", "decode", "llama2-70b", "--dtype", "fp32", "--seq", "2048", "--steps", "4", "--device", "cuda"),
    ("memory", "llama2-70b", "--dtype", "fp32", "--training", "--measure", "--device", "cuda"),
    ("infer", "llama2-70b", "--dtype", "fp32", "--seq", "2048", "--gen", "8", "--measure", "--device", "cuda"),
], ids=["bench", "decode", "memory", "infer"])
def test_what_does_not_fit_is_refused_before_allocating(cli, args):
    from conftest import assert_one_line_error

    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    r = cli(*args)  # 70B parameters in fp32: 276 GB of weights alone
    assert_one_line_error(r, "not running")
    assert torch.cuda.memory_allocated() == before and torch.cuda.max_memory_allocated() == before


@pytest.mark.parametrize("model", ["gpt2", "llama2-7b"])
def test_flop_counter_on_cuda_sees_the_analytic_count(cli, model):
    """FlopCounterMode on the CUDA kernels (SDPA dispatches to flash, memory-efficient or cuDNN attention
    there, each with its own FLOP formula in torch.utils.flop_counter) counts what the formulas say."""
    r = cli("flops", model, "--set", "n_layer=2", "--seq", "256", "--measure", "--device", "cuda", "--training",
            "--json")
    assert r.code == 0, r.err
    j = r.json()
    assert j["measured_device"].startswith("cuda") and j["agree"] is True
    assert j["measured_flops"] == j["forward_flops"]
    # the fused attention backward recomputes Q·Kᵀ: PyTorch's formula counts 5 score matmuls, not 4 (as on the CPU,
    # tests/count/test_flops.py)
    assert j["measured_training_flops"] == j["training_flops"] + j["breakdown"]["attention_scores"] // 2


def test_an_absent_gpu_index_is_one_line(cli):
    from conftest import assert_one_line_error

    n = torch.cuda.device_count()
    assert_one_line_error(cli("bench", "gpt2", "--device", f"cuda:{n}"), f"only {n} CUDA device(s) exist")


def test_the_gpu_report_runs_its_cuda_steps(tmp_path):
    """benchmarks/gpu_report.py on this GPU, its quickest steps within a short budget: each ok, its ratios
    (predicted ÷ measured) finite and positive where both sides exist."""
    import json
    import os
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    try:
        import gpu_report
    finally:
        sys.path.pop(0)
    out = Path(os.environ.get("TFCALC_GPU_OUT", tmp_path)) / "gpu_report_tests.json"  # kept where a run asks
    assert gpu_report.main(["-o", str(out), "--budget", "240", "--only", "bench bf16,decode,device memory"]) == 0
    report = json.loads(out.read_text(encoding="utf-8"))
    assert report["environment"]["gpus"][0]["name"] == torch.cuda.get_device_name(0)
    ran = [r for r in report["results"] if r["status"] != "skipped"]
    assert [r["name"] for r in ran] == ["bench bf16", "bench decode", "device memory (driver total, CUDA context)"]
    for r in ran:
        assert r["status"] == "ok", r["reason"]
        assert all(c["ratio"] > 0 for c in r["comparisons"] if c["ratio"] is not None)
