"""ZeRO-3 under a pipeline (tfcalc.count.training.pipeline_fsdp) against the hand derivation: a tiny Llama
(d 64, 4 heads, FFN 128, vocabulary 100, 4 layers) on pp 2 × dp 2. Its last stage holds two blocks, the final
norm and the head: 2·(4·64² + 3·64·128 + 2·64) + 64 + 100·64 = 88,640 parameters; the first, the embedding and
two blocks: 88,576. The measured counterpart (FSDP2 on gloo ranks): tests/measure/test_pipeline_fsdp_measured.py."""

import pytest

import tfcalc

TINY = dict(n_layer=4, d_model=64, n_head=4, d_ff=128, vocab_size=100, max_seq_len=16)
STAGE_PARAMS = {0: 100 * 64 + 2 * (4 * 64**2 + 3 * 64 * 128 + 2 * 64),
                1: 2 * (4 * 64**2 + 3 * 64 * 128 + 2 * 64) + 64 + 100 * 64}


def per_rank(**kw) -> dict:
    base = dict(dp=2, global_batch=8, micro_batch=1, seq=16, device_spec="a100-80gb")
    return tfcalc.plan("llama2-7b", **{**base, **kw}, **TINY).to_json()["per_rank"]


@pytest.mark.parametrize("grad_dtype, grad_bytes", [(None, 2), ("fp32", 4)])
def test_unsharded_gradients_and_weights_of_the_stage(grad_dtype, grad_bytes):
    m = per_rank(pp=2, zero=3, grad_dtype=grad_dtype)
    psi = STAGE_PARAMS[m["pipeline_stage"]]
    assert m["params"] == psi
    assert m["accumulated_grads_bytes"] == grad_bytes * psi  # the reduce dtype: --grad-dtype, else bf16
    assert m["gathered_weights_bytes"] == 2 * psi  # the whole stage, bf16, resharded after forward or not
    parts = ("weights", "grads", "optimizer", "activation", "gathered_weights", "fp8_cache", "accumulated_grads")
    assert m["total_bytes"] == sum(m[f"{k}_bytes"] for k in parts)


def test_nothing_without_a_pipeline_or_without_zero3():
    flat = per_rank(pp=1, dp=4, zero=3)
    assert flat["accumulated_grads_bytes"] == 0
    assert flat["gathered_weights_bytes"] < 2 * flat["params"]  # two units' worth, not the model's
    assert per_rank(pp=2, zero=1)["accumulated_grads_bytes"] == 0  # ZeRO-1/2 reduce into their own buffers


def test_the_plan_table_names_the_term(cli, width):
    width(200)
    args = ["plan", "llama2-7b", "--pp", "2", "--dp", "2", "--zero", "3", "--global-batch", "8", "--seq", "16"]
    r = cli(*args, *[x for k, v in TINY.items() for x in ("--set", f"{k}={v}")])
    assert r.code == 0, r.err
    assert "Unsharded gradients (PP)" in r.out
    assert "the pipeline's backward does not reshard" in " ".join(r.out.split())  # the cell wraps


def test_fsdp2_with_an_fp32_reduction_is_16_bytes_a_parameter_not_18():
    """rank_memory, step 4: Llama 2 7B (Ψ = 6,738,415,616, every tensor's rows divisible by 8) on FSDP 8 with
    --grad-dtype fp32: one fp32 shard (the master) 4, its fp32 gradient 4, Adam's moments 8 -> 16Ψ/8 =
    13,476,831,232 bytes, as with bf16 gradients; no bf16 shard."""
    m = tfcalc.plan("llama2-7b", dp=8, zero=3, global_batch=8, seq=4096, grad_dtype="fp32").to_json()["per_rank"]
    assert m["weights_bytes"] == 0
    assert (m["grads_bytes"], m["optimizer_bytes"]) == (4 * 6738415616 // 8, 12 * 6738415616 // 8)
    bf16 = tfcalc.plan("llama2-7b", dp=8, zero=3, global_batch=8, seq=4096).to_json()["per_rank"]
    states = ("weights_bytes", "grads_bytes", "optimizer_bytes")
    assert sum(m[k] for k in states) == sum(bf16[k] for k in states) == 13476831232
