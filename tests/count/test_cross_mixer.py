"""Cross-attention through the mixer protocol (issue 29): what it keeps for the backward pass and what is alive
in a no-grad forward come from its ``saved`` and ``working_set`` answers, asked with ``sources`` (the length of
the sequence its keys come from), each checked against a hand derivation below; the byte-for-byte check
against autograd's saved tensors of the real module is tests/count/test_memory_kinds.py
(test_activation_formula_equals_what_autograd_saves_for_each_kind, the vaswani-like cases)."""

from conftest import VASWANI_LIKE, tiny

from tfcalc.architecture.attention import Attention
from tfcalc.count.model import memory as mem
from tfcalc.workload import Workload


def _cross(**changes):
    cfg = tiny(**VASWANI_LIKE, **changes)
    return cfg, cfg.architecture.output.kinds()[0][0].cross_attention


def test_cross_attention_saved_over_its_sources_by_hand():
    """d = 32, 4 heads of 8, 2 K/V heads: q = o = 32, k = v = 16, a = 4; fp32 (e = 4); B = 2 sequences of T = 3
    queries over S = 5 sources: 6 target and 10 source rows.
    flash: Q 6·4·32 = 768 and fused K/V 10·4·(16 + 16) = 1280 -> 2048; log-sum-exp 6·4·4 = 96; output 768.
    math (GQA: K and V repeated to every query head, 32 each, as SDPA's math path copies them):
    768 + 10·4·(32 + 32) = 3328; softmax output 6·4·4·5 = 480; no log-sum-exp."""
    _, att = _cross(n_kv_head=2)
    assert att.saved(2, 3, 4, "flash", False, sources=5) == {
        "qkv": 2048, "attn_scores": 0, "softmax_stats": 96, "attn_output": 768}
    assert att.saved(2, 3, 4, "math", False, sources=5) == {
        "qkv": 3328, "attn_scores": 480, "softmax_stats": 0, "attn_output": 768}


def test_the_activation_count_asks_the_cross_mixer(monkeypatch):
    """A term the cross-attention says it keeps reaches the count, prefixed "cross_": the fold asks the mixer."""
    cfg, _ = _cross()
    base = Attention.saved

    def saved(self, batch, seq, e, kernel, dropout, sources=None):
        out = base(self, batch, seq, e, kernel, dropout, sources)
        return {**out, "probe": 7 * batch * sources} if sources is not None else out

    monkeypatch.setattr(Attention, "saved", saved)
    a = mem.activations(cfg, Workload(batch=2, seq=3, dtype="fp32", src_seq=5))
    assert a.per_layer["cross_probe"] == 7 * 2 * 5


def test_cross_stage_of_the_forward_working_set_by_hand():
    """A decoder-only stack reading S = 50 external states (GPT-2's add_cross_attention), d = 32, 4 heads of 8,
    d_ff = 128, vocab 61, fp32, one sequence of T = 2 tokens. Per target token the self-attention stage is
    3·32 + (96 + 32) = 224 (x, norm, projection; fused QKV, SDPA output), the FFN's 2·32 + 2·128 = 320, the
    head's 2·32 + 61 = 125; the cross-attention's 3·32 + 32 + 32 = 160 per target token (x, norm, projection;
    Q, SDPA output) and K, V 32 + 32 per source token: 2·160 + 50·64 = 3520, the largest stage. With the
    50·32 external states alive throughout: 4 · (1600 + 3520) = 20480 bytes."""
    cfg = tiny(cross_attention=True)
    assert mem.forward_working_set(cfg, Workload(batch=1, seq=2, dtype="fp32", src_seq=50)) == 20480
    att = cfg.architecture.output.kinds()[0][0].cross_attention
    assert att.working_set("flash", 2, sources=50) == 2 * 64 + 50 * 64
    assert att.working_set("math", 2, sources=50) == 2 * (64 + 2 * 4 * 50) + 50 * 64  # scores and softmax
