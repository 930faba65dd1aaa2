"""Kimi Linear (model_type kimi_linear) and its Kimi Delta Attention (tfcalc.architecture.kimi_delta,
tfcalc.model.kimi_delta) held against transformers 5.24 (modeling_kimi_linear.py, which runs on a CPU through its
torch fallbacks, chunk_kimi_delta_attention and recurrent_kimi_delta_attention): the published config at full
size on meta (parameters exact, FlopCounterMode on its KDA layer at two lengths plus the terms it cannot see, the
cache it fills at 4,096 tokens), tiny checkpoints (four layers, both kinds, experts) loaded by load_model (logits
within 1e-4, prefill and decode equal to the uncached forward and to transformers' generate, the state's bytes,
FLOPs of the forward and of each step), what autograd keeps, and the hostile inputs of the new fields.

By hand (tfcalc.architecture.kimi_delta's docstring), per chunk of c = 64 and head of h channels: transformers'
torch path computes the decayed K_β·Kᵀ and Q·Kᵀ as elementwise products summed over the channels, 2·c²·h FLOPs
each that FlopCounterMode does not see; it inverts the c×c system by forward substitution (unseen) and multiplies
V_β and the decayed K_β by the inverse, (c, c) @ (c, h) twice, 2·2·c²·h that FlopCounterMode sees; tfcalc counts
two unit lower triangular solves in their place, c(c-1)·2h (gated DeltaNet's convention, whose transformers path
solves). Its convolution pads K - 1 on both sides and drops K - 1 outputs (2·C·K·(K - 1) a sequence, C = 3·H·h),
which tfcalc does not count.
"""

from __future__ import annotations

import json
import math

import pytest
import torch
from hf_pairs import (
    assert_decode_equals,
    assert_logits_close,
    assert_rows_decode_alone,
    assert_verify_refused,
    nudge,
    saved_bytes,
    step_flops,
)

from tfcalc.count.model import flops as count_flops, params as count_params
from tfcalc.count.model.memory import kv_cache_bytes
from tfcalc.errors import InputError
from tfcalc.presets import load
from tfcalc.workload import Workload

pytestmark = pytest.mark.filterwarnings("ignore")
TESTED_TYPES = {"kimi_linear"}

# moonshotai/Kimi-Linear-48B-A3B-Instruct, config.json as published on the Hugging Face Hub
# (https://huggingface.co/moonshotai/Kimi-Linear-48B-A3B-Instruct/blob/main/config.json; the keys that shape the
# model, auto_map and the token ids left out; presets/kimi-linear-48b-a3b.yaml cites where each was read)
PUBLISHED = {
    "architectures": ["KimiLinearForCausalLM"], "model_type": "kimi_linear", "dtype": "bfloat16",
    "first_k_dense_replace": 1, "head_dim": 72, "hidden_act": "silu", "hidden_size": 2304, "intermediate_size": 9216,
    "kv_lora_rank": 512, "linear_attn_config": {
        "full_attn_layers": [4, 8, 12, 16, 20, 24, 27], "head_dim": 128,
        "kda_layers": [1, 2, 3, 5, 6, 7, 9, 10, 11, 13, 14, 15, 17, 18, 19, 21, 22, 23, 25, 26], "num_heads": 32,
        "short_conv_kernel_size": 4},
    "mla_use_nope": True, "model_max_length": 1048576, "moe_intermediate_size": 1024, "moe_layer_freq": 1,
    "moe_renormalize": True, "moe_router_activation_func": "sigmoid", "num_attention_heads": 32, "num_expert_group": 1,
    "num_experts": 256, "num_experts_per_token": 8, "num_hidden_layers": 27, "num_key_value_heads": 32,
    "num_nextn_predict_layers": 0, "num_shared_experts": 1, "q_lora_rank": None, "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64, "rms_norm_eps": 1e-05, "rope_scaling": None, "rope_theta": 10000.0,
    "routed_scaling_factor": 2.446, "tie_word_embeddings": False, "topk_group": 1, "use_cache": True,
    "v_head_dim": 128, "vocab_size": 163840,
}
C = 64  # chunk_kimi_delta_attention's chunk_size


def _write(tmp_path, raw: dict):
    folder = tmp_path / "kimi-linear"
    folder.mkdir(exist_ok=True)
    (folder / "config.json").write_text(json.dumps(raw))
    return str(folder / "config.json")


def _hf_config(raw: dict):
    import transformers

    kw = {k: v for k, v in raw.items() if k not in ("model_type", "architectures", "dtype")}
    return transformers.KimiLinearConfig(**kw)


@pytest.fixture(scope="module")
def hf_meta():
    import transformers

    with torch.device("meta"):
        return transformers.KimiLinearForCausalLM(_hf_config(PUBLISHED))


def kda_layers(cfg) -> int:
    return sum(n for block, n in cfg.architecture.output.kinds() if type(block.mixer).__name__ == "KimiDeltaAttention")


def unseen_and_replaced(cfg, batch: int, seq: int) -> int:
    """tfcalc's KDA FLOPs less FlopCounterMode's on transformers' torch path, the convolution aside (module
    docstring): per chunk and head, + 2·2c²h (the decayed products, unseen) - 2·2c²h (the products by the inverse,
    seen) + c(c-1)·2h (the solves) -- the first two cancel where dk = dv = h."""
    H, h = cfg.kda_heads, cfg.kda_head_dim
    per_chunk = 2 * 2 * C * C * h - 2 * 2 * C * C * h + C * (C - 1) * 2 * h
    return kda_layers(cfg) * batch * H * math.ceil(seq / C) * per_chunk


def conv_padding(cfg, batch: int) -> int:
    """The convolution outputs transformers computes and drops: 2·C·K·(K - 1) a sequence and KDA layer."""
    K = cfg.kda_conv_kernel or 4
    return kda_layers(cfg) * batch * 2 * 3 * cfg.kda_heads * cfg.kda_head_dim * K * (K - 1)


# ---------- the published config at full size ----------


def test_published_config_parameters_exact(tmp_path, hf_meta):
    """transformers' model on meta holds tfcalc's count, and tfcalc's own module on meta the same, group by group;
    one KDA layer by hand."""
    from tfcalc.measure.params import measure_params

    cfg = load(_write(tmp_path, PUBLISHED))
    hf_total = sum(p.numel() for p in hf_meta.parameters())
    assert count_params.total(cfg) == hf_total
    total, breakdown = measure_params(cfg)
    assert total == hf_total and breakdown == count_params.breakdown(cfg)
    # q, k, v 2304 × 4096 each; the convolution 12288 × 4; f_a 128 × 2304, f_b 4096 × 128, dt_bias 4096, A_log 32;
    # b_proj 32 × 2304; g_a and g_b as f's; o_norm 128; o_proj 4096 × 2304
    kda = 3 * 2304 * 4096 + 12288 * 4 + 2 * (128 * 2304 + 4096 * 128) + 4096 + 32 + 32 * 2304 + 128 + 4096 * 2304
    assert sum(p.numel() for p in hf_meta.model.layers[0].self_attn.parameters()) == kda
    assert breakdown["attn_q_conv1d_weight"] == 20 * 4096 * 4 and cfg.layer_pattern == "(kda*3, nope)*6, kda*2, nope"


def test_the_preset_is_the_published_config(tmp_path):
    ours, theirs = load("kimi-linear-48b-a3b"), load(_write(tmp_path, PUBLISHED))
    assert ours.architecture == theirs.architecture


@pytest.mark.parametrize("seq", [100, 300])
def test_kda_flops_equal_flop_counter_mode_on_transformers_layer(seq):
    """transformers' KimiLinearDeltaAttention at full width on meta under FlopCounterMode, plus the terms by hand
    (module docstring), less the convolution outputs it drops: tfcalc's count of the layer. 100 and 300 tokens:
    2 and 5 chunks, padded."""
    import transformers.models.kimi_linear.modeling_kimi_linear as m
    from torch.utils.flop_counter import FlopCounterMode

    with torch.device("meta"):
        layer = m.KimiLinearDeltaAttention(_hf_config(PUBLISHED), 0)
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        layer(torch.empty(1, seq, 2304, device="meta"))
    cfg = load("kimi-linear-48b-a3b")
    mixer = cfg.architecture.output.layer(0).mixer
    ours = sum(2 * seq * lin.n_in * lin.n_out for lin in mixer.linears()) + sum(
        mx.flops for mx in mixer.mixing(seq, seq))
    n = math.ceil(seq / C)
    by_hand = 32 * n * C * (C - 1) * 2 * 128  # the decayed products and the inverse's products cancel at dk = dv
    thrown = 2 * 12288 * 4 * 3
    assert ours == counter.get_total_flops() + by_hand - thrown
    assert by_hand == unseen_and_replaced(cfg, 1, seq) // 20 and thrown == conv_padding(cfg, 1) // 20


def test_generation_state_at_4096_tokens_is_what_transformers_cache_holds(hf_meta):
    """Every layer of transformers' model on meta over a 4,096-token prompt in bf16 with its DynamicCache: the
    7 latent layers' latents and shared keys (512 + 64 a position), the 20 KDA layers' convolution inputs (K = 4
    columns of 12,288 channels, bf16) and recurrent state (32 × 128 × 128, fp32): tfcalc's generation state."""
    from transformers import DynamicCache

    model = hf_meta.to(torch.bfloat16)
    cache = DynamicCache(config=model.config)
    T = 4096
    x = torch.empty(1, T, 2304, device="meta", dtype=torch.bfloat16)
    with torch.no_grad():
        for layer in model.model.layers:
            if layer.block_type == "linear_attention":
                layer.self_attn(x, cache=cache)
            else:
                layer.self_attn(x, None, cache=cache)
    held = 0
    for lay in cache.layers:
        for name in ("keys", "values", "conv_states", "recurrent_states"):
            t = getattr(lay, name, None)
            tensors = t.values() if isinstance(t, dict) else [t]
            held += sum(v.numel() * v.element_size() for v in tensors if isinstance(v, torch.Tensor))
    by_hand = 7 * T * (512 + 64) * 2 + 20 * (12288 * 4 * 2 + 32 * 128 * 128 * 4)
    assert held == by_hand == kv_cache_bytes(load("kimi-linear-48b-a3b"), Workload(batch=1, seq=T, kv_dtype="bf16"))


def test_measured_flops_on_meta_put_the_convolution_and_the_scan_with_the_mixing():
    """tfcalc.measure.flops on meta at full size (`tfcalc flops --measure`): group by group as counted."""
    from tfcalc.measure.flops import measure_flops

    cfg, w = load("kimi-linear-48b-a3b"), Workload(batch=1, seq=100)
    m = measure_flops(cfg, w)
    b = count_flops.breakdown(cfg, w)
    assert m.groups == dict({g: n for g, n in b.totals().items() if g != "embeddings" or n}, other=0)
    assert m.total == count_flops.forward_flops(cfg, w)


# ---------- tiny checkpoints: logits, decode with the fixed state, FLOPs ----------

TINY = dict(vocab_size=61, hidden_size=32, intermediate_size=40, moe_intermediate_size=16, num_hidden_layers=4,
            num_attention_heads=4, num_key_value_heads=4, kv_lora_rank=12, q_lora_rank=None, qk_rope_head_dim=4,
            qk_nope_head_dim=8, v_head_dim=6, num_local_experts=8, num_experts_per_tok=2, linear_head_dim=8,
            linear_num_heads=4, pad_token_id=0, bos_token_id=1, eos_token_id=2, model_max_length=256,
            layer_types=["linear_attention", "linear_attention", "full_attention", "linear_attention"])
# the other forms: a compressed Q, grouped routing, biases, a kernel of 3, no dense layer, 2 shared experts
VARIANT = dict(TINY, q_lora_rank=20, n_group=4, topk_group=2, attention_bias=True, linear_conv_kernel_dim=3,
               first_k_dense_replace=0, n_shared_experts=2, norm_topk_prob=False, routed_scaling_factor=1.5)


def _pair(tmp_path_factory, kw, name):
    import transformers

    import tfcalc

    torch.manual_seed(0)
    hf = transformers.KimiLinearForCausalLM(transformers.KimiLinearConfig(**kw)).eval()
    nudge(hf, "A_log", "dt_bias", "e_score_correction_bias")
    folder = tmp_path_factory.mktemp(name)
    hf.save_pretrained(folder)
    return hf, tfcalc.load_model(str(folder)), load(str(folder / "config.json"))


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return _pair(tmp_path_factory, TINY, "kimi-linear")


def test_tiny_parameters_and_logits_across_chunks_equal_transformers(tiny, tmp_path_factory):
    """130 tokens: three chunks, the state carried between them; the other forms at 70."""
    hf, ours, cfg = tiny
    assert count_params.total(cfg) == sum(p.numel() for p in hf.parameters()) == sum(
        p.numel() for p in ours.parameters())
    assert cfg.layer_pattern == "kda*2, nope, kda"
    assert_logits_close(hf, ours, torch.randint(0, 61, (2, 130), generator=torch.Generator().manual_seed(3)))
    hf2, ours2, cfg2 = _pair(tmp_path_factory, VARIANT, "kimi-linear-variant")
    assert count_params.total(cfg2) == sum(p.numel() for p in hf2.parameters())
    assert_logits_close(hf2, ours2, torch.randint(0, 61, (2, 70), generator=torch.Generator().manual_seed(4)))


def test_params_of_the_folder_counts_every_stored_tensor(tmp_path_factory, cli):
    """`tfcalc params FOLDER` reads the safetensors header (the released names: q/k/v_conv1d, the forget gate's
    under self_attn, block_sparse_moe, experts' w1/w2/w3): every stored element placed, equal to the count."""
    from safetensors import safe_open

    _pair(tmp_path_factory, VARIANT, "kimi-linear-folder")
    folder = next(p for p in tmp_path_factory.getbasetemp().iterdir() if p.name.startswith("kimi-linear-folder"))
    with safe_open(str(folder / "model.safetensors"), framework="pt") as f:
        stored = {k: math.prod(f.get_slice(k).get_shape()) for k in f.keys()}
    data = cli("params", str(folder), "--json").json()
    biases = sum(n for k, n in stored.items() if k.endswith("e_score_correction_bias"))  # buffers, no parameter
    assert data["checkpoint_total"] == sum(stored.values()) and biases == 4 * 8
    assert data["checkpoint"]["parameters_matched"] == sum(stored.values()) - biases == data["analytic_total"]
    assert not data["checkpoint"]["unexplained"] and len(data["checkpoint"]["buffers"]) == 4


def test_tiny_prefill_and_decode_equal_the_full_forward_and_transformers(tiny):
    """A prompt of 60, 9 new tokens (across the chunk boundary at 64): the recurrent step on the state continues
    the chunked prefill, as the uncached forward over the whole sequence and transformers' generate; the state is
    the count's bytes, allocated once."""
    hf, ours, cfg = tiny
    prompt = torch.randint(0, 61, (2, 60), generator=torch.Generator().manual_seed(5))
    cache = ours.new_cache(2, 69)
    assert_decode_equals(ours, hf, prompt, 9, cache)
    assert cache.nbytes == kv_cache_bytes(cfg, Workload(batch=2, seq=60, gen=9, dtype="fp32", kv_dtype="fp32"))
    assert not cache.rewindable


def test_tiny_state_is_what_transformers_cache_holds(tiny):
    """transformers' DynamicCache after a 10-token prompt (fp32): the latent layer's 10 positions of 12 + 4, the
    KDA layers' 4 columns of 96 channels and 4 × 8 × 8 states -- tfcalc's state at 10 tokens."""
    from hf_pairs import hf_cache_bytes

    hf, _, cfg = tiny
    with torch.no_grad():
        cache = hf(torch.randint(0, 61, (1, 10)), use_cache=True).cache
    by_hand = 10 * (12 + 4) * 4 + 3 * (96 * 4 * 4 + 4 * 8 * 8 * 4)
    w = Workload(batch=1, seq=10, dtype="fp32", kv_dtype="fp32")
    assert hf_cache_bytes(cache) == by_hand == kv_cache_bytes(cfg, w)


def test_tiny_forward_flops_with_tfcalcs_counter_equal_the_count(tiny):
    """tfcalc's counter (with the triangular solve's formula) on tfcalc's module equals the count, at 70 tokens;
    transformers' whole model under FlopCounterMode (eager attention) plus the terms by hand, less its dropped
    convolution outputs, is the same count."""
    from hf_pairs import eager_flops

    from tfcalc.measure.flops import flop_counter

    hf, ours, cfg = tiny
    idx = torch.randint(0, 61, (2, 70))
    with torch.no_grad(), flop_counter() as counter:
        ours(idx)
    count = count_flops.forward_flops(cfg, Workload(batch=2, seq=70))
    assert counter.get_total_flops() == count
    assert count == eager_flops(hf, idx) + unseen_and_replaced(cfg, 2, 70) - conv_padding(cfg, 2)


def test_tiny_decode_step_flops_are_counted_and_static(tiny):
    """FlopCounterMode on each decode step equals the count's decode step; the KDA's recurrent step is fixed in
    the context, the latent layer's absorbed step reads a bucket of 16 slots (the keys past the context hidden
    by the mask: 2·4·(12 + 4) + 2·4·12 FLOPs each, Q·Kᵀ over the latent and shared key, attention·latent). The
    step's ops do not change with the context."""
    from tfcalc.measure.flops import flop_counter

    _, ours, cfg = tiny
    steps = step_flops(ours, ours.new_cache(1, 40), torch.randint(0, 61, (1, 5)), 11, counter=flop_counter)
    for context, (total, _) in zip(range(6, 17), steps, strict=True):
        masked = (2 * 4 * 16 + 2 * 4 * 12) * (16 - context)
        assert total == count_flops.decode_flops(cfg, Workload(batch=1, seq=context)) + masked
    assert all(counts == steps[0][1] for _, counts in steps)


def test_tiny_continuous_batching_rows(tiny):
    """Two prompts in two rows of the slot cache, decoded together: each row's tokens its own sequence's."""
    _, ours, _ = tiny
    prompts = [torch.randint(0, 61, (1, n), generator=torch.Generator().manual_seed(n)) for n in (3, 7)]
    assert_rows_decode_alone(ours, prompts, max_tokens=16, release=False)


def test_tiny_verify_step_is_refused(tiny):
    """A KDA state cannot return to an earlier position: speculative verify (extend) is refused in one line."""
    assert_verify_refused(tiny[1], 61)


@pytest.mark.parametrize("dtype, e", [(torch.float32, 4), (torch.bfloat16, 2)])
@pytest.mark.parametrize("form, bound", [("kimi", None), ("kimi", -5.0), ("bailing", None), ("bailing", -5.0)])
def test_saved_activations_equal_what_autograd_keeps(dtype, e, form, bound):
    """saved_tensors_hooks on tfcalc's KDA module against the component's saved bytes times the tokens, to the
    byte: below the 64-token chunk (padded), at it, above it and between whole chunks, one and two sequences, both
    forms (Kimi's bottlenecks, Ling 3's full projections) with and without the bounded decay. Before: 12x low at 5
    tokens (the chunk padding), 45 % low at 130."""
    from tfcalc.architecture.kimi_delta import kda
    from tfcalc.model.kimi_delta import KimiDeltaModule

    for spec in (kda(64, 4, 8, form=form, decay_bound=bound), kda(48, 2, 16, form=form, decay_bound=bound)):
        module = KimiDeltaModule(spec).to(dtype)
        for p in module.parameters():
            torch.nn.init.normal_(p, 0.0, 0.05)
        for batch, T in ((1, 5), (2, 5), (1, 64), (2, 100), (1, 128), (1, 130)):
            x = torch.randn(batch, T, spec.d_model, dtype=dtype, requires_grad=True)
            kept = saved_bytes(module, x)
            assert kept == batch * T * sum(spec.saved(batch, T, e, "math", False).values()), (spec.d_model, batch, T)


def test_chunked_form_equals_transformers_recurrent_form():
    """tfcalc's chunked KDA (across two chunks, from a given state) against transformers' recurrent torch path
    token by token, and its final state."""
    import transformers.models.kimi_linear.modeling_kimi_linear as m

    from tfcalc.model.gated_deltanet import l2norm
    from tfcalc.model.kimi_delta import chunked

    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 70, 3, 8, generator=g) for _ in range(3))
    decay, beta, s0 = -torch.rand(2, 70, 3, 8, generator=g), torch.rand(2, 70, 3, generator=g), torch.randn(2, 3, 8, 8)
    want, s_want = m.recurrent_kimi_delta_attention(q, k, v, g=decay, beta=beta, initial_state=s0.clone(),
                                                    output_final_state=True, use_qk_l2norm_in_kernel=True)
    Q, K, V, G, Bt = (t.transpose(1, 2) for t in (q, k, v, decay, beta))
    got, s = chunked(l2norm(Q) * 8 ** -0.5, l2norm(K), V, G, Bt, C, s0.clone())
    assert (got.transpose(1, 2) - want).abs().max() < 1e-4 and (s - s_want).abs().max() < 1e-4


# ---------- hostile inputs ----------


@pytest.mark.parametrize("changes, message", [
    (dict(linear_attn_config=[1]), "'linear_attn_config' must be an object"),
    (dict(linear_attn_config=dict(PUBLISHED["linear_attn_config"], num_heads=0)), "'num_heads' must be a positive"),
    (dict(linear_attn_config=dict(PUBLISHED["linear_attn_config"], head_dim=True)), "'head_dim' must be a positive"),
    (dict(linear_attn_config=dict(PUBLISHED["linear_attn_config"], short_conv_kernel_size=2.5)),
     "'short_conv_kernel_size' must be a positive"),
    (dict(linear_attn_config=dict(PUBLISHED["linear_attn_config"], full_attn_layers=[4, 8])),
     "must number each of the 27 layers once"),
    (dict(linear_attn_config=dict(PUBLISHED["linear_attn_config"], kda_layers="1-26")), "must number each"),
    (dict(linear_attn_config=None, linear_num_heads="32"), "'linear_num_heads' must be a positive"),
    (dict(layer_types=["linear_attention"] * 3), "lists 3 layers"),
    (dict(layer_types=["sliding_attention"] * 27), "must be a list of linear_attention, full_attention"),
    (dict(mla_use_nope=False), "'mla_use_nope' false is not supported"),
    (dict(moe_router_activation_func="softmax"), "scores with a sigmoid"),
    (dict(mlp_layer_types=["sparse", "dense"] + ["sparse"] * 25), "the dense layers first"),
    (dict(mlp_layer_types=["dense"] * 3), "for each of the 27 layers"),
    (dict(first_k_dense_replace=-1), "'first_k_dense_replace' must be 0 or more"),
    (dict(hidden_act="gelu"), "with SiLU only"),
    (dict(num_key_value_heads=8), "'num_key_value_heads' 8 is not supported"),
    (dict(num_hidden_layers=2**41), "num_hidden_layers|n_layer"),
])
def test_hostile_config_json(tmp_path, changes, message):
    with pytest.raises(InputError, match=message):
        load(_write(tmp_path, {**PUBLISHED, **changes}))


def test_default_layers_and_big_depths_cost_nothing(tmp_path):
    """No layer list: layer 0 KDA, then three KDA to one latent layer (KimiLinearConfig's default), written as a
    pattern for 2**30 layers; every layer dense or sparse by first_k_dense_replace."""
    raw = {k: v for k, v in PUBLISHED.items() if k != "linear_attn_config"}
    cfg = load(_write(tmp_path, {**raw, "num_hidden_layers": 2**30}))
    assert cfg.layer_pattern == f"kda, (kda*3, nope)*{(2**30 - 1) // 4}, kda*3"
    dense = load(_write(tmp_path, {**raw, "num_hidden_layers": 6, "first_k_dense_replace": 6}))
    assert dense.n_expert is None and dense.layer_pattern == "kda*4, nope, kda"


@pytest.mark.parametrize("overrides, message", [
    (["kda_heads=4"], "name its layers 'kda' in layer_pattern"),
    (["layer_pattern=(kda*3, full)*8"], "need 'kda_heads'"),
    (["layer_pattern=(kda*3, full)*8", "kda_heads=4"], "need 'kda_head_dim'"),
    (["layer_pattern=(kda*3, full)*8", "kda_heads=4", "kda_head_dim=0"], "must be positive"),
    (["layer_pattern=(kda*3, full)*8", "kda_heads=4", "kda_head_dim=64", "kda_conv_kernel=-1"], "must be positive"),
    (["layer_pattern=(kda*3, full)*8", "kda_heads=4", "kda_head_dim=64", "activation=gelu"], "must be silu"),
    (["layer_pattern=(kda*3, full)*8", "kda_heads=true", "kda_head_dim=64"], "kda_heads"),
    (["layer_pattern=(kda*3, full)*8", "kda_heads=4", "kda_head_dim=6.5"], "kda_head_dim"),
])
def test_hostile_flat_fields(overrides, message):
    with pytest.raises(InputError, match=message):
        load("llama2-7b", overrides)


def test_flat_fields_build_the_hybrid():
    cfg = load("llama2-7b", ["layer_pattern=(kda*3, full)*8", "kda_heads=4", "kda_head_dim=64"])
    kinds = [(type(b.mixer).__name__, n) for b, n in cfg.architecture.output.kinds()]
    assert kinds == [("KimiDeltaAttention", 24), ("Attention", 8)]


def test_cli_reports_the_state_apart(cli):
    """`tfcalc memory` at 4,096 tokens: the preset's generation state is the count's (latent positions that grow
    and KDA state that does not)."""
    r = cli("memory", "kimi-linear-48b-a3b", "--seq", "4096", "--batch", "1", "--json")
    assert r.code == 0, r.err
    assert r.json()["kv_cache_bytes"] == kv_cache_bytes(load("kimi-linear-48b-a3b"), Workload(batch=1, seq=4096))
