"""benchmarks/gpu_report.py end to end on the CPU with tiny models (--device cpu --quick), so the script
cannot rot where no GPU runs it: the JSON's shape, each ratio = predicted ÷ measured, the time budget's
skips and its alarm, a failing step recorded, the refusal without CUDA. tests/gpu/test_cuda.py runs the
CUDA paths it drives."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def report_module():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import gpu_report

        yield gpu_report
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))


NAMES = ["bench fp32", "bench bf16", "bench decode", "memory --measure (forward)", "memory --measure --training",
         "infer --measure --batch 1",
         "MoE forward against transformers (gpt-oss-20b, qwen3-30b-a3b shapes, 2 layers, bf16)",
         "training step on one GPU (bench ranks --nproc 1)",
         "device memory (driver total, CUDA context)",
         "plan --measure on 2 ranks, tp 2; dp 2, ZeRO-1; dp 2, ZeRO-2; dp 2, ZeRO-3; dp 2, ep 2; dp 2, ZeRO-3, MoE; "
         "pp 2, 1f1b; pp 2, zero-bubble (gloo)", "plan --measure on 4 ranks, dp 4, ZeRO-3, hsdp 2; pp 2 × dp 2 (gloo)",
         "infer --measure --tp 2 (gloo)"]
TWO_RANKS = NAMES[-3]
RESULT_KEYS = {"name", "expected_s", "status", "reason", "seconds", "comparisons", "measured"}
COMPARISON_KEYS = {"quantity", "unit", "predicted", "measured", "ratio", "how"}


def _run(report_module, tmp_path, *args):
    out = tmp_path / "report.json"
    code = report_module.main(["--device", "cpu", "--quick", "-o", str(out), *args])
    return code, json.loads(out.read_text(encoding="utf-8")) if out.exists() else None


def _check_shape(report):
    assert report["report"] == "tfcalc gpu report" and report["version"] == 1 and report["device"] == "cpu"
    env = report["environment"]
    assert {"python", "torch", "cuda", "cudnn", "driver", "tfcalc_commit", "gpus"} <= env.keys()
    assert env["gpus"] == [] and env["cuda"] is None or isinstance(env["cuda"], str)
    assert [r["name"] for r in report["results"]] == NAMES
    for r in report["results"]:
        assert r.keys() == RESULT_KEYS and r["status"] in ("ok", "skipped", "refused", "failed", "stopped")
        assert (r["reason"] is None) == (r["status"] == "ok")
        for c in r["comparisons"]:
            assert c.keys() == COMPARISON_KEYS
            if c["predicted"] is not None and c["measured"]:
                assert c["ratio"] == pytest.approx(c["predicted"] / c["measured"])
            else:
                assert c["ratio"] is None
    assert 0 < report["wall_s"] <= report["budget_s"] + 60


def test_the_in_process_steps_with_a_table_device(report_module, tmp_path):
    code, report = _run(report_module, tmp_path, "--device-spec", "h100-sxm", "--only",
                                  "bench fp32,bench bf16,decode,infer")
    assert code == 0
    _check_shape(report)
    by = {r["name"]: r for r in report["results"]}
    for name in ("bench fp32", "bench bf16", "bench decode", "infer --measure --batch 1"):
        assert by[name]["status"] == "ok", by[name]["reason"]
    assert by["memory --measure (forward)"]["reason"].startswith("not asked for (--only")
    assert "exist only there" in by["device memory (driver total, CUDA context)"]["reason"]
    # predictions on the table device (meaningless against a CPU, but computed): the forward pass's and the
    # matmul ceiling's, and the datasheet infer's
    forward = by["bench bf16"]["comparisons"][0]
    assert forward["quantity"] == "forward pass, full depth" and forward["predicted"] > 0 and forward["measured"] > 0
    assert by["bench bf16"]["measured"]["device"] == "cpu"
    decode = {c["how"].split(" (")[0]: c for c in by["bench decode"]["comparisons"] if c["unit"] == "s/token"}
    assert decode["`tfcalc infer --device-spec h100-sxm`"]["predicted"] > 0


def test_the_steps_that_start_processes(report_module, tmp_path):
    code, report = _run(report_module, tmp_path, "--only", "--training,training step,on 2 ranks,--tp 2")
    assert code == 0
    _check_shape(report)
    by = {r["name"]: r for r in report["results"]}
    memory = by["memory --measure --training"]
    assert memory["status"] == "ok", memory["reason"]
    saved = next(c for c in memory["comparisons"] if c["quantity"].startswith("bytes autograd"))
    assert saved["ratio"] == 1.0  # exact on the CPU
    plan = by[TWO_RANKS]  # every 2-rank layout in one launch, each exact
    assert plan["status"] == "ok", plan["reason"]
    layouts = plan["measured"]["layouts"]
    assert plan["measured"]["backend"] == "gloo" and plan["measured"]["refused"] == {}
    assert list(layouts) == list(report_module.ranks.TWO_RANKS)
    assert all(x["states_exact"] and x["collectives_exact"] for x in layouts.values()), layouts
    assert layouts["pp 2, zero-bubble"]["schedule"] == "ScheduleInterleavedZeroBubble"
    states = [c for c in plan["comparisons"] if c["unit"] == "bytes"]
    assert len(states) > 3 * len(layouts) and all(c["ratio"] == 1.0 for c in states)
    assert by[NAMES[-2]]["reason"].startswith("4 gloo ranks")
    serving = by["infer --measure --tp 2 (gloo)"]
    assert serving["status"] == "ok", serving["reason"]
    assert serving["measured"]["equal"] and all(c["ratio"] == 1.0 for c in serving["comparisons"])
    train = by["training step on one GPU (bench ranks --nproc 1)"]
    assert train["status"] == "ok", train["reason"]
    assert train["comparisons"][0]["predicted"] is None and train["comparisons"][0]["measured"] > 0  # no table entry


def test_what_would_overrun_the_budget_is_skipped_and_recorded(report_module, tmp_path):
    code, report = _run(report_module, tmp_path, "--budget", "0.5")
    assert code == 0
    _check_shape(report)
    for r in report["results"]:
        assert r["status"] == "skipped"
        assert "would overrun the budget" in r["reason"] or "exist only there" in r["reason"] or \
            r["reason"].startswith("4 gloo ranks")


def test_a_step_still_running_when_the_budget_ends_is_stopped(report_module):
    step = report_module.Step("slow", 0.1, lambda: time.sleep(30) or {})
    start = time.monotonic()
    r = report_module.run_step(step, left=1.0)
    assert r["status"] == "stopped" and "budget ran out" in r["reason"] and time.monotonic() - start < 10


def test_a_failing_step_is_recorded_and_the_report_goes_on(report_module):
    def boom():
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    r = report_module.run_step(report_module.Step("boom", 0.1, boom), left=10.0)
    assert r["status"] == "failed" and r["reason"].startswith("RuntimeError: CUDA error")


@pytest.mark.parametrize(("args", "message"), [
    (["--device", "cuda"], "no CUDA device here"),
    (["--device", "tpu"], "--device must be cuda or cpu"),
    (["--device", "cpu", "--budget", "0"], "--budget must be a positive number"),
    (["--device", "cpu", "--device-spec", "no-such-gpu"], "no-such-gpu"),
])
def test_bad_requests_are_one_line(report_module, tmp_path, capsys, args, message):
    import torch

    if args == ["--device", "cuda"] and torch.cuda.is_available():
        pytest.skip("CUDA is available here: the refusal is for machines without it")
    assert report_module.main([*args, "-o", str(tmp_path / "r.json")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("gpu_report: error:") and message in err
    assert not (tmp_path / "r.json").exists()


def test_the_full_run_is_planned_within_ten_minutes(report_module):
    """Every step's expected seconds on one H100 (four GPUs: every step of several ranks too) fit the default
    budget, and the budget leaves a minute of the 10 for start-up (importing torch, CUDA's context) and the JSON;
    on fewer GPUs the steps of more ranks than GPUs are skipped, saying why."""
    planned = report_module.plan_steps("cuda:0", False, None, gpus=4)
    assert sum(s.expected_s for s in planned) <= report_module.DEFAULT_BUDGET_S <= 540
    assert all(s.skip is None for s in planned)
    one_gpu = report_module.plan_steps("cuda:0", False, None, gpus=1)
    assert [s.name for s in one_gpu if s.skip] == [n.replace("(gloo)", "over NCCL") for n in NAMES[-3:]]
    assert "2 ranks need 2 GPUs; 1 here" in one_gpu[-1].skip
    two = report_module.plan_steps("cuda:0", False, None, gpus=2)
    assert [s.name for s in two if s.skip] == [NAMES[-2].replace("(gloo)", "over NCCL")]
