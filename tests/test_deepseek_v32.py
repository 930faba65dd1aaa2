"""DeepSeek-V3.2 (model_type deepseek_v32) and DeepSeek Sparse Attention (tfcalc.architecture.sparse_latent,
tfcalc.model.sparse_latent) held against transformers 5.24 (modeling_deepseek_v32.py): the published config at full
size on meta (parameters exact; the cache transformers fills at 4,096 tokens: latent, rotary key and indexer keys),
FlopCounterMode on transformers' DeepseekV32Attention at full width at two lengths (dense attention under the top-k
mask, as its torch path runs), a tiny checkpoint (top-k below the sequence, so the selection shows) loaded by
load_model against transformers' logits and decoded sparse with the fixed state, and the hostile inputs."""

from __future__ import annotations

import json
import warnings

import pytest
import torch
from hf_pairs import saved_bytes

from tfcalc.architecture.sparse_latent import topk_pairs
from tfcalc.count.model import flops as count_flops, params as count_params
from tfcalc.count.model.memory import kv_cache_bytes
from tfcalc.errors import InputError
from tfcalc.presets import load
from tfcalc.workload import Workload

pytestmark = pytest.mark.filterwarnings("ignore")

# deepseek-ai/DeepSeek-V3.2, config.json as published on the Hugging Face Hub
# (https://huggingface.co/deepseek-ai/DeepSeek-V3.2/blob/main/config.json; V3.2-Exp publishes the same sizes)
PUBLISHED = {
    "architectures": ["DeepseekV32ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
    "bos_token_id": 0, "eos_token_id": 1, "ep_size": 1, "first_k_dense_replace": 3, "hidden_act": "silu",
    "hidden_size": 7168, "index_head_dim": 128, "index_n_heads": 64, "index_topk": 2048, "initializer_range": 0.02,
    "intermediate_size": 18432, "kv_lora_rank": 512, "max_position_embeddings": 163840, "model_type": "deepseek_v32",
    "moe_intermediate_size": 2048, "moe_layer_freq": 1, "n_group": 8, "n_routed_experts": 256, "n_shared_experts": 1,
    "norm_topk_prob": True, "num_attention_heads": 128, "num_experts_per_tok": 8, "num_hidden_layers": 61,
    "num_key_value_heads": 128, "num_nextn_predict_layers": 1, "q_lora_rank": 1536, "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64,
    "quantization_config": {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
                            "scale_fmt": "ue8m0", "weight_block_size": [128, 128]},
    "rms_norm_eps": 1e-06,
    "rope_scaling": {"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 1.0, "mscale_all_dim": 1.0,
                     "original_max_position_embeddings": 4096, "type": "yarn"},
    "rope_theta": 10000, "routed_scaling_factor": 2.5, "scoring_func": "sigmoid", "tie_word_embeddings": False,
    "topk_group": 4, "topk_method": "noaux_tc", "torch_dtype": "bfloat16", "use_cache": True, "v_head_dim": 128,
    "vocab_size": 129280,
}
TESTED_TYPES = {"deepseek_v32", "glm_moe_dsa"}  # tested here and in tests/test_glm_moe_dsa.py (test_hf_config.py)
# a tiny model: 3 layers (the first dense), top-5 keys of 12, 16 indexer heads (ties at ReLU's 0 unlikely)
TINY = dict(vocab_size=61, hidden_size=32, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=4,
            intermediate_size=40, moe_intermediate_size=16, n_routed_experts=8, num_experts_per_tok=2,
            n_shared_experts=1, first_k_dense_replace=1, kv_lora_rank=12, q_lora_rank=20, qk_nope_head_dim=8,
            qk_rope_head_dim=4, v_head_dim=6, max_position_embeddings=64, n_group=4, topk_group=2, index_topk=5,
            index_n_heads=16, index_head_dim=8)


def _write(tmp_path, raw: dict, name: str = "dsv32"):
    folder = tmp_path / name
    folder.mkdir(exist_ok=True)
    (folder / "config.json").write_text(json.dumps(raw))
    return folder / "config.json"


def _hf_config(raw: dict):
    import transformers

    kw = {k: v for k, v in raw.items() if k not in ("model_type", "architectures", "quantization_config",
                                                    "rope_scaling", "rope_theta")}
    scaling = raw.get("rope_scaling")
    if scaling is not None:
        kw["rope_parameters"] = {**{k: v for k, v in scaling.items() if k != "type"}, "rope_type": scaling["type"],
                                 "rope_theta": raw["rope_theta"]}
    return transformers.DeepseekV32Config(**kw)


@pytest.fixture(scope="module")
def hf_meta():
    import transformers

    with torch.device("meta"):
        return transformers.DeepseekV32ForCausalLM(_hf_config(PUBLISHED))


def test_published_config_parameters_exact(tmp_path, hf_meta):
    """transformers' model at full size on meta holds tfcalc's count, and tfcalc's module on meta the same."""
    from tfcalc.measure.params import measure_params

    cfg = load(str(_write(tmp_path, PUBLISHED)))
    hf_total = sum(p.numel() for p in hf_meta.parameters())
    assert count_params.total(cfg) == hf_total
    total, breakdown = measure_params(cfg)
    assert total == hf_total and breakdown == count_params.breakdown(cfg)
    # one indexer by hand: wq_b 1536 × 64·128, wk 7168 × 128, k_norm 128 + 128 (a LayerNorm's bias), weights_proj
    # 7168 × 64
    indexer = 1536 * 64 * 128 + 7168 * 128 + 2 * 128 + 7168 * 64
    assert sum(p.numel() for p in hf_meta.model.layers[0].self_attn.indexer.parameters()) == indexer
    assert count_params.total(cfg) - count_params.total(load("deepseek-v3")) == 61 * indexer


def test_the_preset_is_the_published_config(tmp_path):
    ours, theirs = load("deepseek-v3.2"), load(str(_write(tmp_path, PUBLISHED)))
    assert ours.architecture == theirs.architecture
    assert count_params.breakdown(ours) == count_params.breakdown(theirs)


def test_topk_pairs_by_brute_force():
    """Σ over the queries (the last q of n positions) of min(k, visible keys), summed one query at a time."""
    for queries, keys, k in [(1, 1, 1), (7, 7, 3), (12, 12, 5), (5, 40, 8), (300, 300, 2048), (4096, 4096, 2048)]:
        brute = sum(min(k, keys - queries + i + 1) for i in range(queries))
        assert topk_pairs(queries, keys, k) == brute


@pytest.mark.parametrize("seq", [64, 160])
def test_forward_flops_equal_flop_counter_mode_on_transformers_attention(seq):
    """transformers' DeepseekV32Attention at full width on meta under FlopCounterMode: its projections, the
    indexer's q·k over every key per query and head, the weighted sum over the heads, then the main attention
    DENSE over the T×T square under the top-k mask (its torch path's form): tfcalc's full-square figure. The
    causal-effective figure counts the indexer over its causal pairs and the main attention over the top-k."""
    import transformers.models.deepseek_v32.modeling_deepseek_v32 as m
    from torch.utils.flop_counter import FlopCounterMode

    hf_cfg = _hf_config(dict(PUBLISHED, index_topk=40))  # top-40: fewer than the keys, so the selection counts
    hf_cfg._attn_implementation = "eager"
    with torch.device("meta"):
        layer = m.DeepseekV32Attention(hf_cfg, 0).eval()
        x = torch.empty(1, seq, 7168)
        cos = sin = torch.empty(1, seq, 64)
        mask = torch.ones(1, 1, seq, seq, dtype=torch.bool).tril()
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        layer(x, (cos, sin), mask)
    mixer = load("deepseek-v3.2", ["index_topk=40"]).architecture.output.layer(0).mixer
    projections = sum(2 * seq * lin.n_in * lin.n_out for lin in mixer.linears())
    mixing = mixer.mixing(seq, seq)
    assert projections + sum(mx.flops for mx in mixing) == counter.get_total_flops()
    # by hand: indexer 2·T²·64·128 + 2·T²·64; the main attention 2·T²·128·192 + 2·T²·128·128
    square = 2 * seq * seq * (64 * 128 + 64 + 128 * 192 + 128 * 128)
    assert sum(mx.flops for mx in mixing) == square
    causal, sparse = seq * (seq + 1) // 2, topk_pairs(seq, seq, 40)
    assert sum(mx.causal_flops for mx in mixing) == 2 * causal * (64 * 128 + 64) + 2 * sparse * 128 * (192 + 128)


def test_generation_state_at_4096_tokens_is_what_transformers_cache_holds(hf_meta):
    """Every layer's attention of transformers' model on meta over a 4,096-token prompt in bf16 with its own
    cache (DynamicIndexedLayer: the latent, the rotary key and the indexer keys (B, S, 128)): tfcalc's state."""
    from transformers import DynamicCache

    model = hf_meta.to(torch.bfloat16)
    cache = DynamicCache(config=model.config)
    T = 4096
    x = torch.empty(1, T, 7168, device="meta", dtype=torch.bfloat16)
    cos = sin = torch.empty(1, T, 64, device="meta", dtype=torch.bfloat16)
    mask = torch.ones(1, 1, T, T, dtype=torch.bool, device="meta")
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn(x, (cos, sin), mask, cache=cache)
    held = sum(t.numel() * t.element_size() for lay in cache.layers
               for t in (lay.keys, lay.values, lay.indexer_keys))
    by_hand = 61 * T * (512 + 64 + 128) * 2
    assert held == by_hand == kv_cache_bytes(load("deepseek-v3.2"), Workload(batch=1, seq=T, kv_dtype="bf16"))


# ---------- a tiny checkpoint: top-5 of 12 keys ----------


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    import transformers

    import tfcalc

    torch.manual_seed(0)
    config = transformers.DeepseekV32Config(**TINY)
    config._attn_implementation = "eager"
    config._experts_implementation = "eager"
    hf = transformers.DeepseekV32ForCausalLM(config).eval()
    with torch.no_grad():
        for p in hf.parameters():
            p.add_(torch.randn_like(p), alpha=0.05)
    folder = tmp_path_factory.mktemp("dsv32-tiny")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        hf.save_pretrained(folder)
    return hf, tfcalc.load_model(str(folder)), load(str(folder / "config.json"))


def test_tiny_logits_equal_transformers(tiny):
    hf, ours, _ = tiny
    ids = torch.randint(0, 61, (2, 12), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        ref, got = hf(input_ids=ids).logits, ours(ids)
    assert (got - ref).abs().max() <= 1e-4 * ref.abs().max() and ref.abs().max() > 0.1
    # the selection matters: with every key kept (dense latent attention) the logits move
    layer = ours.blocks[0].attn
    keep, layer.topk = layer.topk, 12
    try:
        with torch.no_grad():
            dense = ours(ids)
    finally:
        layer.topk = keep
    assert (dense - ref).abs().max() > 1e-3


def _greedy_hf(hf, prompt, new):
    idx = prompt
    with torch.no_grad():
        for _ in range(new):
            idx = torch.cat([idx, hf(input_ids=idx).logits[:, -1:].argmax(-1)], dim=1)
    return idx[:, prompt.shape[1]:]


def test_tiny_sparse_decode_with_the_fixed_state_equals_transformers(tiny):
    """A prompt of 9, 8 new tokens decoded by the sparse step (the top-5 rows gathered from the cache): the
    tokens of transformers' uncached greedy forward; the state allocated once is the count's bytes."""
    from tfcalc.model import generate

    hf, ours, cfg = tiny
    prompt = torch.randint(0, 61, (2, 9), generator=torch.Generator().manual_seed(1))
    cache = ours.new_cache(2, 17)
    out = generate(ours, prompt, 8, cache=cache)
    assert torch.equal(out, _greedy_hf(hf, prompt, 8))
    per_token = 3 * (12 + 4 + 8) * 4  # 3 layers of [c | k_r | k_I], fp32
    assert cache.nbytes == 2 * 17 * per_token == kv_cache_bytes(cfg, Workload(batch=2, seq=9, gen=8, kv_dtype="fp32"))


def test_tiny_decode_step_reads_the_top_k_rows_and_is_static(tiny):
    """FlopCounterMode on each decode step: the same ops on the same shapes at every position (a bucket of the
    cache, the top-5 gathered), and its main attention over 5 keys whatever the context."""
    from tfcalc.measure.flops import flop_counter
    from tfcalc.model.generate import Decoder, next_token

    _, ours, _ = tiny
    cache = ours.new_cache(1, 40)
    with torch.no_grad():
        token = next_token(ours.prefill(torch.randint(0, 61, (1, 6)), cache))
        decoder, shapes = Decoder(ours, cache), []
        for _ in range(7, 16):
            with flop_counter() as counter:
                token = next_token(decoder.step(token))
            shapes.append(counter.get_flop_counts())
    assert all(s == shapes[0] for s in shapes)


def test_tiny_forward_flops_with_tfcalcs_counter_equal_the_count(tiny):
    from tfcalc.measure.flops import flop_counter

    _, ours, cfg = tiny
    with torch.no_grad(), flop_counter() as counter:
        ours(torch.randint(0, 61, (2, 12)))
    assert counter.get_total_flops() == count_flops.forward_flops(cfg, Workload(batch=2, seq=12))


# ---------- hostile inputs ----------


@pytest.mark.parametrize("changes, message", [
    (dict(q_lora_rank=None), "'q_lora_rank' null is not supported"),
    (dict(rope_interleave=False), "'rope_interleave' false is not supported"),
    (dict(layer_types=["full_attention"] * 61), "'layer_types'"),
    (dict(layer_types=["indexed_attention"] * 3), "61 layers of 'indexed_attention'"),
    (dict(mlp_layer_types=["sparse", "dense"] * 30 + ["sparse"]), "'mlp_layer_types'"),
    (dict(index_topk=0), "'index_topk' must be positive"),
    (dict(index_n_heads=-1), "'index_n_heads' must be positive"),
    (dict(index_head_dim=32), "must be at least qk_rope_head_dim"),
    (dict(index_topk="2048"), "'index_topk'"),
    (dict(index_topk=True), "'index_topk'"),
    (dict(index_head_dim=12.5), "'index_head_dim'"),
    (dict(scoring_func="softmax"), "sigmoid"),
])
def test_hostile_config_json(tmp_path, changes, message):
    with pytest.raises(InputError, match=message):
        load(str(_write(tmp_path, {**PUBLISHED, **changes})))


def test_null_index_fields_read_as_transformers_defaults(tmp_path):
    cfg = load(str(_write(tmp_path, {**PUBLISHED, "index_topk": None, "index_n_heads": None, "layer_types": None})))
    mixer = cfg.architecture.output.layer(0).mixer
    assert (mixer.index_topk, mixer.index_n_heads, mixer.index_head_dim) == (2048, 64, 128)


@pytest.mark.parametrize("overrides, message", [
    (["index_n_heads=8"], "applies to sparse attention only"),
    (["index_topk=8"], "applies to latent attention only"),
    (["index_topk=0"], "'index_topk' must be positive"),
    (["index_topk=-5"], "'index_topk' must be positive"),
    (["index_head_dim=16"], "applies to sparse attention only"),
])
def test_hostile_flat_fields(overrides, message):
    preset = "llama2-7b" if "latent attention only" in message else "deepseek-v3"
    with pytest.raises(InputError, match=message):
        load(preset, overrides)


def test_flat_fields_without_a_compressed_query_refused():
    with pytest.raises(InputError, match="give q_lora_rank"):
        load("deepseek-v3", ["index_topk=64", "q_lora_rank=null"])
    with pytest.raises(InputError, match="at least qk_rope_head_dim"):
        load("deepseek-v3.2", ["index_head_dim=32"])


def test_cli_commands_count_the_indexer(cli):
    """memory of the preset: the indexer keys counted beside the latent, 704 elements a token and layer, bf16."""
    r = cli("memory", "deepseek-v3.2", "--seq", "4096", "--json")
    assert r.code == 0, r.err
    assert r.json()["kv_cache_bytes"] == 61 * 4096 * (512 + 64 + 128) * 2
    # without MLA: K and V heads of 128 × (192 + 128), and the indexer keys still
    assert r.json()["kv_cache_expanded_bytes"] == 61 * 4096 * (128 * (192 + 128) + 128) * 2
    assert "and indexer keys" in " ".join(cli("memory", "deepseek-v3.2").out.split())
    for command in (("params", "deepseek-v3.2", "--no-measure"), ("flops", "deepseek-v3.2", "--seq", "4096"),
                    ("infer", "deepseek-v3.2", "--seq", "4096")):
        r = cli(*command)
        assert r.code == 0, r.err


@pytest.mark.parametrize("context", [1000, 32768])
def test_decode_step_reads_the_top_k_latent_rows_and_every_indexer_key(context):
    """The roofline's decode step at a context of S: per layer min(2048, S) rows [c | k_r] of 576 elements and S
    indexer keys of 128, bf16 (DeepSeek-V3's dense latent step reads S rows of 576); its main attention's FLOPs
    over the same min(2048, S) keys."""
    from tfcalc.count.model.quant import plain
    from tfcalc.count.serving import roofline

    step = roofline.decode_step(load("deepseek-v3.2"), 1, context, plain("bf16"), "bf16")
    dense = roofline.decode_step(load("deepseek-v3"), 1, context, plain("bf16"), "bf16")
    kept = min(2048, context)
    assert sum(r.kv_bytes for r in step.rows) == 61 * (kept * 576 + context * 128) * 2
    assert sum(r.kv_bytes for r in dense.rows) == 61 * context * 576 * 2
    qk = next(r for r in step.rows if r.component == "attn_qk")
    assert qk.flops == 61 * 2 * 128 * 576 * kept


def test_fp8_as_stored_matches_transformers_fp8_modules_on_meta(tmp_path):
    """transformers' FP8 quantizer on DeepseekV32ForCausalLM at full size on meta (replace_with_fp8_linear with
    the modules its FineGrainedFP8 quantizer leaves: the LM head and _keep_in_fp32_modules, the indexer's
    weights_proj): the indexer's wq_b and wk in fp8 with their 128×128 fp32 scales, byte for byte with the
    preset; weights_proj and the router transformers holds in fp32, tfcalc counts them in the checkpoint's bf16."""
    import transformers
    from transformers import FineGrainedFP8Config
    from transformers.integrations.finegrained_fp8 import replace_with_fp8_linear

    from tfcalc.count.model import quant
    from tfcalc.count.model.quant import plain

    with torch.device("meta"):
        model = transformers.DeepseekV32ForCausalLM(_hf_config(PUBLISHED)).to(torch.bfloat16)
    model = replace_with_fp8_linear(model, modules_to_not_convert=["lm_head", *model._keep_in_fp32_modules],
                                    quantization_config=FineGrainedFP8Config(weight_block_size=[128, 128]))
    by: dict[str, int] = {}
    for p in model.parameters():
        by[str(p.dtype)] = by.get(str(p.dtype), 0) + p.numel() * p.element_size()
    weights_proj = 61 * 64 * 7168  # bf16 here, as cast on meta (transformers holds it in fp32 once loaded)
    parts = quant.breakdown(load(str(_write(tmp_path, PUBLISHED))), plain("bf16"))
    assert parts == quant.breakdown(load("deepseek-v3.2"), plain("bf16"))
    assert by["torch.float8_e4m3fn"] == parts["quantized"]
    assert by["torch.float32"] == parts["scales"]
    assert by["torch.bfloat16"] == parts["unquantized"]
    # the indexer beside DeepSeek-V3's: wq_b 8192×1536 and wk 128×7168 in fp8, 64·12 + 1·56 scales a layer
    v3 = quant.breakdown(load("deepseek-v3"), plain("bf16"))
    assert parts["quantized"] - v3["quantized"] == 61 * (8192 * 1536 + 128 * 7168)
    assert parts["scales"] - v3["scales"] == 61 * 4 * (64 * 12 + 56)
    assert parts["unquantized"] - v3["unquantized"] == 2 * (weights_proj + 61 * 2 * 128)


def test_tiny_verify_steps_equal_the_uncached_forward(tiny):
    """Speculative verify: three tokens at a time against the cache (the dense form under the step's mask with the
    unselected keys hidden), rewound to keep one to three: each verify's logits are the uncached forward's."""
    _, ours, _ = tiny
    seq = torch.randint(0, 61, (2, 16), generator=torch.Generator().manual_seed(4))
    cache = ours.new_cache(2, 16)
    with torch.no_grad():
        full = ours(seq)
        ours.prefill(seq[:, :4], cache)
        for kept in [1, 3, 2, 1]:
            at = cache.length
            out = ours.extend(seq[:, at:at + 3], cache)
            torch.testing.assert_close(out, full[:, at:at + 3], rtol=1e-4, atol=1e-5)
            cache.rewind(at + kept)


@pytest.mark.parametrize("dtype, e", [(torch.float32, 4), (torch.bfloat16, 2)])
@pytest.mark.parametrize("reduce_low", [True, False])
def test_saved_activations_are_what_autograd_keeps(dtype, e, reduce_low):
    """saved_tensors_hooks on tfcalc's DSA module (every floating-point storage packed for backward, once, weights
    and the input excluded) against the component's saved bytes at two lengths, byte for byte: the indexer keeps
    nothing. The count is of the math kernel reducing in the activations' dtype (tfcalc.architecture.saved,
    latent_saved): with torch.backends.cuda.allow_fp16_bf16_reduction_math_sdp(True) (global: the CPU's math
    kernel follows it) bf16 is that to the byte; under torch's default the math kernel upcasts bf16 to fp32 and
    keeps, by hand, fp32 Q, K and V (4·H·(2·48 + 32) a token) where the count has bf16 Q, K and the expanded
    [K_nope | V] (2·H·(2·48 + 64)), and an fp32 softmax (4·H·T where 2·H·T): at T = 64, 315,904 kept against
    233,984 counted."""
    from tfcalc.architecture.sparse_latent import SparseLatentAttention
    from tfcalc.model.sparse_latent import SparseLatentAttention as Module

    spec = SparseLatentAttention(256, 4, 64, 32, 16, 32, 96, index_topk=24, index_n_heads=8, index_head_dim=32)
    module = Module(spec).to(dtype)
    for p in module.parameters():
        torch.nn.init.normal_(p, 0.0, 0.05)
    before = torch.backends.cuda.fp16_bf16_reduction_math_sdp_allowed()
    torch.backends.cuda.allow_fp16_bf16_reduction_math_sdp(reduce_low)
    try:
        for T in (64, 128):
            x = torch.randn(1, T, 256, dtype=dtype, requires_grad=True)
            kept = saved_bytes(module, x)
            counted = T * sum(spec.saved(1, T, e, "math", False).values())
            H, qk, hv = 4, 32 + 16, 32
            upcast = 0 if e == 4 or reduce_low else T * (4 * H * (2 * qk + hv) - 2 * H * (2 * qk + 32 + hv)
                                                          + (4 - 2) * H * T)
            assert kept == counted + upcast, T
    finally:
        torch.backends.cuda.allow_fp16_bf16_reduction_math_sdp(before)


def test_tiny_decode_step_flops_are_the_counted_sparse_step(tiny):
    """FlopCounterMode on each decode step against the count's decode step at that context: the same but for the
    indexer's scores over the bucket's slots past the context (16 slots, hidden by the mask: 2·16·(8 + 1) FLOPs
    each, 3 layers); the main attention over the 5 gathered keys at every context (absorbed: 2·4·(12 + 4) +
    2·4·12 per key), not over the context."""
    from tfcalc.measure.flops import flop_counter
    from tfcalc.model.generate import Decoder, next_token

    _, ours, cfg = tiny
    cache = ours.new_cache(1, 40)
    with torch.no_grad():
        token = next_token(ours.prefill(torch.randint(0, 61, (1, 6)), cache))
        decoder = Decoder(ours, cache)
        for context in range(7, 16):
            with flop_counter() as counter:
                token = next_token(decoder.step(token))
            masked = 3 * 2 * 16 * (8 + 1) * (16 - context)
            assert counter.get_total_flops() == count_flops.decode_flops(cfg, Workload(batch=1, seq=context)) + masked
    step = cfg.architecture.output.layer(0).mixer.mixing(1, 15, step=True)
    assert sum(m.flops for m in step if m.name in ("qk", "av")) == 5 * (2 * 4 * 16 + 2 * 4 * 12)


def test_tiny_checkpoint_names_map_every_tensor(tiny, cli, tmp_path):
    """`tfcalc params` of the saved checkpoint: every stored tensor (the indexer's wq_b, wk, k_norm weight and
    bias, weights_proj among them) maps onto a parameter or a named buffer: the elements stored are the
    parameters and the router's correction bias (2 MoE layers × 8 experts, a buffer), and the checkpoint agrees
    with the config."""
    import math

    from safetensors import safe_open

    hf, _, cfg = tiny
    folder = tmp_path / "ckpt"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        hf.save_pretrained(folder)
    stored, names = 0, []
    for file in folder.glob("*.safetensors"):
        with safe_open(str(file), framework="pt") as f:
            stored += sum(math.prod(f.get_slice(k).get_shape()) for k in f.keys())
            names += list(f.keys())
    assert sum("indexer" in n for n in names) == 3 * 5
    data = cli("params", str(folder), "--json").json()
    params = sum(p.numel() for p in hf.parameters())
    assert data["checkpoint_total"] == stored == params + 2 * 8 and data["analytic_total"] == params
    assert data["checkpoint"]["agree"]
