"""A transformers model and the same checkpoint loaded by tfcalc, for the tests that hold one against the other
(tests/model/test_mamba2.py, test_nemotron_h.py, test_granitemoehybrid.py, test_mixer_plugin.py,
tests/test_qwen3_next.py, test_hf_lfm2.py, test_qwen3_5.py): the model written to a folder by
``save_pretrained`` and read back by tfcalc's ``load_model``; its logits and its decode over tfcalc's cache set
against transformers' and the uncached forward's. Each test keeps its own configs and assertions.
"""

from __future__ import annotations

import torch

from tfcalc.model import generate
from tfcalc.model.generate import next_token
from tfcalc.model.load import load_model


def nudge(hf, *also: str) -> None:
    """Move the tensors a fresh init sets to ones and zeros (norms, Mamba2's D and conv bias, and any name holding
    one of ``also``) by N(0, 0.3²), so a tensor loaded into the wrong place shows; under the caller's seed."""
    with torch.no_grad():
        for name, p in hf.named_parameters():
            if any(m in name for m in ("norm", "conv1d.bias", *also)) or name.endswith(".D"):
                p.add_(torch.randn_like(p) * 0.3)


def saved_pair(hf, folder):
    """(hf, tfcalc's model of the checkpoint hf writes to folder)."""
    hf.save_pretrained(folder)
    return hf, load_model(folder)


def assert_logits_close(hf, model, idx: torch.Tensor) -> None:
    """tfcalc's logits on idx within 1e-4 of transformers', relative to the largest (fp32)."""
    with torch.no_grad():
        want, got = hf(idx).logits, model(idx)
    assert (want - got).abs().max() <= 1e-4 * want.abs().max()


def greedy_uncached(model, prompt: torch.Tensor, new_tokens: int) -> torch.Tensor:
    """The new_tokens greedy tokens (B, new_tokens) of the full forward over the whole sequence at every step:
    no cache, the reference a decode over the cache must equal."""
    idx = prompt
    with torch.no_grad():
        for _ in range(new_tokens):
            idx = torch.cat([idx, next_token(model(idx))], dim=1)
    return idx[:, prompt.shape[1]:]


def assert_decode_equals(model, hf, prompt: torch.Tensor, new_tokens: int, cache) -> torch.Tensor:
    """tfcalc's greedy decode over ``cache`` equals the uncached forward's and transformers' generate; returns it."""
    out = generate(model, prompt, new_tokens, cache=cache)
    assert torch.equal(out, greedy_uncached(model, prompt, new_tokens))
    assert torch.equal(out, hf.generate(prompt, max_new_tokens=new_tokens, do_sample=False)[:, prompt.shape[1]:])
    return out
