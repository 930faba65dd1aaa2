"""Ling 3 hybrids (model_type bailing_hybrid) held against transformers 5.24 (modeling_bailing_hybrid.py, which runs
on a CPU through its torch fallbacks, chunk_kimi_delta_attention and recurrent_kimi_delta_attention): Kimi Delta
Attention in Ling 3's form (tfcalc.architecture.kimi_delta, form "bailing": full f_proj and g_proj, A_log per
head, the bounded decay) beside latent attention with a head gate (tfcalc.architecture.latent, head_gate).

No published config.json is held here (no preset either): the full-size checks run on BailingHybridConfig's
defaults, the class's documented checkpoint inclusionAI/Ling-3.0-Flash (configuration_bailing_hybrid.py), as
save_pretrained writes them, and on the same keys as the released files spell them (head_dim the KDA's, no
linear_* keys). On meta: parameters exact, FlopCounterMode on its KDA layer at two lengths plus the terms it cannot
see, the cache at 4,096 tokens. Tiny checkpoints (four layers, both kinds, experts) loaded by load_model: logits
within 1e-4, prefill and decode equal to the uncached forward and to transformers' generate, the state's bytes,
FLOPs of the forward and of each step; what autograd keeps; the hostile inputs of the new keys and fields.

By hand, as for Kimi Linear (tests/test_kimi_linear.py's docstring: the same chunked torch path), per chunk of
c = 64 and head of h channels: + 2·2c²h (the decayed products, unseen) - 2·2c²h (the products by the inverse, seen)
+ c(c-1)·2h (tfcalc's two triangular solves); the convolution's 2·C·K·(K - 1) dropped outputs, C = 3·H·h.
"""

from __future__ import annotations

import json
import math

import pytest
import torch
from hf_pairs import assert_decode_equals, assert_logits_close, assert_rows_decode_alone, nudge, saved_bytes, step_flops

from tfcalc.count.model import flops as count_flops, params as count_params
from tfcalc.count.model.memory import kv_cache_bytes
from tfcalc.errors import InputError
from tfcalc.presets import load
from tfcalc.workload import Workload

pytestmark = pytest.mark.filterwarnings("ignore")
TESTED_TYPES = {"bailing_hybrid"}
C = 64  # chunk_kimi_delta_attention's chunk_size

# the keys of a Ling 3 file as the released ones spell them (the KDA's head_dim, the sizes of BailingHybridConfig's
# defaults, no linear_* keys), beside the keys transformers itself reads
RELEASED = {
    "architectures": ["BailingHybridForCausalLM"], "model_type": "bailing_hybrid", "dtype": "bfloat16",
    "vocab_size": 157184, "hidden_size": 2560, "intermediate_size": 6144, "moe_intermediate_size": 768,
    "num_hidden_layers": 42, "num_attention_heads": 32, "num_key_value_heads": 32, "head_dim": 128,
    "num_experts": 512, "num_experts_per_tok": 8, "num_shared_experts": 1, "n_group": 8, "topk_group": 4,
    "routed_scaling_factor": 2.5, "norm_topk_prob": True, "first_k_dense_replace": 2, "kv_lora_rank": 512,
    "q_lora_rank": None, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128, "rope_theta": 6000000,
    "rope_interleave": True, "layer_group_size": 6, "short_conv_kernel_size": 4, "no_kda_lora": True,
    "kda_safe_gate": True, "kda_lower_bound": -5.0, "gated_attention_proj_granularity_type": "head_wise",
    "score_function": "sigmoid", "moe_shared_expert_intermediate_size": 768, "num_nextn_predict_layers": 1,
    "rms_norm_eps": 1e-6, "max_position_embeddings": 262144, "tie_word_embeddings": False,
}


def _write(tmp_path, raw: dict):
    folder = tmp_path / "bailing-hybrid"
    folder.mkdir(exist_ok=True)
    (folder / "config.json").write_text(json.dumps(raw))
    return str(folder / "config.json")


def _defaults() -> dict:
    """BailingHybridConfig() as save_pretrained writes it."""
    import transformers

    return json.loads(transformers.BailingHybridConfig().to_json_string())


@pytest.fixture(scope="module")
def hf_meta():
    import transformers

    with torch.device("meta"):
        return transformers.BailingHybridForCausalLM(transformers.BailingHybridConfig())


def kda_layers(cfg) -> int:
    return sum(n for block, n in cfg.architecture.output.kinds() if type(block.mixer).__name__ == "KimiDeltaAttention")


def unseen_and_replaced(cfg, batch: int, seq: int) -> int:
    """tfcalc's KDA FLOPs less FlopCounterMode's on transformers' torch path, the convolution aside (module
    docstring): the decayed products and the inverse's products cancel at dk = dv; the solves remain."""
    H, h = cfg.kda_heads, cfg.kda_head_dim
    return kda_layers(cfg) * batch * H * math.ceil(seq / C) * C * (C - 1) * 2 * h


def conv_padding(cfg, batch: int) -> int:
    """The convolution outputs transformers computes and drops: 2·C·K·(K - 1) a sequence and KDA layer."""
    K = cfg.kda_conv_kernel
    return kda_layers(cfg) * batch * 2 * 3 * cfg.kda_heads * cfg.kda_head_dim * K * (K - 1)


# ---------- the config class's defaults at full size ----------


def test_default_config_parameters_exact(tmp_path, hf_meta):
    """transformers' model on meta holds tfcalc's count, and tfcalc's own module on meta the same, group by group;
    one KDA layer and one latent layer by hand; the released spelling of the same sizes is the same model."""
    from tfcalc.measure.params import measure_params

    cfg = load(_write(tmp_path, _defaults()))
    hf_total = sum(p.numel() for p in hf_meta.parameters())
    assert count_params.total(cfg) == hf_total == 124_414_191_072
    total, breakdown = measure_params(cfg)
    assert total == hf_total and breakdown == count_params.breakdown(cfg)
    # q, k, v 2560 × 4096 each; the convolution 12288 × 4; f_proj 4096 × 2560, dt_bias 4096, A_log 32; b_proj
    # 32 × 2560; g_proj 4096 × 2560; o_norm 128; o_proj 4096 × 2560
    kda = 3 * 2560 * 4096 + 12288 * 4 + 4096 * 2560 + 4096 + 32 + 32 * 2560 + 4096 * 2560 + 128 + 4096 * 2560
    assert sum(p.numel() for p in hf_meta.model.layers[0].self_attn.parameters()) == kda
    # q 2560 → 32 × 192; kv_a 2560 → 576, its norm 512; kv_b 512 → 32 × 256; the head gate 2560 → 32; o 4096 → 2560
    mla = 2560 * 6144 + 2560 * 576 + 512 + 512 * 8192 + 2560 * 32 + 4096 * 2560
    assert sum(p.numel() for p in hf_meta.model.layers[5].self_attn.parameters()) == mla
    assert breakdown["attn_g_proj_weight"] == 35 * 4096 * 2560 + 7 * 32 * 2560
    assert cfg.layer_pattern == "(kda*5, full)*7" and cfg.kda_decay_limit == 5.0
    assert load(_write(tmp_path, RELEASED)).architecture == cfg.architecture


@pytest.mark.parametrize("seq", [100, 300])
def test_kda_flops_equal_flop_counter_mode_on_transformers_layer(tmp_path, seq):
    """transformers' BailingHybridDeltaAttention at full width on meta under FlopCounterMode, plus the solves by
    hand, less the convolution outputs it drops: tfcalc's count of the layer (the full f_proj and g_proj among
    its projections). 100 and 300 tokens: 2 and 5 chunks, padded."""
    import transformers
    import transformers.models.bailing_hybrid.modeling_bailing_hybrid as m
    from torch.utils.flop_counter import FlopCounterMode

    with torch.device("meta"):
        layer = m.BailingHybridDeltaAttention(transformers.BailingHybridConfig(), 0)
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        layer(torch.empty(1, seq, 2560, device="meta"))
    cfg = load(_write(tmp_path, RELEASED))
    mixer = cfg.architecture.output.layer(0).mixer
    ours = sum(2 * seq * lin.n_in * lin.n_out for lin in mixer.linears()) + sum(
        mx.flops for mx in mixer.mixing(seq, seq))
    by_hand = 32 * math.ceil(seq / C) * C * (C - 1) * 2 * 128
    thrown = 2 * 12288 * 4 * 3
    assert ours == counter.get_total_flops() + by_hand - thrown
    assert by_hand == unseen_and_replaced(cfg, 1, seq) // 35 and thrown == conv_padding(cfg, 1) // 35
    assert [lin.name for lin in mixer.linears()] == ["q", "k", "v", "f", "b", "g", "o"]


@pytest.mark.parametrize("seq", [100, 300])
def test_latent_flops_equal_flop_counter_mode_on_transformers_layer(tmp_path, seq):
    """transformers' BailingHybridAttention (eager attention) at full width on meta under FlopCounterMode: tfcalc's
    count of the layer, its projections (the head gate's 2·2560·32 a token among them) and the full square of
    scores, with nothing by hand."""
    import transformers
    import transformers.models.bailing_hybrid.modeling_bailing_hybrid as m
    from torch.utils.flop_counter import FlopCounterMode

    config = transformers.BailingHybridConfig()
    config._attn_implementation = "eager"
    with torch.device("meta"):
        layer, rotary = m.BailingHybridAttention(config, 5), m.BailingHybridRotaryEmbedding(config)
    x = torch.empty(1, seq, 2560, device="meta")
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        layer(x, rotary(x, torch.arange(seq, device="meta")[None]), None)
    mixer = load(_write(tmp_path, RELEASED)).architecture.output.layer(5).mixer
    projections = sum(2 * seq * lin.n_in * lin.n_out for lin in mixer.linears())  # kv_b's "keys": the seq
    assert "g" in [lin.name for lin in mixer.linears()] and mixer.head_gate
    assert projections + sum(mx.flops for mx in mixer.mixing(seq, seq)) == counter.get_total_flops()


def test_generation_state_at_4096_tokens_is_what_transformers_cache_holds(tmp_path, hf_meta):
    """Every layer of transformers' model on meta over a 4,096-token prompt in bf16 with its DynamicCache: the
    7 latent layers' latents and rotary keys (512 + 64 a position), the 35 KDA layers' convolution inputs (K = 4
    columns of 12,288 channels, bf16) and recurrent state (32 × 128 × 128, fp32): tfcalc's generation state."""
    from transformers import DynamicCache

    model = hf_meta.to(torch.bfloat16)
    cache = DynamicCache(config=model.config)
    T = 4096
    x = torch.empty(1, T, 2560, device="meta", dtype=torch.bfloat16)
    rope = model.model.rotary_emb(x, torch.arange(T, device="meta")[None])
    with torch.no_grad():
        for layer in model.model.layers:
            if layer.block_type == "linear_attention":
                layer.self_attn(x, cache=cache)
            else:
                layer.self_attn(x, rope, None, cache=cache)
    held = 0
    for lay in cache.layers:
        for name in ("keys", "values", "conv_states", "recurrent_states"):
            t = getattr(lay, name, None)
            tensors = t.values() if isinstance(t, dict) else [t]
            held += sum(v.numel() * v.element_size() for v in tensors if isinstance(v, torch.Tensor))
    by_hand = 7 * T * (512 + 64) * 2 + 35 * (12288 * 4 * 2 + 32 * 128 * 128 * 4)
    cfg = load(_write(tmp_path, RELEASED))
    assert held == by_hand == kv_cache_bytes(cfg, Workload(batch=1, seq=T, kv_dtype="bf16"))


# ---------- tiny checkpoints: logits, decode with the fixed state, FLOPs ----------

TINY = dict(vocab_size=61, hidden_size=32, intermediate_size=40, moe_intermediate_size=16, num_hidden_layers=4,
            num_attention_heads=4, num_key_value_heads=4, kv_lora_rank=12, q_lora_rank=None, qk_rope_head_dim=4,
            qk_nope_head_dim=8, v_head_dim=6, num_experts=8, num_experts_per_token=2, n_group=2, topk_group=1,
            head_dim=8, layer_group_size=3, first_k_dense_replace=1, pad_token_id=0, bos_token_id=1, eos_token_id=2,
            model_max_length=256, rope_theta=10000.0)
# the other forms: a compressed Q, biases, a kernel of 3, Kimi's softplus decay (kda_safe_gate false), no dense
# layer, 2 shared experts, no renormalization, a layer list, YaRN (its mscale² in the softmax scale)
VARIANT = dict(TINY, q_lora_rank=20, attention_bias=True, short_conv_kernel_size=3, kda_safe_gate=False,
               first_k_dense_replace=0, num_shared_experts=2, moe_renormalize=False, routed_scaling_factor=1.5,
               layer_types=["full_attention", "linear_attention", "linear_attention", "full_attention"],
               rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0, "mscale_all_dim": 1.0,
                                "original_max_position_embeddings": 64, "mscale": 1.0})


def _pair(tmp_path_factory, kw, name):
    import transformers

    import tfcalc

    torch.manual_seed(0)
    hf = transformers.BailingHybridForCausalLM(transformers.BailingHybridConfig(**kw)).eval()
    nudge(hf, "A_log", "dt_bias", "e_score_correction_bias")
    folder = tmp_path_factory.mktemp(name)
    hf.save_pretrained(folder)
    return hf, tfcalc.load_model(str(folder)), load(str(folder / "config.json"))


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return _pair(tmp_path_factory, TINY, "bailing-hybrid")


def test_tiny_parameters_and_logits_across_chunks_equal_transformers(tiny, tmp_path_factory):
    """130 tokens: three chunks, the state carried between them; the other forms at 70."""
    hf, ours, cfg = tiny
    assert count_params.total(cfg) == sum(p.numel() for p in hf.parameters()) == sum(
        p.numel() for p in ours.parameters())
    assert cfg.layer_pattern == "kda*2, full, kda" and cfg.kda_decay_limit == 5.0
    assert_logits_close(hf, ours, torch.randint(0, 61, (2, 130), generator=torch.Generator().manual_seed(3)))
    hf2, ours2, cfg2 = _pair(tmp_path_factory, VARIANT, "bailing-hybrid-variant")
    assert cfg2.kda_decay_limit is None and cfg2.layer_pattern == "full, kda*2, full" and cfg2.rope_scaling == "yarn"
    assert count_params.total(cfg2) == sum(p.numel() for p in hf2.parameters())
    assert_logits_close(hf2, ours2, torch.randint(0, 61, (2, 70), generator=torch.Generator().manual_seed(4)))


@pytest.mark.parametrize("extra, sizes", [(dict(linear_num_heads=2, linear_head_dim=16, linear_conv_kernel_dim=3),
                                           (2, 16, 3)), (dict(head_dim=16, short_conv_kernel_size=2), (4, 16, 2))])
def test_the_kda_sizes_as_transformers_reads_them(tmp_path, extra, sizes):
    """transformers' linear_* keys outrank the ones __post_init__ copies them from (num_attention_heads, head_dim,
    short_conv_kernel_size): its model on meta and tfcalc's count agree on either spelling."""
    import transformers

    kw = dict(TINY, **extra)
    config = transformers.BailingHybridConfig(**kw)
    with torch.device("meta"):
        hf = transformers.BailingHybridForCausalLM(config)
    cfg = load(_write(tmp_path, dict(kw, model_type="bailing_hybrid")))
    assert (config.linear_num_heads, config.linear_head_dim, config.linear_conv_kernel_dim) == sizes == (
        cfg.kda_heads, cfg.kda_head_dim, cfg.kda_conv_kernel)
    assert count_params.total(cfg) == sum(p.numel() for p in hf.parameters())


def test_params_of_the_folder_counts_every_stored_tensor(tmp_path_factory, cli):
    """`tfcalc params FOLDER` reads the safetensors header (the released names save_pretrained writes back:
    word_embeddings, attention, dense, f_proj beside the KDA, q/k/v_conv1d, expert_bias, each expert's own
    projections): every stored element placed, equal to the count."""
    from safetensors import safe_open

    _pair(tmp_path_factory, VARIANT, "bailing-hybrid-folder")
    folder = next(p for p in tmp_path_factory.getbasetemp().iterdir() if p.name.startswith("bailing-hybrid-folder"))
    with safe_open(str(folder / "model.safetensors"), framework="pt") as f:
        stored = {k: math.prod(f.get_slice(k).get_shape()) for k in f.keys()}
    assert "model.layers.1.attention.q_conv1d.weight" in stored and "model.word_embeddings.weight" in stored
    data = cli("params", str(folder), "--json").json()
    biases = sum(n for k, n in stored.items() if k.endswith("expert_bias"))  # buffers, no parameter
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
    convolution outputs, is the same count (the head gate's 2·d·H a token among the projections)."""
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
    by the mask: 2·4·(12 + 4) + 2·4·12 FLOPs each). The step's ops do not change with the context."""
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


@pytest.mark.parametrize("dtype, e", [(torch.float32, 4), (torch.bfloat16, 2)])
def test_saved_activations_are_within_ten_percent_of_what_autograd_keeps(dtype, e):
    """saved_tensors_hooks on tfcalc's KDA module in Ling 3's form against the component's saved bytes."""
    from tfcalc.architecture.kimi_delta import kda
    from tfcalc.model.kimi_delta import KimiDeltaModule

    spec = kda(256, 4, 32, form="bailing", decay_bound=-5.0)
    module = KimiDeltaModule(spec).to(dtype)
    for p in module.parameters():
        torch.nn.init.normal_(p, 0.0, 0.05)
    for T in (128, 256):
        x = torch.randn(1, T, 256, dtype=dtype, requires_grad=True)
        kept = saved_bytes(module, x)
        counted = T * sum(spec.saved(1, T, e, "math", False).values())
        assert abs(counted - kept) <= 0.1 * kept


def test_bounded_decay_is_transformers_forget_gate():
    """tfcalc's decay (the module's ``_decay``) against BailingHybridForgetGate's, with the safe gate and without."""
    import transformers
    import transformers.models.bailing_hybrid.modeling_bailing_hybrid as m

    from tfcalc.architecture.kimi_delta import kda
    from tfcalc.model.kimi_delta import KimiDeltaModule

    x = torch.randn(2, 5, 32, generator=torch.Generator().manual_seed(0))
    for safe in (True, False):
        gate = m.BailingHybridForgetGate(transformers.BailingHybridConfig(
            hidden_size=32, num_attention_heads=4, head_dim=8, kda_safe_gate=safe, kda_lower_bound=-3.0))
        ours = KimiDeltaModule(kda(32, 4, 8, form="bailing", decay_bound=-3.0 if safe else None))
        with torch.no_grad():
            for p in (gate.A_log, gate.dt_bias, gate.f_proj.weight):
                p.copy_(torch.randn_like(p))
            ours.A_log.copy_(gate.A_log)
            ours.dt_bias.copy_(gate.dt_bias)
            ours.f_proj.weight.copy_(gate.f_proj.weight)
            want, got = gate(x).flatten(2), ours._decay(x)
        assert torch.allclose(got, want, atol=1e-6)
        assert bool((got >= -3.0).all()) or not safe  # the bounded decay never falls below the bound


# ---------- hostile inputs ----------


@pytest.mark.parametrize("changes, message", [
    (dict(no_kda_lora=False), "'no_kda_lora': False is not supported"),
    (dict(gated_attention_proj_granularity_type="element_wise"), "gates each head"),
    (dict(score_function="softmax"), "scores with a sigmoid"),
    (dict(rope_interleave=False), "'rope_interleave': False is not supported"),
    (dict(moe_shared_expert_intermediate_size=1024), "768 wide"),
    (dict(moe_shared_expert_intermediate_size="768"), "must be an integer"),
    (dict(kda_lower_bound=0), "'kda_lower_bound' must be negative"),
    (dict(kda_lower_bound="-5"), "'kda_lower_bound' must be a number"),
    (dict(kda_safe_gate="yes"), "'kda_safe_gate' must be true or false"),
    (dict(head_dim=0), "'head_dim' must be a positive integer"),
    (dict(linear_num_heads=2.5), "'linear_num_heads' must be a positive integer"),
    (dict(short_conv_kernel_size=None, linear_conv_kernel_dim=True), "'linear_conv_kernel_dim' must be a positive"),
    (dict(layer_group_size=0), "'layer_group_size' must be a positive integer"),
    (dict(layer_group_size=[6]), "'layer_group_size' must be a positive integer"),
    (dict(layer_types=["linear_attention"] * 3), "lists 3 layers"),
    (dict(layer_types=["sliding_attention"] * 42), "must be a list of linear_attention, full_attention"),
    (dict(mlp_layer_types=["sparse", "dense"] + ["sparse"] * 40), "the dense layers first"),
    (dict(first_k_dense_replace=-1), "'first_k_dense_replace' must be 0 or more"),
    (dict(hidden_act="gelu"), "with SiLU only"),
    (dict(num_key_value_heads=8), "'num_key_value_heads' 8 is not supported"),
    (dict(num_hidden_layers=2**41), "num_hidden_layers|n_layer"),
    (dict(rope_parameters={"rope_type": "linear", "factor": 2.0}), "'rope_scaling' type 'linear' is not supported"),
    (dict(architectures=["BailingMoeV3ForCausalLM"]), "'architectures' 'BailingMoeV3ForCausalLM' is not supported"),
])
def test_hostile_config_json(tmp_path, changes, message):
    with pytest.raises(InputError, match=message):
        load(_write(tmp_path, {**RELEASED, **changes}))


def test_default_layers_and_big_depths_cost_nothing(tmp_path):
    """No layer list: every layer_group_size-th layer latent attention, a trailing part group all KDA
    (BailingHybridConfig's default), written as a pattern for 2**30 layers; a group of 1: no KDA layer at all."""
    cfg = load(_write(tmp_path, {**RELEASED, "num_hidden_layers": 2**30}))
    assert cfg.layer_pattern == f"(kda*5, full)*{2**30 // 6}, kda*{2**30 % 6}"
    import transformers

    c = transformers.BailingHybridConfig(num_hidden_layers=14, layer_group_size=4)
    assert load(_write(tmp_path, {**RELEASED, "num_hidden_layers": 14, "layer_group_size": 4})).layer_pattern == (
        "(kda*3, full)*3, kda*2") and c.layer_types[-3:] == ["full_attention", "linear_attention", "linear_attention"]
    full = load(_write(tmp_path, {**RELEASED, "num_hidden_layers": 4, "layer_group_size": 1}))
    assert full.layer_pattern == "full*4" and full.kda_heads is None


@pytest.mark.parametrize("overrides, message", [
    (["kda_form=bailing"], "name its layers 'kda' in layer_pattern"),
    (["layer_pattern=(kda*3, full)*8", "kda_heads=4", "kda_head_dim=64", "kda_form=glm"], "kda_form"),
    (["layer_pattern=(kda*3, full)*8", "kda_heads=4", "kda_head_dim=64", "kda_decay_limit=-5"], "must be positive"),
    (["layer_pattern=(kda*3, full)*8", "kda_heads=4", "kda_head_dim=64", "kda_decay_limit=0"], "must be positive"),
    (["attn_head_gate=true"], "applies to latent attention only"),
])
def test_hostile_flat_fields(overrides, message):
    with pytest.raises(InputError, match=message):
        load("llama2-7b", overrides)


def test_flat_fields_build_the_hybrid():
    """The flat fields alone give the same description as the config.json (kda_form, kda_decay_limit,
    attn_head_gate)."""
    cfg = load("llama2-7b", ["layer_pattern=(kda*3, full)*8", "kda_heads=4", "kda_head_dim=64", "kda_form=bailing",
                             "kda_decay_limit=5"])
    kda = cfg.architecture.output.layer(0).mixer
    assert (kda.form, kda.decay_bound) == ("bailing", -5.0)


def test_cli_reports_the_state_apart(tmp_path, cli):
    """`tfcalc memory` of the config.json at 4,096 tokens: the generation state is the count's (latent positions
    that grow and KDA state that does not); `tfcalc params` its parameters."""
    path = _write(tmp_path, RELEASED)
    r = cli("memory", path, "--seq", "4096", "--batch", "1", "--json")
    assert r.code == 0, r.err
    assert r.json()["kv_cache_bytes"] == kv_cache_bytes(load(path), Workload(batch=1, seq=4096))
    assert cli("params", path, "--json").json()["analytic_total"] == 124_414_191_072
