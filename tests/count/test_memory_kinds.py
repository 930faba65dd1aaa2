"""Memory of the new kinds: the cross-attention KV cache, an encoder's lack of one, a MoE's routed
activations; each activation formula against the bytes autograd really saves."""

import pytest
import torch
from conftest import BERT_LIKE, MIXTRAL_LIKE, VASWANI_LIKE, assert_one_line_error, tiny

from tfcalc.count.model import memory as mem
from tfcalc.measure.memory import forward_loss
from tfcalc.model import build_model
from tfcalc.presets import load
from tfcalc.workload import Workload


def test_encoder_decoder_kv_cache_adds_the_cross_attention_cache():
    # transformer-base, bf16: 6 decoder layers, 8 heads of 64 (k = 512), 2 bytes per element.
    cfg, B, T, S = load("transformer-base"), 2, 100, 300
    own, cross = 2 * B * T * 6 * 512 * 2, 2 * B * S * 6 * 512 * 2
    assert mem.cross_kv_cache_bytes(cfg, Workload(batch=B, seq=S, dtype="bf16")) == cross == 7_372_800
    assert mem.kv_cache_bytes(cfg, Workload(batch=B, seq=T, dtype="bf16", src_seq=S)) == own + cross
    assert mem.kv_cache_bytes(cfg, Workload(batch=B, seq=T, dtype="bf16")) == 2 * own  # the source length defaults to T
    assert (
        mem.inference_bytes(cfg, Workload(batch=B, seq=T, dtype="bf16", src_seq=S))
        == mem.weights_bytes(cfg, "bf16") + own + cross
    )


def test_an_encoder_keeps_no_kv_cache_and_a_moe_the_dense_one():
    assert mem.kv_cache_bytes(load("bert-base"), Workload(batch=8, seq=512, dtype="bf16")) == 0
    assert mem.cross_kv_cache_bytes(load("llama2-7b"), Workload(batch=1, seq=4096, dtype="bf16")) == 0
    mistral, mixtral = load("mistral-7b"), load("mixtral-8x7b")
    # Mistral's window of 4,096 keeps a ring of W = 4,096 slots (transformers' StaticSlidingWindowLayer), at
    # 4,096 tokens all of them, as Mixtral (no window) does
    assert mem.kv_cache_bytes(mixtral, Workload(batch=1, seq=4096, dtype="bf16")) == 2**29
    assert mem.kv_cache_bytes(mistral, Workload(batch=1, seq=4096, dtype="bf16")) == 2**29
    assert mem.kv_cache_bytes(mistral, Workload(batch=1, seq=8192, dtype="bf16")) == 2**29


def test_moe_keeps_k_experts_worth_of_hidden_and_the_routing():
    cfg, B, T, e = tiny(**MIXTRAL_LIKE), 2, 8, 4
    dense = tiny(**{**MIXTRAL_LIKE, "n_expert": None, "n_expert_active": None})
    moe, base = (
        mem.activations(cfg, Workload(batch=B, seq=T, dtype="fp32")).per_layer,
        mem.activations(dense, Workload(batch=B, seq=T, dtype="fp32")).per_layer,
    )
    h, f, k = cfg.d_model, cfg.ffn_dim, 2
    assert moe["ffn_hidden"] == k * base["ffn_hidden"] == k * B * T * 4 * e * f  # SwiGLU: 4 hidden tensors
    assert moe["moe_routing"] == B * T * (k * (3 * e * h + e) + 4 * k)


def _saved(cfg, B, T, S=None, dtype=torch.float32):
    torch.manual_seed(0)
    model = build_model(cfg, "cpu", dtype).train()
    idx = torch.randint(0, cfg.vocab_size, (B, T))
    src = None if S is None else torch.randint(0, cfg.vocab_size, (B, S))
    return forward_loss(model, idx, count_saved=True, src_idx=src)[1]


@pytest.mark.parametrize(
    "changes, S",
    [(BERT_LIKE, None), ({**BERT_LIKE, "lm_head": True, "final_norm": True}, None), (MIXTRAL_LIKE, None),
     ({**MIXTRAL_LIKE, "activation": "relu", "gated_ffn": False}, None), (VASWANI_LIKE, 3), (VASWANI_LIKE, 13),
     ({**VASWANI_LIKE, **MIXTRAL_LIKE, "tie_encoder_embedding": False, "embedding_norm": True}, 7),
     ({**VASWANI_LIKE, "pos_encoding": "alibi", "norm_placement": "pre", "final_norm": True}, 11)],
    ids=["bert", "bert-with-head", "mixtral", "moe-relu", "vaswani-short-source", "vaswani-long-source",
         "moe-encoder-decoder", "alibi-encoder-decoder"],
)
def test_activation_formula_equals_what_autograd_saves_for_each_kind(changes, S):
    cfg, B, T = tiny(**changes), 2, 9
    assert _saved(cfg, B, T, S) == mem.activations(cfg, Workload(batch=B, seq=T, dtype="fp32", src_seq=S)).stored


def test_encoder_decoder_activations_by_stack():
    cfg, B, T, S = tiny(**VASWANI_LIKE, n_encoder_layer=3), 2, 6, 10
    a = mem.activations(cfg, Workload(batch=B, seq=T, dtype="fp32", src_seq=S))
    assert (
        a.n_encoder_layer == 3
        and a.encoder_layer
        == mem.activations(tiny(**{**VASWANI_LIKE, "arch": "encoder"}), Workload(batch=B, seq=S, dtype="fp32")).layer
    )
    assert a.per_layer["cross_qkv"] == 4 * (B * T * cfg.q_dim + B * S * 2 * cfg.kv_dim)
    assert a.head["encoder_output"] == 4 * B * S * cfg.d_model
    full = mem.activations(cfg, Workload(batch=B, seq=T, dtype="fp32", src_seq=S), recompute="full")
    assert full.stored == 2 * 4 * B * T * 32 + 3 * 4 * B * S * 32 + sum(a.head.values())


def test_memory_cli_encoder_decoder_and_encoder(cli):
    data = cli("memory", "transformer-base", "--seq", "100", "--src-seq", "300", "--json").json()
    assert data["src_seq"] == 300 and data["cross_kv_cache_bytes"] == 7_372_800 // 2
    assert data["kv_cache_bytes"] == 2 * 100 * 6 * 512 * 2 + data["cross_kv_cache_bytes"]
    table = cli("memory", "transformer-base", "--seq", "100", "--src-seq", "300", "--training").out
    assert "of which cross-attention" in table and "per encoder layer" in table and "S = 300" in table
    bert = cli("memory", "bert-base", "--seq", "128", "--json").json()
    assert bert["kv_cache_bytes"] == 0 and bert["activations"]["loss_gradient_bytes"] == 0
    assert "an encoder generates no tokens" in cli("memory", "bert-base", "--seq", "128").out


def test_memory_cli_measures_an_encoder_decoder_on_cpu(cli):
    args = ("memory", "transformer-base", "--set", "n_layer=1", "--set", "n_encoder_layer=1", "--set", "d_model=64",
            "--set", "d_head=8", "--set", "d_ff=128", "--set", "vocab_size=500", "--seq", "16", "--src-seq", "24",
            "--dtype", "fp32", "--training", "--measure", "--json")
    data = cli(*args).json()
    assert data["measured_saved_activation_bytes"] == data["activations"]["stored_bytes"]  # to the byte
    assert data["measured_peak_bytes"] > 0  # the RSS peak of so small a model is mostly allocator noise


@pytest.mark.parametrize(
    "args, message",
    [(["memory", "gpt2", "--src-seq", "8"],
      "--src-seq applies to encoder-decoder models only, or to stacks with cross_attention (gpt2 is decoder)"),
     (["bench", "transformer-base"], "encoder-decoders are not supported yet")],
)
def test_bad_input_for_the_new_kinds(cli, args, message):
    assert_one_line_error(cli(*args), message)
