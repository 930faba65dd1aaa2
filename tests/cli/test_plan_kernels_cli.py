"""`tfcalc plan --kernels eager|fused` (issue 20): the JSON's layout.kernels, eager the default, each bad value
one line and exit 2, and the eager step's non-matmul term built from tfcalc.count.perf.eager's bytes and kernels
(forward, backward and the recomputed forward), the fused one unchanged."""

import dataclasses

import pytest
from conftest import assert_one_line_error

import tfcalc
from tfcalc.count.model.memory import activation_element_bytes
from tfcalc.count.model.non_matmul import non_matmul_entries
from tfcalc.count.perf import eager, elementwise
from tfcalc.count.training.micro_batch_time import micro_batch_time
from tfcalc.devices import resolve as device
from tfcalc.presets import load_preset
from tfcalc.report.plan import hardware

LAYOUT = ("llama3-8b", "--dp", "8", "--zero", "3", "--global-batch", "16", "--micro-batch", "2", "--seq", "8192",
          "--device-spec", "a100-80gb")


def test_json_says_which_kernels_and_eager_is_the_default(cli):
    plain = cli("plan", *LAYOUT, "--json").json()
    fused = cli("plan", *LAYOUT, "--kernels", "fused", "--json").json()
    assert plain["layout"]["kernels"] == "eager" and fused["layout"]["kernels"] == "fused"
    assert set(plain) == set(fused)
    # eager PyTorch moves several times the fused kernels' bytes around the matmuls: a slower step
    assert 1.03 < plain["step_time_s"] / fused["step_time_s"] < 1.3


@pytest.mark.parametrize("args, message", [
    (["--kernels", "bogus"], "'bogus' is not one of"),
    (["--kernels", ""], "is not one of"),
    (["--kernels", "FUSED"], "is not one of"),
    (["--kernels"], "requires an argument"),
])
def test_hostile_values_are_one_line(cli, args, message):
    assert_one_line_error(cli("plan", "llama2-7b", "--dp", "2", *args), message)


@pytest.mark.parametrize("bad", [3, "Eager", "compiled", True, ["eager"]])  # None: the model's default
def test_api_refuses_other_values(bad):
    with pytest.raises(tfcalc.errors.InputError, match="(?<!-)kernels must be one of eager, fused"):
        tfcalc.plan("llama2-7b", dp=2, kernels=bad)
    with pytest.raises(tfcalc.errors.InputError, match="(?<!-)kernels must be one of"):
        tfcalc.plan("llama2-7b", gpus=8, kernels=bad)  # a search: said once, before it starts


@pytest.mark.parametrize("recompute", ["none", "selective", "full", "op"])
@pytest.mark.parametrize("tp,sp", [(1, False), (2, False), (2, True)])
def test_the_eager_term_is_the_ops_bytes_and_kernels(recompute, tp, sp):
    """The step's non-matmul seconds under eager, rebuilt from the eager module's figures: (forward ×
    (1 + a recomputed forward) + backward) / bandwidth, plus every kernel's fixed cost (the matmuls' three
    passes as under fused, the blocks' eager forward kernels again where full or op recompute replays them: the
    checkpoints wrap the blocks, so the embedding, final norm and loss run once)."""
    cfg = load_preset("llama3-8b")
    r = tfcalc.plan("llama3-8b", tp=tp, dp=2, micro_batch=2, seq=2048, global_batch=8, recompute=recompute,
                    sequence_parallel=sp, device_spec="a100-80gb")
    L = r.plan.layout
    hw = hardware(device("a100-80gb"), "bf16")
    peak = hw.peak_flops_per_s * hw.perf.sustained_clock
    bw = hw.bandwidth_bytes_per_s * hw.perf.bandwidth_efficiency
    eager_t = micro_batch_time(cfg, L, peak, bw, hw.perf)
    fused_t = micro_batch_time(cfg, dataclasses.replace(L, kernels="fused"), peak, bw, hw.perf)
    assert eager_t.block_matmul_s == fused_t.block_matmul_s  # the matmuls do not change
    fwd, bwd, kf, kb = eager.rank_traffic(cfg, 2, 2048, activation_element_bytes("bf16"), tp, sp)
    edge_f, _, edge_k, _ = eager.rank_traffic(cfg, 2, 2048, activation_element_bytes("bf16"), tp, sp, edges_only=True)
    again = recompute in ("full", "op")
    entries = non_matmul_entries(cfg, 2, 2048)
    nm = sum(e.copies for e in entries)
    # the matmul kernels: fused's kernel count less its non-matmul entries, from fused's own term
    fused_other = fused_t.block_other_s * cfg.n_layer
    fused_traffic = elementwise.forward_traffic(entries, 2, tp, sp)
    passes = 1 + elementwise.BACKWARD_TRAFFIC + again
    matmul_kernels = (fused_other - fused_traffic * passes / bw) / hw.perf.kernel_s / passes - nm
    assert matmul_kernels == pytest.approx(round(matmul_kernels), abs=1e-6)
    expected = ((fwd * (1 + again) - edge_f * again + bwd) / bw
                + (round(matmul_kernels) * passes + kf * (1 + again) - edge_k * again + kb) * hw.perf.kernel_s)
    assert eager_t.block_other_s * cfg.n_layer == pytest.approx(expected, rel=1e-12)
