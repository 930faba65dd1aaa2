"""Encoder-only, encoder-decoder and mixture-of-experts models: config rules, the real module, the counts."""

import pytest
import torch
import torch.nn.functional as F
from conftest import BERT_LIKE, MIXTRAL_LIKE, VASWANI_LIKE, tiny

from tfcalc.config import ConfigError
from tfcalc.count.model import params as count
from tfcalc.measure.params import measure_params
from tfcalc.model import MixtureOfExperts, build_model
from tfcalc.presets import load


@pytest.mark.parametrize(
    "changes, message",
    [
        (dict(arch="encoder-only"), "field 'arch' must be one of decoder, encoder, encoder-decoder"),
        (dict(n_encoder_layer=2), "n_encoder_layer applies to arch encoder-decoder only"),
        (dict(arch="encoder", n_encoder_layer=2), "n_encoder_layer applies to arch encoder-decoder only"),
        (dict(arch="encoder-decoder", n_encoder_layer=0), "'n_encoder_layer' must be positive"),
        (dict(tie_encoder_embedding=False), "tie_encoder_embedding applies to arch encoder-decoder only"),
        (dict(arch="encoder-decoder", type_vocab_size=2), "an encoder-decoder takes no token types"),
        (dict(type_vocab_size=-1), "'type_vocab_size' must be 0 or more"),
        (dict(arch="encoder-decoder", pooler=True), "pooler applies to one stack"),
        (dict(lm_head=False), "tie_embeddings needs an LM head"),
        (dict(n_expert=8), "give n_expert and n_expert_active together"),
        (dict(n_expert_active=2), "give n_expert and n_expert_active together"),
        (dict(n_expert=2, n_expert_active=3), "n_expert_active (3) must not exceed n_expert (2)"),
        (dict(n_expert=0, n_expert_active=0), "'n_expert' must be positive"),
        (dict(embedding_norm="yes"), "'embedding_norm' must be true or false"),
    ],
)
def test_impossible_kinds_are_refused_naming_the_field(changes, message):
    with pytest.raises(ConfigError) as info:
        tiny(**changes)
    assert message in str(info.value) and "\n" not in str(info.value)


def test_depths_of_each_kind():
    assert (tiny().encoder_layers, tiny().decoder_layers, tiny().cross_attention_layers) == (0, 2, 0)
    encoder = tiny(arch="encoder", n_layer=3)
    assert (encoder.encoder_layers, encoder.decoder_layers, encoder.cross_attention_layers) == (3, 0, 0)
    both = tiny(arch="encoder-decoder", n_layer=2, n_encoder_layer=5)
    assert (both.encoder_layers, both.decoder_layers, both.cross_attention_layers) == (5, 2, 2)
    assert tiny(arch="encoder-decoder").encoder_layers == 2  # defaults to n_layer
    assert both.resolved()["n_encoder_layer"] == 5 and tiny().resolved()["n_encoder_layer"] is None


# ---------- the real module ----------


def _changed_at(idx, position, vocab_size):
    changed = idx.clone()
    changed[:, position] = (idx[:, position] + 1) % vocab_size
    return changed


def test_encoder_is_bidirectional_for_every_position_scheme():
    for pos in ("learned", "rope", "alibi", "sinusoidal", "none"):
        cfg = tiny(**{**BERT_LIKE, "pooler": False}, pos_encoding=pos)
        model = build_model(cfg, "cpu")
        idx = torch.randint(0, cfg.vocab_size, (1, 10))
        with torch.no_grad():
            a, b = model(idx), model(_changed_at(idx, 7, cfg.vocab_size))
        assert a.shape == (1, 10, cfg.d_model)
        assert not torch.allclose(a[:, :7], b[:, :7]), pos  # earlier positions see the later token


def test_bert_like_returns_hidden_states_and_pooled_first_token():
    cfg = tiny(**BERT_LIKE)
    model = build_model(cfg, "cpu")
    idx = torch.randint(0, cfg.vocab_size, (2, 9))
    types = torch.ones_like(idx)
    with torch.no_grad():
        hidden, pooled = model(idx, token_type_ids=types)
        assert torch.allclose(pooled, torch.tanh(model.pooler(hidden[:, 0])))
        other, _ = model(idx)  # token types default to 0
    assert hidden.shape == (2, 9, cfg.d_model) and pooled.shape == (2, cfg.d_model)
    assert not torch.allclose(hidden, other)


def test_encoder_decoder_target_is_causal_and_reads_the_whole_source():
    cfg = tiny(**VASWANI_LIKE, n_encoder_layer=3)
    model = build_model(cfg, "cpu")
    src, tgt = torch.randint(0, cfg.vocab_size, (1, 12)), torch.randint(0, cfg.vocab_size, (1, 8))
    with torch.no_grad():
        logits = model(src, tgt)
        later_target = model(src, _changed_at(tgt, 5, cfg.vocab_size))
        last_source = model(_changed_at(src, 11, cfg.vocab_size), tgt)
    assert logits.shape == (1, 8, cfg.vocab_size)
    torch.testing.assert_close(logits[:, :5], later_target[:, :5])
    assert not torch.allclose(logits[:, 0], last_source[:, 0])  # the first target token sees the last source one
    with pytest.raises(ValueError, match="src_idx, tgt_idx"):
        model(src)


def test_encoder_decoder_shares_one_embedding_with_the_head_after_allocation():
    model = build_model(tiny(**VASWANI_LIKE), "cpu")
    assert model.encoder.tok_emb is model.tok_emb and model.lm_head.weight is model.tok_emb.weight
    untied = build_model(tiny(**VASWANI_LIKE, tie_encoder_embedding=False), "cpu")
    assert untied.encoder.tok_emb is not untied.tok_emb


def _expert(moe: MixtureOfExperts, e: int, token: torch.Tensor) -> torch.Tensor:
    """Expert e on one token, from its slice of the grouped tensors: down(silu(gate) · up)."""
    gate, up = F.linear(token, moe.experts.up.weight[e]).chunk(2)
    return F.linear(F.silu(gate) * up, moe.experts.down.weight[e])


def _reference_moe(moe: MixtureOfExperts, x: torch.Tensor) -> torch.Tensor:
    """Token by token: every expert's output, the top-k by router logit, softmax-weighted."""
    out = []
    for token in x.reshape(-1, x.shape[-1]):
        logits = moe.router(token)
        top = logits.topk(moe.top_k).indices
        weights = logits[top].softmax(-1)
        out.append(sum(w * _expert(moe, int(e), token) for w, e in zip(weights, top, strict=True)))
    return torch.stack(out).view_as(x)


@pytest.mark.parametrize("experts, active", [(4, 2), (3, 1), (2, 2), (1, 1)])
def test_moe_routes_each_token_to_its_top_k_experts(experts, active):
    cfg = tiny(**{**MIXTRAL_LIKE, "n_expert": experts, "n_expert_active": active})
    moe = build_model(cfg, "cpu").blocks[0].ffn
    x = torch.randn(2, 5, cfg.d_model)
    with torch.no_grad():
        torch.testing.assert_close(moe(x), _reference_moe(moe, x))


@pytest.mark.parametrize("changes", [BERT_LIKE, VASWANI_LIKE, MIXTRAL_LIKE,
                                     {**VASWANI_LIKE, **MIXTRAL_LIKE, "tie_encoder_embedding": False}],
                         ids=["bert-like", "vaswani-like", "mixtral-like", "moe-encoder-decoder-untied"])
def test_bf16_forward_of_each_kind(changes):
    cfg = tiny(**changes)
    model = build_model(cfg, "cpu", torch.bfloat16)
    idx = torch.randint(0, cfg.vocab_size, (1, 6))
    with torch.no_grad():
        out = model(idx, idx) if cfg.arch == "encoder-decoder" else model(idx)
    out = out[0] if isinstance(out, tuple) else out
    assert out.dtype == torch.bfloat16 and torch.isfinite(out.float()).all()


# ---------- counts ----------


@pytest.mark.parametrize("changes", [BERT_LIKE, VASWANI_LIKE, MIXTRAL_LIKE,
                                     {**VASWANI_LIKE, **MIXTRAL_LIKE, "tie_encoder_embedding": False}],
                         ids=["bert-like", "vaswani-like", "mixtral-like", "moe-encoder-decoder-untied"])
def test_analytic_equals_empirical_for_each_kind(changes):
    cfg = tiny(**changes)
    total, measured = measure_params(cfg)
    assert measured == count.breakdown(cfg) and total == count.total(cfg)
    assert count.active_params(cfg, measured) == count.active_total(cfg)


def test_bert_like_count_by_hand():
    V, T, d, L, types = 61, 16, 32, 2, 2
    embeddings = V * d + T * d + types * d + 2 * d
    block = 4 * d * d + 4 * d + 2 * 4 * d * d + 4 * d + d + 4 * d  # attention, FFN (4d wide), two LayerNorms
    assert count.total(tiny(**BERT_LIKE)) == embeddings + L * block + d * d + d  # + pooler, no LM head


def test_encoder_decoder_adds_cross_attention_and_shares_the_embedding():
    cfg = tiny(**VASWANI_LIKE, n_encoder_layer=3)
    b = count.breakdown(cfg)
    d, V = 32, 61
    assert b["token_embedding"] == V * d and b["encoder_token_embedding"] == 0 and b["lm_head"] == 0
    assert b["cross_attn_q_weight"] == b["attn_q_weight"] == 2 * d * d  # 2 decoder layers
    assert b["encoder_attn_q_weight"] == 3 * d * d and "encoder_cross_attn_q_weight" not in b
    assert b["cross_attn_norm_weight"] == 2 * d
    stacks = count.stack_totals(cfg, b)
    assert stacks["encoder"] + stacks["decoder"] == count.total(cfg)
    groups = count.group_totals(cfg, b)
    assert groups["cross_attention"] == 2 * 4 * d * d
    untied = tiny(**VASWANI_LIKE, tie_encoder_embedding=False)
    assert count.total(untied) - count.total(tiny(**VASWANI_LIKE)) == V * d


def test_moe_total_and_active_parameters():
    cfg, dense = tiny(**MIXTRAL_LIKE), tiny(**{**MIXTRAL_LIKE, "n_expert": None, "n_expert_active": None})
    d, f, L = 32, cfg.ffn_dim, 2
    expert = 3 * d * f  # gate, up, down; no biases
    assert count.total(cfg) - count.total(dense) == L * (3 * expert + 4 * d)  # 3 more experts and the router
    assert count.total(cfg) - count.active_total(cfg) == L * 2 * expert  # each token skips 2 of 4 experts
    assert count.active_total(dense) == count.total(dense)


def test_seeds_formula_for_each_kind():
    assert count.seeds_formula(tiny(**BERT_LIKE)) == "12·L·d² + V·d"
    assert count.seeds_formula(tiny(**VASWANI_LIKE)) == "12·L_enc·d² + 16·L_dec·d² + V·d"
    assert count.seeds_formula(tiny(**MIXTRAL_LIKE, tie_embeddings=False)) == "(4 + 8·E)·L·d² + 2·V·d"
    assert count.seeds_approximation(tiny(**VASWANI_LIKE, n_encoder_layer=3)) == (12 * 3 + 16 * 2) * 32**2 + 61 * 32


# ---------- the presets of the new kinds ----------


def test_mixtral_active_parameters_per_token_are_12_9_billion():
    cfg = load("mixtral-8x7b")
    expert = 3 * 4096 * 14336  # SwiGLU: gate, up, down
    assert count.total(cfg) - count.active_total(cfg) == 32 * 6 * expert  # 6 of 8 experts idle per token
    assert count.active_total(cfg) == 12_879_925_248  # "12.9B" (Mistral AI), "13B" (Jiang et al. 2024)


def test_mistral_is_llama3_8b_with_a_32000_vocabulary():
    # Same blocks; Llama 3's 128,256-token vocabulary adds 96,256 rows to the embedding and to the head.
    assert count.total(load("llama3-8b")) - count.total(load("mistral-7b")) == 2 * 96_256 * 4096


def test_transformer_base_and_big_by_hand_against_table_3():
    def vaswani(d, f, V=37000, N=6):
        attention = 4 * d * d  # W^Q, W^K, W^V, W^O: no biases in sec. 3.2.2
        ffn = 2 * d * f + f + d  # eq. 2, with biases
        layer_norm = 2 * d
        encoder = attention + ffn + 2 * layer_norm
        decoder = 2 * attention + ffn + 3 * layer_norm
        return V * d + N * (encoder + decoder)  # one V x d matrix for both embeddings and the pre-softmax

    base, big = load("transformer-base"), load("transformer-big")
    assert count.total(base) == vaswani(512, 2048) == 63_045_632  # Table 3: 65M, 3.0% higher
    assert count.total(big) == vaswani(1024, 4096) == 214_171_648  # Table 3: 213M, 0.55% lower
    assert measure_params(base)[0] == count.total(base)
    b = count.breakdown(base)
    assert b["encoder_token_embedding"] == b["lm_head"] == 0 and b["token_embedding"] == 37000 * 512


def test_bert_base_as_bertmodel():
    b = count.breakdown(load("bert-base"))
    assert b["token_type_embedding"] == 2 * 768 and b["pooler_weight"] == 768 * 768
    assert "lm_head" not in b and "final_norm_weight" not in b and b["embedding_norm_weight"] == 768


@pytest.mark.parametrize("name", ["transformer-base", "mixtral-8x7b", "bert-base"])
def test_resolved_config_of_each_kind_rebuilds_the_same_model(name):
    from tfcalc.config import from_mapping

    cfg = load(name)
    assert count.breakdown(from_mapping(cfg.resolved())) == count.breakdown(cfg)
