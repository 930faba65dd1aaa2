"""tfcalc.count.perf.expert_imbalance: the expected maximum of standard normals against its closed forms and tables,
the fullest GPU's routed pairs against a Monte-Carlo of torch.topk routing (uniform, and skewed by per-expert biases),
and the named skews against TensorRT-LLM's measured imbalance ratios (tech blog 4, Table 1)."""

import math

import pytest
import torch

from tfcalc.count.perf import expert_imbalance as ei
from tfcalc.errors import InputError


def test_expected_max_normal_closed_forms_and_tables():
    """e_2 = 1/√π, e_3 = 3/(2√π) (closed forms); e_10 = 1.538753, e_100 = 2.507594 (Harter 1961's table)."""
    assert ei.expected_max_normal(1) == 0.0
    assert ei.expected_max_normal(2) == pytest.approx(1 / math.sqrt(math.pi), abs=1e-9)
    assert ei.expected_max_normal(3) == pytest.approx(1.5 / math.sqrt(math.pi), abs=1e-9)
    assert ei.expected_max_normal(10) == pytest.approx(1.538753, abs=2e-6)
    assert ei.expected_max_normal(100) == pytest.approx(2.507594, abs=2e-6)


def _routed_max_over_mean(n, k, G, B, trials, bias_sd=0.0, seed=0):
    """Monte-Carlo: B tokens, logits N(0, 1) (+ a per-expert bias N(0, bias_sd) drawn each trial), torch.topk's k
    experts; GPU g holds experts g·n/G ..; the mean over trials of max_g(pairs) / (B·k/G), and the placement's CV
    (each trial's GPU shares from 40,000 tokens of the same bias, their spread around 1/G)."""
    gen = torch.Generator().manual_seed(seed)
    ratios, cv2 = [], []
    for _ in range(trials):
        bias = torch.randn(n, generator=gen) * bias_sd
        ids = torch.topk(torch.randn(B, n, generator=gen) + bias, k, dim=-1).indices  # (B, k)
        per_gpu = torch.bincount(ids.flatten() // (n // G), minlength=G).double()
        ratios.append(per_gpu.max().item() / (B * k / G))
        if bias_sd:
            big = torch.topk(torch.randn(40000, n, generator=gen) + bias, k, dim=-1).indices
            share = torch.bincount(big.flatten() // (n // G), minlength=G).double() / (40000 * k)
            noise = ei.noise_variance(G, n, k, 40000 * k / G)  # the big sample's own noise, taken out
            cv2.append(((share * G - 1) ** 2).mean().item() - noise)
    c = math.sqrt(max(sum(cv2) / len(cv2), 0.0)) if cv2 else 0.0
    return sum(ratios) / trials, c


@pytest.mark.parametrize("n, k, G, B", [(64, 4, 8, 256), (128, 8, 16, 128), (256, 8, 32, 64)])
def test_uniform_router_against_topk_monte_carlo(n, k, G, B):
    """Step 1-3 with c = 0: the routing's noise alone, against torch.topk on random logits (1,000 trials: the mean's
    standard error is about 0.002)."""
    measured, _ = _routed_max_over_mean(n, k, G, B, 1000)
    predicted = ei.factor(G, n, k, B, 0.0)
    assert predicted > 1.05  # a visible effect at these sizes
    assert predicted == pytest.approx(measured, rel=0.02)


def test_skewed_router_against_topk_monte_carlo():
    """A per-expert bias (hot and cold experts, placed at random) adds a placement spread c; the factor with the
    measured c matches the Monte-Carlo's mean maximum."""
    n, k, G, B = 64, 4, 8, 512
    measured, c = _routed_max_over_mean(n, k, G, B, 300, bias_sd=0.3, seed=1)
    assert 0.05 < c < 0.3
    assert ei.factor(G, n, k, B, c) == pytest.approx(measured, rel=0.03)
    assert ei.factor(G, n, k, B, c) > ei.factor(G, n, k, B, 0.0) + 0.05


def test_named_skews_against_tensorrt_llm_table_1():
    """TensorRT-LLM tech blog 4, Table 1 (DeepSeek-R1, 1,024 pairs a rank, k = 8): (max − mean)/mean by rank 0.109
    (EPLB, 288 slots, EP 32: the row c is taken from, its own maximum within 3 %) and 0.115 (EPLB, 288 slots, EP 36:
    out of sample, predicted 0.109, 5 % low); without EPLB (256 slots, EP 32) the
    normal maximum is a lower bound of the measured 1.564 (a hot expert's heavier tail: the module docstring)."""
    assert ei.SKEW["eplb"] == pytest.approx(math.sqrt((52.0 / 1024) ** 2 - (31 / 32) * (280 / 287) / 1024))
    assert ei.factor(32, 288, 8, 1024 * 32 / 8, ei.SKEW["eplb"]) - 1 == pytest.approx(0.109, rel=0.03)
    assert ei.factor(36, 288, 8, 1024 * 36 / 8, ei.SKEW["eplb"]) - 1 == pytest.approx(0.115, rel=0.06)
    assert 0.9 < ei.factor(32, 256, 8, 1024 * 32 / 8, ei.SKEW["none"]) - 1 < 1.564


def test_factor_limits():
    """One GPU, or no tokens: 1.0; the noise falls as 1/√tokens (so f − 1 under c = 0 halves at 4× the tokens)."""
    assert ei.factor(1, 256, 8, 100, 0.5) == 1.0 and ei.factor(8, 256, 8, 0, 0.5) == 1.0
    a, b = ei.factor(8, 256, 8, 1000, 0.0) - 1, ei.factor(8, 256, 8, 4000, 0.0) - 1
    assert b == pytest.approx(a / 2, rel=1e-12)


@pytest.mark.parametrize("value, expected", [(None, None), ("EPLB", "eplb"), (" uniform ", "uniform"), ("1.3", 1.3),
                                             (1, 1.0), (2.56, 2.56)])
def test_parse(value, expected):
    assert ei.parse(value) == expected


@pytest.mark.parametrize("value", ["0.9", "nan", "inf", "lots", True, -1, 0.5])
def test_parse_refuses(value):
    with pytest.raises(InputError, match="--expert-imbalance must be one of"):
        ei.parse(value)


def test_training_expert_gemms_wait_for_the_fullest_rank():
    """count.training.micro_batch_time: under EP every expert GEMM (forward, input and weight gradients) × f, the
    rest as it was: the block's matmul seconds are linear in f, and f = 1 leaves them as without the term. The
    default is the routing's noise alone, at the EP group's micro_batch·seq·ep tokens; no EP, no factor."""
    from tfcalc.count.perf.hardware import PerfSpec
    from tfcalc.count.training.micro_batch_time import imbalance, micro_batch_time
    from tfcalc.presets import load
    from tfcalc.workload import Layout

    cfg, perf = load("qwen3-30b-a3b"), PerfSpec(sm_count=132, kernel_s=4e-6)

    def mm(f):
        L = Layout(seq=1024, global_batch=8, micro_batch=2, ep=8, expert_imbalance=f)
        return micro_batch_time(cfg, L, 989e12, 3e12, perf)

    one, two, three = mm(1.0), mm(2.0), mm(3.0)
    experts = two.block_matmul_s - one.block_matmul_s
    assert 0 < experts < one.block_matmul_s
    assert three.block_matmul_s - two.block_matmul_s == pytest.approx(experts, rel=1e-9)
    assert two.block_weight_grad_s > one.block_weight_grad_s
    assert two.block_other_s == one.block_other_s
    L = Layout(seq=1024, global_batch=8, micro_batch=2, ep=8)
    assert imbalance(cfg, L) == pytest.approx(ei.factor(8, 128, 8, 2 * 1024 * 8, 0.0), rel=1e-12)
    assert 1.0 < imbalance(cfg, L) < 1.05
    assert imbalance(cfg, Layout(seq=1024, global_batch=8, micro_batch=2)) == 1.0


def test_cli_bad_value_one_line(cli):
    """--expert-imbalance 0.5 (below a balanced step) in infer, a name it does not know in plan: one line each."""
    from conftest import assert_one_line_error

    assert_one_line_error(cli("infer", "qwen3-30b-a3b", "--ep", "4", "--device-spec", "h100-sxm",
                              "--expert-imbalance", "0.5"), "--expert-imbalance must be one of")
    assert_one_line_error(cli("plan", "qwen3-30b-a3b", "--tp", "1", "--pp", "1", "--dp", "8", "--ep", "8",
                              "--expert-imbalance", "lots"), "--expert-imbalance must be one of")
    assert_one_line_error(cli("infer", "qwen3-30b-a3b", "--expert-imbalance", "eplb"), "give --ep E above 1")
