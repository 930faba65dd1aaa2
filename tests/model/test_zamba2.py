"""The zamba2 family (Zamba2) against transformers 5.24 (models/zamba2/modeling_zamba2.py): Mamba2 layers, and hybrid
layers that run one of num_mem_blocks shared transformer blocks on [h | embeddings] (its weights counted once), with
each use's LoRA adapters and Linear, before their own Mamba2 layer. Parameters to the one at Zamba2Config's default
size on meta; the generation state at 4,096 tokens equal to transformers' cache bytes; a tiny checkpoint loaded by
load_model (logits within 1e-4, fp32); FLOPs against FlopCounterMode on transformers' module; decode over tfcalc's
cache against the uncached forward and transformers' generate; hostile keys in one line.
"""

from __future__ import annotations

import pytest
import torch
from hf_pairs import (
    assert_decode_equals,
    assert_logits_close,
    config_json,
    eager_flops,
    hf_cache_bytes,
    nudge,
    saved_pair,
)

from tfcalc.count.model import flops as count_flops, params as count_params
from tfcalc.count.model.memory import kv_cache_bytes
from tfcalc.errors import InputError
from tfcalc.workload import Workload

transformers = pytest.importorskip("transformers")

HEAD = {"model_type": "zamba2", "architectures": ["Zamba2ForCausalLM"]}


def _hf(keys, device="meta", dtype=torch.float32):
    with torch.device(device):
        return transformers.Zamba2ForCausalLM(transformers.Zamba2Config(**keys)).to(dtype).eval()


@pytest.mark.parametrize("extra", [{}, {"num_mem_blocks": 2, "use_shared_attention_adapter": True,
                                        "add_bias_linear": True, "tie_word_embeddings": False}],
                         ids=["default", "two-blocks-adapters-biases"])
def test_parameters_equal_transformers_on_meta(tmp_path, extra):
    """Zamba2Config's default layout (54 layers, 9 of them hybrid, one shared block) at its default widths."""
    keys = dict(hidden_size=2560, vocab_size=32000, **extra)
    cfg = config_json(tmp_path, dict(HEAD, **keys))
    assert count_params.total(cfg) == sum(p.numel() for p in _hf(keys).parameters())


def test_parameters_by_hand(tmp_path):
    """Two Mamba2 layers and two hybrid layers of one shared block: its tensors once, each use's own twice."""
    keys = dict(hidden_size=32, vocab_size=61, layers_block_type=["mamba", "hybrid", "mamba", "hybrid"],
                num_hidden_layers=4, num_attention_heads=4, n_mamba_heads=8, mamba_d_state=6, intermediate_size=40,
                adapter_rank=3)
    d, inner, conv, H, f, r = 32, 64, 64 + 2 * 6, 8, 40, 3
    mamba = d * (inner + conv + H) + conv * 4 + conv + 3 * H + inner + inner * d + d  # with its input norm
    shared = 2 * d + 4 * (2 * d) * (2 * d) - (2 * d) * (2 * d) + d * 2 * d + d + 3 * d * f  # norms, QKV, O, MLP
    use = r * d + 2 * f * r + d * d  # gate_up adapter, Linear
    cfg = config_json(tmp_path, dict(HEAD, **keys))
    assert count_params.total(cfg) == sum(p.numel() for p in _hf(keys).parameters()) == \
        4 * mamba + shared + 2 * use + 61 * d + d


def test_state_at_4096_tokens_equals_transformers_cache(tmp_path):
    """Each hybrid layer's K and V (bf16) beside every layer's conv ring (bf16) and SSM state (fp32)."""
    keys = dict(hidden_size=128, vocab_size=1000, layers_block_type=["mamba", "hybrid", "mamba", "hybrid"],
                num_hidden_layers=4, num_attention_heads=4, n_mamba_heads=8, mamba_d_state=16, num_mem_blocks=2)
    cfg, hf = config_json(tmp_path, dict(HEAD, **keys)), _hf(keys, dtype=torch.bfloat16)
    with torch.no_grad():
        cache = hf(torch.zeros(1, 4096, dtype=torch.long, device="meta"), use_cache=True).cache
    conv, ssm = (256 + 2 * 16) * 4 * 2, 8 * 32 * 16 * 4
    by_hand = 2 * 2 * 4096 * 256 * 2 + 4 * (conv + ssm)
    assert kv_cache_bytes(cfg, Workload(batch=1, seq=4096, kv_dtype="bf16")) == hf_cache_bytes(cache) == by_hand


TINY = dict(vocab_size=61, hidden_size=32, num_hidden_layers=5, layers_block_type=["mamba", "hybrid", "mamba",
                                                                                   "hybrid", "hybrid"],
            num_attention_heads=4, n_mamba_heads=8, mamba_ngroups=2, mamba_d_state=6, mamba_d_conv=4, chunk_size=4,
            intermediate_size=40, max_position_embeddings=64, num_mem_blocks=2, adapter_rank=3, time_step_min=1e-6)
VARIANTS = {"adapters-rope": {"use_shared_attention_adapter": True, "use_mem_rope": True},
            "plain": {"num_mem_blocks": 1, "hidden_act": "gelu"},
            # untied embeddings: transformers then ties no shared block, each hybrid layer holding a copy
            "untied": {"tie_word_embeddings": False, "use_shared_attention_adapter": True}}


@pytest.fixture(scope="module", params=list(VARIANTS))
def tiny_pair(request, tmp_path_factory):
    torch.manual_seed(0)
    hf = _hf(dict(TINY, **VARIANTS[request.param]), device="cpu")
    nudge(hf, "A_log")
    return saved_pair(hf, tmp_path_factory.mktemp("tiny_zamba2"))


def test_tiny_checkpoint_logits_equal_transformers(tiny_pair):
    hf, model = tiny_pair
    assert_logits_close(hf, model, torch.randint(1, 61, (2, 11)))


def test_the_shared_block_is_one_module(tiny_pair):
    hf, model = tiny_pair
    hybrid = [b.attn for b in model.blocks if hasattr(b.attn, "shared")]
    blocks = len(hybrid) if model.cfg.shared_untied else model.cfg.shared_blocks
    assert sum(p.numel() for p in model.parameters()) == sum(p.numel() for p in hf.parameters())
    q = [h.shared.attn.qkv.weight for h in hybrid]
    assert [q[j] is q[j % blocks] for j in range(len(hybrid))] == [True] * len(hybrid)
    assert len({id(w) for w in q}) == blocks


def test_tiny_forward_flops_equal_flop_counter_on_transformers(tiny_pair):
    """At two lengths, less the named term of the Mamba2 convolutions (transformers pads K - 1 on both sides:
    tfcalc.architecture.mamba2), 5 layers."""
    hf, model = tiny_pair
    conv_dim, K = 64 + 2 * 2 * 6, 4
    for T in (3, 11):
        measured = eager_flops(hf, torch.randint(1, 61, (1, T)))
        dropped = 5 * 2 * conv_dim * K * (K - 1)
        assert measured == count_flops.forward_flops(model.cfg, Workload(batch=1, seq=T)) + dropped


def test_decode_equals_the_uncached_forward_and_transformers(tiny_pair):
    hf, model = tiny_pair
    prompt, new = torch.randint(1, 61, (2, 5)), 8  # no pad id (0): generate would read it as padding
    cache = model.new_cache(2, 5 + new)
    assert_decode_equals(model, hf, prompt, new, cache)
    assert cache.nbytes == kv_cache_bytes(model.cfg, Workload(batch=2, seq=5 + new, dtype="fp32", kv_dtype="fp32"))


def test_the_dt_floor_is_transformers_prefill(tmp_path):
    """time_step_min large enough to clamp: the prompt's logits still equal transformers' (its scan clamps dt)."""
    torch.manual_seed(2)
    hf = _hf(dict(TINY, time_step_min=0.05), device="cpu")
    nudge(hf, "A_log", "dt_bias")
    hf, model = saved_pair(hf, tmp_path)
    assert model.cfg.ssm_dt_min == 0.05
    assert_logits_close(hf, model, torch.randint(1, 61, (2, 9)))


def test_a_decode_step_runs_the_counted_flops_and_the_same_shapes_at_every_context(tiny_pair):
    """FlopCounterMode (with the CPU flash-attention ops) on each step equals decode_flops at its context, plus the
    bucket's masked slots the step reads (16, then 20 = max_tokens), in 3 hybrid layers of 4 heads of 16."""
    from hf_pairs import step_flops

    from tfcalc.measure.flops import flop_counter
    from tfcalc.model.cache import bucket

    _, model = tiny_pair
    steps = step_flops(model, model.new_cache(1, 20), torch.randint(1, 61, (1, 5)), 14, counter=flop_counter)
    for context, (total, _) in zip(range(6, 20), steps, strict=True):
        masked = 3 * 2 * 2 * 4 * 16 * (bucket(context, 20) - context)
        assert total == count_flops.decode_flops(model.cfg, Workload(batch=1, seq=context)) + masked
    assert all(counts == steps[0][1] for _, counts in steps[:11])  # the same ops on the same shapes within a bucket


def test_continuous_batching_rows_decode_alone(tiny_pair):
    from hf_pairs import assert_rows_decode_alone

    _, model = tiny_pair
    assert_rows_decode_alone(model, [torch.randint(1, 61, (1, 4)), torch.randint(1, 61, (1, 6))], 16)


def _flat(**changes):
    from tfcalc.config import from_mapping

    base = dict(n_layer=4, d_model=64, n_head=4, n_kv_head=4, d_head=32, vocab_size=97, max_seq_len=256,
                pos_encoding="none", norm="rmsnorm", hybrid_pattern="MHMH", shared_blocks=1, shared_adapter_rank=8,
                ssm_heads=8, ssm_head_dim=16, ssm_state_size=8, ssm_chunk_size=32, d_ff=48, gated_ffn=True,
                activation="gelu", attn_scale=0.25)
    return from_mapping(dict(base, **changes))


@pytest.mark.parametrize("adapters", [False, True])
def test_measured_flops_of_tfcalcs_module_fall_in_the_counted_groups(adapters):
    """FlopCounterMode on tfcalc's own module (meta): each use's shared block under its own layer, group by group
    equal to the count (the shared block's MLP with the mixer's projections)."""
    from tfcalc.measure.flops import measure_flops

    cfg, w = _flat(shared_attn_adapters=adapters, shared_blocks=2), Workload(batch=2, seq=40)
    m = measure_flops(cfg, w)
    b = count_flops.breakdown(cfg, w)
    assert m.groups == dict({g: n for g, n in b.totals().items() if g != "embeddings" or n}, other=0)


@pytest.mark.parametrize("seq", [64, 100])
@pytest.mark.parametrize("adapters", [False, True], ids=["mlp-adapter", "qkv-adapters"])
def test_saved_activations_against_autograd(seq, adapters):
    """fp32, CPU: the count equals the bytes autograd keeps to the byte -- each hybrid use's shared block: the norm
    of [h | e] and its output u (Q, K, V's and the adapters' input), the FFN norm and its output, the MLP, the
    adapters' inputs to B, the Linear's input (Zamba2Hybrid.saved); before, u and the FFN norm's output were missing
    and the Mamba2 norm counted twice (low by 63 fp32 values a token and use); Mamba2's per-sequence terms whole."""
    from tfcalc.count.model import memory as mem
    from tfcalc.measure.memory import forward_loss
    from tfcalc.model import build_model

    cfg = _flat(shared_attn_adapters=adapters, shared_blocks=1 + adapters)
    torch.manual_seed(0)
    model = build_model(cfg, "cpu").train()
    _, saved = forward_loss(model, torch.randint(0, 97, (2, seq)), count_saved=True)
    assert mem.activations(cfg, Workload(batch=2, seq=seq, dtype="fp32")).stored == saved


@pytest.mark.parametrize("tied", [True, False], ids=["tied", "untied"])
def test_a_checkpoints_tensors_are_the_counted_parameters(cli, tmp_path, tied):
    """The safetensors headers transformers writes (the shared blocks stored once where tied, a copy in every
    hybrid layer with its block's adapter lists where not) hold exactly the parameters counted."""
    keys = dict(TINY, use_shared_attention_adapter=True, tie_word_embeddings=tied)
    _hf(keys, device="cpu").save_pretrained(tmp_path)
    out = cli("params", str(tmp_path), "--json").json()
    assert out["checkpoint_total"] == out["analytic_total"] == sum(p.numel() for p in _hf(keys).parameters())


@pytest.mark.parametrize("seq", [300, 1000])
def test_full_size_flops_equal_flop_counter_on_tfcalcs_module(tmp_path, seq):
    """At a full default size on meta (transformers' own forward reads a value back there, so cannot run):
    FlopCounterMode on tfcalc's module -- whose logits equal transformers' on the tiny checkpoints above -- equals
    the count in total and group by group."""
    from tfcalc.measure.flops import measure_flops

    keys = {"hidden_size": 2560, "vocab_size": 32000, "use_shared_attention_adapter": True, "num_mem_blocks": 2,
            "use_mem_rope": True}
    cfg, w = config_json(tmp_path, dict(HEAD, **keys)), Workload(batch=1, seq=seq)
    m = measure_flops(cfg, w)
    assert m.total == count_flops.forward_flops(cfg, w)
    assert m.groups == dict({g: n for g, n in count_flops.breakdown(cfg, w).totals().items() if g != "embeddings" or n},
                            other=0)


@pytest.mark.parametrize("key, value, message", [
    ("layers_block_type", ["mamba", "attention"], "'layers_block_type' must list"),
    ("num_hidden_layers", 7, "lists 5 layers"),
    ("n_mamba_heads", 7, "must divide mamba_expand"),
    ("num_attention_heads", 5, "must divide 2·hidden_size"),
    ("use_long_context", True, "use_long_context"),
    ("rms_norm_eps", 1e-6, "only 1e-5 is built"),
    ("num_mem_blocks", 0, "'num_mem_blocks' must be a positive integer"),
    ("adapter_rank", "big", "'adapter_rank' must be a positive integer"),
    ("time_step_min", -1, "'time_step_min' must be a positive number"),
    ("use_shared_attention_adapter", "yes", "must be true or false"),
])
def test_bad_zamba2_config_json_is_one_line(tmp_path, key, value, message):
    raw = dict(HEAD, **dict(TINY, **{key: value}))
    if key == "use_shared_attention_adapter":
        raw["num_key_value_heads"] = 2
    with pytest.raises(InputError, match=message) as e:
        config_json(tmp_path, raw)
    assert "\n" not in str(e.value)


def test_adapters_need_as_many_kv_heads_as_query_heads(tmp_path):
    with pytest.raises(InputError, match="num_key_value_heads must equal"):
        config_json(tmp_path, dict(HEAD, **dict(TINY, use_shared_attention_adapter=True, num_key_value_heads=2)))


@pytest.mark.parametrize("overrides, message", [
    (["hybrid_pattern=MHMH", "n_layer=4", "ssm_heads=4", "ssm_head_dim=8"], "give shared_blocks"),
    (["shared_blocks=0"], "'shared_blocks' must be positive"),
    (["shared_adapter_rank=0"], "'shared_adapter_rank' must be positive"),
    (["ssm_dt_min=-1"], "'ssm_dt_min' must be positive"),
    (["shared_blocks=2.5"], "shared_blocks"),
])
def test_bad_flat_fields_are_one_line(overrides, message):
    from tfcalc.presets import load

    with pytest.raises(InputError, match=message) as e:
        count_params.total(load("gpt2", overrides))
    assert "\n" not in str(e.value)
