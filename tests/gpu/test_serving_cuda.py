"""Issue 20's serving paths measured on a GPU (part V), marked ``gpu``: skipped, with the reason, where
torch.cuda.is_available() is false (tests/conftest.py). Their logic runs on the CPU in
tests/measure/test_speculative_measured.py, tests/measure/test_continuous_measured.py and
tests/measure/test_memory_parent_cuda.py.

- memory --measure --device cuda: the parent process never starts CUDA (torch.cuda.is_initialized() is
  false in it after the run), the child measures the allocator's peak;
- infer --draft --measure --device cuda: speculative rounds on the GPU, the output the target's greedy
  output, a draft that is the target accepting every proposal; a windowed model's rings with k spare slots;
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")

PARENT = """
import json, torch
from tfcalc.report import resolve
from tfcalc.report.memory import build_memory
from tfcalc.workload import Workload
r = build_memory(resolve("llama2-7b", ["n_layer=2"]), Workload(batch=1, seq=256, dtype="bf16"), measure=True,
                 device="cuda")
print(json.dumps({"peak": r.measured.peak_bytes, "parent_cuda": torch.cuda.is_initialized()}))
"""


def test_memory_measure_leaves_the_parent_without_a_cuda_context():
    out = subprocess.run([sys.executable, "-c", PARENT], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    answer = json.loads(out.stdout.strip().splitlines()[-1])
    assert answer["parent_cuda"] is False and answer["peak"] > 0


def test_speculative_decoding_measured_on_cuda(cli, tmp_path):
    target = tmp_path / "t.yaml"
    target.write_text("name: t\nn_layer: 4\nd_model: 512\nn_head: 8\nvocab_size: 32000\nmax_seq_len: 1024\n"
                      "pos_encoding: rope\ntie_embeddings: false\n")
    r = cli("infer", str(target), "--measure", "--device", "cuda", "--dtype", "bf16", "--seq", "128", "--gen", "64",
            "--warmup", "1", "--repeat", "3", "--draft", str(target), "--accept-rate", "0.7", "--json")
    assert r.code == 0, r.err
    m = r.json()["speculative"]["measured"]
    # the draft's one-token kernels and the verify step's round apart in bf16 (tfcalc.model.fused): reported
    assert m["device"].startswith("cuda") and m["same_weights"] and 0 < m["accept_rate"] <= 1
    assert m["exact"] and m["draft_step_s"] > 0 and m["verify_step_s"] > 0 and m["ratio"]["decode"] > 0


def test_speculative_decoding_of_a_windowed_model_on_cuda(cli, tmp_path):
    """A sliding window of 32 wrapped six times (issue 29: refused before): rings of W + k slots, exact in
    bf16 against the same kernels, the state allocated equal to the count's."""
    target = tmp_path / "w.yaml"
    target.write_text("name: w\nn_layer: 4\nd_model: 512\nn_head: 8\nn_kv_head: 2\nvocab_size: 32000\n"
                      "max_seq_len: 1024\npos_encoding: rope\ntie_embeddings: false\nsliding_window: 32\n")
    r = cli("infer", str(target), "--measure", "--device", "cuda", "--dtype", "bf16", "--seq", "128", "--gen", "64",
            "--warmup", "1", "--repeat", "3", "--draft", str(target), "--accept-rate", "0.7", "--json")
    assert r.code == 0, r.err
    m = r.json()["speculative"]["measured"]
    assert m["same_weights"] and m["exact"] and m["ring_spare_slots"] == 4  # bf16: a draft step may round otherwise
    assert m["kv_cache_bytes"] == m["predicted_at_measured"]["kv_cache_bytes"] == 4 * 2 * 2 * 64 * (32 + 4) * 2



def test_continuous_batching_measured_on_cuda(cli):
    r = cli("infer", "llama2-7b", "--set", "n_layer=2", "--measure", "--device", "cuda", "--rate", "50",
            "--mean-input", "128", "--mean-output", "32", "--requests", "40", "--max-time", "60", "--json")
    assert r.code == 0, r.err
    m = r.json()["continuous"]["measured"]
    assert m["device"].startswith("cuda") and m["completed"] == m["requests"] == 40 and not m["stopped_at_budget"]
    assert m["output_tokens_per_s"] > 0 and 0 < m["ttft_s"]["median"] <= m["ttft_s"]["p90"]
    assert m["decode_steps"] * m["decode_batch_mean"] == pytest.approx(40 * 31)
