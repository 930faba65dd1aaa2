"""`tfcalc plan` and `tfcalc bench --nproc`: the JSON contract, the tables, the search, hostile input, and
one real distributed run each (2 gloo ranks)."""

import pytest
from conftest import assert_one_line_error

PSI_7B = 6_738_415_616


def test_plan_json_contract(cli):
    r = cli("plan", "llama2-70b", "--gpus", "64", "--tp", "8", "--pp", "2", "--zero", "1", "--recompute",
            "selective", "--sequence-parallel", "--json")
    assert r.code == 0, r.err
    j = r.json()
    assert {k: j["layout"][k] for k in ("tp", "pp", "dp", "zero")} == {"tp": 8, "pp": 2, "dp": 4, "zero": 1}
    per = j["per_rank"]
    assert per["total_bytes"] == sum(per[k] for k in ("weights_bytes", "grads_bytes", "optimizer_bytes",
                                                      "activation_bytes", "gathered_weights_bytes"))
    assert j["comm_bytes_per_step"]["total"] == sum(v for k, v in j["comm_bytes_per_step"].items() if k != "total")
    assert set(j["comm_bytes_per_step"]) >= {"dp_grads_reduce_scatter", "zero_params_all_gather",
                                             "tp_activations_all_gather", "pp_activations_send_recv"}
    assert j["step_time_s"] == j["step"]["overlap_s"] <= j["step"]["no_overlap_s"]
    assert j["measured"] is None and j["search"] is None and j["fits"] is True
    assert j["device_spec"] == "h100-sxm" and j["gpus"] == 64


@pytest.mark.parametrize("zero, expected", [("0", 16 * PSI_7B), ("1", 37_061_285_888), ("2", 25_269_058_560),
                                            ("3", 13_476_831_232)])
def test_plan_llama2_7b_model_states_on_8(cli, zero, expected):
    r = cli("plan", "llama2-7b", "--dp", "8", "--zero", zero, "--json")
    per = r.json()["per_rank"]
    assert per["weights_bytes"] + per["grads_bytes"] + per["optimizer_bytes"] == expected


def test_fsdp_is_zero3(cli):
    a = cli("plan", "llama2-7b", "--dp", "8", "--fsdp", "--json").json()
    assert a["layout"]["zero"] == 3
    assert a["per_rank"]["weights_bytes"] == 2 * PSI_7B // 8


def test_plan_table_and_training_time(cli):
    r = cli("plan", "llama2-70b", "--gpus", "64", "--tp", "8", "--pp", "2", "--sequence-parallel", "--zero", "1",
            "--recompute", "selective", "--tokens", "2T")
    assert r.code == 0, r.err
    for text in ("memory of one rank", "Communication per step", "TP activations", "reduce-scatter", "NVLink",
                 "network", "idle", "Step, overlapped", "GPU-hours", "Chinchilla-optimal", "1.542T",
                 "Ring conventions"):
        assert text in r.out, text  # Chinchilla: 68,976,648,192 × 22.35 (Table 3, between 67B's 22.39 and 175B's 21.14)
    j = cli("plan", "llama2-70b", "--gpus", "64", "--tp", "8", "--pp", "2", "--tokens", "2T", "--json").json()
    assert j["training"]["tokens"] == 2 * 10**12
    assert j["training"]["gpu_hours"] == pytest.approx(j["training"]["seconds"] * 64 / 3600)


@pytest.mark.parametrize("fmt", ["markdown", "csv"])
def test_plan_other_formats(cli, fmt):
    r = cli("plan", "llama2-7b", "--dp", "8", "--zero", "3", "--format", fmt)
    assert r.code == 0 and "Weights" in r.out


def test_search_of_64_gpus(cli):
    j = cli("plan", "llama2-70b", "--gpus", "64", "--json").json()
    s = j["search"]
    assert s["kind"] == "layouts" and s["fitting"] >= len(s["layouts"]) > 1
    times = [x["step_time_s"] for x in s["layouts"]]
    assert times == sorted(times) and times[0] == j["step_time_s"]
    assert all(x["layout"]["gpus"] == 64 and x["total_bytes"] <= j["device_usable_bytes"] for x in s["layouts"])
    r = cli("plan", "llama2-70b", "--gpus", "64", "--top", "3")
    assert "layouts of 64 GPUs that fit" in r.out


def test_gpus_auto_is_the_default_without_a_layout(cli):
    j = cli("plan", "llama2-13b", "--json").json()
    assert j["search"]["kind"] == "gpus"
    assert cli("plan", "llama2-13b", "--gpus", "auto", "--json").json()["gpus"] == j["gpus"]
    assert j["per_rank"]["total_bytes"] <= j["device_usable_bytes"]
    # the driver's 79.19 GiB of an "80 GB" H100 (torch reports 81,089 MiB) less the CUDA context and NCCL buffers
    assert j["device_usable_bytes"] == int(80 * 2**30 * 81089 / 81920) - 714_670_080 - 2**29


@pytest.mark.parametrize("args, message", [
    (["--tp", "3"], "tp 3 does not divide n_head"),
    (["--pp", "100"], "more pipeline stages"),
    (["--gpus", "63", "--tp", "8"], "--gpus 63 is not a multiple"),
    (["--gpus", "64", "--tp", "8", "--dp", "2"], "must equal"),
    (["--gpus", "many"], "--gpus: expected a number"),
    (["--gpus", "auto", "--tp", "2"], "--gpus auto searches"),
    (["--fsdp", "--zero", "1", "--dp", "2"], "contradicts --zero 1"),
    (["--zero", "2", "--tp", "2"], "dp is 1"),
    (["--dp", "3", "--global-batch", "8"], "multiple of dp"),
    (["--nproc", "2", "--dp", "2"], "add --measure"),
    (["--measure"], "--measure checks one layout"),
    (["--dp", "2", "--measure", "--nproc", "100000"], "--nproc 100000 is more"),
    (["--dp", "2", "--fsdp", "--hsdp", "2", "--measure"], "plain FSDP"),
    (["--device-spec", "h100-sxn", "--dp", "2"], "did you mean 'h100-sxm'"),
    (["--tokens", "lots", "--dp", "2"], "token count"),
    (["--mfu", "2", "--dp", "2"], "--mfu must be a number in [0.0001, 1]"),
    (["--seq", "8192", "--dp", "2"], "at most 4096"),
    (["--dtype", "int4", "--dp", "2"], "inference format"),
    (["--micro-batch", "0", "--dp", "2"], "--micro-batch must be between"),
])
def test_hostile_plans(cli, args, message):
    assert_one_line_error(cli("plan", "llama2-7b", *args), message)


def test_what_a_real_run_cannot_split_is_refused_before_ranks_start(cli):
    """T5's per-head relative bias under TP is planned but not split by the run: refused before any rank (an
    encoder-decoder's cross-attention itself is planned and run under TP: tests/measure/test_tp_architectures.py)."""
    assert_one_line_error(cli("plan", "t5-base", "--tp", "2", "--measure"), "per-head position bias")
    # a per-head position bias is planned under TP but not split by the run (a tied head runs under TP now)
    assert_one_line_error(cli("plan", "gpt2", "--tp", "2", "--measure", "--nproc", "2", "--set", "pos_encoding=alibi"),
                          "position bias")


def test_plan_measure_exits_1_when_plan_and_run_disagree(cli, monkeypatch):
    """A drift put back into the plan (one parameter more per rank, as qwen2-7b's O biases once were): the
    ranks measure the real module in their own processes, so the two disagree and plan exits 1."""
    from tfcalc.count.training import rank_memory

    real = rank_memory.stage_params
    monkeypatch.setattr(rank_memory, "stage_params", lambda cfg, layout, stage: real(cfg, layout, stage) + 1)
    r = cli("plan", "llama2-7b", "--dp", "2", "--measure", "--nproc", "2", "--json")
    assert r.code == 1 and r.json()["measured"]["states_exact"] is False
    assert "disagree on model-state bytes" in r.err and len(r.err.strip().splitlines()) == 1


def test_plan_measured_on_two_gloo_ranks(cli):
    """A small copy of Llama 2 7B (2 blocks, an odd vocabulary) under FSDP2 on 2 ranks: plan == measured."""
    r = cli("plan", "llama2-7b", "--dp", "8", "--fsdp", "--measure", "--nproc", "2", "--json")
    assert r.code == 0, r.err
    m = r.json()["measured"]
    assert (m["backend"], m["world_size"], m["small_copy"]) == ("gloo", 2, True)
    assert m["layout"]["dp"] == 2 and m["layout"]["zero"] == 3 and m["config"]["vocab_size"] == 127
    assert m["states_exact"] and m["collectives_exact"]
    for key in ("weights_bytes", "grads_bytes", "optimizer_bytes"):
        assert m["per_rank"][key] == m["plan"]["per_rank"][key] and m["ratio"][key] == 1
    assert m["comm_bytes_per_step"] == m["plan"]["comm_bytes_per_step"]
    assert len(m["ranks"]) == 2 and all(x["peak_bytes"] > 0 for x in m["ranks"])
    assert m["step_time_s"] == max(x["step_s"] for x in m["ranks"]) > 0


def test_bench_on_two_gloo_ranks(cli):
    r = cli("bench", "llama2-7b", "--set", "n_layer=1", "--set", "d_model=64", "--set", "n_head=2",
            "--set", "n_kv_head=2", "--set", "d_ff=128", "--set", "vocab_size=96", "--set", "max_seq_len=32",
            "--nproc", "2", "--seq", "32", "--batch", "2", "--repeat", "3", "--warmup", "1", "--json")
    assert r.code == 0, r.err
    j = r.json()
    assert (j["nproc"], j["backend"], j["layout"]["dp"], j["samples"]) == (2, "gloo", 2, 3)
    assert j["median_s"] == max(x["median_s"] for x in j["ranks"]) > 0
    assert j["tokens_per_s"] == pytest.approx(2 * 2 * 32 / j["median_s"])
    assert j["mfu"] is None  # no datasheet peak for a CPU


@pytest.mark.parametrize("args, message", [
    (["--tp", "2"], "add --nproc"),
    (["--nproc", "2", "--tp", "3"], "does not divide --nproc"),
    (["--nproc", "2", "--seq", "16,32"], "one --seq at a time"),
    (["--nproc", "2", "--n-layer", "1"], "--nproc times a training step on every rank the same way: drop --n-layer"),
    (["--nproc", "2", "--min-time", "1"], "drop --min-time"),
    (["--nproc", "0"], "--nproc must be between"),
    (["--nproc", "2", "--fsdp", "--zero", "2"], "contradicts"),
    (["--nproc", "2", "--zero", "1"], "ZeRO-1 is planned"),
])
def test_hostile_bench_nproc(cli, args, message):
    assert_one_line_error(cli("bench", "llama2-7b", "--set", "n_layer=1", *args), message)


def test_bench_nproc_under_tp_refuses_a_per_head_position_bias(cli):
    """A tied model now runs under TP (tests/measure/test_tp_architectures.py); ALiBi's per-head bias does not."""
    assert_one_line_error(cli("bench", "gpt2", "--nproc", "2", "--tp", "2", "--set", "pos_encoding=alibi"),
                          "position bias")


@pytest.mark.parametrize("args, kwargs", [
    (["llama2-70b", "--gpus", "64", "--tp", "8", "--pp", "2", "--sequence-parallel", "--tokens", "2T"],
     dict(gpus=64, tp=8, pp=2, sequence_parallel=True, tokens="2T")),
    (["llama2-7b", "--dp", "8", "--fsdp", "--set", "n_layer=16"], dict(dp=8, zero=3, n_layer=16)),
    (["llama2-13b", "--gpus", "16", "--recompute", "full", "--device-spec", "a100-80gb", "--mfu", "0.5"],
     dict(gpus=16, recompute="full", device_spec="a100-80gb", mfu=0.5)),
])
def test_python_api_plan_equals_the_cli_json(cli, args, kwargs):
    import tfcalc

    model = args[0]
    assert tfcalc.plan(model, **kwargs).to_json() == cli("plan", *args, "--json").json()
