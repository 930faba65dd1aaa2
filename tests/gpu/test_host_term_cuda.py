"""The host term of the serving performance model on a GPU (tfcalc.count.perf.inference, step 6), marked ``gpu``:
a small model's decode step run eagerly is the host's pace -- the kernels tfcalc counts × PerfSpec.host_op_s,
31 µs, fitted on the H100 run of 2026-11 (benchmarks/results/h100-2026-11-26-decode-profile.json) -- and
captured in CUDA graphs it is far below that. The band is wide, [0.6, 1.67]: the constant is one node's CPU
and one torch (2.11); another host moves it. The CPU's share is measured in tests/count/test_host_term.py."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")

DRAFT = "name: t\nn_layer: 4\nd_model: 512\nn_head: 8\nvocab_size: 32000\nmax_seq_len: 1024\n"


def _step_s(cli, path, *extra) -> dict:
    r = cli("bench", "decode", str(path), "--device", "cuda", "--dtype", "fp32", "--seq", "128", "--steps", "32",
            "--warmup", "2", "--repeat", "3", "--json", *extra)
    assert r.code == 0, r.err
    return r.json()


def test_a_small_eager_step_is_the_hosts_and_a_captured_one_is_not(cli, tmp_path):
    from tfcalc.count.perf.hardware import PerfSpec
    from tfcalc.count.perf.inference import kernel_count
    from tfcalc.presets import load

    path = tmp_path / "t.yaml"
    path.write_text(DRAFT)
    eager, graph = _step_s(cli, path, "--eager"), _step_s(cli, path)
    assert eager["mode"] == "eager" and graph["mode"] == "graph"
    predicted = kernel_count(load(str(path)), 1, 1, 129) * PerfSpec().host_op_s
    ratio = predicted / eager["decode_s_per_token"]
    assert 0.6 <= ratio <= 1.67, f"eager {eager['decode_s_per_token'] * 1e3:.2f} ms, host term {predicted * 1e3:.2f}"
    assert graph["decode_s_per_token"] < eager["decode_s_per_token"] / 2
