"""Decoding with the static KV cache: the logits of a prefill and of every decode step equal the full
forward pass's logits at the same positions, for every kind of model that decodes."""

from __future__ import annotations

import pytest
import torch
from conftest import tiny

from tfcalc.errors import InputError
from tfcalc.model import build_model, generate
from tfcalc.workload import Workload

KINDS = {
    "gpt2-like": {},
    "llama-gqa-rope": dict(pos_encoding="rope", norm="rmsnorm", norm_bias=False, gated_ffn=True, activation="silu",
                           attn_bias=False, ffn_bias=False, tie_embeddings=False, n_head=8, n_kv_head=2),
    "alibi": dict(pos_encoding="alibi", n_head=6, d_model=36),
    "sinusoidal-post-ln": dict(pos_encoding="sinusoidal", norm_placement="post", final_norm=False, activation="relu"),
    "mqa-no-positions": dict(pos_encoding="none", n_kv_head=1, gated_ffn=True, activation="gelu"),
    "moe-top2": dict(n_expert=4, n_expert_active=2),
    "window-rope-gqa": dict(pos_encoding="rope", n_head=4, n_kv_head=2, sliding_window=5),
    "window-alibi": dict(pos_encoding="alibi", sliding_window=4),
    # the step's mask is built per layout from the slots' positions, ALiBi's distances with it
    "alibi-alternating-windows": dict(pos_encoding="alibi", n_layer=2, sliding_window=3, full_attention_every=2),
    "window-learned": dict(sliding_window=3),
    "window-of-one": dict(pos_encoding="rope", sliding_window=1),
    "encoder-decoder": dict(arch="encoder-decoder", n_encoder_layer=1, pos_encoding="sinusoidal",
                            norm_placement="post", embedding_scale=True),
    "encoder-decoder-window": dict(arch="encoder-decoder", pos_encoding="rope", sliding_window=4),
    # recent families' layouts, decoded: Gemma 2's alternating windows, soft-caps and sandwich norms; Qwen3's
    # Q/K norms with partial rotary; GPT-NeoX's and Falcon's parallel blocks; OPT's position offset
    "gemma2-alternating": dict(pos_encoding="rope", n_layer=4, sliding_window=4, full_attention_every=2,
                               attn_softcap=50.0, logit_softcap=30.0, norm_placement="sandwich", norm="rmsnorm",
                               norm_bias=False),
    "qk-norm-partial-rope": dict(pos_encoding="rope", qk_norm=True, rope_fraction=0.5),
    "parallel-two-norms": dict(pos_encoding="rope", parallel_block="two_norms"),
    "parallel-shared-norm": dict(pos_encoding="rope", parallel_block="shared_norm"),
    "opt-position-offset": dict(position_offset=2),
    # per-layer patterns (tfcalc.architecture.patterns): chunks (Llama 4), NoPE layers, a local RoPE base
    # (Gemma 3), an explicit layer list
    "chunked": dict(pos_encoding="rope", attention_chunk_size=4),
    "chunk-of-one": dict(pos_encoding="rope", attention_chunk_size=1),
    "llama4-chunks-nope": dict(pos_encoding="rope", n_layer=4, attention_chunk_size=3, full_attention_every=4,
                               nope_every=4),
    "gemma3-local-base": dict(pos_encoding="rope", n_layer=3, sliding_window=4, full_attention_every=3,
                              rope_theta=1e6, rope_local_theta=10.0),
    "llama4-like": dict(pos_encoding="rope", n_layer=4, attention_chunk_size=3, full_attention_every=2, nope_every=2,
                        qk_l2_norm=True, attn_temperature_floor=2, attn_temperature_scale=0.5, n_expert=4,
                        n_expert_active=1, moe_every=2, router_sigmoid_input=True, router_norm_topk=False,
                        shared_expert_d_ff=8, gated_ffn=True, activation="silu", norm="rmsnorm", norm_bias=False),
    "olmo2-like": dict(pos_encoding="rope", norm="rmsnorm", norm_bias=False, norm_placement="output", qk_norm=True,
                       qk_norm_over="projection"),
    "layer-pattern": dict(pos_encoding="rope", n_layer=4, sliding_window=3, layer_pattern="local_nope, full*2, nope"),
    # LFM2: short gated convolutions (tfcalc.model.short_conv) beside a windowed attention layer
    "conv-lfm2": dict(pos_encoding="rope", n_layer=4, sliding_window=3, conv_kernel=4, conv_bias=True,
                      layer_pattern="conv, local, conv*2"),
}


def _full_and_cached(cfg, batch=2, prompt_len=5, steps=9, seed=0):
    """Full-forward logits over prompt + steps tokens, and the cached ones: prefill over the prompt, then
    one decode step per token (teacher-forced, so any token sequence is checked)."""
    torch.manual_seed(seed)
    model = build_model(cfg, "cpu")
    tokens = torch.randint(0, cfg.vocab_size, (batch, prompt_len + steps))
    src = torch.randint(0, cfg.vocab_size, (batch, 7)) if cfg.arch == "encoder-decoder" else None
    with torch.inference_mode():
        full = model(src, tokens) if src is not None else model(tokens)
        cache = model.new_cache(batch, prompt_len + steps)
        cached = [model.prefill(tokens[:, :prompt_len], cache, src, last_only=False)]
        for i in range(prompt_len, prompt_len + steps):
            cached.append(model.decode(tokens[:, i:i + 1], cache))
    return full, torch.cat(cached, dim=1), cache


@pytest.mark.parametrize("changes", list(KINDS.values()), ids=list(KINDS))
def test_cached_decoding_equals_the_full_forward(changes):
    cfg = tiny(max_seq_len=16, **changes)
    full, cached, cache = _full_and_cached(cfg)
    torch.testing.assert_close(cached, full, rtol=1e-4, atol=1e-5)
    assert cache.length == 14


def test_the_window_is_what_the_cache_holds():
    """A window of W = 5: the cache keeps a ring of W = 5 slots, which a decode step writes its own K and V
    into before it reads them all (tfcalc.model.attention_state; the count of tfcalc.count.model.memory)."""
    cfg = tiny(max_seq_len=16, pos_encoding="rope", sliding_window=5)
    _, _, cache = _full_and_cached(cfg, batch=3)
    assert cache.slots == [5] * cfg.n_layer and cache.k[0].shape == (3, cfg.kv_heads, 5, cfg.head_dim)
    assert cache.nbytes == 2 * cfg.n_layer * 3 * 5 * cfg.kv_dim * 4  # K and V, fp32
    # 14 positions written into a ring of 5: slot s holds the latest p < 14 with p mod 5 = s
    assert cache.slot_positions(0).tolist() == [[10, 11, 12, 13, 9]] * 3
    assert tiny(max_seq_len=16).kv_positions(14) == 14 and cfg.kv_positions(14) == 5 and cfg.kv_positions(3) == 3


def test_the_window_ring_is_what_transformers_static_cache_allocates():
    """The independent reference for W slots: transformers' StaticCache gives a sliding-window layer a
    StaticSlidingWindowLayer of sliding_window slots (cache_utils.py), and a full layer max_cache_len."""
    transformers = pytest.importorskip("transformers")
    hf = transformers.MistralConfig(hidden_size=32, num_attention_heads=4, num_key_value_heads=2, num_hidden_layers=2,
                                    intermediate_size=64, vocab_size=61, sliding_window=5)
    hf_cache = transformers.StaticCache(config=hf, max_cache_len=14)
    hf_cache.early_initialization(2, 2, 8, torch.float32, torch.device("cpu"))
    cfg = tiny(max_seq_len=16, pos_encoding="rope", sliding_window=5, n_kv_head=2)
    cache = build_model(cfg, "meta").new_cache(2, 14)
    assert [layer.keys.shape[2] for layer in hf_cache.layers] == cache.slots == [5, 5]


def test_a_chunked_layer_caches_one_chunk():
    """Chunks of C = 4: a ring of C = 4 slots per layer (the KV count's convention); after 14 positions,
    slots 0 and 1 hold the current chunk (12, 13), slots 2 and 3 the previous one's (10, 11), masked."""
    from tfcalc.count.model.memory import kv_cache_bytes

    cfg = tiny(max_seq_len=16, pos_encoding="rope", attention_chunk_size=4)
    _, _, cache = _full_and_cached(cfg, batch=3)
    assert cache.slots == [4] * cfg.n_layer
    assert cache.slot_positions(0).tolist() == [[12, 13, 10, 11]] * 3
    assert (
        cache.nbytes
        == kv_cache_bytes(cfg, Workload(batch=3, seq=14, dtype="fp32"))
        == 2 * cfg.n_layer * 3 * 4 * cfg.kv_dim * 4
    )


def test_alternating_windows_give_each_layer_its_own_cache():
    """Gemma 2: every second layer sees the whole context, so its cache holds every position; the others
    hold a ring of W. The sizes are the ones tfcalc.count.model.memory.kv_cache_bytes counts."""
    from tfcalc.count.model.memory import kv_cache_bytes

    cfg = tiny(n_layer=4, max_seq_len=16, pos_encoding="rope", sliding_window=4, full_attention_every=2)
    _, _, cache = _full_and_cached(cfg, batch=2)
    assert cache.slots == [4, 14, 4, 14]
    assert (
        cache.nbytes
        == kv_cache_bytes(cfg, Workload(batch=2, seq=14, dtype="fp32"))
        == 2 * 2 * (4 + 14 + 4 + 14) * cfg.kv_dim * 4
    )


@pytest.mark.parametrize("changes, why", [
    (dict(arch="encoder-decoder", pos_encoding="relative", n_encoder_layer=1), "relative position bias"),
    (dict(cross_attention=True), "encoder's states"),
])
def test_what_decoding_does_not_build_is_refused(changes, why):
    with pytest.raises(InputError, match=why):
        build_model(tiny(max_seq_len=16, **changes), "cpu").new_cache(1, 8)


def test_one_layer_with_a_window_sees_exactly_w_keys():
    """With one block, position i depends on tokens i - W + 1 .. i and on no earlier one (W keys, itself
    included: the convention of docs/serving.md, "Sliding window")."""
    W = 4
    cfg = tiny(n_layer=1, max_seq_len=16, pos_encoding="rope", sliding_window=W)
    model = build_model(cfg, "cpu")
    idx = torch.randint(0, cfg.vocab_size, (1, 12))
    with torch.inference_mode():
        base = model(idx)
        for j, i in ((11 - W, 11), (11 - W + 1, 11)):
            changed = idx.clone()
            changed[0, j] = (idx[0, j] + 1) % cfg.vocab_size
            moved = not torch.allclose(model(changed)[0, i], base[0, i])
            assert moved == (i - j < W), (j, i)


def test_greedy_generation_equals_argmax_of_the_full_forward():
    cfg = tiny(max_seq_len=16, pos_encoding="rope", n_kv_head=2)
    model = build_model(cfg, "cpu")
    prompt = torch.randint(0, cfg.vocab_size, (2, 4))
    out = generate(model, prompt, 8)
    seq = prompt
    with torch.inference_mode():
        for _ in range(8):
            seq = torch.cat([seq, model(seq)[:, -1].argmax(-1, keepdim=True)], dim=1)
    assert torch.equal(out, seq[:, 4:])


def test_bf16_decoding_tracks_the_full_forward():
    cfg = tiny(max_seq_len=16, pos_encoding="rope", n_kv_head=2)
    model = build_model(cfg, "cpu", torch.bfloat16)
    tokens = torch.randint(0, cfg.vocab_size, (2, 10))
    with torch.inference_mode():
        full = model(tokens)
        cache = model.new_cache(2, 10)
        assert cache.k[0].dtype == torch.bfloat16
        steps = [model.prefill(tokens[:, :4], cache)] + [model.decode(tokens[:, i:i + 1], cache) for i in range(4, 10)]
    torch.testing.assert_close(torch.cat(steps, 1), full[:, 3:], rtol=0.05, atol=0.05)


@pytest.mark.parametrize("case, message", [
    ("encoder", "no causal stack"),
    ("too-long", "at most 16 tokens"),
    ("decode-first", "call prefill"),
    ("two-at-once", "one token per sequence"),
    ("full", "set up for 6 tokens"),
    ("no-source", "decodes against a source"),
])
def test_misuse_is_a_one_line_input_error(case, message):
    cfg = tiny(max_seq_len=16, arch="encoder-decoder") if case == "no-source" else tiny(max_seq_len=16)
    model = build_model(tiny(max_seq_len=16, arch="encoder", lm_head=False, tie_embeddings=False) if case == "encoder"
                        else cfg, "cpu")
    idx = torch.randint(0, 61, (1, 6))
    with pytest.raises(InputError, match=message), torch.inference_mode():
        if case == "encoder":
            model.new_cache(1, 8)
        elif case == "too-long":
            model.new_cache(1, 17)
        elif case == "no-source":
            model.prefill(idx, model.new_cache(1, 8))
        else:
            cache = model.new_cache(1, 6)
            if case == "decode-first":
                model.decode(idx[:, :1], cache)
            model.prefill(idx[:, :5] if case == "full" else idx[:, :2], cache)
            model.decode(idx[:, :2] if case == "two-at-once" else idx[:, :1], cache)
            model.decode(idx[:, :1], cache)
