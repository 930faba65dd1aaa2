"""Issue 20's measured distributed paths over NCCL, one rank per GPU (marked ``gpu``: skipped without CUDA,
and each test skipped, saying why, on fewer GPUs than its ranks -- NCCL refuses two ranks on one GPU). The
same programs run on gloo ranks in tests/measure/ (test_pipeline_measured, test_experts_parallel,
test_distributed, test_hsdp_run, test_small_copy_runs, test_serving_tp_measured); here they must place
every tensor on the rank's own GPU (cuda:LOCAL_RANK), run NCCL's collectives and agree with the plan to the
byte, as there:
- pipeline parallelism (torch.distributed.pipelining: 1F1B, interleaved, zero-bubble, DualPipeV), NCCL's send/recv;
- expert parallelism's all-to-all (counts in int64, tokens in fp32; the experts' rows indexed on the GPU);
- ZeRO-1 (ZeroRedundancyOptimizer's broadcasts) and ZeRO-2 (FSDP2 without resharding after forward);
- ZeRO-3 on the small copy of a latent-attention MoE (deepseek-v3: 16 experts in grouped tensors);
- HSDP and a pipeline with data parallelism (4 GPUs: FSDP2 on a 2-D mesh; pp 2 × dp 2);
- infer --tp --measure: the collectives of a tensor-parallel forward on NCCL.
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")


def _gpus(n: int) -> None:
    if torch.cuda.device_count() < n:
        pytest.skip(f"NCCL runs one rank per GPU: this needs {n} GPUs; {torch.cuda.device_count()} here")


LAYOUTS = {
    "pipeline-1f1b": ("gpt2", "--pp", "2"),
    "pipeline-interleaved": ("gpt2", "--pp", "2", "--schedule", "interleaved", "--virtual-stages", "2"),
    "pipeline-zero-bubble": ("gpt2", "--pp", "2", "--schedule", "zero-bubble"),
    "pipeline-dualpipev": ("gpt2", "--pp", "2", "--global-batch", "8", "--schedule", "dualpipe"),  # ScheduleDualPipeV
    "expert-parallel": ("mixtral-8x7b", "--dp", "2", "--ep", "2"),
    "zero-1": ("gpt2", "--dp", "2", "--zero", "1"),
    "zero-2": ("gpt2", "--dp", "2", "--zero", "2"),
    "zero-3-latent-moe": ("deepseek-v3", "--dp", "2", "--zero", "3"),
}


@pytest.mark.parametrize("name", list(LAYOUTS))
def test_measured_over_nccl_agrees_exactly(cli, name):
    _gpus(2)
    r = cli("plan", *LAYOUTS[name], "--seq", "256", "--measure", "--nproc", "2", "--json")
    assert r.code == 0, r.err
    m = r.json()["measured"]
    assert m["backend"] == "nccl" and m["world_size"] == 2 and m["device"] == "cuda:0"
    assert m["states_exact"] and m["collectives_exact"], (m["per_rank"], m["plan"]["per_rank"], m["collectives"])
    assert all(rank["first_loss"] > 0 for rank in m["ranks"])  # a finite loss on every rank
    if name == "expert-parallel":
        assert {c["op"] for c in m["collectives"] if c["cause"].startswith("ep_")} == {"all_to_all"}
    if name.startswith("pipeline"):
        assert any(c["op"] == "send_recv" for c in m["collectives"])


def test_every_rank_of_a_pipeline_runs_on_its_own_gpu():
    _gpus(2)
    import tfcalc

    report = tfcalc.plan("gpt2", pp=2, seq=128, measure=True, nproc=2)
    assert [a["device"] for a in report.measured.ranks] == ["cuda:0", "cuda:1"]
    assert {a["backend"] for a in report.measured.ranks} == {"nccl"}
    assert report.measured.states_exact and report.measured.collectives_exact


@pytest.mark.parametrize("layout", [("--dp", "4", "--zero", "3", "--hsdp", "2"), ("--pp", "2", "--dp", "2")],
                         ids=["hsdp", "pipeline-with-dp"])
def test_four_ranks_over_nccl_agree_exactly(cli, layout):
    _gpus(4)
    r = cli("plan", "gpt2", *layout, "--seq", "256", "--measure", "--nproc", "4", "--json")
    assert r.code == 0, r.err
    m = r.json()["measured"]
    assert m["backend"] == "nccl" and m["world_size"] == 4
    assert (m["layout"]["hsdp"], m["layout"]["pp"], m["layout"]["dp"]) == ((2, 1, 4) if "--hsdp" in layout
                                                                           else (None, 2, 2))
    assert m["states_exact"] and m["collectives_exact"]


def test_infer_tp_measured_over_nccl(cli):
    _gpus(2)
    r = cli("infer", "gpt2", "--set", "n_layer=2", "--seq", "64", "--gen", "4", "--measure", "--tp", "2",
            "--device", "cuda", "--json")
    assert r.code == 0, r.err
    m = r.json()["tensor_parallel"]["measured"]
    assert m["backend"] == "nccl" and m["world_size"] == 2
    assert m["equal"], (m["prefill"], m["decode"])
