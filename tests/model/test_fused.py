"""tfcalc.model.fused on the CPU: the runtime step with its norms, SwiGLU and RoPE compiled (as a CUDA step
runs them, Inductor's kernels) gives the logits of the same step uncompiled, and a step that cannot use them
(a prompt, a step under autograd) does not call them. Inductor compiles C++ here, Triton on a GPU: the same
graphs (tests/gpu/test_decode_runtime_cuda.py times them there)."""

from __future__ import annotations

import pytest
import torch

from tfcalc.model import build_model, fused
from tfcalc.presets import load

pytest.importorskip("torch._inductor")


def _tiny():
    return load("llama2-7b", ["n_layer=2", "d_model=64", "n_head=4", "d_ff=96", "vocab_size=97", "max_seq_len=64"])


def _decode(model, prompt, steps: int) -> list[torch.Tensor]:
    cache = model.new_cache(prompt.shape[0], prompt.shape[1] + steps)
    out = [model.prefill(prompt, cache)[:, -1:]]
    with torch.inference_mode():
        for _ in range(steps):
            out.append(model.step(out[-1].argmax(-1), cache, cache.bucket(1)))
            cache.length += 1
    return out


def test_a_step_through_the_compiled_kernels_gives_the_same_logits(monkeypatch):
    torch.manual_seed(0)
    model = build_model(_tiny(), "cpu")
    prompt = torch.randint(0, 97, (2, 5))
    with torch.inference_mode():
        plain = _decode(model, prompt, 3)
        calls = []
        for name in ("rms_norm", "silu_mul", "rotate_heads"):
            f = getattr(fused, name)
            monkeypatch.setattr(f, "fused", lambda *a, _f=f.fused, _n=name: calls.append(_n) or _f(*a))
        monkeypatch.setattr(fused, "enabled", lambda x: True)
        compiled = _decode(model, prompt, 3)
    # two norms, one SwiGLU and one rotation a layer, in each of the three steps; none in the prompt
    assert sorted(set(calls)) == ["rms_norm", "rotate_heads", "silu_mul"]
    assert len(calls) == 3 * 2 * 4
    for a, b in zip(plain, compiled, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


def test_off_the_gpu_and_by_the_switch_nothing_is_compiled(monkeypatch):
    x = torch.zeros(2)
    assert not fused.enabled(x)  # a CPU tensor
    monkeypatch.setenv("TFCALC_FUSED", "0")
    assert not fused.enabled(torch.empty(2, device="meta"))
