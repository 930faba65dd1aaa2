"""Several tokens after the prompt in one forward (Transformer.extend, speculative decoding's verify step)
and rewinding the cache: the logits equal the full forward pass's at the same positions (fp64, so the
check is to rounding), for every kind of model whose layers keep every position; the rest are refused."""

from __future__ import annotations

import pytest
import torch
from conftest import tiny

from tfcalc.errors import InputError
from tfcalc.model import build_model

KINDS = {
    "gpt2-like": {},
    "llama-gqa-rope": dict(pos_encoding="rope", norm="rmsnorm", norm_bias=False, gated_ffn=True, activation="silu",
                           attn_bias=False, ffn_bias=False, tie_embeddings=False, n_head=8, n_kv_head=2),
    "mqa-no-positions": dict(pos_encoding="none", n_kv_head=1, gated_ffn=True, activation="gelu"),
    "moe-top2": dict(n_expert=4, n_expert_active=2),
    "qk-norm-partial-rope": dict(pos_encoding="rope", qk_norm=True, rope_fraction=0.5),
    "parallel-two-norms": dict(pos_encoding="rope", parallel_block="two_norms"),
    "softcaps-sinks": dict(pos_encoding="rope", attn_softcap=20.0, logit_softcap=30.0, attn_sinks=True),
    "alibi": dict(pos_encoding="alibi", n_head=4),  # the step's mask carries each key's distance
    "latent": dict(pos_encoding="rope", kv_lora_rank=12, qk_nope_head_dim=8, qk_rope_head_dim=4, v_head_dim=8,
                   n_head=4),
}


def _model(cfg):
    torch.manual_seed(0)
    return build_model(cfg, "cpu", torch.float64)


@pytest.mark.parametrize("changes", KINDS.values(), ids=KINDS.keys())
def test_extend_and_rewind_equal_the_full_forward(changes):
    cfg = tiny(**changes)
    model = _model(cfg)
    idx = torch.randint(0, cfg.vocab_size, (2, 12), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        full = model(idx)
        cache = model.new_cache(2, 14)
        model.prefill(idx[:, :4], cache)
        four = model.extend(idx[:, 4:8], cache)  # positions 4..7 at once
        assert cache.length == 8
        cache.rewind(6)  # 6 and 7 rejected: written again below
        three = model.extend(idx[:, 6:9], cache)
        one = model.decode(idx[:, 9:10], cache)
    torch.testing.assert_close(four, full[:, 4:8], rtol=0, atol=1e-12)
    torch.testing.assert_close(three, full[:, 6:9], rtol=0, atol=1e-12)
    torch.testing.assert_close(one, full[:, 9:10], rtol=0, atol=1e-12)


@pytest.mark.parametrize("changes,message", [
    (dict(pos_encoding="rope", sliding_window=4), "without sliding windows or chunks"),
    (dict(pos_encoding="rope", attention_chunk_size=4), "without sliding windows or chunks"),
])
def test_what_cannot_extend_is_refused(changes, message):
    model = _model(tiny(**changes))
    cache = model.new_cache(1, 12)
    with torch.no_grad():
        model.prefill(torch.zeros(1, 3, dtype=torch.long), cache)
        with pytest.raises(InputError, match=message):
            model.extend(torch.zeros(1, 2, dtype=torch.long), cache)


def test_rewind_misuse_is_an_input_error():
    model = _model(tiny())
    cache = model.new_cache(1, 8)
    with pytest.raises(InputError, match="call prefill"):
        model.extend(torch.zeros(1, 2, dtype=torch.long), cache)
    with torch.no_grad():
        model.prefill(torch.zeros(1, 3, dtype=torch.long), cache)
    for bad in (0, 4):
        with pytest.raises(InputError, match="the cache holds 3 positions"):
            cache.rewind(bad)
    windowed = _model(tiny(pos_encoding="rope", sliding_window=4)).new_cache(1, 8)
    with pytest.raises(InputError, match="cannot rewind"):
        windowed.rewind(1)
