"""The falcon_h1 family (Falcon-H1) against transformers 5.24 (models/falcon_h1/modeling_falcon_h1.py): every layer
attention and a Mamba2 mixer side by side on one norm's output, summed, then a SwiGLU MLP; the muP multipliers run
as transformers runs them. Parameters to the one at FalconH1Config's default size on meta (and by hand); the
generation state at 4,096 tokens equal to transformers' cache bytes; a tiny checkpoint loaded by load_model (logits
within 1e-4, fp32, with every multiplier off 1 and each gated-norm layout); FLOPs against FlopCounterMode on
transformers' module; decode over tfcalc's cache against the uncached forward and transformers' generate; hostile
keys in one line.
"""

from __future__ import annotations

import pytest
import torch
from hf_pairs import (
    assert_decode_equals,
    assert_logits_close,
    assert_rows_decode_alone,
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

HEAD = {"model_type": "falcon_h1", "architectures": ["FalconH1ForCausalLM"]}


def _hf(keys, device="meta", dtype=torch.float32):
    with torch.device(device):
        return transformers.FalconH1ForCausalLM(transformers.FalconH1Config(**keys)).to(dtype).eval()


def test_parameters_of_the_default_config_equal_transformers_on_meta(tmp_path):
    """FalconH1Config's defaults (32 layers of d 4096; Mamba2 d_ssm 1024 in 128 heads of 8, state 256, one group;
    32 query and 8 KV heads of 128; SwiGLU 14336; vocabulary 128000, untied), and by hand."""
    keys = {"hidden_size": 4096, "vocab_size": 128000}  # required of every config.json; FalconH1Config's defaults
    cfg = config_json(tmp_path, dict(HEAD, **keys))
    d, inner, conv, H = 4096, 1024, 1024 + 2 * 256, 128
    mamba = d * (inner + conv + H) + conv * 4 + conv + 3 * H + inner * d  # no gated-norm weight: mamba_rms_norm false
    attention = d * 128 * (32 + 8 + 8) + 32 * 128 * d
    layer = mamba + attention + 3 * d * 14336 + 2 * d
    assert count_params.total(cfg) == sum(p.numel() for p in _hf(keys).parameters()) == 32 * layer + 2 * 128000 * d + d


@pytest.mark.parametrize("extra", [{"mamba_rms_norm": True, "projectors_bias": True, "mamba_proj_bias": True,
                                    "attention_bias": True, "mlp_bias": True, "mamba_d_ssm": None, "head_dim": 64},
                                   {"tie_word_embeddings": True, "mamba_conv_bias": False}],
                         ids=["norm-and-biases", "tied-no-conv-bias"])
def test_parameters_equal_transformers_with_each_option(tmp_path, extra):
    keys = dict(hidden_size=256, num_hidden_layers=3, intermediate_size=512, vocab_size=1000, mamba_n_heads=16,
                num_attention_heads=8, num_key_value_heads=2, **extra)
    cfg = config_json(tmp_path, dict(HEAD, **keys))
    assert count_params.total(cfg) == sum(p.numel() for p in _hf(keys).parameters())


def test_state_at_4096_tokens_equals_transformers_cache(tmp_path):
    """K and V of every layer in bf16 beside its Mamba2 conv ring (bf16) and SSM state (fp32)."""
    keys = dict(hidden_size=256, num_hidden_layers=2, intermediate_size=512, vocab_size=1000, mamba_n_heads=8,
                mamba_d_ssm=256, mamba_d_state=16, num_attention_heads=8, num_key_value_heads=2)
    cfg, hf = config_json(tmp_path, dict(HEAD, **keys)), _hf(keys, dtype=torch.bfloat16)
    with torch.no_grad():
        cache = hf(torch.zeros(1, 4096, dtype=torch.long, device="meta"), use_cache=True).cache
    conv, ssm = (256 + 2 * 16) * 4 * 2, 8 * 32 * 16 * 4
    by_hand = 2 * (2 * 4096 * 2 * 32 * 2 + conv + ssm)
    assert kv_cache_bytes(cfg, Workload(batch=1, seq=4096, kv_dtype="bf16")) == hf_cache_bytes(cache) == by_hand


TINY = dict(vocab_size=61, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
            mamba_d_ssm=48, mamba_n_heads=6, mamba_n_groups=2, mamba_d_state=6, mamba_d_conv=4, mamba_chunk_size=4,
            intermediate_size=40, max_position_embeddings=64, key_multiplier=0.7, attention_in_multiplier=1.3,
            attention_out_multiplier=0.8, ssm_in_multiplier=0.6, ssm_out_multiplier=1.2, embedding_multiplier=2.0,
            lm_head_multiplier=0.5, mlp_multipliers=[0.9, 1.1], ssm_multipliers=[0.5, 0.6, 0.7, 0.8, 0.9],
            rope_parameters={"rope_type": "default", "rope_theta": 500.0})
NORMS = {"no-norm": {}, "norm-then-gate": {"mamba_rms_norm": True},
         "gated-norm": {"mamba_rms_norm": True, "mamba_norm_before_gate": False}}


@pytest.fixture(scope="module", params=list(NORMS))
def tiny_pair(request, tmp_path_factory):
    torch.manual_seed(0)
    hf = _hf(dict(TINY, **NORMS[request.param]), device="cpu")
    nudge(hf, "dt_bias", "A_log")
    return saved_pair(hf, tmp_path_factory.mktemp("tiny_falcon_h1"))


def test_tiny_checkpoint_logits_equal_transformers(tiny_pair):
    hf, model = tiny_pair
    assert_logits_close(hf, model, torch.randint(0, 61, (2, 11)))


def test_tiny_forward_flops_equal_flop_counter_on_transformers(tiny_pair):
    """At two lengths (within one chunk and over three), less the named term of the Mamba2 convolution
    (tfcalc.architecture.mamba2: transformers pads K - 1 on both sides)."""
    hf, model = tiny_pair
    conv_dim, K = 48 + 2 * 2 * 6, 4
    for T in (3, 11):
        measured = eager_flops(hf, torch.randint(0, 61, (1, T)))
        dropped = 2 * 2 * conv_dim * K * (K - 1)
        assert measured == count_flops.forward_flops(model.cfg, Workload(batch=1, seq=T)) + dropped


def test_decode_equals_the_uncached_forward_and_transformers(tiny_pair):
    hf, model = tiny_pair
    prompt, new = torch.randint(1, 61, (2, 5)), 8  # no pad id (0): generate would read it as padding
    cache = model.new_cache(2, 5 + new)
    assert_decode_equals(model, hf, prompt, new, cache)
    assert cache.nbytes == kv_cache_bytes(model.cfg, Workload(batch=2, seq=5 + new, dtype="fp32", kv_dtype="fp32"))


def test_continuous_batching_rows_decode_alone(tiny_pair):
    _, model = tiny_pair
    assert_rows_decode_alone(model, [torch.randint(0, 61, (1, 4)), torch.randint(0, 61, (1, 6))], 16)


def test_a_tiny_checkpoint_with_biases_and_head_dim_loads(tmp_path):
    """Every bias on, head_dim given apart from hidden / heads, the LM head tied."""
    torch.manual_seed(1)
    keys = dict(TINY, projectors_bias=True, mamba_proj_bias=True, attention_bias=True, mlp_bias=True, head_dim=6,
                tie_word_embeddings=True, mamba_rms_norm=True)
    hf = _hf(keys, device="cpu")
    nudge(hf, "bias", "dt_bias")
    hf, model = saved_pair(hf, tmp_path)
    assert_logits_close(hf, model, torch.randint(0, 61, (2, 9)))


def test_a_decode_step_runs_the_counted_flops_and_the_same_shapes_at_every_context(tiny_pair):
    """FlopCounterMode (with the CPU flash-attention ops: tfcalc.measure.flops.flop_counter) on each step equals
    decode_flops at its context, plus the named term: a step reads its bucket of slots (16, then 20 = max_tokens),
    the empty ones masked, where the count charges the keys of the context (2 layers, Q·Kᵀ and attention·V, 4 heads
    of 8)."""
    from hf_pairs import step_flops

    from tfcalc.measure.flops import flop_counter
    from tfcalc.model.cache import bucket

    _, model = tiny_pair
    steps = step_flops(model, model.new_cache(1, 20), torch.randint(1, 61, (1, 5)), 14, counter=flop_counter)
    for context, (total, _) in zip(range(6, 20), steps, strict=True):
        masked = 2 * 2 * 2 * 4 * 8 * (bucket(context, 20) - context)
        assert total == count_flops.decode_flops(model.cfg, Workload(batch=1, seq=context)) + masked
    assert all(counts == steps[0][1] for _, counts in steps[:11])  # the same ops on the same shapes within a bucket


@pytest.mark.parametrize("seq", [40, 100])
def test_measured_flops_of_tfcalcs_module_fall_in_the_counted_groups(seq):
    """FlopCounterMode on tfcalc's own module (meta): the Mamba2 part's scan, nested in the mixer slot beside the
    attention, lands in attention_scores with SDPA; its in_proj and out_proj in attention_proj; group by group
    equal to the count."""
    from tfcalc.measure.flops import measure_flops

    cfg, w = _flat(**MUP), Workload(batch=2, seq=seq)
    m = measure_flops(cfg, w)
    b = count_flops.breakdown(cfg, w)
    assert m.groups == dict({g: n for g, n in b.totals().items() if g != "embeddings" or n}, other=0)


def _flat(**changes):
    from tfcalc.config import from_mapping

    return from_mapping(dict(n_layer=2, d_model=64, n_head=4, n_kv_head=2, vocab_size=97, max_seq_len=256,
                             pos_encoding="rope", norm="rmsnorm", ssm_parallel=True, ssm_heads=8, ssm_head_dim=16,
                             ssm_state_size=8, ssm_chunk_size=32, d_ff=48, gated_ffn=True, activation="silu",
                             **changes))


MUP = dict(attn_in_multiplier=1.3, ssm_in_multiplier=0.7, attn_out_multiplier=0.5, ssm_out_multiplier=2.0,
           ssm_proj_multipliers=[1.0, 2.0, 3.0, 4.0, 5.0], ffn_multipliers=[0.5, 2.0])


@pytest.mark.parametrize("gate", ["gated", "norm_then_gate", "none"])
@pytest.mark.parametrize("mup", [False, True], ids=["plain", "mup"])
@pytest.mark.parametrize("seq", [64, 100])
def test_saved_activations_equal_what_autograd_keeps(gate, mup, seq):
    """fp32, CPU, chunks of 32: the count's bytes kept for backward equal autograd's saved tensors' bytes to the byte
    (the Mamba2 part's per-sequence bytes and A's H-wide tensors whole: tests/model/test_mamba2.py); the
    multipliers' scaled copies counted (ParallelMixers.saved)."""
    from tfcalc.count.model import memory as mem
    from tfcalc.measure.memory import forward_loss
    from tfcalc.model import build_model

    cfg = _flat(ssm_gate_norm=gate, **(MUP if mup else {}))
    torch.manual_seed(0)
    model = build_model(cfg, "cpu").train()
    _, saved = forward_loss(model, torch.randint(0, 97, (2, seq)), count_saved=True)
    counted = mem.activations(cfg, Workload(batch=2, seq=seq, dtype="fp32")).stored
    assert saved == counted, saved - counted


def test_a_checkpoints_tensors_are_the_counted_parameters(cli, tmp_path):
    keys = dict(TINY, mamba_rms_norm=True, projectors_bias=True)
    _hf(keys, device="cpu").save_pretrained(tmp_path)
    out = cli("params", str(tmp_path), "--json").json()
    assert out["checkpoint_total"] == out["analytic_total"] == sum(p.numel() for p in _hf(keys).parameters())


@pytest.mark.parametrize("seq", [300, 1000])
def test_full_size_flops_equal_flop_counter_on_tfcalcs_module(tmp_path, seq):
    """At a full default size on meta (transformers' own forward reads a value back there, so cannot run):
    FlopCounterMode on tfcalc's module -- whose logits equal transformers' on the tiny checkpoints above -- equals
    the count in total and group by group."""
    from tfcalc.measure.flops import measure_flops

    keys = {"hidden_size": 4096, "vocab_size": 128000}
    cfg, w = config_json(tmp_path, dict(HEAD, **keys)), Workload(batch=1, seq=seq)
    m = measure_flops(cfg, w)
    assert m.total == count_flops.forward_flops(cfg, w)
    assert m.groups == dict({g: n for g, n in count_flops.breakdown(cfg, w).totals().items() if g != "embeddings" or n},
                            other=0)


@pytest.mark.parametrize("key, value, message", [
    ("mamba_n_heads", 7, "must divide the Mamba2 inner width"),
    ("mamba_d_head", 5, "must equal the Mamba2 inner width"),
    ("mamba_d_ssm", "wide", "'mamba_d_ssm' must be a positive integer"),
    ("ssm_multipliers", [1.0, 2.0], "'ssm_multipliers' must list 5 finite numbers"),
    ("mlp_multipliers", "x", "'mlp_multipliers' must list 2 finite numbers"),
    ("key_multiplier", "big", "'key_multiplier' must be a number"),
    ("ssm_out_multiplier", float("inf"), "'ssm_out_multiplier' must be a finite number"),
    ("time_step_limit", [0.0, 5.0], "time_step_limit"),
    ("mamba_rms_norm", "yes", "'mamba_rms_norm' must be true or false"),
    ("hidden_act", "gelu", "activation"),
    ("rope_parameters", {"rope_type": "yarn", "factor": 2.0}, "rope_type 'yarn' is not built"),
    ("partial_rotary_factor", 0.5, "rotates the whole head"),
])
def test_bad_falcon_h1_config_json_is_one_line(tmp_path, key, value, message):
    with pytest.raises(InputError, match=message) as e:
        config_json(tmp_path, dict(HEAD, **dict(TINY, **{key: value})))
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("overrides, message", [
    (["ssm_parallel=true"], "give ssm_heads and ssm_head_dim"),
    (["attn_in_multiplier=2.0"], "give ssm_parallel true"),
    (["ffn_multipliers=[1.0]"], "ffn_multipliers must give 2 numbers"),
    (["ssm_parallel=true", "ssm_heads=4", "ssm_head_dim=8", "ssm_proj_multipliers=[1.0]"],
     "ssm_proj_multipliers must give 5 numbers"),
    (["ssm_parallel=true", "ssm_heads=4", "ssm_head_dim=8", "hybrid_pattern=MMMMMMMMMMMM"], "no per-layer pattern"),
    (["ssm_gate_norm=after"], "ssm_gate_norm"),
])
def test_bad_flat_fields_are_one_line(overrides, message):
    from tfcalc.presets import load

    with pytest.raises(InputError, match=message) as e:
        count_params.total(load("gpt2", overrides))
    assert "\n" not in str(e.value)


def test_flat_fields_build_what_the_config_json_builds(tmp_path):
    """The same model written as --set keys on a preset: its parameters are the config.json's."""
    from tfcalc.presets import load

    keys = dict(hidden_size=64, num_hidden_layers=2, intermediate_size=96, vocab_size=100, num_attention_heads=4,
                num_key_value_heads=2, mamba_d_ssm=64, mamba_n_heads=8, mamba_d_state=8, mamba_rms_norm=True)
    want = count_params.total(config_json(tmp_path, dict(HEAD, **keys)))
    flat = load("gpt2", ["d_model=64", "n_layer=2", "d_ff=96", "vocab_size=100", "n_head=4", "n_kv_head=2",
                         "pos_encoding=rope", "norm=rmsnorm", "norm_bias=false", "gated_ffn=true", "ffn_bias=false",
                         "attn_bias=false", "tie_embeddings=false", "ssm_parallel=true", "ssm_heads=8",
                         "ssm_head_dim=8", "ssm_state_size=8", "ssm_gate_norm=norm_then_gate"])
    assert count_params.total(flat) == want == sum(p.numel() for p in _hf(keys).parameters())
