"""FLOPs of the new kinds: a MoE counts its top-k experts, an encoder masks nothing, an encoder-decoder
reads S source and T target tokens; measured (FlopCounterMode) == analytic for each."""

import pytest
from conftest import BERT_LIKE, MIXTRAL_LIKE, VASWANI_LIKE, assert_one_line_error, tiny

from tfcalc.count.model import flops as count, params as params_count
from tfcalc.measure import flops as measure
from tfcalc.presets import load
from tfcalc.workload import Workload


def _dense(cfg):
    from tfcalc.config import replace

    return replace(cfg, n_expert=None, n_expert_active=None)


def test_moe_ffn_is_k_experts_and_the_router_not_all_experts():
    cfg, B, T = tiny(**MIXTRAL_LIKE), 2, 7  # 4 experts, top-2
    dense = _dense(cfg)
    router = 2 * B * T * cfg.d_model * 4
    assert (
        count.ffn_flops(cfg, Workload(batch=B, seq=T)) == 2 * count.ffn_flops(dense, Workload(batch=B, seq=T)) + router
    )
    moe = count.breakdown(cfg, Workload(batch=B, seq=T)).components()
    assert moe["expert_ffn_up"] == cfg.n_layer * 2 * 2 * B * T * cfg.d_model * cfg.ffn_dim  # B·T·k rows per layer
    assert count.attention_flops(cfg, Workload(batch=B, seq=T)) == count.attention_flops(
        dense, Workload(batch=B, seq=T)
    )


def test_mixtral_forward_per_token_is_twice_the_active_matrix_parameters():
    # One token, T = 1: every active weight matrix multiplies it once (2 FLOPs per weight); the token
    # embedding is a lookup and the norms are not matmuls. Plus the scores of one query against one key.
    cfg = load("mixtral-8x7b")
    b = params_count.breakdown(cfg)
    norms = sum(n for c, n in b.items() if "norm" in c)
    matrices = params_count.active_total(cfg) - b["token_embedding"] - norms
    assert count.forward_flops(cfg, Workload(batch=1, seq=1)) == 2 * matrices + cfg.n_layer * 4 * cfg.q_dim
    assert (
        count.forward_flops(cfg, Workload(batch=1, seq=1))
        < 2 * params_count.active_total(cfg)
        < 0.3 * 2 * params_count.total(cfg)
    )


@pytest.mark.parametrize("device", ["meta", "cpu"])
def test_moe_measured_equals_analytic_whatever_the_routing(device):
    for active in (1, 2, 4):
        cfg = tiny(**{**MIXTRAL_LIKE, "n_expert_active": active})
        m = measure.measure_flops(cfg, Workload(batch=2, seq=9), device)
        assert m.total == count.forward_flops(cfg, Workload(batch=2, seq=9)) and m.groups["other"] == 0
        assert m.by_module["ffn.router"] == cfg.n_layer * 2 * 18 * cfg.d_model * 4


def test_encoder_masks_nothing_has_a_pooler_and_no_head():
    cfg, B, T = tiny(**BERT_LIKE), 3, 11
    b = count.breakdown(cfg, Workload(batch=B, seq=T))
    assert b.forward_causal == b.forward
    assert b.totals()["attention_scores"] == cfg.n_layer * 4 * B * T * T * cfg.q_dim
    assert b.totals()["pooler"] == 2 * B * cfg.d_model**2 and b.totals()["lm_head"] == 0
    assert count.crossover_seq(cfg, causal=True) == count.crossover_seq(cfg)
    assert b.per_token(b.forward) == round(b.forward / (B * T))  # the pooler runs per sequence: rounded
    with pytest.raises(ValueError, match="generates no tokens"):
        count.decode_flops(cfg, Workload(batch=1, seq=8))


def test_bert_base_forward_by_hand():
    cfg, B, T, d, L = load("bert-base"), 1, 512, 768, 12
    block = 2 * T * d * (4 * d + 2 * 4 * d) + 4 * T * T * d  # projections, FFN (d_ff = 4d), scores
    assert count.forward_flops(cfg, Workload(batch=B, seq=T)) == L * block + 2 * d * d  # + pooler, no LM head


def test_encoder_decoder_by_hand_with_different_lengths():
    cfg, B, S, T = load("transformer-base"), 2, 100, 60
    d, f, V, L = 512, 2048, 37000, 6
    encoder = L * (2 * B * S * d * (4 * d + 2 * f) + 4 * B * S * S * d)
    self_attention = 2 * B * T * d * 4 * d + 4 * B * T * T * d
    cross = 2 * B * T * d * 2 * d + 2 * B * S * d * 2 * d + 4 * B * T * S * d  # Q, O; K, V on the source; scores
    decoder = L * (self_attention + cross + 2 * B * T * d * 2 * f)
    b = count.breakdown(cfg, Workload(batch=B, seq=T, src_seq=S))
    assert b.forward == encoder + decoder + 2 * B * T * d * V
    assert b.totals()["cross_attention_scores"] == L * 4 * B * T * S * d
    # Causal: only the decoder's self-attention scores are masked.
    assert b.forward - b.forward_causal == L * 4 * B * d * (T * T - T * (T + 1) // 2)
    assert count.breakdown(cfg, Workload(batch=B, seq=T)).src_seq == T  # the source length defaults to T


def test_encoder_decoder_decode_reuses_the_encoder_and_the_cross_kv_cache():
    cfg, B, T, S = load("transformer-big"), 2, 50, 70
    d, f, V, L = 1024, 4096, 37000, 6
    per_block = 2 * B * d * 4 * d + 4 * B * T * d + 2 * B * d * 2 * d + 4 * B * S * d + 2 * B * d * 2 * f
    assert count.decode_flops(cfg, Workload(batch=B, seq=T, src_seq=S)) == L * per_block + 2 * B * d * V
    components = {e.component for e in count.decode_entries(cfg, Workload(batch=B, seq=T, src_seq=S))}
    assert "cross_attn_k" not in components and not any(c.startswith("encoder_") for c in components)


def test_source_length_only_for_encoder_decoders():
    with pytest.raises(ValueError, match="encoder-decoder models only"):
        count.breakdown(load("gpt2"), Workload(batch=1, seq=8, src_seq=4))


@pytest.mark.parametrize("device", ["meta", "cpu"])
@pytest.mark.parametrize("changes", [BERT_LIKE, VASWANI_LIKE, {**VASWANI_LIKE, **MIXTRAL_LIKE}],
                         ids=["bert-like", "vaswani-like", "moe-encoder-decoder"])
def test_measured_forward_and_training_of_each_kind(device, changes):
    cfg = tiny(**changes)
    src = 5 if cfg.arch == "encoder-decoder" else None
    m = measure.measure_flops(cfg, Workload(batch=2, seq=9, src_seq=src), device, training=True)
    b = count.breakdown(cfg, Workload(batch=2, seq=9, src_seq=src))
    assert m.total == b.forward
    assert m.groups == dict({g: n for g, n in b.totals().items() if g != "embeddings" or n}, other=0)
    if device == "meta":  # the CPU flash-attention backward recomputes Q·Kᵀ (see test_flops)
        assert m.training_total == 3 * b.forward


# ---------- the command line ----------


def test_flops_cli_encoder_decoder(cli):
    data = cli("flops", "transformer-base", "--seq", "64", "--src-seq", "100", "--measure", "--json").json()
    assert data["src_seq"] == 100 and data["agree"] is True
    assert data["forward_flops"] == count.forward_flops(
        load("transformer-base"), Workload(batch=1, seq=64, src_seq=100)
    )
    assert data["breakdown"]["cross_attention_scores"] == 6 * 4 * 64 * 100 * 512
    assert any("encoder-decoder" in note for note in data["notes"])
    out = cli("flops", "transformer-base", "--seq", "64", "--src-seq", "100", "--decode", "--verbose").out
    for text in ("Cross-attention projections", "encoder Q projection", "decoder cross-attention scores Q·Kᵀ",
                 "Decode"):
        assert text in out, text


def test_flops_cli_moe_and_encoder(cli):
    data = cli("flops", "mixtral", "--seq", "16", "--measure", "--json").json()
    assert data["agree"] is True and data["components"]["router"] == 32 * 2 * 16 * 4096 * 8
    assert any("top-2 of 8 experts" in note for note in data["notes"])
    bert = cli("flops", "bert-base", "--seq", "128", "--decode", "--json").json()
    assert bert["decode"] is None and bert["forward_flops_causal"] == bert["forward_flops"]
    assert bert["breakdown"]["lm_head"] == 0 and bert["breakdown"]["pooler"] == 2 * 768 * 768
    r = cli("flops", "bert-base", "--seq", "128", "--decode")
    assert r.code == 0 and "Pooler" in r.out and "LM head" not in r.out and "no decode step" in r.out


@pytest.mark.parametrize(
    "args, message",
    [
        (["flops", "gpt2", "--src-seq", "8"],
         "--src-seq applies to encoder-decoder models only, or to stacks with cross_attention (gpt2 is decoder)"),
        (["flops", "transformer-base", "--src-seq", "0"], "--src-seq must be between 1 and"),
        (["flops", "bert-base", "--seq", "600", "--measure"], "--seq 600 exceeds the model's context of 512"),
    ],
)
def test_bad_flops_input_for_the_new_kinds(cli, args, message):
    assert_one_line_error(cli(*args), message)


def test_compare_and_scan_account_for_cross_attention_and_the_pooler(cli):
    rows = {r["preset"]: r for r in cli("compare", "bert-base", "transformer-base", "--json").json()}
    b = count.breakdown(load("transformer-base"), Workload(batch=1, seq=512))
    assert rows["transformer-base"]["forward_flops_per_token"] == b.per_token(b.forward)
    scan = cli("scan", "transformer-base", "--seq", "64,128", "--json").json()
    for row in scan["rows"]:
        assert row["attention_scores"] + row["attention_proj"] + row["ffn"] + row["lm_head"] == row["forward_flops"]
    bert = cli("scan", "bert-base", "--seq", "64", "--json").json()["rows"][0]
    assert bert["lm_head"] == 2 * 768 * 768  # the pooler, BertModel's only head
