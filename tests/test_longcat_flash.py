"""LongCat-Flash (model_type longcat_flash; transformers 5.24's modeling_longcat_flash.py; arXiv 2509.01322): its
config at full size on meta (parameters exact but for the zero experts' gate_up slice transformers allocates and
never reads; the cache transformers fills at 4,096 tokens), and a tiny checkpoint (2 layers = 4 blocks, 8 real and
4 zero experts) loaded by load_model: logits, FlopCounterMode on transformers' own forward with the router forced
onto real experts (tfcalc's upper bound) and onto zero experts (the lower bound), prefill + decode against the full
forward and transformers' generate, the stored tensors explained, and the hostile inputs."""

from __future__ import annotations

import json
import warnings

import pytest
import torch
from hf_pairs import assert_decode_equals, eager_flops, hf_cache_bytes

from tfcalc.count.model import flops as count_flops, params as count_params
from tfcalc.count.model.memory import kv_cache_bytes
from tfcalc.errors import InputError
from tfcalc.presets import load
from tfcalc.workload import Workload

pytestmark = pytest.mark.filterwarnings("ignore")

# LongcatFlashConfig's defaults (transformers 5.24, configuration_longcat_flash.py, its docstring's checkpoint
# meituan-longcat/LongCat-Flash-Chat)
TESTED_TYPES = {"longcat_flash"}
FULL = {"model_type": "longcat_flash", "architectures": ["LongcatFlashForCausalLM"]}
TINY = dict(vocab_size=61, hidden_size=32, num_layers=2, num_attention_heads=4, ffn_hidden_size=48, q_lora_rank=20,
            kv_lora_rank=12, qk_nope_head_dim=8, qk_rope_head_dim=4, v_head_dim=6, head_dim=4, n_routed_experts=8,
            zero_expert_num=4, moe_topk=3, expert_ffn_hidden_size=16, max_position_embeddings=64)
E, Z, K = 8, 4, 3


def _write(tmp_path, raw: dict, name: str = "longcat"):
    folder = tmp_path / name
    folder.mkdir(exist_ok=True)
    (folder / "config.json").write_text(json.dumps(raw))
    return folder / "config.json"


@pytest.fixture(scope="module")
def hf_meta():
    import transformers

    with torch.device("meta"):
        return transformers.LongcatFlashForCausalLM(transformers.LongcatFlashConfig())


def _phantom(hf) -> int:
    """transformers' gate_up_proj rows of the zero experts: allocated, never read (LongcatFlashExperts.forward sends
    those experts to nn.Identity), never in the published checkpoint."""
    return sum(layer.mlp.experts.gate_up_proj[layer.mlp.experts.num_routed_experts:].numel()
               for layer in hf.model.layers)


def test_full_size_parameters_exact(tmp_path, hf_meta):
    """transformers' model on meta less the unused slice holds tfcalc's count, and tfcalc's module on meta the same;
    the paper's 560B total (arXiv 2509.01322, abstract)."""
    from tfcalc.measure.params import measure_params

    cfg = load(str(_write(tmp_path, FULL)))
    hf_total = sum(p.numel() for p in hf_meta.parameters())
    assert _phantom(hf_meta) == 28 * 256 * 2 * 2048 * 6144  # by hand: 180,388,626,432
    # by hand: each attention q_a, its norm, q_b, kv_a, its norm, kv_b, o; each layer two of them, two dense FFNs,
    # the router over 768, 512 experts, four norms; the table, the head and the final norm
    mla = 6144 * 1536 + 1536 + 1536 * 64 * 192 + 6144 * 576 + 512 + 512 * 64 * 256 + 64 * 128 * 6144
    layer = 2 * mla + 2 * 3 * 6144 * 12288 + 768 * 6144 + 512 * 3 * 6144 * 2048 + 4 * 6144
    by_hand = 28 * layer + 2 * 131072 * 6144 + 6144
    assert count_params.total(cfg) == hf_total - _phantom(hf_meta) == by_hand == 560_664_958_976
    total, breakdown = measure_params(cfg)
    assert total == count_params.total(cfg) and breakdown == count_params.breakdown(cfg)


def test_active_parameters_are_the_upper_bound_all_k_on_real_experts(tmp_path):
    """Active: the total less the E - k real experts a token skips in each of the 28 MoE layers (each expert 3 ·
    6144 · 2048) -- every pick on a real expert, the most a token can run. The paper gives 18.6B-31.3B activated
    (arXiv 2509.01322, abstract), its convention unstated: without the token table (a lookup), tfcalc's bound is
    31.38B, and with all 12 picks on zero experts 18.69B, each within 0.6 % of the paper's ends."""
    cfg = load(str(_write(tmp_path, FULL)))
    expert = 3 * 6144 * 2048
    active = count_params.active_total(cfg)
    assert active == count_params.total(cfg) - 28 * (512 - 12) * expert
    table = 131072 * 6144
    upper, lower = active - table, active - table - 28 * 12 * expert
    assert (upper, lower) == (31_377_348_608, 18_693_773_312)
    assert abs(upper / 31.3e9 - 1) < 0.006 and abs(lower / 18.6e9 - 1) < 0.006


def test_generation_state_at_4096_tokens_is_what_transformers_cache_holds(tmp_path, hf_meta):
    """Both attentions of each of the 28 layers on meta over 4,096 tokens in bf16 with transformers' cache (the
    latent and the rotary key, 512 + 64 a token, 56 cache layers): tfcalc's state."""
    from transformers import DynamicCache

    model = hf_meta.to(torch.bfloat16)
    cache = DynamicCache(config=model.config)
    T = 4096
    x = torch.empty(1, T, 6144, device="meta", dtype=torch.bfloat16)
    cos = sin = torch.empty(1, T, 64, device="meta", dtype=torch.bfloat16)
    mask = torch.ones(1, 1, T, T, dtype=torch.bool, device="meta")
    with torch.no_grad():
        for layer in model.model.layers:
            for attn in layer.self_attn:
                attn(x, (cos, sin), mask, cache=cache)
    cfg = load(str(_write(tmp_path, FULL)))
    assert hf_cache_bytes(cache) == 56 * T * (512 + 64) * 2 == kv_cache_bytes(cfg, Workload(batch=1, seq=T,
                                                                                             kv_dtype="bf16"))


# ---------- a tiny checkpoint ----------


def _tiny_hf(bias: float | None = None):
    """The tiny model, every tensor moved off its init (so a tensor loaded into the wrong place shows); ``bias``
    on the real experts' correction bias (+: every pick real, -: every pick a zero expert), else a random one."""
    import transformers

    torch.manual_seed(0)
    config = transformers.LongcatFlashConfig(**TINY)
    config._attn_implementation = "eager"
    config._experts_implementation = "eager"
    hf = transformers.LongcatFlashForCausalLM(config).eval()
    with torch.no_grad():
        for p in hf.parameters():
            p.add_(torch.randn_like(p), alpha=0.05)
        for layer in hf.model.layers:
            b = layer.mlp.router.e_score_correction_bias
            b.normal_(0, 0.1) if bias is None else b.copy_(torch.tensor([bias] * E + [0.0] * Z))
    return hf


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    import tfcalc

    hf = _tiny_hf()
    folder = tmp_path_factory.mktemp("longcat-tiny")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        hf.save_pretrained(folder)
    return hf, tfcalc.load_model(str(folder)), load(str(folder / "config.json")), folder


def _picks(hf, ids) -> torch.Tensor:
    """The experts transformers' routers chose over ids, every layer's."""
    chosen = []
    hooks = [layer.mlp.router.register_forward_hook(lambda m, i, out: chosen.append(out[2]))
             for layer in hf.model.layers]
    try:
        with torch.no_grad():
            hf(input_ids=ids)
    finally:
        for h in hooks:
            h.remove()
    return torch.cat([c.flatten() for c in chosen])


def test_tiny_logits_equal_transformers(tiny):
    """Zero experts picked and real ones too (both paths in play), the shortcut carried across the pair."""
    hf, ours, _, _ = tiny
    ids = torch.randint(0, 61, (2, 12), generator=torch.Generator().manual_seed(1))
    picks = _picks(hf, ids)
    assert (picks >= E).any() and (picks < E).any()
    with torch.no_grad():
        ref, got = hf(input_ids=ids).logits, ours(ids)
    assert (got - ref).abs().max() <= 1e-4 * ref.abs().max() and ref.abs().max() > 0.1


def test_tiny_shortcut_and_scales_matter(tiny):
    """The same weights with the experts' output added in the first block of each pair, or without LongCat's latent
    scales, give other logits: the test above sees both."""
    hf, ours, _, _ = tiny
    ids = torch.randint(0, 61, (1, 10), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        ref = hf(input_ids=ids).logits
        scales = ours.blocks[0].attn.scales
        ours.blocks[0].attn.scales = None
        try:
            assert (ours(ids) - ref).abs().max() > 1e-3
        finally:
            ours.blocks[0].attn.scales = scales


def test_tiny_prefill_then_decode_equals_the_full_forward_and_transformers(tiny):
    """A prompt of 7 and 6 new tokens over tfcalc's fixed state (both attentions of each pair cached): the uncached
    forward's tokens and transformers' generate; the state's bytes are the count's."""
    hf, ours, cfg, _ = tiny
    prompt = torch.randint(0, 61, (2, 7), generator=torch.Generator().manual_seed(3))
    cache = ours.new_cache(2, 13)
    assert_decode_equals(ours, hf, prompt, 6, cache)
    assert cache.nbytes == 2 * 13 * 4 * (12 + 4) * 4 == kv_cache_bytes(cfg, Workload(batch=2, seq=7, gen=6,
                                                                                       kv_dtype="fp32"))


def test_tiny_cache_is_what_transformers_holds(tiny):
    hf, _, cfg, _ = tiny
    ids = torch.randint(0, 61, (2, 9))
    with torch.no_grad():
        cache = hf(input_ids=ids, use_cache=True).past_key_values
    assert hf_cache_bytes(cache) == kv_cache_bytes(cfg, Workload(batch=2, seq=9, kv_dtype="fp32")) == 2 * 9 * 4 * 16 * 4


@pytest.mark.parametrize("bias, routed", [(10.0, True), (-10.0, False)])
def test_flop_counter_mode_on_transformers_bounds_the_count(tiny, bias, routed):
    """FlopCounterMode on transformers' forward (eager attention and experts): with every pick on a real expert it is
    tfcalc's forward FLOPs exactly (the upper bound tfcalc counts); with every pick on a zero expert it is that less
    the routed experts' 2·3·d·f per pick (k per token in each of the 2 MoE blocks): the range the router's choice
    spans."""
    _, _, cfg, _ = tiny
    hf = _tiny_hf(bias)
    T = 11
    ids = torch.randint(0, 61, (2, T), generator=torch.Generator().manual_seed(4))
    picks = _picks(hf, ids)
    assert bool((picks < E).all()) is routed and bool((picks >= E).all()) is not routed
    counted = count_flops.forward_flops(cfg, Workload(batch=2, seq=T))
    experts = 2 * 2 * T * K * 2 * 3 * 32 * 16  # 2 MoE blocks, 2·T tokens, k picks, 2·3·d·f each
    assert eager_flops(hf, ids) == (counted if routed else counted - experts)


def test_tiny_forward_flops_with_tfcalcs_counter_equal_the_count(tiny):
    """tfcalc's module runs k expert rows per token whatever the router picks (a zero pick at weight 0)."""
    from tfcalc.measure.flops import flop_counter

    _, ours, cfg, _ = tiny
    with torch.no_grad(), flop_counter() as counter:
        ours(torch.randint(0, 61, (2, 12)))
    assert counter.get_total_flops() == count_flops.forward_flops(cfg, Workload(batch=2, seq=12))


def test_tiny_checkpoint_explains_every_stored_tensor(tiny, cli):
    """`tfcalc params` of the saved folder: every tensor explained, the parameters matched; save_pretrained also
    writes the zero experts' unused gate and up (4 experts × 2 × 16 × 32 a layer) and the routers' correction bias
    (8 + 4 a layer), stored, no parameter."""
    hf, _, _, folder = tiny
    data = cli("params", str(folder), "--json").json()
    params = sum(p.numel() for p in hf.parameters()) - _phantom(hf)
    assert data["checkpoint"]["agree"] and data["checkpoint"]["parameters_matched"] == data["analytic_total"] == params
    assert data["checkpoint_total"] == params + _phantom(hf) + 2 * (E + Z) == params + 2 * Z * 2 * 16 * 32 + 2 * 12


# ---------- hostile inputs ----------


@pytest.mark.parametrize("changes, message", [
    (dict(num_hidden_layers=7), "'num_hidden_layers' 7 must be even"),
    (dict(num_layers=3, num_hidden_layers=8), "must be 2·num_layers"),
    (dict(num_layers=0), "'num_layers' must be a positive integer"),
    (dict(num_layers="28"), "'num_layers' must be an integer"),
    (dict(num_key_value_heads=8), "'num_key_value_heads' 8 is not supported"),
    (dict(q_lora_rank=None), "'q_lora_rank' null is not supported"),
    (dict(qk_head_dim=128), "'qk_head_dim' 128 is not qk_nope_head_dim"),
    (dict(zero_expert_type="copy"), "'zero_expert_type'"),
    (dict(zero_expert_num=-1), "'zero_expert_num' must be 0 or more"),
    (dict(zero_expert_num=True), "'zero_expert_num' must be an integer"),
    (dict(moe_topk=600), "'moe_topk' 600 is more than 'n_routed_experts'"),
    (dict(moe_topk=0), "n_expert_active"),
    (dict(router_bias="yes"), "'router_bias' must be true or false"),
    (dict(routed_scaling_factor=0), "'routed_scaling_factor' must be a positive number"),
    (dict(routed_scaling_factor="6"), "'routed_scaling_factor' must be a number"),
    (dict(architectures=["LongcatFlashForSequenceClassification"]), "'architectures'"),
])
def test_hostile_config_json(tmp_path, changes, message):
    with pytest.raises(InputError, match=message):
        load(str(_write(tmp_path, {**FULL, **changes})))


def test_no_zero_experts_build_a_plain_router(tmp_path):
    """zero_expert_num 0: the router over the 512 real experts (LongcatFlashTopkRouter: zero_expert_num or 0)."""
    moe = load(str(_write(tmp_path, {**FULL, "zero_expert_num": 0}))).architecture.output.layer(0).ffn
    assert moe.n_zero == 0 and moe.n_router == 512


def test_num_hidden_layers_alone_is_read_as_pairs(tmp_path):
    cfg = load(str(_write(tmp_path, {**FULL, "num_hidden_layers": 8})))
    assert cfg.n_layer == 8 and [b.shortcut for b in cfg.architecture.output.layers()] == [True, False] * 4


@pytest.mark.parametrize("overrides, message", [
    (["n_layer=55"], "no next layer to join"),  # a copy of 55 layers cut from the description ends on a pair's first
    (["moe_every=2"], "does not apply with moe_shortcut"),
    (["zero_experts=-2"], "'zero_experts' must be positive"),
    (["n_expert_active=600"], r"fewer than n_expert_active \(600\)"),
])
def test_hostile_flat_fields(tmp_path, overrides, message):
    with pytest.raises(InputError, match=message):
        load(str(_write(tmp_path, FULL)), overrides)


@pytest.mark.parametrize("preset, overrides, message", [
    ("llama2-7b", ["zero_experts=4"], "zero_experts applies to a mixture of experts only"),
    ("llama2-7b", ["mla_lora_scale=true"], "mla_lora_scale scales the compressed query"),
    ("mixtral-8x7b", ["moe_shortcut=true", "n_layer=31"], "n_layer must be even"),
])
def test_hostile_flat_fields_elsewhere(preset, overrides, message):
    with pytest.raises(InputError, match=message):
        load(preset, overrides)


def test_cli_commands_run(cli, tmp_path):
    path = str(_write(tmp_path, FULL))
    for command in (("params", path, "--no-measure"), ("flops", path, "--seq", "4096"),
                    ("memory", path, "--seq", "4096"), ("infer", path, "--seq", "4096")):
        r = cli(*command)
        assert r.code == 0, r.err


def test_tiny_decode_step_flops_are_counted_and_static(tiny):
    """FlopCounterMode on each absorbed decode step (both attentions of each pair, the shortcut experts at k rows a
    token) equals the count's decode step but for the slots the step reads past the context (a bucket of the cache,
    hidden by the mask): 2·H·(2·c_kv + h_r) FLOPs a slot in each of the 4 attentions (H 4, c_kv 12, h_r 4)."""
    from hf_pairs import step_flops

    from tfcalc.measure.flops import flop_counter

    _, ours, cfg, _ = tiny
    steps = step_flops(ours, ours.new_cache(1, 32), torch.randint(0, 61, (1, 5)), 11, counter=flop_counter)
    per_slot = 4 * 2 * 4 * (2 * 12 + 4)
    extra = [total - count_flops.decode_flops(cfg, Workload(batch=1, seq=context))
             for context, (total, _) in zip(range(6, 17), steps, strict=True)]
    bucket = 6 + extra[0] // per_slot
    assert extra == [(bucket - context) * per_slot for context in range(6, 17)] and bucket >= 16
    assert all(counts == steps[0][1] for _, counts in steps)


def test_tiny_continuous_batching_rows(tiny):
    """Two prompts decoded together in two rows, a row freed: each row's tokens its own sequence's."""
    from hf_pairs import assert_rows_decode_alone

    _, ours, _, _ = tiny
    prompts = [torch.randint(0, 61, (1, n), generator=torch.Generator().manual_seed(n)) for n in (3, 7)]
    assert_rows_decode_alone(ours, prompts, max_tokens=16)


def test_shortcut_blocks_refuse_what_they_cannot_carry():
    """A stack may not end on a shortcut block, a shortcut block needs the experts and a pre-norm layout, and zero
    experts run dropless with the weights on the outputs: one line each."""
    import dataclasses

    from tfcalc.architecture import Block

    cfg = load("mixtral-8x7b", ["moe_shortcut=true", "zero_experts=2", "dense_d_ff=64"])
    first, second = cfg.architecture.output.layer(0), cfg.architecture.output.layer(1)
    assert first.shortcut and first.ffn.n_zero == 2 and first.ffn.shared.d_ff == 64 and not second.is_moe
    with pytest.raises(InputError, match="needs a mixture of experts"):
        Block(second.mixer, second.ffn, second.norm, shortcut=True)
    with pytest.raises(InputError, match="norm_placement pre"):
        dataclasses.replace(first, placement="post")
    with pytest.raises(InputError, match="dropless"):
        dataclasses.replace(first.ffn, capacity_factor=1.25)
    with pytest.raises(InputError, match="no next layer to join"):
        dataclasses.replace(cfg.architecture.output, runs=cfg.architecture.output.runs[:-1] + (
            dataclasses.replace(cfg.architecture.output.runs[-1], pattern=(first,)),))


def test_reports_state_the_zero_expert_convention(tmp_path, cli):
    """params and flops name the zero experts and the upper bound they count; the layer row shows them."""
    path = str(_write(tmp_path, FULL))
    for command in (("params", path, "--no-measure"), ("flops", path, "--seq", "64")):
        r = cli(*command)
        assert r.code == 0, r.err
        assert "upper bound, all 12 on real experts" in " ".join(r.out.split())
    assert "top-12, +1 shared, +256 zero" in cli("params", path, "--no-measure").out


@pytest.mark.parametrize("seq", [16, 32])
def test_training_activations_are_within_ten_percent_of_what_autograd_keeps(tmp_path, seq):
    """saved_tensors_hooks over tfcalc's whole tiny model (every floating-point storage packed for backward, once;
    weights left out) against the count's activations: the shortcut block is counted as an MoE block with its dense
    FFN as the shared expert, which is what it keeps (4 % over here, as a DeepSeek-V3 of these widths)."""
    from hf_pairs import saved_bytes

    from tfcalc.count.model import activations as count_activations
    from tfcalc.model import build_model

    raw = {k: v for k, v in TINY.items() if k != "head_dim"}
    cfg = load(str(_write(tmp_path, {**FULL, **raw})))
    torch.manual_seed(0)
    model = build_model(cfg, "cpu", torch.float32)
    for p in model.parameters():
        torch.nn.init.normal_(p, 0.0, 0.05)
    kept = saved_bytes(model, torch.randint(0, 61, (2, seq)))
    counted = count_activations.activations(cfg, Workload(batch=2, seq=seq, dtype="fp32")).total
    assert abs(counted - kept) <= 0.1 * kept, (counted, kept)


def test_measured_pipeline_and_expert_parallel_runs_are_refused(tiny):
    """Planned, not run: a pipeline stage cut may fall between a shortcut block and the next, and the expert-parallel
    forward has no identity term; each refused in one line before any process starts."""
    from tfcalc.count.training.layout import Layout
    from tfcalc.measure.experts_parallel import apply_ep
    from tfcalc.measure.pipeline import check_pipeline_measurable

    _, ours, cfg, _ = tiny
    with pytest.raises(InputError, match="shortcut MoE"):
        check_pipeline_measurable(cfg, Layout(pp=2, seq=8, global_batch=2), 2)
    with pytest.raises(InputError, match="zero-computation experts"):
        apply_ep(ours, None, 2, 0)


@pytest.mark.parametrize("seq", [64, 160])
def test_attention_flops_at_full_width_equal_flop_counter_mode_on_transformers(tmp_path, seq):
    """transformers' LongcatFlashMLA at full width on meta under FlopCounterMode (eager attention over the T×T
    square): tfcalc's projections and mixing for one of the 56 attentions; the scales cost no matmul."""
    import transformers
    import transformers.models.longcat_flash.modeling_longcat_flash as m
    from torch.utils.flop_counter import FlopCounterMode

    hf_cfg = transformers.LongcatFlashConfig()
    hf_cfg._attn_implementation = "eager"
    with torch.device("meta"):
        layer = m.LongcatFlashMLA(hf_cfg, 0).eval()
        x = torch.empty(1, seq, 6144)
        cos = sin = torch.empty(1, seq, 64)
        mask = torch.zeros(1, 1, seq, seq)
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        layer(x, (cos, sin), mask)
    mixer = load(str(_write(tmp_path, FULL))).architecture.output.layer(1).mixer
    projections = sum(2 * seq * lin.n_in * lin.n_out for lin in mixer.linears())
    # by hand: q_a, q_b, kv_a, o over the tokens, kv_b over the keys; Q·Kᵀ over 192 channels, A·V over 128
    by_hand = 2 * seq * (6144 * 1536 + 1536 * 64 * 192 + 6144 * 576 + 512 * 64 * 256 + 64 * 128 * 6144)
    assert projections == by_hand
    assert projections + sum(mx.flops for mx in mixer.mixing(seq, seq)) == counter.get_total_flops() == (
        by_hand + 2 * seq * seq * 64 * (192 + 128))
