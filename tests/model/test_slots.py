"""Continuous batching's cache of slots (tfcalc.model.slots): sequences joining and leaving at different
lengths, each decode step over all of them at once; every logit equals the full forward pass's of that
sequence alone (fp64, to rounding), for every kind of model it runs; the rest refused in one line."""

from __future__ import annotations

import pytest
import torch
from conftest import tiny

from tfcalc.errors import InputError
from tfcalc.model import build_model
from tfcalc.model.slots import SlotCache, check_slots, decode_rows

KINDS = {
    "gpt2-like": {},
    "sinusoidal": dict(pos_encoding="sinusoidal"),
    "opt-offset": dict(position_offset=2),
    "llama-gqa-rope": dict(pos_encoding="rope", norm="rmsnorm", norm_bias=False, gated_ffn=True, activation="silu",
                           n_head=8, n_kv_head=2, tie_embeddings=False),
    "moe-top2": dict(n_expert=4, n_expert_active=2, pos_encoding="rope"),
    "partial-rope-qk-norm": dict(pos_encoding="rope", qk_norm=True, rope_fraction=0.5),
    # each row's own positions reach the step's device mask: its window's ring, its chunk, ALiBi's distances,
    # Llama 4's temperature (windows of 4 and chunks of 3 wrap in these 15-token sequences)
    "window-ring": dict(pos_encoding="rope", sliding_window=4, n_layer=3, full_attention_every=3),
    "alibi-window": dict(pos_encoding="alibi", sliding_window=5),
    "llama4-chunks-temperature": dict(pos_encoding="rope", n_layer=4, attention_chunk_size=3, full_attention_every=4,
                                      nope_every=4, attn_temperature_floor=2, attn_temperature_scale=0.5),
    "sinks-softcap": dict(pos_encoding="rope", attn_sinks=True, attn_softcap=20.0, sliding_window=4,
                          full_attention_every=2, n_head=4, n_kv_head=2),
    "latent": dict(pos_encoding="rope", kv_lora_rank=12, qk_nope_head_dim=8, qk_rope_head_dim=4, v_head_dim=8,
                   n_head=4),
    # LFM2's short convolutions: each row's state of K inputs moves with the row
    "conv-lfm2": dict(pos_encoding="rope", norm="rmsnorm", gated_ffn=True, activation="silu", n_layer=3,
                      layer_pattern="conv, full, conv", conv_bias=True),
    # MiniMax's lightning layers: each row's (H, d, d) state moves with the row; blocks of 4 in the prompts
    "lightning-minimax": dict(pos_encoding="rope", norm="rmsnorm", gated_ffn=True, activation="silu", n_layer=3,
                              layer_pattern="lightning, full, lightning", lightning_block_size=4,
                              norm_placement="normed_residual", residual_alpha=1.5),
}


@pytest.mark.parametrize("changes", KINDS.values(), ids=KINDS.keys())
def test_sequences_join_and_leave_and_each_sees_only_itself(changes):
    cfg = tiny(max_seq_len=24, **changes)
    torch.manual_seed(0)
    model = build_model(cfg, "cpu", torch.float64)
    gen = torch.Generator().manual_seed(2)
    seqs = [torch.randint(0, cfg.vocab_size, (1, n), generator=gen) for n in (14, 13, 15, 12)]
    full = [model(s)[0] for s in seqs]  # (n, V) each, alone
    cache = SlotCache(model, rows=3, max_tokens=16)
    live: list[tuple[int, int]] = []  # (sequence, prompt length) per row
    with torch.no_grad():
        def admit(i: int, prompt: int) -> None:
            logits = cache.admit(seqs[i][:, :prompt], model)
            torch.testing.assert_close(logits[0, 0], full[i][prompt - 1], rtol=0, atol=1e-12)
            live.append((i, prompt))

        def step() -> None:
            tokens = torch.cat([seqs[i][:, cache.lengths[r]:cache.lengths[r] + 1] for r, (i, _) in enumerate(live)])
            positions = list(cache.lengths)
            logits = decode_rows(model, tokens, cache)
            for r, (i, _) in enumerate(live):
                torch.testing.assert_close(logits[r, 0], full[i][positions[r]], rtol=0, atol=1e-12)

        admit(0, 3)
        step()
        admit(1, 2)
        step()
        step()
        admit(2, 5)
        step()
        cache.release(0)  # sequence 0 leaves; sequence 2 (the last row) moves into row 0
        live[0] = live.pop()
        step()
        admit(3, 1)
        step()
        step()
    assert cache.lengths == [9, 8, 3] and cache.n == 3


@pytest.mark.parametrize("changes,message", [
    (dict(arch="encoder-decoder"), "not a decoder-only"),
    (dict(cross_attention=True), "not a decoder-only"),
])
def test_what_the_slots_do_not_run_is_refused(changes, message):
    with pytest.raises(InputError, match=message):
        check_slots(tiny(**changes), "--rate --measure")


def test_misuse_is_an_input_error():
    model = build_model(tiny(max_seq_len=16), "cpu")
    cache = SlotCache(model, rows=1, max_tokens=4)
    with torch.no_grad():
        cache.admit(torch.zeros(1, 3, dtype=torch.long), model)
        with pytest.raises(InputError, match="all 1 slots"):
            cache.admit(torch.zeros(1, 2, dtype=torch.long), model)
        with pytest.raises(InputError, match="one token for each of the 1"):
            decode_rows(model, torch.zeros(2, 1, dtype=torch.long), cache)
        decode_rows(model, torch.zeros(1, 1, dtype=torch.long), cache)
        with pytest.raises(InputError, match="pass the 4 positions"):
            decode_rows(model, torch.zeros(1, 1, dtype=torch.long), cache)


CAPACITY = dict(n_expert=4, n_expert_active=2, expert_capacity_factor=1.0, pos_encoding="rope")


def test_free_rows_take_no_expert_capacity():
    """Capacity routing (Switch Transformers, sec. 2.2: an expert keeps ceil(c·k·N/E) of its tokens) with two
    sequences in flight among five rows: each step's logits of the rows in flight equal a run of a cache of
    exactly those two rows (the tokens in flight alone, in the same order, their capacity C' = ceil(2·2/4) = 1
    per expert), whatever tokens the free rows carry; the same ops and shapes at every step, and no sync
    (tfcalc.model.experts: the free rows' pairs sorted after every expert's, C' a device tensor). The rows'
    tokens compete for experts (drops happen): with the free rows counted as before, the logits differ."""
    from test_state_static import SYNCS, _record

    cfg = tiny(max_seq_len=24, **CAPACITY)
    torch.manual_seed(0)
    model = build_model(cfg, "cpu", torch.float64)
    seqs = torch.randint(0, cfg.vocab_size, (2, 16), generator=torch.Generator().manual_seed(5))
    wide, alone = SlotCache(model, rows=5, max_tokens=20), SlotCache(model, rows=2, max_tokens=20)
    counted = SlotCache(model, rows=5, max_tokens=20)
    counted.base.active = None  # the free rows routed as rows in flight: what the step did before
    records, differ = [], 0
    with torch.inference_mode():
        for cache in (wide, alone, counted):
            cache.admit(seqs[:1, :3], model)
            cache.admit(seqs[1:, :6], model)
        for step in range(6):
            tokens = torch.stack([seqs[0, 3 + step], seqs[1, 6 + step]])[:, None]  # (2, 1)
            free = torch.randint(0, cfg.vocab_size, (3, 1), generator=torch.Generator().manual_seed(step))
            given = torch.cat([tokens, free])  # (5, 1): the free rows' tokens, anything
            out = []
            records.append(_record(lambda g=given, o=out: o.append(decode_rows(model, g, wide))))
            reference = decode_rows(model, tokens, alone)  # (2, 1, V)
            torch.testing.assert_close(out[0][:2], reference, rtol=0, atol=1e-12)
            differ += not torch.allclose(decode_rows(model, given, counted)[:2], reference, rtol=0, atol=1e-9)
    assert differ  # the test can fail: counted free rows change what the rows in flight get
    assert all(r == records[0] for r in records[1:])
    assert not {name for name, _, _, _ in records[0]} & SYNCS
