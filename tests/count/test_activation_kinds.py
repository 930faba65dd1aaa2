"""Activations folded over the per-layer description (tfcalc.count.model.activations over cfg.architecture):
layers that differ -- windows, NoPE layers, V head widths, heads, FFN widths, dense first layers, a mixture
of experts every n-th layer, in a decoder, an encoder or both stacks of an encoder-decoder -- each keep
their own terms, checked against the bytes the real module's autograd saves (saved-tensor hooks, fp32,
CPU) and against a hand derivation of Korthikanti et al. 2022's terms per layer kind."""

from __future__ import annotations

import dataclasses

import torch
from conftest import MIXTRAL_LIKE, configs, tiny
from deepseek_configs import latent_configs
from hypothesis import HealthCheck, given, settings, strategies as st

from tfcalc.architecture import Architecture, Norm, Stack, compress
from tfcalc.config import replace
from tfcalc.count.model.activations import activations
from tfcalc.count.training import rank_activations as ra
from tfcalc.measure.memory import forward_loss
from tfcalc.model import build_model
from tfcalc.workload import Layout, Workload


def with_architecture(cfg, arch: Architecture):
    """cfg describing ``arch`` instead of what its flat fields build (as tests/model/test_mixed_layers.py)."""
    out = replace(cfg, name=f"{cfg.name} (mixed)")
    out.__dict__["architecture"] = arch
    return out


def remix(arch: Architecture, draw) -> Architecture:
    """Each layer redrawn where flat fields cannot say it: its window (causal layers), sinks, its RoPE base or
    none (NoPE), its query heads and head width, its FFN width (dense FFNs). (V heads of their own width are
    left out: SDPA's fused CPU kernel needs V as wide as Q and K, so the module runs another kernel.)"""
    stacks = []
    for stack in arch.stacks:
        layers = []
        for block in stack.layers():
            a, changes = block.attention, {}
            if a.causal:
                changes["window"] = draw(st.sampled_from([None, 1, 3]), label="window")
                changes["chunk"] = None  # a window replaces the flat fields' chunk (one or the other per layer)
            if not stack.name:  # sinks (gpt-oss): written out, one more logit per softmax row
                changes["sinks"] = draw(st.booleans(), label="sinks")
            head_dim = draw(st.sampled_from([a.head_dim, 2, 6]), label="head_dim")
            changes["head_dim"] = head_dim
            if stack.embeddings.positions not in ("alibi", "relative"):  # their biases have the stack's heads
                changes["n_head"] = a.n_kv_head * draw(st.integers(1, 3), label="group")
            if a.qk_norm is not None:
                changes["qk_norm"] = Norm(a.qk_norm.kind, head_dim, a.qk_norm.bias, a.qk_norm.eps)
            if stack.embeddings.positions == "rope":
                theta = draw(st.sampled_from([None, 10_000.0]), label="rope base")
                changes.update(rope_theta=theta, rope_dim=0 if theta is None else head_dim)
            ffn = block.ffn
            if not block.is_moe:
                ffn = dataclasses.replace(ffn, d_ff=draw(st.sampled_from([ffn.d_ff, 3, 10]), label="d_ff"))
            layers.append(dataclasses.replace(block, attention=dataclasses.replace(a, **changes), ffn=ffn))
        stacks.append(Stack(compress(layers), stack.embeddings, stack.final_norm, stack.name))
    return Architecture(arch.kind, tuple(stacks), arch.head)


def _saved(cfg, batch: int, seq: int, src_seq: int | None) -> int:
    torch.manual_seed(0)
    model = build_model(cfg, "cpu").train()
    idx = torch.randint(0, cfg.vocab_size, (batch, seq))
    src_idx = torch.randint(0, cfg.vocab_size, (batch, src_seq)) if cfg.arch == "encoder-decoder" else None
    memory = torch.randn(batch, src_seq, cfg.d_model) if cfg.cross_attention else None
    return forward_loss(model, idx, count_saved=True, src_idx=src_idx, memory=memory)[1]


def _draw_lengths(cfg, batch, data) -> tuple[int, int | None]:
    seq = data.draw(st.integers(1, cfg.max_seq_len), label="seq")
    has_source = cfg.arch == "encoder-decoder" or cfg.cross_attention
    src_seq = data.draw(st.integers(1, cfg.max_seq_len), label="src_seq") if has_source else None
    return seq, src_seq  # any capacity: the saved tensors do not depend on which pairs the routing drops


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cfg=configs(mixed=True), batch=st.integers(1, 3), data=st.data())
def test_dense_and_moe_layers_keep_what_autograd_saves(cfg, batch, data):
    """Dense first layers and MoE every n-th layer, in every stack (an encoder-decoder's encoder too)."""
    seq, src_seq = _draw_lengths(cfg, batch, data)
    assert (
        _saved(cfg, batch, seq, src_seq)
        == activations(cfg, Workload(batch=batch, seq=seq, dtype="fp32", src_seq=src_seq)).stored
    )


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(base=configs(mixed=True), batch=st.integers(1, 3), data=st.data())
def test_per_layer_widths_windows_and_nope_keep_what_autograd_saves(base, batch, data):
    """Layers whose heads, head and V widths, FFN widths, windows and RoPE differ layer by layer."""
    cfg = with_architecture(base, remix(base.architecture, data.draw))
    seq, src_seq = _draw_lengths(cfg, batch, data)
    assert (
        _saved(cfg, batch, seq, src_seq)
        == activations(cfg, Workload(batch=batch, seq=seq, dtype="fp32", src_seq=src_seq)).stored
    )


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cfg=latent_configs(), batch=st.integers(1, 3), data=st.data())
def test_latent_attention_keeps_what_autograd_saves(cfg, batch, data):
    """DeepSeek-shaped models (latent attention with or without a compressed Q, V heads as wide as Q's or
    not, one head or several, dense first layers, DeepSeek's routing): the fold equals autograd's saved
    tensors (it was 0.79x of them before the latent terms, tfcalc.count.model.activation_terms step 11)."""
    seq = data.draw(st.integers(1, cfg.max_seq_len), label="seq")
    assert _saved(cfg, batch, seq, None) == activations(cfg, Workload(batch=batch, seq=seq, dtype="fp32")).stored


def test_hand_derived_latent_attention_terms():
    """Per token, fp32 (e = 4), h = 32, H = 4 heads, c_q = 16, c = 12, h_n = 8, h_r = 4, h_v = 8 (so SDPA runs
    its math kernel on CPU), batch 2, seq 5, RMSNorm: Q latent norm 4·2·16 + 4 = 132 and W_qb's input 64;
    KV latent norm 4·2·12 + 4 = 100 plus the rest of W_kva's output it views, 4·4 = 16, and W_kvb's input 48:
    "latent" 360. Q and K 2·4·4·12 = 384, V 4·4·8 = 128: "qkv" 512; softmax output 4·4·5 = 80; output 128.
    With h_v = 12 the fused kernel runs: V a view of W_kvb's output 4·4·(8 + 12) = 320, log-sum-exp 16."""
    from tfcalc.architecture import LatentAttention
    from tfcalc.count.model.activation_terms import latent_terms

    att = LatentAttention(d_model=32, n_head=4, kv_lora_rank=12, qk_nope_head_dim=8, qk_rope_head_dim=4,
                          v_head_dim=8, q_lora_rank=16)
    assert latent_terms(att, 2, 5, 4, "math") == {"latent": 360, "rope_qk": 0, "attn_output": 128, "qkv": 512,
                                                  "attn_scores": 80, "softmax_stats": 0}
    wide = dataclasses.replace(att, v_head_dim=12)
    assert latent_terms(wide, 2, 5, 4, "flash") == {"latent": 360, "rope_qk": 0, "attn_output": 192,
                                                    "qkv": 384 + 320, "attn_scores": 0, "softmax_stats": 16}


def test_an_encoder_decoders_dense_encoder_layers():
    """The case the flat fields got wrong: an encoder-decoder with first_dense_layers kept MoE terms for
    every encoder layer (only the decoder's layers were told apart)."""
    cfg = tiny(arch="encoder-decoder", n_layer=3, d_ff=8, dense_d_ff=24, first_dense_layers=1,
               **{**MIXTRAL_LIKE, "pos_encoding": "learned"})
    acts = activations(cfg, Workload(batch=2, seq=5, dtype="fp32", src_seq=7))
    assert _saved(cfg, 2, 5, 7) == acts.stored
    encoder = [acts.kinds_in(i, i + 1)[0][0] for i in range(3)]
    assert "moe_routing" not in encoder[0] and "moe_routing" in encoder[1] and encoder[1] is encoder[2]


def test_hand_derived_terms_of_a_dense_and_a_moe_layer():
    """Per token, bf16 (e = 2), fused kernel, h = 16, 4 query heads and 2 KV heads of 4 channels (q = 16,
    k = v = 8), RoPE, RMSNorm, SwiGLU; layer 0 dense (f = 32), layer 1 a mixture of 4 experts of f = 8,
    top 2 (Korthikanti et al. 2022's terms as tfcalc.count.model.activation_terms generalizes them):

    attention, both layers: norm 2·4·16 + 4 = 132; QKV input 2·16 = 32; fused QKV 2·(16 + 8 + 8) = 64;
      rotated Q and K 2·(16 + 8) = 48; log-sum-exp 4·4 = 16; output 2·16 = 32: 324;
    dense FFN: norm 132, input 32, [gate | up], act, product 4·2·32 = 256: 420, layer 744;
    MoE FFN: norm 132, input 32, per routed copy 4·2·8 hidden, 3·2·16 + 2 rows and weight, for k = 2:
      128 + 196, fp32 softmax of the 2 chosen logits 8: 496, layer 820.
    """
    cfg = tiny(n_layer=2, d_model=16, n_head=4, n_kv_head=2, n_expert=4, n_expert_active=2, d_ff=8, dense_d_ff=32,
               first_dense_layers=1, gated_ffn=True, activation="silu", pos_encoding="rope", norm="rmsnorm",
               norm_bias=False, attn_bias=False, ffn_bias=False)
    B, T = 3, 5
    acts = activations(cfg, Workload(batch=B, seq=T, dtype="bf16"), "flash")
    assert sum(acts.layer_terms(0).values()) == B * T * 744
    assert sum(acts.layer_terms(1).values()) == B * T * 820
    assert acts.layer_terms(1)["moe_routing"] == B * T * (2 * (3 * 2 * 16 + 2) + 4 * 2)


def test_tensor_parallel_splits_a_dense_layers_ffn_but_not_the_experts():
    """Experts stay whole on every TP rank; the dense layers of the same model split their FFN as any."""
    cfg = tiny(n_layer=2, d_ff=8, dense_d_ff=32, first_dense_layers=1, **MIXTRAL_LIKE)
    acts = activations(cfg, Workload(batch=1, seq=8, dtype="bf16"), "flash")
    L = Layout(tp=2, seq=8, global_batch=1)
    dense, moe = acts.layer_terms(0), acts.layer_terms(1)
    assert ra.share("ffn_hidden", dense["ffn_hidden"], acts, L, moe=False) == dense["ffn_hidden"] // 2
    assert ra.share("ffn_hidden", moe["ffn_hidden"], acts, L, moe=True) == moe["ffn_hidden"]
    split = sum(ra.share(k, v, acts, L, moe=False) for k, v in dense.items())
    assert ra.layer_bytes(acts, L, dense) == split


def test_non_matmul_work_of_layers_that_differ_by_hand():
    """Non-matmul FLOPs (tfcalc.count.model.non_matmul) folded over two different layers, B = 1, T = 4, d = 16,
    LayerNorm with bias (7 per element), GELU (5 per element), no biases in the Linears:
    layer 0: 4 query heads, 2 KV heads of 8 channels, RoPE, FFN 32 wide;
    layer 1: a NoPE layer, 2 query heads, 1 KV head of 8 channels, FFN 16 wide.
    softmax 5·(4·4·4 + 2·4·4) = 480; norms 7·(4·16)·2 per block·2 layers = 1,792; activation
    5·4·(32 + 16) = 960; residual adds 4·16·2·2 = 256; RoPE 3·4·(4 + 2)·8 = 576 (layer 0 only); final
    norm 7·64 = 448."""
    from tfcalc.count.model.non_matmul import non_matmul_entries

    base = tiny(d_model=16, n_head=4, n_kv_head=2, d_head=8, pos_encoding="rope", d_ff=32, attn_bias=False,
                ffn_bias=False)
    first = next(iter(base.architecture.output.layers()))
    second = dataclasses.replace(
        first, attention=dataclasses.replace(first.attention, n_head=2, n_kv_head=1, rope_theta=None, rope_dim=0),
        ffn=dataclasses.replace(first.ffn, d_ff=16))
    stack = base.architecture.output
    arch = Architecture("decoder", (Stack(compress([first, second]), stack.embeddings, stack.final_norm, ""),),
                        base.architecture.head)
    kinds: dict[str, int] = {}
    for e in non_matmul_entries(with_architecture(base, arch), 1, 4):
        kinds[e.component] = kinds.get(e.component, 0) + e.total
    assert kinds == {"softmax": 480, "norms": 1_792, "activation": 960, "residual": 256, "rope": 576,
                     "final_norm": 448}

def _two_layers(window0=None, window1=None):
    """Layer 0: 4 query heads and 2 KV heads of 8 channels; layer 1: 2 and 1; d = 16, FFN 128 wide (ReLU)."""
    base = tiny(d_model=16, n_head=4, n_kv_head=2, d_head=8, d_ff=128, activation="relu")
    first = next(iter(base.architecture.output.layers()))
    layers = [dataclasses.replace(first, attention=dataclasses.replace(first.attention, window=window0)),
              dataclasses.replace(first, attention=dataclasses.replace(first.attention, n_head=2, n_kv_head=1,
                                                                         window=window1))]
    stack = base.architecture.output
    return with_architecture(base, Architecture("decoder", (Stack(compress(layers), stack.embeddings,
                                                                    stack.final_norm, ""),), base.architecture.head))


def test_crossover_of_layers_with_other_heads_by_hand():
    """Per sequence, scores a·T² with a = 2·H·(h + h_v): 128 and 64, mean 96; FFN c·T, c = 2·2·16·128 = 8,192;
    projections p·T: 2·16·(32 + 16 + 16) + 2·32·16 = 3,072 and 2·16·(16 + 8 + 8) + 2·16·16 = 1,536, mean 2,304.
    Full square: T >= 8,192 / 96 = 85.3 -> 86, T >= (8,192 − 2,304) / 96 = 61.3 -> 62; causal (T + 1 >= twice
    those): 170 and 122. Both layers windowed (4 and 8 keys): the scores grow like (128·4 + 64·8)·T = 1,024·T,
    under the FFN's 2·8,192·T: never."""
    from tfcalc.count.model.crossover import crossover_seq

    cfg = _two_layers()
    assert (crossover_seq(cfg).scores_vs_ffn, crossover_seq(cfg).attention_vs_ffn) == (86, 62)
    causal = crossover_seq(cfg, causal=True)
    assert (causal.scores_vs_ffn, causal.attention_vs_ffn) == (170, 122)
    windowed = crossover_seq(_two_layers(4, 8), causal=True)
    assert (windowed.scores_vs_ffn, windowed.attention_vs_ffn) == (None, None)
    one_full = crossover_seq(_two_layers(4, None), causal=True)  # a full layer's T² always gets there
    assert one_full.scores_vs_ffn is not None and one_full.scores_vs_ffn > 170


def test_xielu_keeps_what_autograd_saves():
    """Apertus' xIELU MLP keeps five tensors of the hidden width (activation_terms, step 7): its input and
    output, α_p·x, expm1(min(x, eps)) and expm1(...) − x; autograd also saves the two softplus'd scalars, 2·e
    bytes a layer whatever the tokens, which the per-token terms leave out: added here by hand."""
    base = dict(pos_encoding="rope", norm="rmsnorm", norm_bias=False, attn_bias=False, ffn_bias=False,
                gated_ffn=False, d_ff=48, n_kv_head=2, qk_norm=True, activation="xielu")
    for batch, seq in ((1, 8), (2, 5)):
        cfg = tiny(**base)
        stored = activations(cfg, Workload(batch=batch, seq=seq, dtype="fp32")).stored
        assert _saved(cfg, batch, seq, None) == stored + 2 * 4 * cfg.n_layer
        plain = activations(tiny(**dict(base, activation="silu")), Workload(batch=batch, seq=seq, dtype="fp32"))
        assert stored - plain.stored == 3 * 4 * batch * seq * 48 * cfg.n_layer
