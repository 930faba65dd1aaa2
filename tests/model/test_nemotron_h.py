"""The nemotron_h family against transformers 5.24 (models/nemotron_h/modeling_nemotron_h.py): each layer ONE
sub-layer beside its norm, the kinds from hybrid_override_pattern (M Mamba2, * attention without positions, - a
relu² MLP, E a mixture of relu² experts with a shared one and DeepSeek-V3's sigmoid router). Published configs at
full size on meta: parameters exact; forward FLOPs equal to FlopCounterMode on transformers' torch path at two
lengths (Nano-9B-v2, less the one named term of its convolutions; transformers' expert loop reads routing counts
back to the host and cannot run on meta, so the experts' FLOPs are checked on the tiny model, where every token's
top-k rows run whatever the routing); the generation state at 4,096 tokens equal to transformers' cache bytes; a
tiny checkpoint with every letter loaded by load_model (logits within 1e-4, fp32) and decoded over its fixed
state and K/V cache as the uncached forward.
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
from torch.utils.flop_counter import FlopCounterMode

from tfcalc.count.model import flops as count_flops, params as count_params
from tfcalc.count.model.memory import kv_cache_bytes
from tfcalc.model.generate import next_token
from tfcalc.presets import load
from tfcalc.workload import Workload

transformers = pytest.importorskip("transformers")

# nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16, config.json as published (transformers_version 4.55.4; its
# auto_map left out)
NANO3 = {
    "architectures": ["NemotronHForCausalLM"], "attention_bias": False, "attention_dropout": 0.0, "bos_token_id": 1,
    "chunk_size": 128, "conv_kernel": 4, "eos_token_id": 2, "expand": 2, "head_dim": 128, "hidden_dropout": 0.0,
    "hidden_size": 2688, "hybrid_override_pattern": "MEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEMEM*EMEMEMEME",
    "initializer_range": 0.02, "intermediate_size": 1856, "layer_norm_epsilon": 1e-05, "mamba_head_dim": 64,
    "mamba_hidden_act": "silu", "mamba_num_heads": 64, "mamba_proj_bias": False, "mamba_ssm_cache_dtype": "float32",
    "max_position_embeddings": 262144, "mlp_bias": False, "mlp_hidden_act": "relu2", "model_type": "nemotron_h",
    "moe_intermediate_size": 1856, "moe_shared_expert_intermediate_size": 3712, "n_group": 1, "n_groups": 8,
    "n_routed_experts": 128, "n_shared_experts": 1, "norm_eps": 1e-05, "norm_topk_prob": True,
    "num_attention_heads": 32, "num_experts_per_tok": 6, "num_hidden_layers": 52, "num_key_value_heads": 2,
    "num_logits_to_keep": 1, "pad_token_id": 0, "partial_rotary_factor": 1.0, "rescale_prenorm_residual": True,
    "residual_in_fp32": False, "rope_theta": 10000, "routed_scaling_factor": 2.5, "sliding_window": None,
    "ssm_state_size": 128, "tie_word_embeddings": False, "time_step_floor": 0.0001, "time_step_max": 0.1,
    "time_step_min": 0.001, "topk_group": 1, "torch_dtype": "bfloat16", "transformers_version": "4.55.4",
    "use_bias": False, "use_cache": True, "use_conv_bias": True, "use_mamba_kernels": True, "vocab_size": 131072,
}
# nvidia/NVIDIA-Nemotron-Nano-9B-v2, config.json: its pattern, heads, Mamba2 sizes and vocabulary as published;
# intermediate_size 15,680 and max_position_embeddings 131,072 as its model card states them (not checked
# against the file here)
NANO9 = {
    "architectures": ["NemotronHForCausalLM"], "model_type": "nemotron_h", "hidden_size": 4480,
    "num_hidden_layers": 56, "hybrid_override_pattern": "M-M-M-MM-M-M-M*-M-M-M*-M-M-M-M*-M-M-M-M*-M-MM-M-M-M-M-M-",
    "num_attention_heads": 40, "num_key_value_heads": 8, "head_dim": 128, "mamba_num_heads": 128,
    "mamba_head_dim": 80, "ssm_state_size": 128, "n_groups": 8, "conv_kernel": 4, "chunk_size": 128,
    "intermediate_size": 15680, "vocab_size": 131072, "max_position_embeddings": 131072, "mlp_hidden_act": "relu2",
    "mamba_hidden_act": "silu", "tie_word_embeddings": False, "use_bias": False, "use_conv_bias": True,
    "layer_norm_epsilon": 1e-05, "attention_bias": False, "mlp_bias": False, "mamba_ssm_cache_dtype": "float32",
    "torch_dtype": "bfloat16",
}
SKIP = ("architectures", "model_type", "torch_dtype", "transformers_version")


def _hf(raw, device="meta", dtype=torch.float32):
    keys = {k: v for k, v in raw.items() if k not in SKIP}
    with torch.device(device):
        return transformers.NemotronHForCausalLM(transformers.NemotronHConfig(**keys)).to(dtype).eval()


@pytest.mark.parametrize("raw, total", [(NANO3, 31_577_937_344), (NANO9, None)], ids=["nano3-30b-a3b", "nano-9b-v2"])
def test_parameters_equal_transformers_on_meta(tmp_path, raw, total):
    cfg = config_json(tmp_path, raw)
    hf = sum(p.numel() for p in _hf(raw).parameters())
    assert count_params.total(cfg) == hf
    assert total is None or hf == total


def test_nano3_parameters_by_hand(tmp_path):
    """23 Mamba2 layers, 23 MoE layers, 6 attention layers, the embeddings, norm and head: by hand."""
    d, V = 2688, 131072
    inner, conv = 64 * 64, 64 * 64 + 2 * 8 * 128
    mamba = d * (inner + conv + 64) + conv * 4 + conv + 3 * 64 + inner + inner * d + d
    moe = 128 * 2 * d * 1856 + 128 * d + 2 * d * 3712 + d  # experts up and down, router, shared, norm
    attention = d * 32 * 128 * 2 + 2 * d * 2 * 128 + d
    assert count_params.total(config_json(tmp_path, NANO3)) == 23 * mamba + 23 * moe + 6 * attention + 2 * V * d + d


@pytest.mark.parametrize("seq", [200, 384])
def test_nano9_forward_flops_equal_flop_counter_on_transformers(tmp_path, seq):
    """Less the named term: transformers' convolution computes K - 1 outputs it drops, 2·conv_dim·K·(K - 1) per
    Mamba2 layer (tfcalc.architecture.mamba2); attention is counted over the full T×T square, as FlopCounterMode
    counts SDPA."""
    cfg, hf = config_json(tmp_path, NANO9), _hf(NANO9)
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        # with a cache: the mask's check for packed sequences, which reads a value back, runs only without one
        hf(torch.zeros(1, seq, dtype=torch.long, device="meta"), use_cache=True)
    conv_dim, K = 128 * 80 + 2 * 8 * 128, 4
    dropped = 27 * 2 * conv_dim * K * (K - 1)
    assert counter.get_total_flops() == count_flops.forward_flops(cfg, Workload(batch=1, seq=seq)) + dropped


def test_nano3_state_at_4096_tokens_equals_transformers_cache(tmp_path):
    """transformers' cache after 4,096 tokens in bf16: K and V of the 6 attention layers (bf16), each Mamba2 layer's
    K convolution columns (bf16) and SSM state (fp32). Its expert loop cannot run on meta, so transformers' model
    here has an MLP where the file has experts (E -> -): E and - layers hold no state, the cache is the same."""
    cfg = config_json(tmp_path, NANO3)
    hf = _hf(dict(NANO3, hybrid_override_pattern=NANO3["hybrid_override_pattern"].replace("E", "-")),
             dtype=torch.bfloat16)
    with torch.no_grad():
        cache = hf(torch.zeros(1, 4096, dtype=torch.long, device="meta"), use_cache=True).cache
    hf_bytes = hf_cache_bytes(cache)
    conv_dim = 64 * 64 + 2 * 8 * 128
    by_hand = 6 * 2 * 4096 * 2 * 128 * 2 + 23 * (conv_dim * 4 * 2 + 64 * 64 * 128 * 4)
    assert kv_cache_bytes(cfg, Workload(batch=1, seq=4096, kv_dtype="bf16")) == hf_bytes == by_hand


# a tiny Nemotron-H with every letter: M * - E M (experts in 2 groups, a shared expert, the correction bias)
TINY = dict(vocab_size=61, hidden_size=32, hybrid_override_pattern="M*-EM", num_attention_heads=4,
            num_key_value_heads=2, head_dim=8, mamba_num_heads=8, mamba_head_dim=8, n_groups=2, ssm_state_size=6,
            conv_kernel=4, chunk_size=4, intermediate_size=24, moe_intermediate_size=12,
            moe_shared_expert_intermediate_size=20, n_routed_experts=8, num_experts_per_tok=2, n_group=2, topk_group=1,
            routed_scaling_factor=2.5, max_position_embeddings=64)


@pytest.fixture(scope="module")
def tiny_pair(tmp_path_factory):
    torch.manual_seed(0)
    hf = _hf(TINY, device="cpu")
    nudge(hf, "gate.weight")
    with torch.no_grad():
        for name, b in hf.named_buffers():
            if "e_score_correction_bias" in name:
                b.normal_(0.0, 0.1)
    return saved_pair(hf, tmp_path_factory.mktemp("tiny_nemotron_h"))


def test_tiny_checkpoint_logits_equal_transformers(tiny_pair):
    hf, model = tiny_pair
    assert_logits_close(hf, model, torch.randint(0, 61, (2, 11)))


def test_tiny_forward_flops_equal_flop_counter_on_transformers(tiny_pair):
    """Every letter, on real weights: transformers' expert loop runs each token's top-2 rows, as tfcalc counts. Its
    attention runs eager here: on a CPU, SDPA's fused kernel (_scaled_dot_product_flash_attention_for_cpu) is no op
    FlopCounterMode counts, so the scores would go unseen."""
    hf, model = tiny_pair
    T = 11
    measured = eager_flops(hf, torch.randint(0, 61, (1, T)))
    conv_dim, K = 64 + 2 * 2 * 6, 4
    dropped = 2 * 2 * conv_dim * K * (K - 1)
    assert measured == count_flops.forward_flops(model.cfg, Workload(batch=1, seq=T)) + dropped


def test_decode_over_the_hybrid_cache_equals_the_uncached_forward(tiny_pair):
    hf, model = tiny_pair
    prompt, new = torch.randint(0, 61, (2, 5)), 8
    cache = model.new_cache(2, 5 + new)
    assert_decode_equals(model, hf, prompt, new, cache)
    cfg = model.cfg  # its bytes are the count's: K/V of the one attention layer, two Mamba2 states
    assert cache.nbytes == kv_cache_bytes(cfg, Workload(batch=2, seq=5, gen=new, dtype="fp32", kv_dtype="fp32"))


@pytest.mark.parametrize("key, value, message", [
    ("hybrid_override_pattern", "MEX", "must be letters M, \\*, - and E"),
    ("hybrid_override_pattern", "", "must be letters"),
    ("hybrid_override_pattern", ["M"], "must be letters"),
    ("layers_block_type", ["ssm"], "layers_block_type"),
    ("num_nextn_predict_layers", -1, "'num_nextn_predict_layers' must be 0 or more"),
    ("mamba_ssm_cache_dtype", "int8", "mamba_ssm_cache_dtype"),
    ("n_shared_experts", 2, "one shared MLP"),
    ("n_shared_experts", 0, "one shared MLP whatever it says"),  # tfcalc had counted no shared MLP
    ("mlp_bias", True, "'mlp_bias' true beside E layers"),  # tfcalc had biased the routed experts too
    ("mlp_hidden_act", "swish2", "not an activation"),
    ("mamba_num_heads", 60, "multiple of 'n_groups'"),
])
def test_bad_nemotron_h_config_json_is_one_line(tmp_path, key, value, message):
    from tfcalc.errors import InputError

    raw = dict(NANO3, **{key: value})
    if key == "layers_block_type":
        raw.pop("hybrid_override_pattern")
    with pytest.raises(InputError, match=message):
        config_json(tmp_path, raw)


def test_the_preset_is_the_published_config_json(tmp_path):
    cfg, preset = config_json(tmp_path, NANO3), load("nemotron-3-nano-30b-a3b")
    assert count_params.breakdown(cfg) == count_params.breakdown(preset)
    assert count_params.total(preset) == 31_577_937_344
    w = Workload(batch=1, seq=4096, kv_dtype="bf16")
    assert count_flops.forward_flops(cfg, w) == count_flops.forward_flops(preset, w)
    assert kv_cache_bytes(cfg, w) == kv_cache_bytes(preset, w)


def test_every_decode_step_runs_the_same_ops_without_a_sync(tiny_pair):
    """The Mamba2 step's conv shift, recurrence and read, beside the attention layer's K/V scatter: the same aten
    ops on the same shapes at every position, none reading a value back (tests/model/test_state_static.py's
    recorder; the MoE layer's forward is left out there, as it is for every MoE model)."""
    from test_state_static import SYNCS, Recorder, _pause

    _, model = tiny_pair
    cache, records = model.new_cache(2, 16), []
    with torch.inference_mode():
        token = next_token(model.prefill(torch.randint(0, 61, (2, 5)), cache))
        for _ in range(6):
            recorder = Recorder()
            handles = _pause(model, recorder)
            with recorder:
                token = next_token(model.decode(token, cache))
            for h in handles:
                h.remove()
            records.append(recorder.ops)
    assert all(r == records[0] for r in records[1:])
    ops = {name for name, _, _, _ in records[0]}
    assert not ops & SYNCS and not any(b for _, b, _, _ in records[0])
    assert {"conv1d", "convolution"} & ops and {"scatter_", "scatter"} & ops  # the conv step; K, V at device slots
