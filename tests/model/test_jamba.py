"""The jamba family (tfcalc.hf_config.jamba: Mamba-1 layers with attention every attn_layer_period, experts every
expert_layer_period) against transformers 5.24 (models/jamba/modeling_jamba.py): JambaConfig's defaults -- Jamba-v0.1's
sizes, as its docstring says -- at full size on meta (parameters exact; forward FLOPs equal to FlopCounterMode with
eager attention, less and plus the Mamba-1 mixer's named terms; the generation state at 4,096 tokens equal to
transformers' cache bytes); tiny checkpoints written by transformers and loaded by load_model (logits within 1e-4,
fp32; decode over the cache against the uncached forward and transformers' generate; a step's FLOPs).
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
    step_flops,
)
from torch.utils.flop_counter import FlopCounterMode

from tfcalc.count.model import flops as count_flops, params as count_params
from tfcalc.count.model.memory import kv_cache_bytes
from tfcalc.errors import InputError
from tfcalc.workload import Workload

transformers = pytest.importorskip("transformers")


def _hf(raw: dict, device="meta", dtype=torch.float32):
    keys = {k: v for k, v in raw.items() if k not in ("architectures", "model_type", "torch_dtype")}
    with torch.device(device):
        return transformers.JambaForCausalLM(transformers.JambaConfig(**keys)).to(dtype).eval()


def _mamba_terms(layers: int, inner: int, state: int, kernel: int, tokens: int, sequences: int) -> int:
    """FlopCounterMode on transformers' Mamba-1 mixer less tfcalc's count (tfcalc.architecture.mamba1): the state
    update it runs elementwise (2·I·N a token, counted by hand) is missing, the K - 1 convolution outputs it drops
    (2·I·K·(K - 1) a sequence) are extra."""
    return layers * (-2 * inner * state * tokens + sequences * 2 * inner * kernel * (kernel - 1))


# JambaConfig()'s defaults, Jamba-v0.1 (ai21labs/Jamba-v0.1): 32 layers, attention at i % 8 == 4 (4 layers), experts
# at i % 2 == 1 (16 of them, top 2), d 4096, FFN 14336, 32 heads and 8 KV heads of 128, Mamba: I 8192, N 16, K 4,
# R 256, vocabulary 65536, untied head
DEFAULT = dict(model_type="jamba", architectures=["JambaForCausalLM"], vocab_size=65536, hidden_size=4096,
               intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8,
               hidden_act="silu", rms_norm_eps=1e-6, tie_word_embeddings=False, max_position_embeddings=262144,
               num_experts=16, num_experts_per_tok=2, expert_layer_period=2, expert_layer_offset=1,
               attn_layer_period=8, attn_layer_offset=4, mamba_d_state=16, mamba_d_conv=4, mamba_expand=2,
               mamba_dt_rank="auto", mamba_conv_bias=True, mamba_proj_bias=False)
D, F, I_, N, K, R, V = 4096, 14336, 8192, 16, 4, 256, 65536


@pytest.fixture(scope="module")
def jamba_v01(tmp_path_factory):
    return config_json(tmp_path_factory.mktemp("jamba"), DEFAULT)


@pytest.fixture(scope="module")
def hf_jamba():
    return _hf(DEFAULT)


def test_jamba_defaults_parameters_equal_transformers_on_meta(jamba_v01, hf_jamba):
    hf = sum(p.numel() for p in hf_jamba.parameters())
    mamba = D * 2 * I_ + I_ * K + I_ + I_ * (R + 2 * N) + R * I_ + I_ + I_ * N + I_ + (R + 2 * N) + I_ * D
    attention = D * 32 * 128 + 2 * D * 8 * 128 + 32 * 128 * D
    mlp, experts = 3 * D * F, 16 * 3 * D * F + 16 * D  # the router, 16 × d
    by_hand = 28 * mamba + 4 * attention + 16 * mlp + 16 * experts + 32 * 2 * D + 2 * V * D + D
    assert count_params.total(jamba_v01) == hf == by_hand == 51_570_323_328


@pytest.mark.parametrize("seq", [7, 40])
def test_jamba_defaults_forward_flops_by_hand_and_against_flop_counter(jamba_v01, tmp_path, seq):
    """The count by hand at full size; and FlopCounterMode on transformers' model at full size (SDPA on meta counted
    over the full T × T square, tfcalc's convention) equal to the count plus the Mamba-1 mixer's named terms --
    with num_experts 1 (every FFN the dense MLP): transformers' experts' loop reads the routing back (nonzero),
    which meta tensors cannot; the experts are held to FlopCounterMode on the tiny checkpoints below."""
    counted = count_flops.forward_flops(jamba_v01, Workload(batch=1, seq=seq))
    mamba = 2 * (D * 2 * I_ + I_ * (R + 2 * N) + R * I_ + I_ * D) * seq + 2 * I_ * K * seq + 2 * 2 * I_ * N * seq
    attention = 2 * seq * (D * 6144 + 4096 * D) + 2 * 2 * 32 * seq * seq * 128
    ffn = 2 * seq * 3 * D * F
    router = 2 * seq * D * 16
    assert counted == 28 * mamba + 4 * attention + 16 * ffn + 16 * (2 * ffn + router) + 2 * seq * D * V
    dense = dict(DEFAULT, num_experts=1)
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        # with a cache: the mask's check for packed sequences, which reads a value back, runs only without one
        _hf(dense)(torch.zeros(1, seq, dtype=torch.long, device="meta"), use_cache=True)
    hf = counter.get_total_flops()
    ours = count_flops.forward_flops(config_json(tmp_path, dense), Workload(batch=1, seq=seq))
    assert ours == 28 * mamba + 4 * attention + 32 * ffn + 2 * seq * D * V
    assert hf == ours + _mamba_terms(28, I_, N, K, seq, 1)


def test_jamba_defaults_state_at_4096_tokens_equals_transformers_cache(jamba_v01):
    """transformers' cache after 4,096 tokens in bf16, of the first 8 layers (one period: 7 Mamba-1 layers and one
    attention layer; the model is that period four times): K and V of the attention layer (bf16), each Mamba
    layer's conv columns (bf16) and I × N state (fp32)."""
    hf = _hf(dict(DEFAULT, num_hidden_layers=8), dtype=torch.bfloat16)
    with torch.no_grad():
        cache = hf(torch.zeros(1, 4096, dtype=torch.long, device="meta"), use_cache=True).cache
    by_hand = 4 * (2 * 4096 * 8 * 128 * 2 + 7 * (I_ * K * 2 + I_ * N * 4))
    assert kv_cache_bytes(jamba_v01, Workload(batch=1, seq=4096, kv_dtype="bf16")) == 4 * hf_cache_bytes(cache) \
        == by_hand


# tiny models, every kind present: 4 layers (attention at layer 2), experts at the odd layers; or experts at layers
# 0 and 3 (period 3, offset 0: dense_layers); or no experts (num_experts 1)
TINY = dict(vocab_size=61, hidden_size=32, intermediate_size=48, num_hidden_layers=4, num_attention_heads=4,
            num_key_value_heads=2, num_experts=4, num_experts_per_tok=2, expert_layer_period=2, expert_layer_offset=1,
            attn_layer_period=4, attn_layer_offset=2, mamba_d_state=6, mamba_d_conv=4, mamba_expand=2,
            mamba_dt_rank=5, eos_token_id=None, pad_token_id=None, bos_token_id=None)
VARIANTS = {"moe_every": {}, "dense_layers": dict(expert_layer_period=3, expert_layer_offset=0),
            "no_experts": dict(num_experts=1)}


@pytest.fixture(scope="module", params=list(VARIANTS))
def tiny_pair(request, tmp_path_factory):
    torch.manual_seed(0)
    hf = _hf(dict(TINY, **VARIANTS[request.param]), device="cpu")
    nudge(hf, "layernorm")
    return saved_pair(hf, tmp_path_factory.mktemp(request.param))


def test_tiny_checkpoint_parameters_logits_and_flops_equal_transformers(tiny_pair):
    hf, model = tiny_pair
    cfg = model.cfg
    assert count_params.total(cfg) == sum(p.numel() for p in hf.parameters()) \
        == sum(p.numel() for p in model.parameters())
    idx = torch.randint(0, 61, (2, 11))
    assert_logits_close(hf, model, idx)
    # transformers' experts' loop runs each expert on the tokens that chose it: 2 of 4 per token, as counted
    counted = count_flops.forward_flops(cfg, Workload(batch=2, seq=11))
    assert eager_flops(hf, idx) == counted + _mamba_terms(3, 64, 6, 4, 22, 2)


def test_tiny_layer_kinds_follow_the_periods(tiny_pair):
    hf, model = tiny_pair
    kinds = [type(b.spec.mixer).__name__ for b in model.blocks]
    assert kinds == ["Mamba1" if t == "mamba" else "Attention" for t in hf.config.layers_block_type]
    assert [b.spec.is_moe for b in model.blocks] == [n > 1 for n in hf.config.layers_num_experts]


def test_decode_over_the_cache_equals_the_uncached_forward_and_transformers(tiny_pair):
    hf, model = tiny_pair
    prompt, new = torch.randint(0, 61, (2, 6)), 8
    cache = model.new_cache(2, 6 + new)
    assert_decode_equals(model, hf, prompt, new, cache)
    assert cache.nbytes == kv_cache_bytes(model.cfg, Workload(batch=2, seq=14, dtype="fp32", kv_dtype="fp32"))


def test_continuous_batching_rows_decode_jamba(tiny_pair):
    _, model = tiny_pair
    assert_rows_decode_alone(model, [torch.randint(0, 61, (1, n)) for n in (3, 6)], max_tokens=14)


def test_a_decode_step_runs_the_counted_flops_and_the_same_shapes(tiny_pair):
    """FlopCounterMode (tfcalc's, which counts the CPU's fused attention) on each decode step equals the count's
    decode step, but for the keys the attention layer's step reads past the context: a bucket of 16 slots, hidden
    by the mask (tfcalc.model.cache), 2·2·H·h FLOPs each (Q·Kᵀ and attention·V, 4 heads of 8). The Mamba-1 layers'
    recurrence is fixed in the context; the step's ops do not change with it."""
    from tfcalc.measure.flops import flop_counter

    _, model = tiny_pair
    steps = step_flops(model, model.new_cache(1, 40), torch.randint(0, 61, (1, 5)), 11, counter=flop_counter)
    for context, (total, _) in zip(range(6, 17), steps, strict=True):
        masked = 2 * 2 * 4 * 8 * (16 - context)
        assert total == count_flops.decode_flops(model.cfg, Workload(batch=1, seq=context)) + masked
    assert all(counts == steps[0][1] for _, counts in steps)


# ---------- hostile input: the jamba file's keys ----------
@pytest.mark.parametrize("key, value, message", [
    ("attn_layer_offset", 8, "'attn_layer_offset' \\(8\\) must be 0 or more and below 'attn_layer_period'"),
    ("attn_layer_offset", -1, "'attn_layer_offset'"),
    ("attn_layer_offset", 1.5, "'attn_layer_offset' must be an integer"),
    ("attn_layer_period", 0, "'attn_layer_period' must be a positive integer"),
    ("expert_layer_offset", 2, "'expert_layer_offset' \\(2\\) must be 0 or more and below 'expert_layer_period'"),
    ("expert_layer_period", "2", "'expert_layer_period' must be a positive integer"),
    ("num_experts", 0, "'num_experts' must be a positive integer"),
    ("num_experts_per_tok", 0, "n_expert_active"),
    ("mamba_dt_rank", "wide", "'mamba_dt_rank' must be \"auto\" or a positive integer"),
    ("mamba_dt_rank", -3, "'mamba_dt_rank' must be \"auto\" or a positive integer"),
    ("mamba_d_state", 0, "'mamba_d_state' must be a positive integer"),
    ("mamba_expand", 2.5, "'mamba_expand' must be a positive integer"),
    ("mamba_conv_bias", "no", "'mamba_conv_bias' must be true or false"),
    ("hidden_act", "gelu", "'hidden_act' 'gelu' is not built"),
    ("num_hidden_layers", 2**40, "num_hidden_layers"),
    ("rms_norm_eps", -1.0, "norm_eps"),
])
def test_bad_jamba_config_json_is_one_line(tmp_path, key, value, message):
    with pytest.raises(InputError, match=message):
        config_json(tmp_path, dict(DEFAULT, **{key: value}))
