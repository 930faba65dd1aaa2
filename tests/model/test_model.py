"""The real module: builds on meta for any size, runs forward on CPU for tiny configs, matches the count."""

import pytest
import torch
from conftest import configs, tiny
from hypothesis import HealthCheck, given, settings

from tfcalc.count.model import params as count
from tfcalc.measure.params import measured_breakdown, measured_total
from tfcalc.model import Transformer, alibi_slopes, build_model
from tfcalc.presets import load


def _forward(cfg, batch=2, seq=None, src_seq=None):
    """The main output of a CPU forward pass: logits (B, T, V), or hidden states (B, T, d) without an LM
    head; an encoder-decoder reads a source of src_seq tokens (default: seq)."""
    model = build_model(cfg, "cpu")
    seq = seq or cfg.max_seq_len
    idx = torch.randint(0, cfg.vocab_size, (batch, seq))
    with torch.no_grad():
        if cfg.arch == "encoder-decoder":
            return model(torch.randint(0, cfg.vocab_size, (batch, src_seq or seq)), idx)
        memory = torch.randn(batch, src_seq or seq, cfg.d_model) if cfg.cross_attention else None
        out = model(idx, memory=memory)
    if cfg.pooler:
        out, pooled = out
        assert pooled.shape == (batch, cfg.d_model) and torch.isfinite(pooled).all()
    return out


def _output_width(cfg):
    return cfg.vocab_size if cfg.lm_head else cfg.d_model


@pytest.mark.parametrize(
    "changes",
    [
        {},
        dict(pos_encoding="rope", norm="rmsnorm", norm_bias=False, gated_ffn=True, activation="silu",
             attn_bias=False, ffn_bias=False, tie_embeddings=False, n_head=8, n_kv_head=2),
        dict(pos_encoding="alibi", n_head=6, d_model=36),
        dict(pos_encoding="sinusoidal", norm_placement="post", final_norm=False, activation="relu"),
        dict(pos_encoding="none", n_kv_head=1, gated_ffn=True, activation="gelu"),
        dict(d_head=12, n_head=4, d_model=32),
    ],
    ids=["gpt2-like", "llama-like-gqa", "alibi-6-heads", "post-ln-sinusoidal", "mqa-geglu-nopos", "explicit-d_head"],
)
def test_forward_shapes_and_finite(changes):
    cfg = tiny(**changes)
    logits = _forward(cfg, batch=2, seq=cfg.max_seq_len - 3)
    assert logits.shape == (2, cfg.max_seq_len - 3, cfg.vocab_size)
    assert torch.isfinite(logits).all()


def test_meta_build_allocates_nothing_even_for_gpt3_175b():
    model = build_model(load("gpt3"), "meta")
    assert all(p.is_meta for p in model.parameters())
    assert measured_total(model) == count.total(load("gpt3"))


def test_tied_weights_stay_tied_after_allocation():
    model = build_model(tiny(), "cpu")
    assert model.lm_head.weight is model.tok_emb.weight
    assert measured_total(model) == count.total(tiny())


def test_model_is_causal():
    """Changing a later token never changes earlier logits (each positional scheme)."""
    for pos in ("learned", "rope", "alibi", "sinusoidal", "none"):
        cfg = tiny(pos_encoding=pos)
        model = build_model(cfg, "cpu")
        idx = torch.randint(0, cfg.vocab_size, (1, 10))
        changed = idx.clone()
        changed[0, 7] = (idx[0, 7] + 1) % cfg.vocab_size
        with torch.no_grad():
            a, b = model(idx), model(changed)
        torch.testing.assert_close(a[:, :7], b[:, :7])
        assert not torch.allclose(a[:, 7:], b[:, 7:])


def test_alibi_slopes_follow_press_et_al():
    assert alibi_slopes(8).tolist() == pytest.approx([2 ** -(i + 1) for i in range(8)])
    # 6 heads: the 4-head slopes, then every other slope of the 8-head set.
    assert alibi_slopes(6).tolist() == pytest.approx([2**-2, 2**-4, 2**-6, 2**-8, 2**-1, 2**-3])


def test_bf16_build_and_forward():
    model = build_model(tiny(), "cpu", torch.bfloat16)
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}
    with torch.no_grad():
        assert model(torch.zeros(1, 4, dtype=torch.long)).dtype == torch.bfloat16


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(configs())
def test_property_analytic_equals_empirical_and_forward_runs(cfg):
    model = build_model(cfg, "meta")
    assert isinstance(model, Transformer)
    assert measured_breakdown(model) == count.breakdown(cfg)
    assert measured_total(model) == count.total(cfg)
    src_seq = max(1, cfg.max_seq_len // 2)  # a source shorter than the target (encoder-decoder, cross_attention)
    out = _forward(cfg, batch=2, src_seq=src_seq)
    assert out.shape == (2, cfg.max_seq_len, _output_width(cfg))
    assert torch.isfinite(out).all()


@pytest.mark.parametrize("vocab", [61, 64], ids=["unaligned-vocab-transposed", "aligned-vocab-plain"])
def test_lm_head_values_match_a_plain_linear(vocab):
    """The unaligned-vocabulary head computes weight @ xᵀ and returns its transposed view: same values."""
    model = build_model(tiny(vocab_size=vocab, tie_embeddings=False), "cpu")
    x = torch.randn(3, 5, 32)
    with torch.no_grad():
        out = model.lm_head(x)
    assert out.shape == (3, 5, vocab)
    torch.testing.assert_close(out, torch.nn.functional.linear(x, model.lm_head.weight))
    assert out.is_contiguous() == (vocab % 16 == 0)
