"""Mamba-1 on a GPU, marked ``gpu`` (skipped where torch.cuda.is_available() is false; the fixed shapes and the
absence of host syncs that make capture possible are proved on the CPU in tests/model/test_state_static.py, its
"mamba1-jamba" kind): Falcon-Mamba-7B's layer shape at two layers, bf16 -- the decode step captured in CUDA graphs
gives the tokens the eager steps give, with the conv ring in bf16 and the SSM state in fp32 as counted."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")


def test_falcon_mamba_graph_decode_gives_the_eager_tokens():
    from tfcalc.count.model.memory import kv_cache_bytes
    from tfcalc.model import build_model, generate
    from tfcalc.presets import load
    from tfcalc.workload import Workload

    cfg = load("falcon-mamba-7b", ["n_layer=2", "hybrid_pattern=MM"])
    torch.manual_seed(0)
    model = build_model(cfg, "cuda", torch.bfloat16)
    prompt = torch.randint(0, cfg.vocab_size, (2, 40), device="cuda")
    graph = generate(model, prompt, 30, mode="graph")
    eager = generate(model, prompt, 30, mode="eager")
    assert torch.equal(graph, eager)
    cache = model.new_cache(2, 70)
    assert {(s.conv.dtype, s.ssm.dtype) for s in cache.states} == {(torch.bfloat16, torch.float32)}
    assert cache.nbytes == kv_cache_bytes(cfg, Workload(batch=2, seq=70, dtype="bf16", kv_dtype="bf16"))
