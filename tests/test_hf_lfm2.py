"""LFM2 and LFM2-MoE (the short gated convolution, tfcalc.architecture.short_conv) held against transformers 5.24:
the published config.json files (tests/hub_lfm2.py) built by transformers on meta at full size -- parameters
exact, forward FLOPs equal to FlopCounterMode at two lengths less the one named term transformers computes and
throws away, the generation state at 4,096 tokens equal to the bytes its cache holds -- and the component's
figures against the hand derivation of its module docstring and against autograd. The tiny checkpoints' logits
(load_model, within 1e-4 in fp32) are tests/test_hf_models.py's cases ``lfm2`` and ``lfm2_moe``; the decode
against the uncached forward, continuous batching and the static step are tests/model/'s ``conv-lfm2`` kinds."""

from __future__ import annotations

import json

import pytest
import torch
from hf_pairs import greedy_uncached, step_flops
from hub_lfm2 import LFM2_1_2B, LFM2_8B_A1B
from torch.utils.flop_counter import FlopCounterMode

from tfcalc.architecture.short_conv import ShortConv, conv_taps
from tfcalc.config import ModelConfig, replace
from tfcalc.count.model import flops as count_flops, params as count_params
from tfcalc.count.model.memory import kv_cache_bytes
from tfcalc.errors import InputError
from tfcalc.model import build_model, generate
from tfcalc.presets import load
from tfcalc.workload import Workload

pytestmark = pytest.mark.filterwarnings("ignore")
HUB = {"lfm2-1.2b": (LFM2_1_2B, "Lfm2Config", "Lfm2ForCausalLM"),
       "lfm2-8b-a1b": (LFM2_8B_A1B, "Lfm2MoeConfig", "Lfm2MoeForCausalLM")}


def _write(tmp_path, data, name="config.json"):
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return str(path)


@pytest.fixture(scope="module")
def hub_models():
    """name -> transformers' model of the published config, on meta in bf16 (eager attention, the scores two
    explicit matmuls; the experts gathered per token, ``batched_mm``, whose FLOPs FlopCounterMode sees)."""
    import transformers

    made = {}

    def get(name):
        if name not in made:
            raw, config_class, model_class = HUB[name]
            kw = {k: v for k, v in raw.items() if k not in ("architectures", "model_type", "torch_dtype", "dtype")}
            config = getattr(transformers, config_class)(**kw)
            config._attn_implementation = "eager"
            if hasattr(config, "_experts_implementation"):
                config._experts_implementation = "batched_mm"
            with torch.device("meta"):
                made[name] = getattr(transformers, model_class)(config).to(torch.bfloat16).eval()
        return made[name]

    return get


@pytest.mark.parametrize("name, card", [("lfm2-1.2b", 1_170_340_608), ("lfm2-8b-a1b", 8_339_929_856)])
def test_published_configs_count_as_transformers_builds_them(tmp_path, hub_models, name, card):
    """LFM2-1.2B's card: 1,170,340,608 parameters; LFM2-8B-A1B's: 8.3B (1.5B active). The preset is the file."""
    cfg = load(_write(tmp_path, HUB[name][0]))
    hf = sum(p.numel() for p in hub_models(name).parameters())  # a tied head counted once
    assert count_params.total(cfg) == hf == card == count_params.total(load(name))
    assert cfg.architecture == load(name).architecture
    if name == "lfm2-8b-a1b":
        assert round(count_params.active_total(cfg) / 1e9, 1) == 1.6  # the card rounds 1.56 down to 1.5B
    kinds = [b.mixer for b in cfg.architecture.output.layers()]
    assert [i for i, m in enumerate(kinds) if not isinstance(m, ShortConv)] == (
        [2, 5, 8, 10, 12, 14] if name == "lfm2-1.2b" else [2, 6, 10, 14, 18, 21])


def _conv_padding(cfg, batch: int) -> int:
    """transformers' causal_conv1d_fn (modeling_lfm2.py, its torch path) pads K - 1 on both sides and keeps the
    first T of T + K - 1 outputs: 2·d·K·(K - 1) FLOPs per sequence and conv layer, computed and thrown away."""
    return sum(n * batch * 2 * b.mixer.d_model * b.mixer.kernel_size * (b.mixer.kernel_size - 1)
               for b, n in cfg.architecture.output.kinds() if isinstance(b.mixer, ShortConv))


@pytest.mark.parametrize("name", list(HUB))
@pytest.mark.parametrize("seq", [128, 1024])
def test_forward_flops_equal_flop_counter_mode_at_full_size(tmp_path, hub_models, name, seq):
    cfg = load(_write(tmp_path, HUB[name][0]))
    model = hub_models(name)
    with torch.no_grad(), FlopCounterMode(display=False) as counter:  # a cache: no packed-sequence check on meta
        model(input_ids=torch.zeros(1, seq, dtype=torch.long, device="meta"), use_cache=True)
    counted = count_flops.forward_flops(cfg, Workload(batch=1, seq=seq))
    assert counted == counter.get_total_flops() - _conv_padding(cfg, 1)
    # the convolutions' own share, by hand: 2·d·K·T per conv layer
    conv = sum(e.total for e in count_flops.breakdown(cfg, Workload(batch=1, seq=seq)).entries
               if e.component == "attn_conv")
    assert conv == (10 if name == "lfm2-1.2b" else 18) * 2 * 2048 * 3 * seq


def _hf_state_bytes(cache) -> tuple[int, list[tuple[int, ...]]]:
    """Every tensor transformers' cache holds (K and V of the attention layers, the conv layers' conv states),
    and the conv states' shapes."""
    total, conv = 0, []
    for layer in cache.layers:
        for t in (getattr(layer, "keys", None), getattr(layer, "values", None)):
            total += t.numel() * t.element_size() if isinstance(t, torch.Tensor) else 0
        for t in (getattr(layer, "conv_states", None) or {}).values():
            if isinstance(t, torch.Tensor):
                total += t.numel() * t.element_size()
                conv.append(tuple(t.shape))
    return total, conv


@pytest.mark.parametrize("name", list(HUB))
def test_state_at_4096_tokens_is_what_transformers_caches(tmp_path, hub_models, name):
    """K and V of every position in the 6 attention layers, and K = 3 columns of u in each conv layer (not the
    K - 1 the next step needs: tfcalc.architecture.short_conv), in bf16."""
    cfg = load(_write(tmp_path, HUB[name][0]))
    with torch.no_grad():
        out = hub_models(name)(input_ids=torch.zeros(1, 4096, dtype=torch.long, device="meta"), use_cache=True)
    held, conv = _hf_state_bytes(out.past_key_values)
    n_conv = 10 if name == "lfm2-1.2b" else 18
    assert conv == [(1, 2048, 3)] * n_conv
    assert held == kv_cache_bytes(cfg, Workload(batch=1, seq=4096, kv_dtype="bf16"))
    assert held == 2 * (6 * 2 * 4096 * 8 * 64 + n_conv * 2048 * 3)


# ---------- the component, by hand (tfcalc.architecture.short_conv's docstring) ----------


def test_mixing_and_state_by_hand():
    c = ShortConv(d_model=8, kernel_size=3)
    (full,) = c.mixing(10, 10)
    assert full.flops == 2 * 8 * 3 * 10  # every output every tap
    assert full.causal_flops == 2 * 8 * (1 + 2 + 3 * 8)  # the first K - 1 outputs see fewer real inputs
    assert conv_taps(4, 10, 3) == 12 and conv_taps(1, 1, 3) == 1 and conv_taps(2, 2, 5) == 3
    (step,) = c.mixing(1, 57, step=True)
    assert (step.flops, step.causal_flops, step.state_read) == (2 * 8 * 3, 2 * 8 * 3, 8 * 3)
    (state,) = c.state()
    # in the model's dtype whatever the KV cache's (tfcalc.count.model.dtypes.state_dtype)
    assert (state.fixed, state.per_token, state.dtype, state.shape) == (24, 0, "model", (8, 3))
    assert not c.capabilities.rewind and not c.capabilities.context_parallel
    assert sum(w.numel for w in ShortConv(8, 3, bias=True).weights()) == 3 * 64 + 24 + 64 + 3 * 8 + 8 + 8


TINY = dict(n_layer=3, d_model=32, n_head=4, n_kv_head=2, vocab_size=61, max_seq_len=64, pos_encoding="rope",
            norm="rmsnorm", activation="silu", gated_ffn=True, attn_bias=False, ffn_bias=False, d_ff=48,
            qk_norm=True, layer_pattern="conv*3")


def test_saved_activations_are_what_autograd_keeps():
    """saved(): in_proj's output whole, u and z, out_proj's input: 6·d elements a token (fp32, T = 7)."""
    cfg = ModelConfig(**TINY)
    model = build_model(cfg, "cpu", torch.float32)
    model.init_weights()
    conv = model.blocks[0].attn
    x = torch.randn(2, 7, 32, requires_grad=True)
    kept: dict[int, int] = {}

    def pack(t):
        if t.data_ptr() != x.data_ptr():  # the input is the block's norm output, counted apart
            kept[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        conv(x).sum().backward()
    weights = {p.untyped_storage().data_ptr() for p in conv.parameters()}
    acts = sum(n for ptr, n in kept.items() if ptr not in weights)
    per_token = sum(conv.spec.saved(2, 7, 4, "flash", False).values())
    # u is kept left-padded: K - 1 = 2 more columns per sequence than its 7 tokens
    assert acts == 2 * 7 * per_token + 2 * 2 * 32 * 4


def test_decode_step_runs_the_counted_flops_at_every_context():
    cfg = ModelConfig(**TINY)
    torch.manual_seed(0)
    model = build_model(cfg, "cpu", torch.float32).eval()
    model.init_weights()
    steps = step_flops(model, model.new_cache(1, 20), torch.randint(0, 61, (1, 1)), 10)
    for context, (total, _) in zip(range(2, 12), steps, strict=True):
        # the step runs K taps over its state; before position K - 1 some read the zeros before position 0,
        # which the count (causal, as attention's leaves masked slots out) does not count
        zeros = 3 * 2 * 32 * max(0, 3 - context)
        assert total == count_flops.decode_flops(cfg, Workload(batch=1, seq=context)) + zeros


def test_a_conv_state_refuses_to_rewind_and_verify():
    cfg = ModelConfig(**dict(TINY, layer_pattern="conv, full, conv"))
    model = build_model(cfg, "cpu", torch.float32).eval()
    model.init_weights()
    cache = model.new_cache(1, 12)
    with torch.no_grad():
        model.prefill(torch.randint(0, 61, (1, 4)), cache)
    assert not cache.rewindable
    with pytest.raises(InputError, match="cannot rewind"):
        cache.rewind(2)
    with pytest.raises(InputError, match="cannot rewind|states that rewind"):
        model.extend(torch.randint(0, 61, (1, 2)), cache)
    # one token a step (generate) decodes what the uncached forward does
    prompt = torch.randint(0, 61, (2, 1))  # shorter than K: the state's leading zeros
    out = generate(model, prompt, 6, cache=model.new_cache(2, 7))
    assert torch.equal(out, greedy_uncached(model, prompt, 6))


# ---------- hostile inputs: one line each ----------


def _lfm2(**changes):
    base = {k: v for k, v in LFM2_1_2B.items() if k != "full_attn_idxs"}
    return {**base, **changes}


@pytest.mark.parametrize("data, message", [
    (_lfm2(layer_types=["conv"] * 15), "'layer_types' lists 15 layers; 'num_hidden_layers' is 16"),
    (_lfm2(layer_types=["conv"] * 15 + ["sliding_attention"]), "must be a list of conv and full_attention"),
    (_lfm2(layer_types="conv"), "must be a list of conv and full_attention"),
    (_lfm2(layer_types=["conv"] * 15 + [3]), "must be a list of conv and full_attention"),
    (_lfm2(full_attn_idxs=[2, 16]), "'full_attn_idxs' must list layer numbers 0 .. 15"),
    (_lfm2(full_attn_idxs=[True]), "'full_attn_idxs' must list layer numbers"),
    (_lfm2(conv_L_cache=0), "conv_kernel' must be positive"),
    (_lfm2(conv_L_cache=True), "conv_L_cache"),
    (_lfm2(conv_L_cache="3"), "conv_L_cache"),
    (_lfm2(block_ff_dim=0), "'intermediate_size' must be a positive integer"),
    (_lfm2(block_multiple_of=0), "'block_multiple_of' must be a positive integer"),
    (_lfm2(block_auto_adjust_ff_dim="yes"), "must be true or false"),
    ({k: v for k, v in LFM2_8B_A1B.items() if k != "layer_types"}, "'layer_types' is required"),
    ({**LFM2_8B_A1B, "num_dense_layers": -1}, "'num_dense_layers' must be a non-negative integer"),
    ({**LFM2_8B_A1B, "use_expert_bias": 1}, "must be true or false"),
])
def test_hostile_config_files_are_one_line(tmp_path, data, message):
    with pytest.raises(InputError, match=message) as e:
        load(_write(tmp_path, data))
    assert "\n" not in str(e.value)


def test_layer_types_and_full_attn_idxs_agree(tmp_path):
    by_idxs = load(_write(tmp_path, LFM2_1_2B, "a.json"))
    kinds = ["full_attention" if i in (2, 5, 8, 10, 12, 14) else "conv" for i in range(16)]
    by_types = load(_write(tmp_path, _lfm2(layer_types=kinds), "b.json"))
    assert by_idxs.architecture == by_types.architecture
    every = load(_write(tmp_path, _lfm2(), "c.json"))  # neither: every layer attention (Lfm2Config)
    conv, attention = 3 * 2048**2 + 2048 * 3 + 2048**2, 2 * 2048**2 + 2 * 2048 * 512 + 2 * 64  # per layer
    assert every.layer_pattern is None
    assert count_params.total(by_idxs) - count_params.total(every) == 10 * (conv - attention)


@pytest.mark.parametrize("changes, message", [
    (dict(conv_kernel=0), "conv_kernel' must be positive"),
    (dict(arch="encoder", lm_head=False, tie_embeddings=False), "a short convolution mixes causally"),
    (dict(layer_pattern="conv*2"), "layer_pattern describes 2 layers, fewer than the model's 3"),
    (dict(layer_pattern="convolution*3"), "unknown layer kind 'convolution'"),
])
def test_hostile_fields_are_one_line(changes, message):
    with pytest.raises(InputError, match=message):
        ModelConfig(**dict(TINY, **changes))


def test_set_keys_reach_the_convolution():
    cfg = replace(load("lfm2-1.2b"), conv_kernel=4, conv_bias=True)
    conv = cfg.architecture.output.layer(0).mixer
    assert (conv.kernel_size, conv.bias) == (4, True)
    assert count_params.total(cfg) - count_params.total(load("lfm2-1.2b")) == 10 * (2048 + 5 * 2048)


def test_the_routers_expert_bias_is_loaded_and_routes(tmp_path):
    """LFM2-MoE's expert_bias (a buffer, tfcalc's score_bias) chooses the experts and does not weight them: a
    tiny checkpoint with a random bias gives transformers' logits within 1e-4 (fp32), and another choice than
    without it."""
    import warnings

    from hf_tiny import build, inputs

    import tfcalc

    model = build("lfm2_moe")
    with torch.no_grad():
        for layer in model.model.layers[1:]:  # the MoE layers (num_dense_layers 1)
            layer.feed_forward.expert_bias.copy_(torch.randn(8, generator=torch.Generator().manual_seed(3)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.save_pretrained(tmp_path)
    ours = tfcalc.load_model(str(tmp_path))
    ids = inputs("lfm2_moe", seed=7)["input_ids"]
    with torch.no_grad():
        ref, got = model(input_ids=ids).logits, ours(ids)
        assert (got - ref).abs().max() <= 1e-4
        for block in ours.blocks[1:]:
            block.ffn.score_bias.zero_()
        assert (ours(ids) - ref).abs().max() > 1e-3
