"""Several tokens after the prompt in one forward (Transformer.extend, speculative decoding's verify step)
and rewinding the cache: the logits equal the full forward pass's at the same positions (fp64, so the
check is to rounding), for every kind of model, a window's or chunk's ring given spare slots for the
verify's width (tfcalc.model.attention_state); a wider step or a deeper rewind is refused."""

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


ROPE = dict(pos_encoding="rope", norm="rmsnorm", norm_bias=False, gated_ffn=True, activation="silu")
RINGS = {  # layers whose state is a ring (tfcalc.model.attention_state), wrapped many times over 24 positions
    "window-mistral": dict(ROPE, sliding_window=4, n_head=4, n_kv_head=2),
    "window-and-full-gemma2": dict(ROPE, n_layer=4, sliding_window=3, full_attention_every=2, attn_softcap=50.0,
                                   norm_placement="sandwich"),
    "sinks-window-gpt-oss": dict(ROPE, attn_sinks=True, sliding_window=4, full_attention_every=2, n_head=4,
                                 n_kv_head=2),
    "chunked-llama4": dict(ROPE, n_layer=4, attention_chunk_size=3, full_attention_every=2, nope_every=2,
                           qk_l2_norm=True, attn_temperature_floor=2, attn_temperature_scale=0.5),
    "window-moe-mixtral": dict(ROPE, sliding_window=5, n_expert=4, n_expert_active=2),
}


@pytest.mark.parametrize("changes", RINGS.values(), ids=RINGS.keys())
@pytest.mark.parametrize("k", [1, 3])
def test_a_ring_with_spare_slots_verifies_and_rewinds_as_the_full_forward(changes, k):
    """Speculative rounds on rings: a verify of k + 1 tokens, then a rewind that keeps the pending token and
    n of the k proposals (n from 0 to k, every one met), over a ring of W + k slots; every position's logits
    equal the uncached forward's, and the state is the bytes the count gives with k spare slots."""
    from tfcalc.count.model.memory import kv_cache_bytes
    from tfcalc.workload import Workload

    cfg = tiny(max_seq_len=32, **changes)
    model = _model(cfg)
    idx = torch.randint(0, cfg.vocab_size, (2, 26), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        full = model(idx)
        cache = model.new_cache(2, 26, spare=k)
        model.prefill(idx[:, :3], cache)
        accepted = iter([0, k, 1, k - 1, 0, k, k, 0, 1, 0, k, 1, 0, k, 0, 1, 0, 0, 0, 0, 0, 0])
        while cache.length + k + 1 <= 26:
            at = cache.length
            out = model.extend(idx[:, at:at + k + 1], cache)  # (2, k + 1, V)
            torch.testing.assert_close(out, full[:, at:at + k + 1], rtol=0, atol=1e-12)
            cache.rewind(at + 1 + next(accepted))
    assert cache.length > 3 * max(cfg.sliding_window or 0, cfg.attention_chunk_size or 0)  # wrapped, often
    fp32 = Workload(batch=2, seq=26, dtype="fp32")  # the count has no fp64: twice fp32's bytes
    assert cache.nbytes == 2 * kv_cache_bytes(cfg, fp32, spare=k)
    assert cache.nbytes > 2 * kv_cache_bytes(cfg, fp32)  # the ring grew


def test_a_ring_refuses_a_step_wider_than_its_spare_slots_and_a_rewind_past_them():
    model = _model(tiny(**RINGS["window-mistral"]))
    plain, spared = model.new_cache(1, 16), model.new_cache(1, 16, spare=2)
    with torch.no_grad():
        for cache, widest in ((plain, 1), (spared, 3)):
            model.prefill(torch.zeros(1, 6, dtype=torch.long), cache)
            assert cache.widest_step == widest
            with pytest.raises(InputError, match=f"takes {widest} at most"):
                model.extend(torch.zeros(1, widest + 1, dtype=torch.long), cache)
        model.extend(torch.zeros(1, 3, dtype=torch.long), spared)  # positions 6, 7, 8 written
        with pytest.raises(InputError, match="overwritten the positions before 6"):
            spared.rewind(5)  # position 5's query needs 2 .. 4; slot 2 of 6 now holds 8
        spared.rewind(6)
    assert plain.nbytes * 6 == spared.nbytes * 4  # a ring of 4 slots, and one of 4 + 2


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

