"""--zero-engine deepspeed (tfcalc.count.training.sharding, step 8): DeepSpeed's BF16_Optimizer keeps the bf16
.grad autograd writes beside its fp32 accumulation buffer, against the hand derivation from Megatron Core's
table (float16 parameters, fp32 gradients: 18 bytes a parameter, 6 + 12/d under the distributed optimizer)."""

import pytest

import tfcalc
from tfcalc.count.training import rank_memory as rm
from tfcalc.errors import InputError
from tfcalc.presets import load
from tfcalc.workload import Layout

PSI_7B = 6_738_415_616


@pytest.mark.parametrize("zero, per_param_times_8", [(0, 20 * 8), (1, 8 * 8 + 12)])
def test_deepspeed_bf16_optimizer_keeps_the_bf16_grads_beside_the_fp32_ones(zero, per_param_times_8):
    """bf16 weights 2, fp32 gradient buffer 4, the bf16 .grad kept 2, master and moments 12 (ZeRO-1: 12/d): 20
    bytes a parameter, 8 + 12/d -- Megatron's 18 and 6 + 12/d plus the kept bf16 gradients; d = 8 divides Ψ."""
    layout = Layout(dp=8, zero=zero, seq=4096, global_batch=8, grad_dtype="fp32", zero_engine="deepspeed")
    psi, w, g, o = rm.model_states(load("llama2-7b"), layout, 0)
    assert psi == PSI_7B and g == 6 * PSI_7B
    assert 8 * (w + g + o) == per_param_times_8 * PSI_7B


def test_the_engine_reaches_the_json_and_the_table(cli, width):
    width(200)
    args = ["plan", "llama2-7b", "--dp", "8", "--zero", "1", "--grad-dtype", "fp32", "--global-batch", "8"]
    flat, ds = cli(*args, "--json"), cli(*args, "--zero-engine", "deepspeed", "--json")
    assert flat.code == ds.code == 0, ds.err
    assert ds.json()["per_rank"]["grads_bytes"] - flat.json()["per_rank"]["grads_bytes"] == 2 * PSI_7B
    table = cli(*args, "--zero-engine", "deepspeed")
    assert "DeepSpeed BF16_Optimizer" in " ".join(table.out.split())


@pytest.mark.parametrize("over", [dict(zero=2, grad_dtype="fp32"), dict(zero=1)])
def test_deepspeed_engine_is_bf16_optimizer_only(over):
    with pytest.raises(InputError, match="BF16_Optimizer: ZeRO 0 or 1 with grad_dtype fp32"):
        tfcalc.plan("llama2-7b", dp=8, zero_engine="deepspeed", **over)


def test_an_unknown_engine_is_one_line(cli):
    r = cli("plan", "llama2-7b", "--dp", "8", "--zero-engine", "megatron")
    assert r.code == 2 and r.out == "" and len(r.err.strip().splitlines()) == 1 and "zero_engine" in r.err
