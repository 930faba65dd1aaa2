"""LoRA (tfcalc.count.model.lora): parameters against PEFT (where installed) and a hand derivation over
transformers' modules, activations against autograd's saved tensors of tfcalc's module with real adapters, FLOPs
against FlopCounterMode with frozen weights, the paper's GPT-3 175B checkpoint, and bad inputs."""

from __future__ import annotations

import re

import pytest
import torch
import torch.nn as nn

from tfcalc.count.model import lora, training_memory as training
from tfcalc.count.model.flops import matmul_entries
from tfcalc.count.training.rank_activations import training_activations
from tfcalc.errors import InputError
from tfcalc.measure.flops import flop_counter
from tfcalc.measure.memory import forward_loss
from tfcalc.model import build_model
from tfcalc.presets import load
from tfcalc.workload import Layout, Workload

TINY = {"llama2-7b": ["n_layer=3", "d_model=64", "n_head=4", "n_kv_head=2", "d_ff=176", "vocab_size=128"],
        "gpt2": ["n_layer=3", "d_model=64", "n_head=4", "d_ff=176", "vocab_size=128"]}
# the blocks each test runs: Llama (GQA, SwiGLU, RMSNorm), GPT-2 (LayerNorm, GELU), and Qwen3's RMSNorm Q/K norms
CASES = {"llama": ("llama2-7b", TINY["llama2-7b"]), "gpt2": ("gpt2", TINY["gpt2"]),
         "qk_norm": ("llama2-7b", [*TINY["llama2-7b"], "qk_norm=true"])}
TARGET_SETS = [("q", "v"), ("k",), ("q", "k", "v", "o"), lora.TARGETS, ("o",), ("up",), ("down",), ("up", "down"),
               ("o", "down")]


def _slices(block, cfg) -> dict[nn.Linear, dict[str, tuple[int, int]]]:
    """Each fused linear of tfcalc's block, and the rows each target owns in it (tfcalc.architecture.tensors:
    Q, K, V in "qkv"; gate, up in "up", in listing order)."""
    a, ffn = cfg.architecture.kinds()[0][1].mixer, cfg.architecture.kinds()[0][1].ffn
    q, k, f, h = a.q_width, a.k_width, ffn.d_ff, cfg.architecture.d_model
    up = {"gate": (0, f), "up": (f, 2 * f)} if ffn.gated else {"up": (0, f)}
    return {block.attn.qkv: {"q": (0, q), "k": (q, q + k), "v": (q + k, q + 2 * k)},
            block.attn.out: {"o": (0, h)}, block.ffn.up: up, block.ffn.down: {"down": (0, h)}}


def add_adapters(model, cfg, targets, r, dtype) -> int:
    """Freeze the model and give each adapted target real A (r × d_in) and B (d_out × r) linears, added to its rows of
    the fused output as PEFT's LoraLayer adds B(A(x)) (lora_dropout 0: x itself). Returns the trainable parameters."""
    for p in model.parameters():
        p.requires_grad_(False)
    for block in model.blocks:
        for linear, rows in _slices(block, cfg).items():
            rows = {t: s for t, s in rows.items() if t in targets}
            if not rows:
                continue
            pairs = nn.ModuleDict({t: nn.Sequential(nn.Linear(linear.in_features, r, bias=False, dtype=dtype),
                                                    nn.Linear(r, b - a, bias=False, dtype=dtype))
                                   for t, (a, b) in rows.items()})
            linear.add_module("lora", pairs)
            linear.register_forward_hook(_adder(pairs, rows))
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def _adder(pairs, rows):
    def hook(module, inputs, out):
        x, parts, pos = inputs[0], [], 0
        for t, (a, b) in sorted(rows.items(), key=lambda kv: kv[1]):
            if a > pos:
                parts.append(out.new_zeros(*out.shape[:-1], a - pos))
            parts.append(pairs[t](x) * 2.0)  # α/r
            pos = b
        if pos < out.shape[-1]:
            parts.append(out.new_zeros(*out.shape[:-1], out.shape[-1] - pos))
        return out + torch.cat(parts, -1)
    return hook


@pytest.mark.parametrize("targets", TARGET_SETS, ids=",".join)
@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_activations_equal_what_autograd_saves_with_real_adapters(case, targets, dtype):
    preset = CASES[case][0]
    if preset == "gpt2" and "gate" in targets:
        targets = tuple(t for t in targets if t != "gate")
    cfg, B, T, r = load(*CASES[case]), 2, 16, 4
    torch_dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[dtype]
    w = Workload(batch=B, seq=T, dtype=dtype)
    full = training_activations(cfg, Layout.single(w, "none", "flash"), w)
    spec = lora.LoraSpec(r, targets)
    e = torch.finfo(torch_dtype).bits // 8
    delta = lora.activation_delta(cfg, full.per_layer, full.head, B * T, e, spec)
    idx = torch.randint(0, 128, (B, T))
    base = build_model(cfg, "cpu", torch_dtype).train()
    _, full_saved = forward_loss(base, idx, count_saved=True)
    model = build_model(cfg, "cpu", torch_dtype).train()
    trainable = add_adapters(model, cfg, targets, r, torch_dtype)
    _, saved = forward_loss(model, idx, count_saved=True)
    assert trainable == lora.trainable_params(cfg, spec)
    # bf16 on a CPU, LayerNorm keeps its mean and 1/σ in bf16 (4 bytes a token less than the fp32 counted, as
    # tests/count/test_memory.py states): a LayerNorm the first block no longer keeps takes 4 bytes a token less
    layernorm = cfg.architecture.kinds()[0][1].norm.kind == "layernorm" and dtype == "bf16"
    dropped = 1 + (lora._first_stage(targets) >= 2)
    assert saved - full_saved == sum(delta.values()) + (4 * B * T * dropped if layernorm else 0)


@pytest.mark.parametrize("targets", TARGET_SETS, ids=",".join)
@pytest.mark.parametrize("case", list(CASES))
def test_training_flops_equal_flopcountermode_with_frozen_weights(case, targets):
    preset = CASES[case][0]
    if preset == "gpt2" and "gate" in targets:
        targets = tuple(t for t in targets if t != "gate")
    cfg, B, T, r = load(*CASES[case]), 2, 16, 4
    model = build_model(cfg, "cpu").train()
    add_adapters(model, cfg, targets, r, torch.float32)
    idx = torch.randint(0, 128, (B, T))
    with flop_counter() as counter:
        loss, _ = forward_loss(model, idx)
        loss.backward()
    entries = matmul_entries(cfg, B, T)
    got = lora.training_flops(cfg, entries, B * T, lora.LoraSpec(r, targets))
    # PyTorch's sdpa_backward_flop_count also counts the flash backward's recomputed Q·Kᵀ, which the convention
    # (backward = 2 × forward for matmuls, docs/models.md) leaves out: once in each block whose attention runs
    # backward -- not the first block's when its first adapter comes after the attention
    qk = next(e for e in entries if e.component == "attn_qk")
    recomputed = qk.per_copy * (qk.copies - (lora._first_stage(targets) >= 1))
    assert counter.get_total_flops() == got.total + recomputed
    assert got.total < got.full_training  # ≈ 4N + adapters, not 6N


def test_params_equal_peft_on_transformers_llama():
    """PEFT's LoraConfig on transformers' LlamaForCausalLM, the same shapes as the tiny preset."""
    peft = pytest.importorskip("peft")
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = load("llama2-7b", TINY["llama2-7b"])
    hf = LlamaForCausalLM(LlamaConfig(hidden_size=64, intermediate_size=176, num_attention_heads=4,
                                      num_key_value_heads=2, num_hidden_layers=3, vocab_size=128))
    names = {"q": "q_proj", "k": "k_proj", "v": "v_proj", "o": "o_proj", "gate": "gate_proj", "up": "up_proj",
             "down": "down_proj"}
    for targets in (None, lora.TARGETS):
        config = peft.LoraConfig(r=8, target_modules=None if targets is None else [names[t] for t in targets])
        model = peft.get_peft_model(LlamaForCausalLM(hf.config), config)
        trainable, total = model.get_nb_trainable_parameters()
        spec = lora.LoraSpec(8, targets or lora.DEFAULT_TARGETS)
        assert trainable == lora.trainable_params(cfg, spec)


@pytest.mark.parametrize("targets", [lora.DEFAULT_TARGETS, lora.TARGETS], ids=",".join)
def test_params_by_hand_over_transformers_modules(targets):
    """Σ r·(in + out) over transformers' own nn.Linear modules of the named projections (meta device)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg, r = load("llama2-7b", TINY["llama2-7b"]), 4
    with torch.device("meta"):
        hf = LlamaForCausalLM(LlamaConfig(hidden_size=64, intermediate_size=176, num_attention_heads=4,
                                          num_key_value_heads=2, num_hidden_layers=3, vocab_size=128))
    want = sum(r * (m.in_features + m.out_features) for name, m in hf.named_modules()
               if isinstance(m, nn.Linear) and name.rsplit(".", 1)[-1].removesuffix("_proj") in targets)
    assert want == lora.trainable_params(cfg, lora.LoraSpec(r, targets))


def test_gpt3_175b_checkpoint_is_the_papers_35mb():
    """Hu et al. 2021 sec. 4.2: r = 4 on W_q and W_v of GPT-3 175B, "checkpoint size reduced by 10,000×
    (from 350GB to 35MB)": 96 · 2 · 4 · (12,288 + 12,288) parameters in fp16 = 37.7 MB (36.0 MiB)."""
    cfg = load("gpt3-175b", [])
    spec = lora.LoraSpec(4, ("q", "v"))
    assert lora.trainable_params(cfg, spec) == 96 * 2 * 4 * 2 * 12288
    assert lora.checkpoint_bytes(cfg, spec, 2) / 2**20 == pytest.approx(35, rel=0.05)
    state = lora.lora_state(training.training_state(cfg, "fp16", "adam-mixed"), cfg, spec)
    # the paper's 350 GB of training VRAM is the fp16 frozen weights: the state adds 16 bytes per adapter parameter
    assert state.weights == pytest.approx(350e9, rel=0.005)
    assert state.total - state.weights == 14 * lora.trainable_params(cfg, spec)
    assert state.total / training.training_state(cfg, "fp16", "adam-mixed").total == pytest.approx(1 / 8, rel=0.01)


@pytest.mark.parametrize("rank, targets, message", [
    (-1, None, "must be 0 (off) or positive"), (8, "q,x", "unknown --lora-targets 'x'"),
    (0, "q", "needs --lora-rank"), (8, "", "unknown --lora-targets")])
def test_bad_flags_are_one_line(rank, targets, message):
    with pytest.raises(InputError, match=re.escape(message)):
        lora.spec(rank, targets)


def test_rank_over_the_dimension_and_missing_targets_are_refused():
    cfg = load("gpt2", TINY["gpt2"])
    with pytest.raises(InputError, match="exceeds"):
        lora.trainable_params(cfg, lora.LoraSpec(65, ("q",)))
    with pytest.raises(InputError, match="no 'gate' linear"):
        lora.trainable_params(cfg, lora.LoraSpec(4, ("gate",)))
    with pytest.raises(InputError, match="modelled for"):
        lora.trainable_params(load("mixtral-8x7b", []), lora.LoraSpec(4))


def test_all_linear_and_off():
    assert lora.spec(8, "all-linear").targets == lora.TARGETS
    assert lora.spec(8, " V , q").targets == ("q", "v")
    assert lora.spec(None, None) is None and lora.spec(0, None) is None


def test_optimizer_step_temporaries_are_the_largest_adapters():
    """adam-mixed below fp32 steps one tensor at a time with three fp32 copies of it alive (training_memory's
    docstring): under LoRA the largest tensor it steps is an adapter's, B of gate (11,008 × r) in Llama 2 7B."""
    cfg = load("llama2-7b", [])
    state = lora.lora_state(training.training_state(cfg, "bf16", "adam-mixed"), cfg, lora.LoraSpec(16, lora.TARGETS))
    assert state.step_temporaries == 3 * 4 * 11008 * 16
