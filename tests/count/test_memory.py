"""Memory: exact published figures, the activation formula against what autograd really saves, the
paper's formula as a special case, training state, budgets, the measured peak, and the command line."""

import time

import pytest
import torch
from conftest import configs, tiny
from hypothesis import HealthCheck, assume, given, settings, strategies as st

from tfcalc.config import ConfigError, ModelConfig, replace
from tfcalc.count.model import budget as count_budget, memory as mem, training_memory as training
from tfcalc.count.model.params import total
from tfcalc.count.training.rank_activations import korthikanti_bytes
from tfcalc.measure import device as dev
from tfcalc.measure.memory import forward_loss, measure_peak
from tfcalc.model import build_model
from tfcalc.presets import load
from tfcalc.workload import Workload

LLAMA_LIKE = dict(pos_encoding="rope", norm="rmsnorm", norm_bias=False, gated_ffn=True, activation="silu",
                  attn_bias=False, ffn_bias=False, tie_embeddings=False)


# ---------- exact published figures ----------


def test_llama2_7b_weights_in_bf16():
    assert mem.weights_bytes(load("llama2-7b"), "bf16") == 13_476_831_232


@pytest.mark.parametrize("preset, expected", [("llama2-7b", 2_147_483_648), ("llama2-70b", 1_342_177_280)])
def test_kv_cache_bf16_at_4096(preset, expected):
    assert mem.kv_cache_bytes(load(preset), Workload(batch=1, seq=4096, dtype="bf16")) == expected


def test_llama2_7b_kv_cache_is_two_gib():
    assert mem.kv_cache_bytes(load("llama2-7b"), Workload(batch=1, seq=4096, dtype="bf16")) == 2 * 2**30


@given(cfg=configs(), batch=st.integers(1, 8), seq=st.integers(1, 4096))
def test_gqa_and_mqa_shrink_the_kv_cache_by_the_group_size(cfg, batch, seq):
    mha = replace(cfg, n_kv_head=cfg.n_head)
    mqa = replace(cfg, n_kv_head=1)
    assert mem.kv_cache_bytes(mha, Workload(batch=batch, seq=seq, dtype="bf16")) == cfg.n_head * mem.kv_cache_bytes(
        mqa, Workload(batch=batch, seq=seq, dtype="bf16")
    )
    assert mem.kv_cache_bytes(mha, Workload(batch=batch, seq=seq, dtype="fp32")) * cfg.kv_heads == (
        mem.kv_cache_bytes(cfg, Workload(batch=batch, seq=seq, dtype="fp32")) * cfg.n_head)


def test_llama2_70b_gqa_saves_eightfold():
    cfg = load("llama2-70b")
    assert (
        mem.kv_cache_bytes(replace(cfg, n_kv_head=64), Workload(batch=1, seq=4096, dtype="bf16")) == 8 * 1_342_177_280
    )


def test_int4_packs_two_per_byte_and_rounds_up():
    cfg = load("llama2-7b")
    assert mem.weights_bytes(cfg, "int4") == 6_738_415_616 // 2
    odd = tiny(d_model=33, n_head=3)  # 29,601 parameters: odd
    assert total(odd) % 2 == 1
    assert mem.weights_bytes(odd, "int4") == (total(odd) + 1) // 2
    assert mem.weights_bytes(cfg, "int8") == mem.weights_bytes(cfg, "fp8") == 6_738_415_616
    assert mem.weights_bytes(cfg, "tf32") == mem.weights_bytes(cfg, "fp32") == 4 * 6_738_415_616
    assert mem.kv_cache_bytes(cfg, Workload(batch=1, seq=4096, dtype="int4")) == 2_147_483_648 // 4


def test_unknown_dtype_is_a_config_error():
    with pytest.raises(ConfigError, match="unknown dtype 'fp64'"):
        mem.weights_bytes(tiny(), "fp64")


# ---------- training state ----------


@pytest.mark.parametrize(
    "dtype, optimizer, per_param, master",
    [("bf16", "adam-mixed", 16, 4), ("fp16", "adam-mixed", 16, 4), ("fp32", "adam-mixed", 16, 0),
     ("fp32", "adam", 16, 0), ("bf16", "adam", 8, 0), ("fp32", "sgd", 8, 0), ("bf16", "sgd", 4, 0)],
)
def test_training_state_bytes_per_param(dtype, optimizer, per_param, master):
    cfg = load("llama2-7b")
    state = training.training_state(cfg, dtype, optimizer)
    n = 6_738_415_616
    assert state.total == per_param * n and state.bytes_per_param == per_param
    assert state.master_weights == master * n
    assert state.weights == state.gradients == mem.weights_bytes(cfg, dtype)


def test_mixed_precision_adam_is_weights_grads_master_and_two_moments():
    state = training.training_state(load("gpt2"), "bf16", "adam-mixed")
    n = 124_439_808
    assert (state.weights, state.gradients, state.master_weights, state.optimizer_state) == (2 * n, 2 * n, 4 * n, 8 * n)


@pytest.mark.parametrize("dtype", ["fp8", "int8", "int4"])
def test_training_in_inference_formats_is_refused(dtype):
    with pytest.raises(ConfigError, match="inference format"):
        training.training_state(tiny(), dtype)


# ---------- activations: the formula ----------


def test_reduces_to_korthikanti_for_a_gpt_block_with_dropout_and_no_flash():
    """Korthikanti et al. 2022, eq. 1, by hand: h = 1024, a = 16, s = 2048, b = 2, 16-bit:
    sbh(34 + 5as/h) = 2048·2·1024·(34 + 5·16·2048/1024) = 4,194,304·194 = 813,694,976 bytes per layer.
    tfcalc adds only the LayerNorm statistics the paper leaves out: 2 norms · 8 bytes · s·b = 65,536."""
    cfg = ModelConfig(n_layer=24, d_model=1024, n_head=16, vocab_size=50257, max_seq_len=2048)
    acts = mem.activations(cfg, Workload(batch=2, seq=2048, dtype="bf16"), attention="math", dropout=True)
    assert acts.layer == 813_694_976 + 65_536
    assert korthikanti_bytes(cfg, 2, 2048) == 24 * 813_694_976


def test_without_dropout_a_gpt_block_keeps_32sbh_plus_the_scores():
    """No dropout (tfcalc's model has none): 34sbh - 2sbh of masks; the s² part is the softmax output,
    2as²b, without the mask (as²b) and the dropout output (2as²b)."""
    cfg = load("gpt2")
    s, b, h, a = 1024, 4, 768, 12
    acts = mem.activations(cfg, Workload(batch=b, seq=s, dtype="bf16"), attention="math")
    assert acts.layer - 16 * s * b == 32 * s * b * h + 2 * a * s * s * b
    # at batch 1, V (a view of the fused QKV output) keeps all of it alive: 2·2sbh more
    one = mem.activations(cfg, Workload(batch=1, seq=s, dtype="bf16"), attention="math")
    assert one.layer - 16 * s == 36 * s * h + 2 * a * s * s


@given(cfg=configs(), batch=st.integers(1, 4), seq=st.integers(1, 512))
def test_flash_removes_the_s_squared_term(cfg, batch, seq):
    assume(cfg.expert_capacity_factor is None)  # an expert's buffer rounds up: not linear in s, though not s²
    flash = mem.activations(cfg, Workload(batch=batch, seq=seq, dtype="bf16"), attention="flash")
    doubled = mem.activations(cfg, Workload(batch=batch, seq=2 * seq, dtype="bf16"), attention="flash")
    assert doubled.layer == 2 * flash.layer  # linear in s: nothing s² is kept
    math = mem.activations(cfg, Workload(batch=batch, seq=seq, dtype="bf16"), attention="math")
    kept = 2 if cfg.attn_softcap is not None else 1  # soft-capping keeps the tanh output beside the softmax
    assert math.per_layer["attn_scores"] == kept * 2 * cfg.n_head * seq * seq * batch


def test_llama_block_terms():
    """Llama 2 7B, bf16, b = 1, s = 4096, flash: per token h = 4096 and f = 11008 give RMSNorm 8h + 4
    (twice), inputs 2·2h, QKV 2·3h, rotated Q, K 2·2h, log-sum-exp 4·32, output 2h, SwiGLU 4·2f."""
    cfg = load("llama2-7b")
    h, f, tokens = 4096, 11008, 4096
    per_token = 2 * (8 * h + 4) + 2 * 2 * h + 2 * 3 * h + 2 * 2 * h + 4 * 32 + 2 * h + 4 * 2 * f
    assert mem.activations(cfg, Workload(batch=1, seq=4096, dtype="bf16")).layer == tokens * per_token


@given(cfg=configs(), batch=st.integers(1, 4), seq=st.integers(1, 64))
def test_full_recompute_keeps_block_inputs_and_rebuilds_one_block(cfg, batch, seq):
    none = mem.activations(cfg, Workload(batch=batch, seq=seq, dtype="bf16"))
    full = mem.activations(cfg, Workload(batch=batch, seq=seq, dtype="bf16"), recompute="full")
    head = sum(none.head.values())
    blocks = cfg.n_layer + (cfg.encoder_layers if cfg.arch == "encoder-decoder" else 0)  # source length = seq
    assert full.stored == blocks * 2 * batch * seq * cfg.d_model + head
    assert full.total == full.stored + max(none.layer, none.encoder_layer) + none.loss_gradients
    assert full.stored <= none.stored


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cfg=configs(extras=True), batch=st.integers(1, 3), data=st.data())
def test_activation_formula_equals_what_autograd_saves(cfg, batch, data):
    """The analytic bytes kept for backward equal, to the byte, the bytes of the tensors the real module
    saves (fp32, CPU), for every config Hypothesis draws -- with an expert capacity too, whichever pairs the
    routing drops (the forward's shapes do not depend on it: tfcalc.model.experts)."""
    seq = data.draw(st.integers(1, cfg.max_seq_len))
    has_source = cfg.arch == "encoder-decoder" or cfg.cross_attention
    src_seq = data.draw(st.integers(1, cfg.max_seq_len)) if has_source else None
    model = build_model(cfg, "cpu").train()
    idx = torch.randint(0, cfg.vocab_size, (batch, seq))
    src_idx = torch.randint(0, cfg.vocab_size, (batch, src_seq)) if cfg.arch == "encoder-decoder" else None
    memory = torch.randn(batch, src_seq, cfg.d_model) if cfg.cross_attention else None
    _, saved = forward_loss(model, idx, count_saved=True, src_idx=src_idx, memory=memory)
    assert saved == mem.activations(cfg, Workload(batch=batch, seq=seq, dtype="fp32", src_seq=src_seq)).stored


def test_activation_formula_in_bf16_on_cpu_differs_only_by_layernorm_statistics():
    """bf16 on CPU: LayerNorm keeps mean and 1/σ in bf16, not fp32 as counted (as CUDA does): 4 bytes less
    per token per norm (2 per layer and the final one). Nothing else differs."""
    cfg = replace(tiny(n_layer=2, d_model=64, vocab_size=97), max_seq_len=32)
    model = build_model(cfg, "cpu", torch.bfloat16).train()
    _, saved = forward_loss(model, torch.randint(0, 97, (2, 32)), count_saved=True)
    assert saved == mem.activations(cfg, Workload(batch=2, seq=32, dtype="bf16")).stored - 4 * (2 * 2 + 1) * 2 * 32


# ---------- budgets ----------


@pytest.mark.parametrize(
    "text, expected",
    [("80GB", 80 * 10**9), ("80 GiB", 80 * 2**30), ("24GiB", 24 * 2**30), ("512MB", 512 * 10**6),
     ("1.5TB", 1_500_000_000_000), ("1000b", 1000), ("2kib", 2048), ("1kB", 1000), ("0.5 KiB", 512), ("7B", 7)],
)
def test_parse_bytes(text, expected):
    assert count_budget.parse_bytes(text) == expected


@pytest.mark.parametrize("text", ["80G", "lots", "", "-5GB", "0", "0GB", "1e9", "GB", "5 GBs", "1.2.3GB", "1000", "24"])
def test_parse_bytes_refuses(text):
    with pytest.raises(ConfigError):
        count_budget.parse_bytes(text)


@settings(deadline=None)
@given(budget=st.integers(14 * 10**9, 200 * 10**9), batch=st.integers(1, 8))
def test_largest_context_fits_and_one_more_does_not(budget, batch):
    cfg = load("llama2-7b")
    fit = count_budget.fit_inference(cfg, Workload(batch=batch, seq=4096, dtype="bf16"), budget)
    t = fit.max_seq
    fits = [mem.inference_bytes(cfg, Workload(batch=batch, seq=n, dtype="bf16")) <= budget for n in (t, t + 1)]
    assert t >= 1 and fits == [True, False]
    b = fit.max_batch
    assert b == 0 or mem.inference_bytes(cfg, Workload(batch=b, seq=4096, dtype="bf16")) <= budget
    assert mem.inference_bytes(cfg, Workload(batch=b + 1, seq=4096, dtype="bf16")) > budget


def test_llama2_7b_on_24_gib():
    """24 GiB - 13,476,831,232 weight bytes, over 524,288 KV bytes per token (2·32·4096·2)."""
    fit = count_budget.fit_inference(load("llama2-7b"), Workload(batch=1, seq=4096), 24 * 2**30)
    assert fit.max_seq == (24 * 2**30 - 13_476_831_232) // 524_288 == 23_446
    assert fit.max_batch == 5


def test_training_fit_and_when_nothing_fits():
    cfg = load("gpt2")
    fit = count_budget.fit_training(cfg, Workload(batch=1, seq=1024), 24 * 10**9)
    need = [training.training_bytes(cfg, Workload(batch=b, seq=1024)) for b in (fit.max_batch, fit.max_batch + 1)]
    assert need[0] <= 24 * 10**9 < need[1]
    small = count_budget.fit_training(cfg, Workload(batch=1, seq=1024), 10**9)
    assert not small.weights_fit and small.max_batch == small.max_seq == 0
    assert not count_budget.fit_inference(load("gpt3"), Workload(batch=1, seq=2048), 80 * 10**9).weights_fit


# ---------- devices ----------


def test_device_resolution():
    assert dev.resolve_device("cpu").name == "cpu"
    with pytest.raises(ConfigError, match="unknown device 'gpu'"):
        dev.resolve_device("gpu")
    with pytest.raises(ConfigError, match="unknown device"):
        dev.resolve_device("cpu:1")
    if not torch.cuda.is_available():
        with pytest.raises(ConfigError, match="CUDA is not available"):
            dev.resolve_device("cuda")


def test_dtypes_and_free_memory(tmp_path):
    assert dev.torch_dtype("bf16") is torch.bfloat16 and dev.torch_dtype("tf32") is torch.float32
    with pytest.raises(ConfigError, match="counted, not run"):
        dev.torch_dtype("int4")
    fake = tmp_path / "meminfo"
    fake.write_text("MemTotal:       24000000 kB\nMemAvailable:   1000 kB\n")
    assert dev._meminfo_available(str(fake)) == 1_024_000
    assert dev._meminfo_available(str(tmp_path / "none")) is None
    free = dev.free_memory(dev.resolve_device("cpu"))
    assert free is None or free > 0


# ---------- measured ----------

# Big enough (tens of MB of weights and activations) that a few MB of allocator noise do not dominate;
# small enough to run in a few seconds on 2 cores.
MEASURED = ModelConfig(n_layer=4, d_model=256, n_head=8, n_kv_head=2, vocab_size=8192, max_seq_len=256, **LLAMA_LIKE)


def test_measured_training_peak_on_cpu_is_close_to_the_estimate():
    """Peak RSS of a training step (fp32, Adam) within 0.95-1.12 of weights + grads + Adam moments +
    activations (+ loss gradients); measured 1.02 when written. The remainder: the gradient of one
    tensor (the LM head, V·h) computed before it is added into .grad, kernel scratch, allocator
    bookkeeping. The saved activations agree to the byte."""
    m = measure_peak(MEASURED, Workload(batch=4, seq=256, dtype="fp32"), "cpu", training=True, optimizer="adam")
    est = training.training_bytes(MEASURED, Workload(batch=4, seq=256, dtype="fp32"), "adam")
    assert 0.95 <= m.peak_bytes / est <= 1.12, (m.peak_bytes, est)
    assert m.saved_activation_bytes == mem.activations(MEASURED, Workload(batch=4, seq=256, dtype="fp32")).stored


def test_measured_forward_peak_on_cpu_is_close_to_the_estimate():
    """A no-grad forward pass in bf16: weights + the working set, within 0.95-1.2 (measured 1.08 when
    written); the remainder is a few MB of kernel scratch and allocator pages, growing with h and V."""
    m = measure_peak(MEASURED, Workload(batch=4, seq=256, dtype="bf16"), "cpu", training=False)
    est = mem.weights_bytes(MEASURED, "bf16") + mem.forward_working_set(
        MEASURED, Workload(batch=4, seq=256, dtype="bf16")
    )
    assert 0.95 <= m.peak_bytes / est <= 1.2, (m.peak_bytes, est)
    assert m.saved_activation_bytes is None


# ---------- command line ----------

CONTRACT = {"preset", "dtype", "batch", "seq", "weights_bytes", "kv_cache_bytes", "activation_bytes",
            "training_bytes", "measured_peak_bytes"}


def test_json_contract(cli):
    one = cli("memory", "llama2-7b", "--json").json()
    assert CONTRACT <= set(one)
    assert (one["preset"], one["dtype"], one["batch"], one["seq"]) == ("llama2-7b", "bf16", 1, 4096)
    assert one["weights_bytes"] == 13_476_831_232 and one["kv_cache_bytes"] == 2_147_483_648
    assert one["measured_peak_bytes"] is None
    assert one["training_bytes"] == 16 * 6_738_415_616 + one["activation_bytes"]
    several = cli("memory", "llama2-7b", "llama2-70b", "--json").json()
    assert [r["preset"] for r in several] == ["llama2-7b", "llama2-70b"]
    assert several[1]["kv_cache_bytes"] == 1_342_177_280
    assert all(CONTRACT <= set(r) for r in several)


def test_inference_format_has_no_training_figures(cli):
    r = cli("memory", "llama2-7b", "--dtype", "int4", "--json").json()
    assert r["training_bytes"] is None and r["activation_bytes"] is None
    # int4 weights: group 128 with fp16 scales and int4 zero points, the rest in bf16 (tfcalc.count.model.quant,
    # hand-worked in tests/count/test_roofline.py); the KV cache stays bf16
    assert r["weights_bytes"] == 3_889_307_648 and r["kv_cache_bytes"] == 2_147_483_648 and r["kv_dtype"] == "bf16"
    parts = r["weight_format"]["parts_bytes"]
    assert parts == {"quantized": 3_238_002_688, "scales": 101_187_584, "zero_points": 25_296_896,
                     "unquantized": 524_820_480}


def test_kv_dtype_and_group_size_options(cli):
    r = cli("memory", "llama2-7b", "--kv-dtype", "fp8", "--budget", "24GB", "--json").json()
    assert r["kv_cache_bytes"] == 2_147_483_648 // 2 and r["weights_bytes"] == 2 * 6_738_415_616
    assert r["fit"]["max_batch"] == (24 * 10**9 - 2 * 6_738_415_616) // (2_147_483_648 // 2)
    g64 = cli("memory", "llama2-7b", "--dtype", "int4", "--group-size", "64", "--json").json()
    assert g64["weight_format"]["parts_bytes"]["scales"] == 2 * 101_187_584
    bad = cli("memory", "gpt2", "--group-size", "64")
    assert bad.code == 2 and "--group-size applies to" in bad.err


def test_table_names_units_and_figures(cli):
    r = cli("memory", "llama2-7b", "--budget", "24GiB", "--exact")
    assert r.code == 0, r.err
    for text in ("13,476,831,232", "2,147,483,648", "2³⁰ bytes", "Korthikanti", "16 bytes/param", "23,446 tokens",
                 "largest batch at seq 4,096"):
        assert text in r.out, text
    human = cli("memory", "llama2-7b").out
    assert "12.55 GiB" in human and "2 GiB" in human and "13,476,831,232" not in human


def test_budget_says_when_the_weights_do_not_fit(cli):
    r = cli("memory", "gpt3", "--budget", "80GB")
    assert r.code == 0 and "the weights alone do not fit" in r.out
    j = cli("memory", "gpt3", "--budget", "80GB", "--json").json()
    assert j["fit"]["weights_fit"] is False and j["fit"]["max_seq"] == 0


def test_measure_on_cpu_from_the_cli(cli):
    r = cli("memory", "gpt2", "--set", "n_layer=1", "--seq", "64", "--dtype", "fp32", "--measure", "--json")
    assert r.code == 0, r.err
    j = r.json()
    assert j["measured_peak_bytes"] > j["weights_bytes"] and 0.9 < j["measured_ratio"] < 1.3
    assert j["estimated_peak_bytes"] == j["weights_bytes"] + j["forward_working_set_bytes"]
    table = cli("memory", "gpt2", "--set", "n_layer=1", "--seq", "64", "--measure", "--training").out
    assert "Measured peak on cpu" in table and "Activations saved by autograd, measured" in table
    assert "1.0000 × estimate" in table or "0.99" in table


def test_refuses_before_allocating_what_cannot_fit(cli):
    start = time.monotonic()
    r = cli("memory", "gpt3", "--measure")
    assert r.code == 2 and r.out == "" and r.err.count("\n") == 1
    assert "not running gpt3-175b" in r.err and "651.4 GiB" in r.err and "free" in r.err  # fp32: runs on a CPU
    assert time.monotonic() - start < 10  # refused from the estimate, nothing built


def test_refusal_uses_the_free_memory(cli, monkeypatch):
    monkeypatch.setattr(dev, "free_memory", lambda device: 10**6)
    r = cli("memory", "gpt2", "--measure", "--training")
    assert r.code == 2 and "free memory on cpu is 976.6 KiB" in r.err and "training step" in r.err


@pytest.mark.parametrize(
    "args, message",
    [
        (["--dtype", "fp64"], "'fp64' is not one of"),
        (["--batch", "0"], "--batch must be between 1 and"),
        (["--seq", "-1"], "--seq must be between 1 and"),
        (["--budget", "80G"], "say GB for 10^9 bytes or GiB for 2^30"),
        (["--budget", "plenty"], "cannot read --budget 'plenty' as a size"),
        (["--budget", "24"], "--budget '24' has no unit; write 24GB (10^9 bytes), 24GiB (2^30 bytes) or 24B"),
        (["--optimizer", "adamw"], "'adamw' is not one of"),
        (["--training", "--dtype", "int8"], "int8 is an inference format here"),
        (["--measure", "--dtype", "fp8"], "fp8 is counted, not run"),
        (["--measure", "--device", "tpu"], "unknown device 'tpu'"),
        (["--measure", "--recompute", "full"], "--measure runs without recompute"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(cli, args, message):
    r = cli("memory", "gpt2", *args)
    assert r.code == 2 and r.out == ""
    assert r.err.count("\n") == 1 and r.err.startswith("tfcalc: error:"), r.err
    assert message in r.err


def test_optimizer_step_temporaries_can_set_the_training_peak():
    """GPT-2's tied embedding, 50257·768 = 38,597,376 params, is its largest tensor: mixed-precision Adam
    holds its fp32 gradient copy and two fp32 denominator temporaries during the step."""
    cfg = load("gpt2")
    state = training.training_state(cfg, "bf16", "adam-mixed")
    assert state.step_temporaries == 3 * 4 * 38_597_376
    assert training.training_state(cfg, "bf16", "adam").step_temporaries == 2 * 2 * 38_597_376
    assert training.training_state(cfg, "bf16", "sgd").step_temporaries == 0
    short = mem.activations(cfg, Workload(batch=1, seq=8, dtype="bf16")).total
    assert short < state.step_temporaries
    assert training.training_bytes(cfg, Workload(batch=1, seq=8)) == state.total + state.step_temporaries
    long = mem.activations(cfg, Workload(batch=8, seq=1024, dtype="bf16")).total
    assert training.training_bytes(cfg, Workload(batch=8, seq=1024)) == state.total + long
