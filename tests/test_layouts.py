"""Layouts and extras of later models (Qwen2/3, Gemma 2, GPT-NeoX, Falcon, T5, OPT, BERT's MLM head,
Qwen2-MoE): the config rules, and the counts worked by hand. The real module is checked against
Hugging Face transformers in test_hf_models.py."""

import pytest
import torch
from conftest import tiny

from tfcalc.config import ConfigError
from tfcalc.count.model import flops as flops_count, memory as mem, params as count
from tfcalc.model import build_model
from tfcalc.model.positions import apply_rope
from tfcalc.workload import Workload

ROPE = dict(pos_encoding="rope", norm="rmsnorm", norm_bias=False)


@pytest.mark.parametrize(
    "changes, message",
    [
        (dict(norm_placement="middle"), "field 'norm_placement' must be one of pre, post, sandwich"),
        (dict(parallel_block="yes"), "field 'parallel_block' must be one of none, shared_norm, two_norms"),
        (dict(parallel_block="shared_norm", norm_placement="post"),
         "parallel_block shared_norm needs norm_placement pre"),
        (dict(parallel_block="two_norms", cross_attention=True),
         "parallel_block with cross-attention is not supported"),
        (dict(attn_out_bias="no"), "field 'attn_out_bias' must be true, false or null"),
        (dict(rope_fraction=0.5), "rope_fraction applies to pos_encoding rope only"),
        (dict(ROPE, rope_fraction=1.5), "field 'rope_fraction' must be at most 1"),
        (dict(ROPE, rope_fraction=0.1), "int(8 · 0.1) = 0 must be even and at least 2"),
        (dict(ROPE, rope_fraction=0.0), "field 'rope_fraction' must be positive"),
        (dict(attn_softcap=0.0), "field 'attn_softcap' must be positive"),
        (dict(attn_scale=-1.0), "field 'attn_scale' must be positive"),
        (dict(logit_softcap=30.0, lm_head=False, tie_embeddings=False), "logit_softcap needs an LM head"),
        (dict(lm_head_bias=True, lm_head=False, tie_embeddings=False), "lm_head_bias needs an LM head"),
        (dict(rel_pos_buckets=32), "rel_pos_buckets applies to pos_encoding relative only"),
        (dict(pos_encoding="relative", rel_pos_buckets=7), "'rel_pos_buckets' must be an even number of at least 4"),
        (dict(pos_encoding="relative", rel_pos_max_distance=16), "'rel_pos_max_distance' (16) must exceed half"),
        (dict(position_offset=2, pos_encoding="rope"), "position_offset applies to pos_encoding learned only"),
        (dict(position_offset=-1), "'position_offset' must be 0 or more"),
        (dict(arch="encoder-decoder", cross_attention=True), "cross_attention applies to arch decoder or encoder"),
        (dict(shared_expert_d_ff=64), "shared_expert_d_ff applies to a mixture of experts only"),
        (dict(router_norm_topk=False), "router_norm_topk applies to a mixture of experts only"),
        (dict(n_expert=4, n_expert_active=2, shared_expert_gate=True), "shared_expert_gate needs a shared expert"),
        (dict(qk_norm=1), "field 'qk_norm' must be true or false"),
    ],
)
def test_impossible_layouts_are_refused_naming_the_field(changes, message):
    with pytest.raises(ConfigError) as info:
        tiny(**changes)
    assert message in str(info.value) and "\n" not in str(info.value)


def test_qkv_bias_without_o_bias_qwen2():
    cfg = tiny(attn_bias=True, attn_out_bias=False)  # d 32, 4 heads: q = k = 32
    b = count.breakdown(cfg)
    assert "attn_o_bias" not in b and b["attn_q_bias"] == b["attn_k_bias"] == 2 * 32
    assert count.total(tiny()) - count.total(cfg) == 2 * 32  # one O bias of d per layer, 2 layers
    assert cfg.resolved()["attn_out_bias"] is False and tiny().resolved()["attn_out_bias"] is True


def test_norm_counts_of_each_layout():
    d, L = 32, 2
    per_norm = 2 * d  # LayerNorm with bias
    base = count.total(tiny())
    assert count.total(tiny(norm_placement="sandwich")) - base == 2 * L * per_norm
    assert count.total(tiny(parallel_block="shared_norm")) - base == -L * per_norm
    assert count.total(tiny(parallel_block="two_norms")) == base
    qk = tiny(**ROPE, qk_norm=True)
    assert count.breakdown(qk)["attn_q_norm_weight"] == count.breakdown(qk)["attn_k_norm_weight"] == L * 8


def test_t5_relative_bias_is_one_table_per_stack_and_opt_offset_adds_rows():
    cfg = tiny(arch="encoder-decoder", pos_encoding="relative", n_head=4)
    b = count.breakdown(cfg)
    assert b["relative_position_bias"] == b["encoder_relative_position_bias"] == 32 * 4
    assert count.breakdown(tiny(position_offset=2))["position_embedding"] == (16 + 2) * 32


def test_shared_expert_is_always_active():
    moe = dict(n_expert=4, n_expert_active=1, gated_ffn=True, d_ff=16, ffn_bias=False)
    plain, shared = tiny(**moe), tiny(**moe, shared_expert_d_ff=24, shared_expert_gate=True)
    extra = 2 * (3 * 32 * 24 + 32)  # two layers: gate, up, down of 32 x 24, and the gate's 32
    assert count.total(shared) - count.total(plain) == extra
    assert count.active_total(shared) - count.active_total(plain) == extra
    fl = flops_count.breakdown(shared, Workload(batch=1, seq=8)).components()
    assert fl["shared_expert_ffn_up"] == 2 * 2 * 8 * 32 * 24 and fl["shared_expert_gate"] == 2 * 2 * 8 * 32


def test_mlm_head_transform_and_bias():
    cfg = tiny(lm_head_transform=True, lm_head_bias=True)
    b = count.breakdown(cfg)
    assert (b["lm_head_transform_weight"], b["lm_head_transform_bias"], b["lm_head_bias"]) == (32 * 32, 32, 61)
    assert b["lm_head_norm_weight"] == b["lm_head_norm_bias"] == 32 and b["lm_head"] == 0  # tied
    assert flops_count.breakdown(cfg, Workload(batch=2, seq=8)).components()["lm_head_transform"] == 2 * 16 * 32 * 32


def test_cross_attention_in_a_decoder_counts_like_an_encoder_decoders_decoder():
    cfg = tiny(cross_attention=True)
    b = count.breakdown(cfg)
    cross = sum(n for c, n in b.items() if c.startswith("cross_attn"))
    assert cross == 2 * (4 * 32 * 32 + 4 * 32 + 2 * 32)  # Q, K, V, O with biases, and a norm, per layer
    f = flops_count.breakdown(cfg, Workload(batch=1, seq=8, src_seq=5))
    assert f.components()["cross_attn_k"] == 2 * 2 * 5 * 32 * 32  # over the 5 external states
    assert f.totals()["cross_attention_scores"] == 2 * 2 * 2 * 8 * 5 * 32
    # its own cache, and the K and V of the 5 states, computed once (as Hugging Face's EncoderDecoderCache)
    assert (
        mem.kv_cache_bytes(cfg, Workload(batch=1, seq=8, dtype="fp32", src_seq=5))
        == 2 * 8 * 2 * 32 * 4 + 2 * 5 * 2 * 32 * 4
    )


def test_softcap_partial_rope_and_relative_bias_are_non_matmul_only():
    B, T, L, V, nh = 2, 8, 2, 61, 4
    base = flops_count.breakdown(tiny(**ROPE), Workload(batch=B, seq=T))
    capped = flops_count.breakdown(tiny(**ROPE, attn_softcap=50.0, logit_softcap=30.0), Workload(batch=B, seq=T))
    assert capped.forward == base.forward
    assert capped.non_matmul_by_kind()["softcap"] == 3 * (B * nh * T * T * L + B * T * V)
    partial = flops_count.breakdown(tiny(**ROPE, rope_fraction=0.5), Workload(batch=B, seq=T))
    assert partial.forward == base.forward
    assert 2 * partial.non_matmul_by_kind()["rope"] == base.non_matmul_by_kind()["rope"]
    relative = flops_count.breakdown(tiny(pos_encoding="relative"), Workload(batch=B, seq=T))
    assert relative.non_matmul_by_kind()["positions"] == B * nh * T * T * L


def test_partial_rope_leaves_the_other_channels_alone():
    x = torch.randn(2, 5, 3, 8)  # (B, T, nh, hs)
    cos, sin = torch.randn(5, 1, 4), torch.randn(5, 1, 4)
    y = apply_rope(x, cos, sin)
    assert torch.equal(y[..., 4:], x[..., 4:]) and not torch.equal(y[..., :4], x[..., :4])


def test_parallel_block_is_the_sum_of_both_branches_on_one_input():
    for layout in ("shared_norm", "two_norms"):
        model = build_model(tiny(parallel_block=layout), "cpu")
        block, x = model.blocks[0], torch.randn(2, 6, 32)
        with torch.no_grad():
            ffn_in = block.attn_norm(x) if block.ffn_norm is None else block.ffn_norm(x)
            expected = x + block.attn(block.attn_norm(x)) + block.ffn(ffn_in)
            torch.testing.assert_close(block(x), expected)


def test_soft_capped_logits_stay_inside_the_cap():
    model = build_model(tiny(logit_softcap=0.5, attn_softcap=0.1), "cpu")
    torch.nn.init.normal_(model.tok_emb.weight, std=5.0)
    with torch.no_grad():
        logits = model(torch.randint(0, 61, (2, 8)))
    assert logits.abs().max() <= 0.5 and logits.abs().max() > 0.4


# ---------- sliding windows, alternating per layer (Gemma 2) ----------


def test_causal_pairs_with_a_window_by_brute_force():
    for queries in range(1, 9):
        for keys in range(queries, 12):
            for window in (None, 1, 2, 3, 5, 16):
                seen = sum(min(p + 1, window or p + 1) for p in range(keys - queries, keys))
                assert flops_count.causal_pairs(queries, keys, window) == seen


def test_gemma2_alternation_windows_every_other_layer():
    cfg = tiny(n_layer=4, **ROPE, sliding_window=3, full_attention_every=2)
    assert [cfg.layer_window(i) for i in range(4)] == [3, None, 3, None] and cfg.windowed_layers == 2
    assert tiny(n_layer=4, **ROPE, sliding_window=3).windowed_layers == 4  # Mistral: every layer
    B, T, nh, hs = 2, 10, 4, 8
    f = flops_count.breakdown(cfg, Workload(batch=B, seq=T))
    pairs = 2 * flops_count.causal_pairs(T, T, 3) + 2 * flops_count.causal_pairs(T, T)
    assert f.totals(causal=True)["attention_scores"] == 2 * 2 * B * nh * hs * pairs
    assert (
        f.forward == flops_count.breakdown(tiny(n_layer=4, **ROPE), Workload(batch=B, seq=T)).forward
    )  # full square: unchanged
    kv = 2 * B * 32 * 4  # K and V, fp32, per cached position
    assert mem.kv_cache_bytes(cfg, Workload(batch=B, seq=T, dtype="fp32")) == kv * (
        2 * 3 + 2 * T
    )  # a window keeps a ring of W


def test_a_windowed_layer_sees_only_the_last_w_positions():
    torch.manual_seed(0)
    cfg = tiny(n_layer=2, **ROPE, sliding_window=3, full_attention_every=2)
    model = build_model(cfg, "cpu")
    idx = torch.randint(0, 61, (1, 10))
    changed = idx.clone()
    changed[0, 2] = (idx[0, 2] + 1) % 61
    with torch.no_grad():
        block0 = model.blocks[0]
        h, h2 = model.embed(idx), model.embed(changed)
        rope, mask = model.block_inputs(10, h.dtype)
        a, b = block0(h, rope, mask), block0(h2, rope, mask)
        assert torch.equal(a[0, 5:], b[0, 5:]) and not torch.equal(a[0, 2:5], b[0, 2:5])  # sees 3, 4 but not 5+
        full_a, full_b = model(idx), model(changed)
    assert not torch.allclose(full_a[0, 9], full_b[0, 9])  # the full layer above reaches further back


@pytest.mark.parametrize(
    "changes, message",
    [
        (dict(full_attention_every=2), "full_attention_every alternates windowed and full layers: give sliding_window"),
        (dict(sliding_window=4, full_attention_every=1), "'full_attention_every' must be at least 2"),
        (dict(sliding_window=0), "'sliding_window' must be positive"),
        (dict(sliding_window=4, arch="encoder", lm_head=False, tie_embeddings=False), "an encoder attends both ways"),
    ],
)
def test_bad_windows_are_refused(changes, message):
    with pytest.raises(ConfigError, match=message):
        tiny(**changes)


# ---------- expert capacity (Switch Transformers): padded buffers, dropped tokens ----------

MOE = dict(n_expert=4, n_expert_active=2, gated_ffn=True, d_ff=16, ffn_bias=False)


def test_capacity_sets_the_expert_flops_whatever_the_routing():
    from tfcalc.measure.flops import measure_flops

    B, T = 2, 8  # 16 tokens, 32 token-expert pairs over 4 experts
    dropless = flops_count.breakdown(tiny(**MOE), Workload(batch=B, seq=T)).components()["expert_ffn_up"]
    for factor, capacity in ((1.25, 10), (0.25, 2)):  # ceil(factor · 2 · 16 / 4)
        cfg = tiny(**MOE, expert_capacity_factor=factor)
        assert cfg.expert_capacity(B * T) == capacity
        up = flops_count.breakdown(cfg, Workload(batch=B, seq=T)).components()["expert_ffn_up"]
        assert up * 32 == dropless * 4 * capacity  # 4 buffers of C rows in place of 32 rows
        for device in ("cpu", "meta"):
            assert measure_flops(cfg, Workload(batch=B, seq=T), device).total == flops_count.forward_flops(
                cfg, Workload(batch=B, seq=T)
            )
    with pytest.raises(ConfigError, match="expert_capacity_factor applies to a mixture of experts only"):
        tiny(expert_capacity_factor=1.0)


def test_tokens_past_an_experts_capacity_are_dropped_in_order():
    cfg = tiny(**MOE, expert_capacity_factor=0.25, n_layer=1)  # 16 tokens: C = 2 rows per expert
    moe = build_model(cfg, "cpu").blocks[0].ffn
    with torch.no_grad():
        moe.router.weight.zero_()
        moe.router.weight[:2] = 1.0  # with positive inputs every token picks experts 0 and 1
        x = torch.rand(1, 16, 32) + 0.1
        out = moe(x)[0]
    assert out[:2].abs().sum() > 0 and torch.equal(out[2:], torch.zeros(14, 32))  # tokens 0 and 1 fit
