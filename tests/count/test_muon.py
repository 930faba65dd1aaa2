"""Muon (tfcalc.count.model.muon): the optimizer state against torch.optim.Muon's own state tensors after a step on
the real module, the Newton-Schulz FLOPs against FlopCounterMode on the real orthogonalization, and Keller
Jordan's published overhead bound T·m/B."""

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from tfcalc.count.model import muon
from tfcalc.count.model.training_memory import training_state
from tfcalc.measure.muon_step import MasterMuon, newton_schulz
from tfcalc.model import build_model
from tfcalc.presets import load

TINY = ["n_layer=2", "d_model=64", "n_head=4", "d_ff=128", "vocab_size=96"]
CASES = {
    "gpt2": (load("gpt2", TINY), torch.float32),  # biases, learned positions, tied head: all on AdamW
    "llama": (load("llama2-7b", TINY + ["n_kv_head=2"]), torch.bfloat16),  # fused QKV and [gate | up]
    "moe": (load("qwen3-30b-a3b", TINY + ["n_kv_head=2", "n_expert=4", "n_expert_active=2"]), torch.float32),
}


def _stepped(cfg, dtype) -> MasterMuon:
    torch.manual_seed(0)
    model = build_model(cfg, "cpu", dtype)
    opt = MasterMuon(model)
    for p in model.parameters():
        p.grad = torch.randn_like(p)
    opt.step()
    return opt


@pytest.mark.parametrize("case", list(CASES), ids=list(CASES))
def test_state_bytes_equal_the_optimizers_tensors(case):
    """The optimizer's own state tensors after one step: Muon's momentum buffers (fp32 masters' size) and AdamW's
    exp_avg, exp_avg_sq -- byte for byte the module docstring's 4·M + 8·(P − M)."""
    cfg, dtype = CASES[case]
    opt = _stepped(cfg, dtype)
    measured = sum(t.numel() * t.element_size() for t in opt.state_tensors())
    state = training_state(cfg, {torch.float32: "fp32", torch.bfloat16: "bf16"}[dtype], "muon")
    assert state.optimizer_state == measured
    assert state.master_weights == (0 if dtype == torch.float32 else 4 * state.params)
    muon_elements = sum(s["momentum_buffer"].numel() for s in opt.state.values() if "momentum_buffer" in s)
    assert muon.matrix_params(cfg) == muon_elements > 0


def test_torch_muon_takes_the_counted_matrices():
    """torch.optim.Muon itself (2-D only) holds one fp32 momentum buffer per hidden matrix of the dense model."""
    cfg, dtype = CASES["llama"]
    opt = _stepped(cfg, dtype)
    bufs = [s["momentum_buffer"] for o in opt.optimizers if isinstance(o, torch.optim.Muon) for s in o.state.values()]
    assert {b.dtype for b in bufs} == {torch.float32} and len(bufs) == 2 * 4  # qkv, o, up, down in 2 blocks
    assert sum(b.numel() for b in bufs) == muon.matrix_params(cfg)


@pytest.mark.parametrize("shape", [(64, 64), (192, 64), (64, 352), (8, 40)])
def test_newton_schulz_flops_against_flop_counter(shape):
    """5 × (X·Xᵀ 2m²n + A·A 2m³ + B·X 2m²n), m ≤ n: FlopCounterMode on torch's own _zeropower_via_newtonschulz and
    on the reference here (a tall matrix is transposed first)."""
    from torch.optim._muon import _zeropower_via_newtonschulz

    g = torch.randn(*shape)
    for run in (lambda: _zeropower_via_newtonschulz(g, muon.NS_COEFFICIENTS, 5, 1e-7), lambda: newton_schulz(g)):
        with FlopCounterMode(display=False) as counter:
            run()
        assert counter.get_total_flops() == muon.ns_flops(*shape)
    m, n = min(shape), max(shape)
    assert muon.ns_flops(*shape) == 5 * (4 * m * m * n + 2 * m ** 3)


def test_overhead_within_jordans_bound():
    """Keller Jordan's post (its FLOP-overhead analysis): the NS FLOPs over the matrices' training FLOPs are at most
    T·m/B; the nanoGPT speedrun (m = 768, B = 524,288 tokens) 0.73 %, Llama 3 405B (m = 16,384, 16M tokens) 0.49 %:
    both under the 1 % the post states."""
    for m, n, tokens in ((768, 3072, 524_288), (16_384, 53_248, 16 * 2**20)):
        ratio = muon.ns_flops(m, n) / (6 * m * n * tokens)
        assert ratio <= 5 * m / tokens < 0.01
        assert ratio > 0.5 * 5 * m / tokens  # the bound is tight within 2× for n ≥ m


def test_state_below_adam():
    """bf16 Llama 2 7B: 16 bytes/param under AdamW, 16 − 4·M/P under Muon (M/P: the hidden matrices' share)."""
    cfg = load("llama2-7b")
    adam, mu = training_state(cfg, "bf16", "adam-mixed"), training_state(cfg, "bf16", "muon")
    M = muon.matrix_params(cfg)
    assert M == 32 * (3 * 4096 * 4096 + 4096 * 4096 + 3 * 4096 * 11008)  # Q, K, V, O and gate, up, down
    assert adam.total - mu.total == 4 * M
    assert mu.bytes_per_param == pytest.approx(16 - 4 * M / cfg_params(cfg))


def cfg_params(cfg) -> int:
    from tfcalc.count.model.params import total

    return total(cfg)


@pytest.mark.parametrize("case", list(CASES), ids=list(CASES))
def test_largest_matrix_as_the_module_stores_it(case):
    """The step's temporaries are sized on the largest matrix the module holds (fused Q|K|V, [gate | up])."""
    cfg, _ = CASES[case]
    model = build_model(cfg, "meta", torch.float32)
    shapes = [tuple(sorted(p.shape)) for n, p in model.named_parameters() if "blocks." in n and p.ndim == 2]
    assert muon.largest_matrix(cfg) == max(shapes, key=lambda s: s[0] * s[1])


def test_measured_memory_steps_muon_one_tensor_at_a_time():
    """`memory --measure --optimizer muon` builds MasterMuon (tfcalc.measure.memory.make_optimizer); primed on zero
    gradients it holds the counted state, and stepping frees each fp32 gradient copy before the next tensor's."""
    from tfcalc.measure.memory import _prime, make_optimizer

    cfg, dtype = CASES["llama"]
    model = build_model(cfg, "cpu", dtype)
    opt = make_optimizer(model, "muon", "bf16")
    _prime(model, opt)
    assert sum(t.numel() * t.element_size() for t in opt.state_tensors()) == \
        training_state(cfg, "bf16", "muon").optimizer_state
    assert all(m.grad is None for p, m in opt.pairs) and all(p.grad is not None for p in model.parameters())
