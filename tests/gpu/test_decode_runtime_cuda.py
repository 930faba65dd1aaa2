"""Issue 29's runtime on a GPU, marked ``gpu`` (skipped where torch.cuda.is_available() is false; the
fixed shapes and the absence of host syncs that make capture possible are proved on the CPU in
tests/model/test_state_static.py):

- Llama-2-7B's shape, bf16, batch 1: the decode step, captured in CUDA graphs (mode "graph"), moves its
  bytes (weights + KV) at >= 70 % of the copy rate tfcalc measures in the same run, and is no slower than
  Hugging Face generate with its static cache on the same GPU, same shape and dtype (tfcalc's H100 run of
  2026-11: 50 ms a token before, HF 7.8 ms, the roofline 4.6 ms);
- --eager runs the same steps uncaptured and says so; graph and eager give the same tokens;
- speculative decoding in bf16 is exact (against the target's greedy output through the same kernels).

Timing is by tfcalc's own loop (CUDA events, warm-up, median: tfcalc.measure.bench) and, for HF,
synchronized wall time of whole generations (benchmarks/hf_decode.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")

SEQ, STEPS = 512, 64


def _bench(cli, *extra):
    r = cli("bench", "decode", "llama2-7b", "--device", "cuda", "--dtype", "bf16", "--seq", str(SEQ), "--steps",
            str(STEPS), "--warmup", "3", "--repeat", "5", "--json", *extra)
    assert r.code == 0, r.err
    return r.json()


def test_llama2_7b_decode_runs_at_the_bandwidth_and_beside_hf(cli):
    j = _bench(cli)
    assert j["mode"] == "graph" and j["batch"] == 1
    moved = j["bytes_per_token"] / j["decode_s_per_token"]  # weights + KV read per step, per second
    share = moved / j["copy_bandwidth_bytes_per_s"]
    print(f"llama2-7b bf16 batch 1: {j['decode_s_per_token'] * 1e3:.3f} ms a token, {share:.1%} of the copy rate")
    assert share >= 0.70, f"{j['decode_s_per_token'] * 1e3:.2f} ms a token: {share:.1%} of the copy rate"
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    try:
        from hf_decode import hf_decode_s_per_token
    finally:
        sys.path.pop(0)
    from tfcalc.presets import load

    hf = hf_decode_s_per_token(load("llama2-7b"), "cuda", torch.bfloat16, SEQ, STEPS, repeat=3)
    print(f"HF generate (static cache): {hf * 1e3:.3f} ms a token")
    assert j["decode_s_per_token"] <= hf * 1.05, (  # 5 %: two separately timed runs on one GPU
        f"tfcalc {j['decode_s_per_token'] * 1e3:.2f} ms a token, HF generate (static cache) {hf * 1e3:.2f} ms")


def test_eager_is_reported_and_gives_the_graphs_tokens():
    from tfcalc.model import build_model, generate
    from tfcalc.presets import load

    cfg = load("llama2-7b", ["n_layer=2"])
    torch.manual_seed(0)
    model = build_model(cfg, "cuda", torch.bfloat16)
    prompt = torch.randint(0, cfg.vocab_size, (2, 40), device="cuda")
    graph = generate(model, prompt, 30, mode="graph")  # buckets 64 (positions up to 69: 128 past 64)
    eager = generate(model, prompt, 30, mode="eager")
    assert torch.equal(graph, eager)


def test_eager_flag(cli):
    r = cli("bench", "decode", "llama2-7b", "--set", "n_layer=2", "--device", "cuda", "--dtype", "bf16", "--seq",
            "128", "--steps", "8", "--warmup", "1", "--repeat", "2", "--eager", "--json")
    assert r.code == 0, r.err
    assert r.json()["mode"] == "eager"


def test_speculative_decoding_is_exact_in_bf16(cli, tmp_path):
    target = tmp_path / "t.yaml"
    target.write_text("name: t\nn_layer: 4\nd_model: 512\nn_head: 8\nvocab_size: 32000\nmax_seq_len: 1024\n"
                      "pos_encoding: rope\ntie_embeddings: false\n")
    r = cli("infer", str(target), "--measure", "--device", "cuda", "--dtype", "bf16", "--seq", "128", "--gen", "96",
            "--warmup", "1", "--repeat", "3", "--draft", str(target), "--accept-rate", "0.7", "--json")
    assert r.code == 0, r.err
    m = r.json()["speculative"]["measured"]
    # the draft's one-token steps and the verify step's k + 1 rows run kernels compiled apart (tfcalc.model.fused),
    # which may round apart in bf16: the accept rate is reported (0.95 on the H100, 2026-11-27), the tokens held
    print(f"draft = target, bf16: accept rate {m['accept_rate']:.3f}, agreement {m['agreement']}")
    assert m["same_weights"] and 0 < m["accept_rate"] <= 1
    assert m["exact"] and m["agreement"] == 1 and m["first_divergence"] is None
    assert 0 < m["plain_agreement"] <= 1  # the one-token steps' kernels may round otherwise: reported, not held


def test_compile_flag(cli):
    r = cli("bench", "decode", "gpt2", "--device", "cuda", "--dtype", "bf16", "--seq", "128", "--steps", "8",
            "--warmup", "1", "--repeat", "2", "--compile", "--json")
    assert r.code == 0, r.err
    assert r.json()["mode"] == "compile" and r.json()["decode_s_per_token"] > 0
