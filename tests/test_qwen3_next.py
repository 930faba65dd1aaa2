"""Qwen3-Next (model_type qwen3_next) and its gated-DeltaNet mixer (tfcalc.architecture.gated_deltanet,
tfcalc.model.gated_deltanet) held against transformers 5.24 (modeling_qwen3_next.py): the published config at full
size on meta (parameters exact; the cache transformers fills at 4,096 tokens), FlopCounterMode on transformers'
DeltaNet layer at full width at two lengths (plus the triangular solves it cannot see, by hand), the tiny
checkpoint of tests/hf_tiny.py (four layers, both kinds) loaded by load_model and decoded with the fixed state
against the uncached forward, and the hostile inputs of the new fields.

By hand (module docstring of tfcalc.architecture.gated_deltanet): a chunk of c = 64 has a c×c unit lower
triangular system solved for dv columns (V_β) and dk columns (decayed K_β): c(c-1)/2 multiply-adds a column, so
c(c-1)·(dk + dv) FLOPs per chunk and value head; a sequence of T tokens is ⌈T/64⌉ chunks.
"""

from __future__ import annotations

import json
import math

import pytest
import torch
from hf_pairs import assert_rows_decode_alone, assert_verify_refused, greedy_uncached, saved_bytes, step_flops

from tfcalc.count.model import flops as count_flops, params as count_params
from tfcalc.count.model.memory import kv_cache_bytes
from tfcalc.errors import InputError
from tfcalc.presets import load
from tfcalc.workload import Workload

pytestmark = pytest.mark.filterwarnings("ignore")

# Qwen/Qwen3-Next-80B-A3B-Instruct, config.json as published on the Hugging Face Hub
# (https://huggingface.co/Qwen/Qwen3-Next-80B-A3B-Instruct/blob/main/config.json; Qwen3-Next-80B-A3B-Thinking and
# Qwen3-Coder-Next publish the same sizes)
PUBLISHED = {
    "architectures": ["Qwen3NextForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
    "bos_token_id": 151643, "decoder_sparse_step": 1, "eos_token_id": 151645, "full_attention_interval": 4,
    "head_dim": 256, "hidden_act": "silu", "hidden_size": 2048, "initializer_range": 0.02, "intermediate_size": 5120,
    "linear_conv_kernel_dim": 4, "linear_key_head_dim": 128, "linear_num_key_heads": 16, "linear_num_value_heads": 32,
    "linear_value_head_dim": 128, "max_position_embeddings": 262144, "mlp_only_layers": [], "model_type": "qwen3_next",
    "moe_intermediate_size": 512, "norm_topk_prob": True, "num_attention_heads": 16, "num_experts": 512,
    "num_experts_per_tok": 10, "num_hidden_layers": 48, "num_key_value_heads": 2, "output_router_logits": False,
    "partial_rotary_factor": 0.25, "rms_norm_eps": 1e-06, "rope_scaling": None, "rope_theta": 10000000,
    "router_aux_loss_coef": 0.001, "shared_expert_intermediate_size": 512, "tie_word_embeddings": False,
    "torch_dtype": "bfloat16", "transformers_version": "4.57.0.dev0", "use_cache": True, "use_sliding_window": False,
    "vocab_size": 151936,
}
C = 64  # torch_chunk_gated_delta_rule's chunk_size
# the hybrid types tested here and in tests/test_qwen3_5.py (tiny text models in tests/hf_tiny.py too)
TESTED_TYPES = {"qwen3_next", "qwen3_5_text", "qwen3_5_moe_text", "qwen3_5", "qwen3_5_moe"}


def triangular_solves(cfg, batch: int, seq: int) -> int:
    """The FLOPs of the DeltaNet layers' triangular solves over a forward (module docstring), from cfg's flat
    fields: batch · Hv · ⌈T/64⌉ · 64·63 · (dk + dv) per linear layer."""
    linear = sum(n for block, n in cfg.architecture.output.kinds() if not hasattr(block.mixer, "n_kv_head"))
    per_layer = batch * cfg.linear_value_heads * math.ceil(seq / C) * C * (C - 1) * (
        cfg.linear_key_head_dim + cfg.linear_value_head_dim)
    return linear * per_layer


def conv_padding(cfg, batch: int) -> int:
    """The convolution outputs transformers computes and throws away (causal_conv1d_fn pads K - 1 on both sides,
    keeps the first T): 2·C·K·(K - 1) FLOPs per sequence and DeltaNet layer, C = 2·Hk·dk + Hv·dv channels; not
    counted by tfcalc (its module pads the left only)."""
    linear = sum(n for block, n in cfg.architecture.output.kinds() if not hasattr(block.mixer, "n_kv_head"))
    K = cfg.linear_conv_kernel or 4
    channels = 2 * cfg.linear_key_heads * cfg.linear_key_head_dim + cfg.linear_value_heads * cfg.linear_value_head_dim
    return linear * batch * 2 * channels * K * (K - 1)


def _write(tmp_path, raw: dict):
    folder = tmp_path / "qwen3-next"
    folder.mkdir(exist_ok=True)
    (folder / "config.json").write_text(json.dumps(raw))
    return folder / "config.json"


def _hf_config(raw: dict):
    import transformers

    kw = {k: v for k, v in raw.items() if k not in ("model_type", "architectures", "transformers_version")}
    return transformers.Qwen3NextConfig(**kw)


@pytest.fixture(scope="module")
def hf_meta():
    import transformers

    with torch.device("meta"):
        return transformers.Qwen3NextForCausalLM(_hf_config(PUBLISHED))


def test_published_config_parameters_exact(tmp_path, hf_meta):
    """transformers' model at full size on meta holds tfcalc's count, and tfcalc's own module on meta the same,
    tensor group by tensor group."""
    from tfcalc.measure.params import measure_params

    cfg = load(str(_write(tmp_path, PUBLISHED)))
    hf_total = sum(p.numel() for p in hf_meta.parameters())
    assert count_params.total(cfg) == hf_total
    total, breakdown = measure_params(cfg)
    assert total == hf_total and breakdown == count_params.breakdown(cfg)
    # one DeltaNet layer by hand: in_proj_qkvz 2048 × (2·16·128 + 2·32·128), in_proj_ba 2048 × 64, conv 8192 × 4,
    # dt_bias and A_log 32 each, the gated norm 128, out_proj 4096 × 2048
    deltanet = 2048 * 12288 + 2048 * 64 + 8192 * 4 + 32 + 32 + 128 + 4096 * 2048
    assert sum(p.numel() for p in hf_meta.model.layers[0].linear_attn.parameters()) == deltanet
    assert breakdown["attn_in_proj_qkvz_weight"] == 36 * 2048 * 12288 and breakdown["attn_A_log"] == 36 * 32


def test_the_preset_is_the_published_config(tmp_path):
    ours, theirs = load("qwen3-next-80b-a3b"), load(str(_write(tmp_path, PUBLISHED)))
    assert ours.architecture == theirs.architecture


@pytest.mark.parametrize("seq", [100, 300])
def test_deltanet_flops_equal_flop_counter_mode_on_transformers_layer(seq):
    """transformers' Qwen3NextGatedDeltaNet at full width (one layer, random weights, fp32, CPU), its forward
    under FlopCounterMode, plus the two triangular solves per chunk and head it does not see, less the K - 1
    convolution outputs it computes and drops: tfcalc's count of the layer (its projections and its position
    mixing). 100 and 300 tokens: 2 and 5 chunks, padded."""
    import transformers.models.qwen3_next.modeling_qwen3_next as m
    from torch.utils.flop_counter import FlopCounterMode

    hf_cfg = _hf_config(PUBLISHED)
    torch.manual_seed(0)
    layer = m.Qwen3NextGatedDeltaNet(hf_cfg, 0).eval()
    x = torch.randn(1, seq, 2048) * 0.1
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        layer(x)
    cfg = load("qwen3-next-80b-a3b")
    mixer = cfg.architecture.output.layer(0).mixer
    ours = sum(2 * seq * lin.n_in * lin.n_out for lin in mixer.linears()) + sum(
        mx.flops for mx in mixer.mixing(seq, seq))
    n = math.ceil(seq / C)
    solves = 32 * n * C * (C - 1) * (128 + 128)
    thrown = 2 * 8192 * 4 * 3  # the convolution's K - 1 padded outputs transformers drops, 8192 channels
    assert ours == counter.get_total_flops() + solves - thrown
    assert thrown == conv_padding(cfg, 1) // 36
    assert solves == triangular_solves(cfg, 1, seq) // 36  # 36 DeltaNet layers of 48


def test_generation_state_at_4096_tokens_is_what_transformers_cache_holds(hf_meta):
    """Every layer of transformers' model on meta run over a 4,096-token prompt in bf16 with its own cache
    (DynamicCache: K and V of the 12 attention layers; the 36 DeltaNet layers' convolution state, K columns
    in bf16, and recurrent state in fp32): the bytes it holds are tfcalc's generation state at 4,096 tokens."""
    from transformers import DynamicCache

    model = hf_meta.to(torch.bfloat16)
    cache = DynamicCache(config=model.config)
    T = 4096
    x = torch.empty(1, T, 2048, device="meta", dtype=torch.bfloat16)
    cos = sin = torch.empty(1, T, 64, device="meta", dtype=torch.bfloat16)
    with torch.no_grad():
        for layer in model.model.layers:
            if layer.block_type == "linear_attention":
                layer.linear_attn(x, cache=cache)
            else:
                layer.self_attn(x, (cos, sin), None, cache=cache)
    held = 0
    for lay in cache.layers:
        for name in ("keys", "values", "conv_states", "recurrent_states"):
            t = getattr(lay, name, None)
            tensors = t.values() if isinstance(t, dict) else [t]
            held += sum(v.numel() * v.element_size() for v in tensors if isinstance(v, torch.Tensor))
    by_hand = 12 * 2 * T * 2 * 256 * 2 + 36 * ((2 * 16 * 128 + 32 * 128) * 4 * 2 + 32 * 128 * 128 * 4)
    assert held == by_hand == kv_cache_bytes(load("qwen3-next-80b-a3b"), Workload(batch=1, seq=T, kv_dtype="bf16"))


# ---------- the tiny checkpoint (tests/hf_tiny.py "qwen3_next"): decode with the fixed state ----------


@pytest.fixture(scope="module")
def tiny(saved):
    import tfcalc

    hf, folder = saved("qwen3_next")
    return hf, tfcalc.load_model(str(folder)), load(str(folder / "config.json"))


def test_tiny_logits_across_chunks_equal_transformers(tiny):
    """130 tokens: three chunks, the state carried between them (the 10-token case is tests/test_hf_models.py)."""
    hf, ours, _ = tiny
    ids = torch.randint(0, 61, (2, 130), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        ref, got = hf(input_ids=ids).logits, ours(ids)
    assert (got - ref).abs().max() <= 1e-4 and ref.abs().max() > 0.1


def test_tiny_decode_with_the_fixed_state_equals_the_uncached_forward(tiny):
    """A prompt of 60, 9 new tokens (across the chunk boundary at 64): the recurrent step on the state
    continues the chunked prefill; the state is the count's bytes, allocated once."""
    from tfcalc.model import generate

    _, ours, cfg = tiny
    prompt = torch.randint(0, 61, (2, 60), generator=torch.Generator().manual_seed(5))
    cache = ours.new_cache(2, 69)
    out = generate(ours, prompt, 9, cache=cache)
    assert torch.equal(out, greedy_uncached(ours, prompt, 9))
    assert cache.nbytes == kv_cache_bytes(cfg, Workload(batch=2, seq=60, gen=9, dtype="fp32", kv_dtype="fp32"))
    assert not cache.rewindable


def test_tiny_decode_step_flops_are_counted_and_static(tiny):
    """FlopCounterMode on each decode step equals the count's decode step (the DeltaNet's recurrent form is
    fixed in the context; the attention layer's grows), but for the keys the attention layer's step reads past
    the context: a bucket of 16 slots, hidden by the mask (tfcalc.model.cache), 2·2·H·h FLOPs each (Q·Kᵀ and
    attention·V, 4 heads of 16). The step's ops do not change with the context."""
    from tfcalc.measure.flops import flop_counter  # FlopCounterMode with the CPU flash attention's formula

    _, ours, cfg = tiny
    steps = step_flops(ours, ours.new_cache(1, 40), torch.randint(0, 61, (1, 5)), 11, counter=flop_counter)
    for context, (total, _) in zip(range(6, 17), steps, strict=True):
        masked = 2 * 2 * 4 * 16 * (16 - context)
        assert total == count_flops.decode_flops(cfg, Workload(batch=1, seq=context)) + masked
    assert all(counts == steps[0][1] for _, counts in steps)  # one bucket: the same ops and shapes at every step


def test_tiny_forward_flops_with_tfcalcs_counter_equal_the_count(tiny):
    """tfcalc's own counter (tfcalc.measure.flops.flop_counter, which passes the triangular solve's formula)
    on tfcalc's module equals the count, solves included."""
    from tfcalc.measure.flops import flop_counter

    _, ours, cfg = tiny
    with torch.no_grad(), flop_counter() as counter:
        ours(torch.randint(0, 61, (2, 70)))
    assert counter.get_total_flops() == count_flops.forward_flops(cfg, Workload(batch=2, seq=70))
    assert triangular_solves(cfg, 2, 70) == 3 * 2 * 4 * 2 * C * (C - 1) * (8 + 12)


def test_tiny_continuous_batching_rows(tiny):
    _, ours, _ = tiny
    prompts = [torch.randint(0, 61, (1, n), generator=torch.Generator().manual_seed(n)) for n in (3, 7)]
    assert_rows_decode_alone(ours, prompts, max_tokens=16, release=False)


def test_tiny_verify_step_is_refused(tiny):
    assert_verify_refused(tiny[1], 61)


# ---------- hostile inputs ----------


@pytest.mark.parametrize("changes, message", [
    (dict(layer_types=["linear_attention"] * 3), "lists 3 layers"),
    (dict(num_hidden_layers=4, layer_types=["linear_attention", "sliding_attention", "full_attention",
                                            "full_attention"]), "must be a list of linear_attention, full_attention"),
    (dict(layer_types="linear_attention"), "must be a list"),
    (dict(full_attention_interval=0), "'full_attention_interval' must be a positive integer"),
    (dict(full_attention_interval="4"), "'full_attention_interval' must be an integer"),
    (dict(linear_num_value_heads=24), "must be a multiple of its key heads"),
    (dict(linear_num_key_heads=0), "'linear_key_heads' must be positive"),
    (dict(linear_conv_kernel_dim=-1), "'linear_conv_kernel' must be positive"),
    (dict(hidden_act="gelu"), "with SiLU only"),
    (dict(num_hidden_layers=2**41), "num_hidden_layers|n_layer"),
    (dict(linear_num_value_heads=True), "'linear_num_value_heads'"),
    (dict(linear_key_head_dim=2.5), "'linear_key_head_dim'"),
    (dict(layer_types=None, full_attention_interval=None, num_hidden_layers=4), None),
])
def test_hostile_config_json(tmp_path, changes, message):
    if message is None:  # null keys read as absent (transformers' defaults): every 4th layer full
        cfg = load(str(_write(tmp_path, {**PUBLISHED, **changes})))
        assert cfg.full_attention_every == 4 and cfg.linear_mixer == "gated_deltanet"
        return
    with pytest.raises(InputError, match=message):
        load(str(_write(tmp_path, {**PUBLISHED, **changes})))


def test_big_depths_cost_nothing(tmp_path):
    """2**30 layers: the pattern in closed form, no list built (full_attention_interval alone)."""
    cfg = load(str(_write(tmp_path, {**PUBLISHED, "num_hidden_layers": 2**30})))
    assert [n for _, n in cfg.architecture.output.kinds()] == [3 * 2**28, 2**28]


def test_every_layer_full_or_linear(tmp_path):
    full = load(str(_write(tmp_path, {**PUBLISHED, "full_attention_interval": 1})))
    assert full.linear_mixer is None and all(hasattr(b.mixer, "n_kv_head") for b, _ in full.architecture.output.kinds())
    linear = load(str(_write(tmp_path, {**PUBLISHED, "num_hidden_layers": 3})))
    assert [type(b.mixer).__name__ for b, _ in linear.architecture.output.kinds()] == ["GatedDeltaNet"]
    pattern = load(str(_write(tmp_path, {**PUBLISHED, "num_hidden_layers": 5, "layer_types": [
        "linear_attention", "full_attention", "linear_attention", "linear_attention", "full_attention"]})))
    assert pattern.layer_pattern == "local, full, local*2, full"


@pytest.mark.parametrize("overrides, message", [
    (dict(linear_key_heads=4), "give linear_mixer too"),
    (dict(linear_mixer="gated_deltanet", full_attention_every=4), "needs 'linear_key_heads'"),
    (dict(linear_mixer="gated_deltanet", linear_key_heads=2, linear_value_heads=4, linear_key_head_dim=8,
          linear_value_head_dim=8, sliding_window=16), "not both"),
    (dict(linear_mixer="mamba"), "linear_mixer"),
    (dict(linear_mixer="gated_deltanet", linear_key_heads=2, linear_value_heads=3, linear_key_head_dim=8,
          linear_value_head_dim=8), "multiple of its key heads"),
    (dict(linear_mixer="gated_deltanet", linear_key_heads=2, linear_value_heads=4, linear_key_head_dim=8,
          linear_value_head_dim=8, linear_conv_kernel=0), "'linear_conv_kernel' must be positive"),
    (dict(linear_mixer="gated_deltanet", linear_key_heads=2, linear_value_heads=4, linear_key_head_dim=8,
          linear_value_head_dim=8, kv_lora_rank=16, qk_rope_head_dim=8, qk_nope_head_dim=8, v_head_dim=8),
     "applies to a decoder's layers beside softmax attention"),
    (dict(linear_mixer="gated_deltanet", linear_key_heads=2, linear_value_heads=4, linear_key_head_dim=8,
          linear_value_head_dim=8, layer_pattern="(local*3, full)*2"), "describes 8 layers, fewer"),
])
def test_hostile_flat_fields(overrides, message):
    with pytest.raises(InputError, match=message):
        load("llama2-7b", [f"{k}={v}" for k, v in overrides.items()])


def test_flat_fields_build_the_hybrid():
    cfg = load("llama2-7b", ["linear_mixer=gated_deltanet", "linear_key_heads=4", "linear_value_heads=8",
                             "linear_key_head_dim=64", "linear_value_head_dim=64", "layer_pattern=(local*3, full)*8",
                             "attn_output_gate=true"])
    kinds = [(type(b.mixer).__name__, n) for b, n in cfg.architecture.output.kinds()]
    assert kinds == [("GatedDeltaNet", 24), ("Attention", 8)]


def test_measured_flops_on_meta_put_the_convolution_and_the_scan_with_the_mixing():
    """tfcalc.measure.flops on meta at full size (`tfcalc flops --measure`): the DeltaNet's projections in
    attention_proj, its convolution, chunked scan and solves in attention_scores, group by group as counted."""
    from tfcalc.measure.flops import measure_flops

    cfg, w = load("qwen3-next-80b-a3b"), Workload(batch=1, seq=100)
    m = measure_flops(cfg, w)
    b = count_flops.breakdown(cfg, w)
    assert m.groups == dict({g: n for g, n in b.totals().items() if g != "embeddings" or n}, other=0)
    assert m.total == count_flops.forward_flops(cfg, w)


@pytest.mark.parametrize("dtype, e", [(torch.float32, 4), (torch.bfloat16, 2)])
@pytest.mark.parametrize("layout", ["grouped", "split", "separate"])
def test_saved_activations_equal_what_autograd_keeps(dtype, e, layout):
    """saved_tensors_hooks on tfcalc's DeltaNet module (every floating-point storage packed for backward, once,
    weights and the input excluded) against the component's saved bytes times the tokens, to the byte: below the
    64-token chunk (one chunk, padded), at it, above it and between whole chunks, one and two sequences, in the
    three projection layouts (Qwen3-Next's, Qwen3.5's, OLMo-Hybrid's), with r = 2 value heads a key head and with
    one key head for all (where a reshape could have kept a view). Before: 9.2x low at 5 tokens, 12 % high at
    100 (the chunk padding and the per-chunk states not counted, the per-token rows estimated)."""
    from tfcalc.architecture.gated_deltanet import GatedDeltaNet
    from tfcalc.model.gated_deltanet import GatedDeltaNetModule

    flags = {"split": {"split_projections": True}, "separate": {"separate_projections": True}}.get(layout, {})
    for sizes in ((64, 2, 4, 8, 12), (48, 1, 3, 16, 8)):
        spec = GatedDeltaNet(*sizes, **flags)
        module = GatedDeltaNetModule(spec).to(dtype)
        for p in module.parameters():
            torch.nn.init.normal_(p, 0.0, 0.05)
        for batch, T in ((1, 5), (2, 5), (1, 64), (2, 100), (1, 128), (1, 130)):
            x = torch.randn(batch, T, sizes[0], dtype=dtype, requires_grad=True)
            kept = saved_bytes(module, x)
            counted = batch * T * sum(spec.saved(batch, T, e, "math", False).values())
            assert kept == counted, (sizes, batch, T)


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
@pytest.mark.parametrize("layers", [3, 4])
def test_saved_activations_of_a_deltanet_model_equal_autograd(dtype, layers):
    """Three DeltaNet layers, and a fourth of Qwen3-Next's gated attention (Q/K norms, a quarter rotated, each
    head's output gate) (tfcalc.measure.memory.forward_loss: every storage autograd keeps, each once): the count's
    stored activations to the byte, over one chunk (5 tokens: no state update built, so nothing freed that a
    pointer could later reuse) and over two (70, padded to 128). Before, the gated attention was low by its gate's
    rows of the fused output a view keeps (e·q a token) and, where its Q norm keeps its input, the copy of Q's
    strided heads (e·q)."""
    from tfcalc.config import from_mapping
    from tfcalc.count.model import memory as mem
    from tfcalc.measure.memory import forward_loss
    from tfcalc.model import build_model

    cfg = from_mapping(dict(n_layer=layers, d_model=64, n_head=2, n_kv_head=1, d_head=16, vocab_size=97,
                            max_seq_len=256, norm="rmsnorm", d_ff=48, gated_ffn=True, activation="silu",
                            full_attention_every=4, linear_mixer="gated_deltanet", linear_key_heads=2,
                            linear_value_heads=4, linear_key_head_dim=8, linear_value_head_dim=8, pos_encoding="rope",
                            qk_norm=True, attn_output_gate=True, rope_fraction=0.25))
    torch.manual_seed(0)
    model = build_model(cfg, "cpu").train().to(torch.float32 if dtype == "fp32" else torch.bfloat16)
    for seq in (5, 70):
        _, saved = forward_loss(model, torch.randint(0, 97, (2, seq)), count_saved=True)
        assert saved == mem.activations(cfg, Workload(batch=2, seq=seq, dtype=dtype)).stored, seq
