"""Every supported Hugging Face model type, held against transformers itself: a tiny model built by
transformers from a config object (random weights, nothing downloaded), saved with save_pretrained; its
config.json read by tfcalc. The parameter count must equal transformers' own, and tfcalc's analytic
forward FLOPs must equal what FlopCounterMode counts on transformers' forward (eager attention, so the
scores are two explicit matmuls over the full square, tfcalc's convention)."""

from __future__ import annotations

import math

import pytest
from hf_tiny import ALIASES, CASES, SOURCE, T, inputs, output
from test_qwen3_next import conv_padding, triangular_solves

from tfcalc.count.model import flops as flops_count, params as count
from tfcalc.hf_config import SUPPORTED_MODEL_TYPES
from tfcalc.measure.params import measure_params
from tfcalc.presets import load
from tfcalc.workload import Workload

pytestmark = pytest.mark.filterwarnings("ignore")


def test_every_supported_type_has_a_case():
    import transformers

    types = {getattr(transformers, CASES[name].config).model_type for name in CASES}
    types |= {"gemma3", "llama4"}  # vision-language: tiny checkpoints of their own in tests/test_hf_patterns.py
    types |= {"qwen3_5", "qwen3_5_moe"}  # vision-language: tests/test_qwen3_5.py
    types |= {"kimi_k25"}  # vision-language: tests/test_kimi_k25.py
    types |= {"mamba", "falcon_mamba", "jamba"}  # Mamba-1: tests/model/test_mamba1.py, test_jamba.py
    types |= {"gemma4"}  # vision-language: tests/test_gemma4.py
    types |= {"gemma3n"}  # vision-language: tests/test_gemma3n.py
    # Mamba2 families: tiny checkpoints written by transformers, loaded by load_model, logits compared in
    # tests/model/test_mamba2.py, test_nemotron_h.py and test_granitemoehybrid.py
    types |= {"mamba2", "nemotron_h", "granitemoehybrid"}
    types |= {"kimi_linear"}  # tiny checkpoints of its own (two layouts), every check: tests/test_kimi_linear.py
    types |= {"deepseek_v4"}  # tests/test_deepseek_v4_family.py: its own tiny checkpoint (a hash layer, every kind)
    types |= {"mamba2", "nemotron_h", "granitemoehybrid", "falcon_h1", "zamba2"}  # and test_falcon_h1/zamba2.py
    types |= {"bailing_hybrid"}  # tiny checkpoints of its own (two layouts): tests/test_bailing_hybrid.py
    # a tiny checkpoint of its own (its parameters less transformers' unused zero-expert gate/up, its routing forced
    # for the FLOPs): tests/test_longcat_flash.py
    types |= {"longcat_flash"}
    assert types == set(SUPPORTED_MODEL_TYPES) - set(ALIASES)


@pytest.mark.parametrize("name", list(CASES))
def test_parameters_equal_transformers(saved, name):
    model, folder = saved(name)
    cfg = load(str(folder / "config.json"))
    hf_total = sum(p.numel() for p in model.parameters())  # unique tensors: a tied head counts once
    # ERNIE-4.5's router correction bias is an nn.Parameter (requires_grad false) in transformers, a buffer in
    # tfcalc as DeepSeek-V3's is (tfcalc.hf_config.ernie4_5_moe): E per MoE layer, named and taken off
    hf_total -= sum(p.numel() for n, p in model.named_parameters() if n.endswith("moe_statics.e_score_correction_bias"))
    assert count.total(cfg) == hf_total
    total, breakdown = measure_params(cfg)
    assert total == hf_total and breakdown == count.breakdown(cfg)


def _hf_flops(name: str, model) -> int:
    """FlopCounterMode on transformers' forward, less its rotary-table matmul (inv_freq @ positions:
    tfcalc precomputes those tables and counts no FLOPs for them, a position encoding)."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        model(**inputs(name))
    counts = {path: sum(ops.values()) for path, ops in counter.get_flop_counts().items()}
    rotary = sum(n for path, n in counts.items() if path.endswith(("rotary_emb", "rotary_embedding")))
    return counter.get_total_flops() - rotary


def _every_expert(cfg, tokens: int) -> int:
    """Llama 4's transformers module runs every expert on every token (Llama4TextMoe: routed_in repeats the
    tokens E times, the unchosen ones scaled by sigmoid(-inf) = 0; Llama4TextExperts: one bmm over all E):
    the matmul FLOPs of the E - k experts a token did not choose, which tfcalc's top-k count leaves out."""
    out = 0
    for block, n in cfg.architecture.output.kinds():
        if block.is_moe:
            moe = block.ffn
            per_row = sum(2 * m.n_in * m.n_out for m in moe.expert.linears())
            out += n * (moe.n_expert - moe.top_k) * tokens * per_row
    return out


def _conv_padding(cfg, batch: int) -> int:
    """transformers' short convolution (modeling_lfm2.py, causal_conv1d_fn's torch path) pads K - 1 on both
    sides and drops the last K - 1 outputs: 2·d·K·(K - 1) FLOPs per sequence and conv layer computed and thrown
    away, which tfcalc does not count (tfcalc.architecture.short_conv)."""
    out = 0
    for block, n in cfg.architecture.output.kinds():
        k = getattr(block.mixer, "kernel_size", None)
        out += n * batch * 2 * cfg.d_model * k * (k - 1) if k else 0
    return out


@pytest.mark.parametrize("name", list(CASES))
def test_forward_flops_equal_flop_counter_mode(saved, name):
    model, folder = saved(name)
    cfg = load(str(folder / "config.json"))
    src = SOURCE if CASES[name].inputs in ("seq2seq", "cross") else None
    dense_experts = _every_expert(cfg, 2 * T) if name.startswith("llama4") else 0
    # gated DeltaNet: its triangular solves, which FlopCounterMode does not see, and the convolution outputs
    # transformers drops, which tfcalc does not count, each by hand (tests/test_qwen3_next.py); LFM2's dropped
    # convolution outputs likewise
    hybrid = name.startswith(("qwen3_next", "qwen3_5", "olmo_hybrid"))
    solves, thrown = (triangular_solves(cfg, 2, T), conv_padding(cfg, 2)) if hybrid else (0, 0)
    thrown += _conv_padding(cfg, 2) if name.startswith("lfm2") else 0
    assert (
        flops_count.forward_flops(cfg, Workload(batch=2, seq=T, src_seq=src)) - solves
        == _hf_flops(name, model) - dense_experts - thrown
    )


# ---------- the same function: real weights in tfcalc's own model ----------


def _tfcalc_output(name: str, model, kw):
    import torch

    with torch.no_grad():
        if CASES[name].inputs == "seq2seq":
            out = model(kw["input_ids"], kw["decoder_input_ids"])
        elif CASES[name].inputs == "cross":
            out = model(kw["input_ids"], memory=kw["encoder_hidden_states"])
        else:
            out = model(kw["input_ids"])
    return out


@pytest.mark.parametrize("name", list(CASES))
def test_loaded_checkpoint_computes_what_transformers_computes(saved, name):
    """load_model reads the save_pretrained safetensors into tfcalc's model; in fp32 its outputs (logits,
    or BertModel's hidden states and pooled token) are transformers' within 1e-4 on random ids."""
    import torch

    import tfcalc

    model, folder = saved(name)
    ours = tfcalc.load_model(str(folder))
    kw = inputs(name, seed=7)
    with torch.no_grad():
        ref = model(**kw)
    got = _tfcalc_output(name, ours, kw)
    if isinstance(got, tuple):  # BertModel: (hidden states, pooled first token)
        got, pooled = got
        assert (pooled - ref.pooler_output).abs().max() <= 1e-4
    expected = output(name, ref)
    assert got.shape == expected.shape
    assert (got - expected).abs().max() <= 1e-4
    assert expected.abs().max() > 0.1  # outputs of a size where a wrong weight would show


@pytest.mark.parametrize("name", ["smollm3", "olmo2", "glm4", "gemma3_text", "llama4_text"])
def test_params_of_the_folder_counts_the_elements_in_its_files(saved, cli, name):
    """`tfcalc params FOLDER` reads the safetensors headers: checkpoint_total is the elements stored there
    (a tied head stored once), equal to the analytic and empirical counts."""
    from safetensors import safe_open

    model, folder = saved(name)
    stored = 0
    for file in folder.glob("*.safetensors"):
        with safe_open(str(file), framework="pt") as f:
            stored += sum(math.prod(f.get_slice(k).get_shape()) for k in f.keys())
    data = cli("params", str(folder), "--json").json()
    assert data["checkpoint_total"] == stored == data["analytic_total"] == data["empirical_total"]


def test_bench_times_the_loaded_weights(saved, cli):
    _, folder = saved("llama")
    r = cli("bench", str(folder), "--weights", str(folder), "--seq", "8", "--warmup", "0", "--repeat", "1",
            "--matmul-size", "64", "--json")
    assert r.code == 0, r.err
    data = r.json()
    assert data["weights"] == str(folder) and data["tokens_per_s"] > 0
    other = cli("bench", "gpt2", "--weights", str(folder), "--seq", "8")
    assert other.code == 2 and "its config.json is another model" in other.err


# ---------- the KV cache transformers keeps ----------


def _hf_cache_bytes(cache) -> int:
    """Bytes of every K and V tensor a transformers cache holds (its self-attention layers), and of a linear
    attention layer's convolution and recurrent states (LinearAttentionLayer: {state index: tensor} each), and
    a sparse attention layer's indexer keys (StaticIndexedLayer)."""
    layers = getattr(cache, "self_attention_cache", cache).layers
    tensors = [getattr(layer, name, None) for layer in layers for name in ("keys", "values", "indexer_keys")]
    tensors += [t for layer in layers for name in ("conv_states", "recurrent_states")
                for t in (getattr(layer, name, None) or {}).values()]
    return sum(t.numel() * t.element_size() for t in tensors if t is not None)


@pytest.mark.parametrize("name", [n for n in CASES if CASES[n].inputs == "ids" and CASES[n].output == "logits"
                                  and not n.startswith(("bert", "roberta"))  # an encoder keeps no cache
                                  # modeling_falcon.py (_split_heads, new_decoder_architecture) broadcasts K and V
                                  # to every query head before caching them: H, not the G KV heads tfcalc counts
                                  and n != "falcon-40b-like"
                                  # conv states beside K and V: tests/test_hf_lfm2.py
                                  and not n.startswith("lfm2")
                                  # MiniMaxCache of its own (no StaticCache): tests/test_minimax.py
                                  and n != "minimax"])
def test_kv_bytes_equal_the_cache_transformers_keeps(saved, name):
    """After a forward pass of T tokens into transformers' StaticCache of T positions, its tensors hold what
    tfcalc counts (and tfcalc.model allocates): every position in a full layer, a ring of W slots in a
    sliding-window layer and of C in a chunked one (StaticSlidingWindowLayer, cache_utils.py). Its
    DynamicCache keeps one slot less in those (W - 1 between steps), and the same in a full layer."""
    import torch
    import transformers

    from tfcalc.count.model.memory import kv_cache_bytes

    model, folder = saved(name)
    cfg = load(str(folder / "config.json"))
    expected = kv_cache_bytes(cfg, Workload(batch=2, seq=T, dtype="fp32"))
    with torch.no_grad():
        static = transformers.StaticCache(config=model.config, max_cache_len=T)
        model(**inputs(name), past_key_values=static, use_cache=True)
        dynamic = model(**inputs(name), use_cache=True).past_key_values
    assert _hf_cache_bytes(static) == expected
    rings = sum(b.attention.kv_elements() * (b.attention.kv_positions(T) < T)
                for b in cfg.architecture.output.layers() if hasattr(b.attention, "kv_positions"))
    assert _hf_cache_bytes(dynamic) == expected - 2 * 4 * rings  # batch 2, fp32: one slot per ring layer
