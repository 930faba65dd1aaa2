"""A transformers model and the same checkpoint loaded by tfcalc, for the tests that hold one against the other
(tests/model/test_mamba2.py, test_nemotron_h.py, test_granitemoehybrid.py, test_mixer_plugin.py, test_mixer_kind.py,
tests/test_qwen3_next.py, test_hf_lfm2.py, test_qwen3_5.py, test_deepseek_v32.py): the model written to a folder by
``save_pretrained`` and read back by tfcalc's ``load_model``; its logits and its decode over tfcalc's cache set
against transformers' and the uncached forward's. Each test keeps its own configs and assertions.
"""

from __future__ import annotations

import json

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from tfcalc.errors import InputError
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


def config_json(tmp_path, raw: dict):
    """tfcalc's config of a config.json holding raw, written under tmp_path."""
    from tfcalc.presets import load

    path = tmp_path / "config.json"
    path.write_text(json.dumps(raw))
    return load(str(path))


def hf_cache_bytes(cache) -> int:
    """Bytes of a transformers cache's tensors: each layer's keys and values, conv and recurrent states."""
    tensors = []
    for layer in cache.layers:
        tensors += [t for t in (getattr(layer, "keys", None), getattr(layer, "values", None)) if t is not None]
        tensors += [t for t in (getattr(layer, "conv_states", {}) or {}).values() if t is not None]
        tensors += [t for t in (getattr(layer, "recurrent_states", {}) or {}).values() if t is not None]
    return sum(t.numel() * t.element_size() for t in tensors)


def eager_flops(hf, idx: torch.Tensor) -> int:
    """FlopCounterMode's total over transformers' uncached forward on idx, its attention eager: on a CPU, SDPA's
    fused kernel (_scaled_dot_product_flash_attention_for_cpu) is no op FlopCounterMode counts."""
    hf.config._attn_implementation = "eager"
    try:
        with FlopCounterMode(display=False) as counter, torch.no_grad():
            hf(idx, use_cache=False)
    finally:
        hf.config._attn_implementation = "sdpa"
    return counter.get_total_flops()


def assert_verify_refused(model, vocab: int) -> None:
    """A state that cannot return to an earlier position (a recurrent mixer's): after a 3-token prompt, a verify
    step of 2 tokens (extend) is refused in one line that names the rewind."""
    cache = model.new_cache(1, 10)
    with torch.no_grad():
        model.prefill(torch.randint(0, vocab, (1, 3)), cache)
    with pytest.raises(InputError, match="rewind"):
        model.extend(torch.randint(0, vocab, (1, 2)), cache)


def assert_rows_decode_alone(model, prompts: list[torch.Tensor], max_tokens: int, release: bool = True) -> None:
    """Continuous batching (tfcalc.model.slots): the two prompts admitted into 2 rows and decoded together 4
    steps; each row's 5 tokens are its own sequence's greedy uncached ones. With ``release``, row 0 is freed (the
    second sequence moves into it, its state with it) and one more step is the second sequence's 6th token."""
    from tfcalc.model.slots import SlotCache, decode_rows

    slots = SlotCache(model, rows=2, max_tokens=max_tokens)
    with torch.no_grad():
        tokens = torch.cat([next_token(slots.admit(p, model)) for p in prompts])
        got = [tokens]
        for _ in range(4):
            tokens = next_token(decode_rows(model, tokens, slots))
            got.append(tokens)
        if release:
            slots.release(0)
            last = next_token(decode_rows(model, tokens[1:], slots))
    got = torch.cat(got, dim=1)
    for i, p in enumerate(prompts):
        assert torch.equal(got[i:i + 1], greedy_uncached(model, p, 5))
    if release:
        assert torch.equal(torch.cat([got[1:], last], dim=1), greedy_uncached(model, prompts[1], 6))


def step_flops(model, cache, prompt: torch.Tensor, steps: int, counter=None) -> list[tuple[int, dict]]:
    """The prompt prefilled into cache, then ``steps`` decode steps of one token each (tfcalc.model.generate's
    Decoder), each under ``counter()`` (FlopCounterMode unless given, e.g. tfcalc.measure.flops.flop_counter): per
    step, (its total FLOPs, its counts by module and op). Step i's context is the prompt's length + 1 + i."""
    from tfcalc.model.generate import Decoder

    make = counter or (lambda: FlopCounterMode(display=False))
    out = []
    with torch.no_grad():
        token = next_token(model.prefill(prompt, cache))
        decoder = Decoder(model, cache)
        for _ in range(steps):
            with make() as c:
                token = next_token(decoder.step(token))
            out.append((c.get_total_flops(), c.get_flop_counts()))
    return out


def saved_bytes(module, x: torch.Tensor) -> int:
    """Bytes autograd packs for the backward pass of ``module(x)``: every floating-point storage, each once, the
    module's parameters and the input left out (saved_tensors_hooks) -- the reference a mixer's ``saved`` is
    held to."""
    skip = {p.untyped_storage().data_ptr() for p in module.parameters()} | {x.untyped_storage().data_ptr()}
    seen: dict[int, int] = {}

    def pack(t):
        if t.is_floating_point() and t.untyped_storage().data_ptr() not in skip:
            seen[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        module(x)
    return sum(seen.values())
