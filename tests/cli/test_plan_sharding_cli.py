"""`tfcalc plan` with issue 20's sharding and precision flags: --ep, --compute-dtype fp8,
--no-reshard-after-forward, --hsdp, --grad-dtype fp32, --recompute op, --offload -- the JSON they add, the
tables, and their hostile values (one line, exit 2)."""

import pytest
from conftest import assert_one_line_error

PSI_7B = 6_738_415_616


def test_each_flag_reaches_the_json(cli):
    r = cli("plan", "mixtral-8x7b", "--dp", "8", "--ep", "4", "--zero", "3", "--no-reshard-after-forward",
            "--grad-dtype", "fp32", "--compute-dtype", "fp8", "--recompute", "full", "--offload", "optimizer",
            "--offload", "activations", "--seq", "4096", "--json")
    assert r.code == 0, r.err
    j = r.json()
    L = j["layout"]
    assert (L["ep"], L["reshard_after_forward"], L["grad_dtype"], L["compute_dtype"], L["offload"]) == (
        4, False, "fp32", "fp8", ["optimizer", "activations"])
    per = j["per_rank"]
    assert per["optimizer_bytes"] == 0 and per["host_bytes"] > 0 and per["fp8_cache_bytes"] > 0
    assert per["total_bytes"] == sum(per[k] for k in ("weights_bytes", "grads_bytes", "optimizer_bytes",
                                                      "activation_bytes", "gathered_weights_bytes", "fp8_cache_bytes"))
    assert {"ep_tokens_all_to_all", "ep_counts_all_to_all", "expert_params_all_gather",
            "expert_grads_reduce_scatter"} <= set(j["comm_bytes_per_step"])
    assert j["step"]["comm_s"]["ep"] > 0 and j["step"]["comm_s"]["pcie"] > 0
    assert any("expert parallel over 4 ranks" in n for n in j["notes"])


def test_hsdp_and_fp32_grads_in_the_table(cli):
    r = cli("plan", "llama2-7b", "--dp", "8", "--fsdp", "--hsdp", "2", "--grad-dtype", "fp32")
    assert r.code == 0, r.err
    assert "HSDP 2 × 4" in r.out and "dp_shard ×2" in r.out and "dp_replicate ×4" in r.out
    assert "fp32; 1/2" in r.out  # gradients in fp32, split over the 2 ranks of a shard group


def test_recompute_op_in_the_search(cli):
    r = cli("plan", "llama2-7b", "--gpus", "8", "--recompute", "op", "--json")
    assert r.code == 0, r.err
    assert {x["layout"]["recompute"] for x in r.json()["search"]["layouts"]} == {"op"}


@pytest.mark.parametrize("model, args, message", [
    ("llama2-7b", ["--dp", "8", "--ep", "2"], "dense"),
    ("mixtral-8x7b", ["--dp", "6", "--ep", "3", "--global-batch", "6"], "does not divide the 8 routed experts"),
    ("mixtral-8x7b", ["--dp", "2", "--ep", "4"], "ep must divide dp"),
    ("mixtral-8x7b", ["--dp", "8", "--ep", "0"], "--ep must be between"),
    ("mixtral-8x7b", ["--dp", "8", "--ep", "2", "--fsdp", "--hsdp", "2"], "not modelled"),
    ("llama2-7b", ["--dp", "8", "--compute-dtype", "fp4"], "--compute-dtype must be fp8"),
    ("llama2-7b", ["--dp", "8", "--compute-dtype", "fp8", "--device-spec", "a100-80gb"], "no FP8 rate"),
    ("llama2-7b", ["--dp", "8", "--grad-dtype", "bf16"], "--grad-dtype must be fp32"),
    ("llama2-7b", ["--dp", "8", "--grad-dtype", "fp32", "--dtype", "fp32"], "fp32 gradients already"),
    ("llama2-7b", ["--dp", "8", "--hsdp", "2"], "needs --zero 3"),
    ("llama2-7b", ["--dp", "8", "--fsdp", "--hsdp", "3"], "must divide dp"),
    ("llama2-7b", ["--dp", "8", "--fsdp", "--hsdp", "8"], "plain FSDP"),
    ("llama2-7b", ["--dp", "8", "--fsdp", "--hsdp", "-1"], "--hsdp must be between"),
    ("llama2-7b", ["--dp", "8", "--no-reshard-after-forward"], "needs --zero 3"),
    ("llama2-7b", ["--dp", "8", "--offload", "disk"], "--offload takes optimizer, activations or both"),
    ("llama2-7b", ["--dp", "8", "--offload", "optimizer,,gpu"], "--offload has an empty item"),
    ("mixtral-8x7b", ["--dp", "8", "--recompute", "op"], "mixture of experts"),
    ("gpt2", ["--dp", "8", "--recompute", "op"], "biases"),
    ("llama2-7b", ["--dp", "2", "--ep", "2", "--measure"], "dense"),
    ("llama2-7b", ["--gpus", "8", "--ep", "2"], "dense"),  # a search says why, not "no layout splits"
    ("mixtral-8x7b", ["--gpus", "8", "--recompute", "op"], "mixture of experts"),
])
def test_hostile_sharding_flags(cli, model, args, message):
    assert_one_line_error(cli("plan", model, *args), message)


def test_zero2_measured_as_fsdp2_without_resharding_after_forward(cli):
    """PyTorch has no ZeRO-2 engine: the run is FSDP2 with reshard_after_forward=False (one gather per block and
    micro-batch), planned as such, and the two agree exactly (2 gloo ranks)."""
    r = cli("plan", "llama2-7b", "--dp", "2", "--zero", "2", "--measure", "--nproc", "2", "--json")
    assert r.code == 0, r.err
    m = r.json()["measured"]
    assert m["states_exact"] and m["collectives_exact"]
    assert (m["layout"]["zero"], m["layout"]["reshard_after_forward"]) == (3, False)
    gathers = [c for c in m["collectives"] if c["op"] == "all_gather"]
    assert [c["calls"] for c in gathers] == [m["layout"]["micro_batches"] * (2 + 1)]  # 2 blocks and the root, once
    assert any(w.startswith("ZeRO-2 (ran as FSDP2") for w in m["left_out"])


def test_zero1_measured_as_zero_redundancy_optimizer(cli):
    """ZeRO-1 as PyTorch ships it: DDP's all-reduce, whole tensors' Adam states dealt out greedily, a broadcast
    per rank after the step -- planned as such (zero_engine "torch") and exact (2 gloo ranks)."""
    r = cli("plan", "llama2-7b", "--dp", "2", "--zero", "1", "--measure", "--nproc", "2", "--json")
    assert r.code == 0, r.err
    m = r.json()["measured"]
    assert m["states_exact"] and m["collectives_exact"] and m["layout"]["zero_engine"] == "torch"
    ops = {(c["cause"], c["op"]): c["calls"] for c in m["collectives"]}
    assert ops == {("dp_grads", "all_reduce"): ops["dp_grads", "all_reduce"], ("zero_params", "broadcast"): 2}
    # the two ranks' optimizer states together: every parameter's two fp32 Adam moments once, 2 × its fp32 weight
    assert sum(x["optimizer_bytes"] for x in m["ranks"]) == 2 * m["ranks"][0]["weights_bytes"]


def test_help_names_every_flag(cli, monkeypatch):
    monkeypatch.setenv("COLUMNS", "250")  # the long flag whole on one line
    r = cli("plan", "--help")
    for flag in ("--ep", "--compute-dtype", "--no-reshard-after-forward", "--hsdp", "--grad-dtype", "--offload"):
        assert flag in r.out


def test_python_api_takes_the_same_variants(cli):
    import tfcalc

    args = ["mixtral-8x7b", "--dp", "8", "--ep", "4", "--offload", "optimizer", "--grad-dtype", "fp32", "--seq", "4096"]
    api = tfcalc.plan("mixtral-8x7b", dp=8, ep=4, offload="optimizer", grad_dtype="fp32", seq=4096).to_json()
    assert api == cli("plan", *args, "--json").json()
    with pytest.raises(tfcalc.InputError if hasattr(tfcalc, "InputError") else ValueError, match="^offload"):
        tfcalc.plan("llama2-7b", dp=8, offload=5)


@pytest.mark.parametrize("kwargs, message", [
    (dict(ep=2.0), "--ep must be an integer; got float"),
    (dict(hsdp=2.5, zero=3), "--hsdp must be an integer; got float"),
    (dict(offload=["disk"]), "--offload must be optimizer, activations or both"),
    (dict(offload=None), "--offload must be optimizer, activations or both"),
    (dict(grad_dtype=5), "--grad-dtype must be fp32"),
    (dict(compute_dtype=8), "--compute-dtype must be fp8"),
    (dict(reshard_after_forward="no", zero=3), "True or False"),
])
def test_python_api_hostile_variants(kwargs, message):
    import tfcalc
    from tfcalc.errors import InputError

    python = message.replace("--", "").replace("grad-dtype", "grad_dtype").replace("compute-dtype", "compute_dtype")
    with pytest.raises(InputError, match=python.replace("(", r"\(")):  # the Python argument's name (issue 32)
        tfcalc.plan("llama2-7b", dp=8, **kwargs)
