"""The per-layer description (tfcalc.architecture): its shape for the presets, the per-layer patterns of
the flat front end, each component's validation, and mixed layers counted against the module on meta."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter

import pytest
from conftest import MIXTRAL_LIKE, tiny
from hypothesis import assume, given, settings, strategies as st

from tfcalc.architecture import FFN, Attention, Block, MoE, Norm, Run, compress
from tfcalc.architecture.flat import is_moe_layer
from tfcalc.architecture.patterns import layer_kind
from tfcalc.count.model import flops, params as count
from tfcalc.errors import InputError
from tfcalc.measure.params import measure_params
from tfcalc.presets import load, preset_names
from tfcalc.workload import Workload


@pytest.mark.parametrize("name", preset_names(), ids=str)
def test_every_preset_describes_every_layer(name):
    cfg = load(name)
    arch = cfg.architecture
    assert arch.output.n_layer == cfg.n_layer and arch.kind == cfg.arch
    assert len(arch.stacks) == (2 if cfg.arch == "encoder-decoder" else 1)
    for i, block in enumerate(arch.output.layers()):
        a = block.attention
        assert block.is_moe == is_moe_layer(cfg, i)  # DeepSeek-V3: the first 3 layers dense
        if cfg.linear_mixer is not None and layer_kind(cfg, i).local:  # a linear-attention layer: a fixed state
            assert a.state() and not any(t.per_token for t in a.state())
            continue
        # a mixer without attention heads (LFM2's short convolution, Mamba2's M, an FFN-alone layer's empty slot)
        if not hasattr(a, "n_head") or (cfg.hybrid_pattern is not None and cfg.hybrid_pattern[i] != "*"):
            continue
        assert a.window == (cfg.layer_window(i) if cfg.arch != "encoder" else None)
        expected = (cfg.n_head, cfg.kv_heads, cfg.head_dim)
        if cfg.global_d_head is not None and a.window is None:  # Gemma 4's global layers: wider heads, fewer K/V
            expected = (cfg.n_head, cfg.global_n_kv_head or cfg.kv_heads, cfg.global_d_head)
        assert (a.n_head, a.n_kv_head, a.head_dim) == expected
        assert block.is_moe == is_moe_layer(cfg, i)  # DeepSeek-V3: the first 3 layers dense
        assert (block.cross_attention is not None) == (cfg.arch == "encoder-decoder")
    assert arch is cfg.architecture  # built once


def test_gemma2_is_one_run_of_a_local_global_pair():
    arch = load("gemma-2-9b").architecture
    (run,) = arch.output.runs
    assert run.repeat == 21 and [b.attention.window for b in run.pattern] == [4096, None]
    assert arch.output.n_layer == 42 and len(arch.output.kinds()) == 2


def test_compress_finds_the_longest_cover_and_the_shortest_pattern():
    n = Norm("rmsnorm", 8, False)
    dense = Block(Attention(8, 2, 2, 4), FFN(8, 16), n)
    moe = Block(Attention(8, 2, 2, 4), MoE(FFN(8, 4), 4, 2), n)
    assert compress([dense] * 3 + [moe] * 5) == (Run((dense,), 3), Run((moe,), 5))
    assert compress([dense, moe] * 4) == (Run((dense, moe), 4),)
    assert compress([dense, moe, moe]) == (Run((dense,), 1), Run((moe,), 2))


def test_first_dense_layers_then_experts():
    """DeepSeek-V3's first_k_dense_replace, tiny: 4 layers, the first 1 dense (d_ff 48), the other 3 each a
    router and 4 SwiGLU experts of width 16. By hand (d = 32, no biases, RMSNorm without bias):
    a dense gated FFN is 3·32·48 = 4,608; an expert 3·32·16 = 1,536; a MoE layer 4·1,536 + 4·32 (router)
    = 6,272. FFN parameters: 4,608 + 3·6,272 = 23,424."""
    cfg = tiny(n_layer=4, first_dense_layers=1, dense_d_ff=48, d_ff=16, **MIXTRAL_LIKE)
    moe = [b.is_moe for b in cfg.architecture.output.layers()]
    assert moe == [False, True, True, True]
    assert count.group_totals(cfg, count.breakdown(cfg))["ffn"] == 23_424
    total, breakdown = measure_params(cfg)
    assert total == count.total(cfg) and breakdown == count.breakdown(cfg)
    # up alone (gate is its own key): one dense layer 32·48, three MoE layers of 4 experts 32·16
    assert breakdown["ffn_up_weight"] == 32 * 48 and breakdown["expert_ffn_up_weight"] == 3 * 4 * 32 * 16


def test_moe_every_interleaves_as_llama4():
    """Llama 4's interleave_moe_layer_step 2: layers 1, 3, ... have the experts (modeling_llama4.py)."""
    cfg = tiny(n_layer=4, moe_every=2, **MIXTRAL_LIKE)
    assert [b.is_moe for b in cfg.architecture.output.layers()] == [False, True, False, True]
    assert cfg.architecture.output.runs[0].repeat == 2
    total, breakdown = measure_params(cfg)
    assert total == count.total(cfg) and breakdown == count.breakdown(cfg)
    dense = 3 * 32 * cfg.ffn_dim  # default dense width: d_ff
    assert breakdown["ffn_down_weight"] * 3 == 2 * dense


def test_patterns_load_from_yaml_fields_and_set_keys():
    cfg = load("mixtral-8x7b", ["first_dense_layers=3", "dense_d_ff=18432"])
    layers = list(cfg.architecture.output.layers())
    assert [b.is_moe for b in layers[:4]] == [False, False, False, True]
    assert layers[0].ffn.d_ff == 18432 and layers[3].ffn.expert.d_ff == 14336
    # 3 layers lose 8 experts and the router and gain one dense FFN 18432 wide
    base = count.total(load("mixtral-8x7b"))
    assert count.total(cfg) == base - 3 * (8 * 3 * 4096 * 14336 + 8 * 4096) + 3 * 3 * 4096 * 18432


@pytest.mark.parametrize("changes, message", [
    (dict(first_dense_layers=1), "first_dense_layers applies to a mixture of experts only"),
    (dict(moe_every=2), "moe_every applies to a mixture of experts only"),
    (dict(first_dense_layers=2, **MIXTRAL_LIKE), "must be less than the depth"),
    (dict(moe_every=3, **MIXTRAL_LIKE), "must be at most n_layer"),
    (dict(dense_d_ff=8, **MIXTRAL_LIKE), "dense_d_ff is the width of the dense layers"),
    (dict(first_dense_layers=0, **MIXTRAL_LIKE), "must be positive"),
], ids=["dense-first", "dense-every", "all-dense", "every-too-big", "width-alone", "zero"])
def test_pattern_fields_fail_with_one_line(changes, message):
    with pytest.raises(InputError, match=message) as e:
        tiny(**changes)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("build, message", [
    (lambda: Attention(8, 3, 2, 4), "multiple of n_kv_head"),
    (lambda: Attention(8, 2, 2, 4, causal=False, window=4), "sliding window applies to causal"),
    (lambda: Attention(8, 2, 2, 4, rope_theta=1e4, rope_dim=3), "must be even"),
    (lambda: MoE(FFN(8, 4), 2, 3), "must not exceed n_expert"),
    (lambda: MoE(FFN(8, 4), 2, 1, shared_gate=True), "needs a shared expert"),
    (lambda: Norm("rmsnorm", 8, True), "rmsnorm has no bias"),
    (lambda: FFN(8, 0), "positive widths"),
    (lambda: Block(Attention(8, 2, 2, 4), FFN(8, 4), Norm("layernorm", 8), "post", "shared_norm"),
     "needs norm_placement"),
], ids=["heads", "window", "rope", "top-k", "shared-gate", "rms-bias", "ffn-width", "parallel-post"])
def test_each_component_validates_itself(build, message):
    with pytest.raises(InputError, match=message):
        build()


def test_kv_elements_fold_the_layers():
    """Gemma 2 at 8,192 tokens: 21 windowed layers keep a ring of W = 4,096 slots (transformers'
    StaticSlidingWindowLayer), 21 full ones 8,192; each position 2 · 8 · 256 = 4,096 elements (K and V of
    8 KV heads of 256)."""
    arch = load("gemma-2-9b").architecture
    assert arch.kv_elements(8192) == 21 * 4096 * 4096 + 21 * 8192 * 4096
    assert load("bert-base").architecture.kv_elements(512) == 0


def test_the_package_imports_no_torch():
    code = "import sys, tfcalc.architecture, tfcalc.config; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "False"


def test_mixed_layers_flops_and_non_matmul_by_hand():
    """The tiny DeepSeek-like model above, B = 2 sequences of T = 5 tokens (10 token rows, d = 32):
    the dense layer's gated FFN 2·10·3·32·48 = 92,160; each MoE layer's router 2·10·32·4 = 2,560 and its
    top-2 experts 2·(2·10)·3·32·16 = 61,440: FFN FLOPs 92,160 + 3·64,000 = 284,160. The activation (silu
    and the gate product, 4 + 1 per element) runs on 10·48 elements in the dense layer and 20·16 in each
    MoE layer: 5·(480 + 3·320) = 7,200."""
    cfg = tiny(n_layer=4, first_dense_layers=1, dense_d_ff=48, d_ff=16, **MIXTRAL_LIKE)
    b = flops.breakdown(cfg, Workload(batch=2, seq=5))
    assert b.totals()["ffn"] == 284_160
    assert b.non_matmul_by_kind()["activation"] == 7_200


@settings(max_examples=60, deadline=None)
@given(n_layer=st.integers(1, 40), first=st.integers(0, 6), every=st.sampled_from([None, 1, 2, 3]),
       full=st.sampled_from([None, 2, 3, 6]), data=st.data())
def test_runs_in_closed_form_equal_the_layer_by_layer_rule(n_layer, first, every, full, data):
    """The runs built without listing layers (architecture.flat) hold, layer by layer, what the per-layer
    rules say (is_moe_layer, cfg.layer_window); a range's kinds counted in closed form equal the count
    of the listed layers."""
    assume(first < n_layer and (every or 1) <= n_layer)
    cfg = tiny(n_layer=n_layer, first_dense_layers=first or None, moe_every=every, sliding_window=3,
               full_attention_every=full, **MIXTRAL_LIKE)
    stack = cfg.architecture.output
    layers = list(stack.layers())
    assert len(layers) == n_layer == stack.n_layer
    assert [b.is_moe for b in layers] == [is_moe_layer(cfg, i) for i in range(n_layer)]
    assert [b.attention.window for b in layers] == [cfg.layer_window(i) for i in range(n_layer)]
    start = data.draw(st.integers(0, n_layer - 1))
    stop = data.draw(st.integers(start, n_layer))
    listed = Counter(layers[start:stop])
    assert dict(stack.kinds_in(start, stop)) == dict(listed)


def test_a_2_to_the_40_layer_model_is_described_in_a_few_runs():
    """Depths up to 2**40 are valid: the description never lists layers, so counting stays instant."""
    cfg = tiny(n_layer=2**40, sliding_window=4, full_attention_every=3, first_dense_layers=5, moe_every=2,
               **MIXTRAL_LIKE)
    stack = cfg.architecture.output
    assert len(stack.runs) < 10 and stack.n_layer == 2**40
    assert sum(n for _, n in stack.kinds()) == 2**40
    assert count.total(cfg) > 0 and flops.forward_flops(cfg, Workload(batch=1, seq=8)) > 0
