"""DeepSeek-V3 / R1, Kimi K2 and DeepSeek-V2: latent attention, DeepSeek's routing, YaRN and the MTP module,
held against the published sizes, transformers itself (tiny random models; the full configs on meta are in
test_hf_reference.py, the tiny cases' parameters, FLOPs and logits in test_hf_models.py) and tfcalc's own
module (cache, decode, checkpoint)."""

from __future__ import annotations

import json
import math
import warnings

import pytest
from deepseek_configs import DEEPSEEK_FILES, DEEPSEEK_V2_LITE, DEEPSEEK_V3, KIMI_K2, latent_configs
from hf_tiny import CASES, V, build
from hypothesis import HealthCheck, given, settings, strategies as st

from tfcalc.count.model import flops as flops_count, memory as mem, params as count
from tfcalc.errors import InputError
from tfcalc.presets import load
from tfcalc.workload import Workload

pytestmark = pytest.mark.filterwarnings("ignore")


def _write(tmp_path, data, folder="model"):
    path = tmp_path / folder / "config.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))
    return str(path)


@pytest.mark.parametrize("model_type", ["deepseek_v3", "kimi_k2"])
def test_hub_config_counts_as_the_preset(tmp_path, model_type):
    data, preset = DEEPSEEK_FILES[model_type]
    cfg, ours = load(_write(tmp_path, data)), load(preset)
    assert count.breakdown(cfg) == count.breakdown(ours)
    assert cfg.architecture.output.runs == ours.architecture.output.runs  # the routing and YaRN too
    assert cfg.architecture.mtp == ours.architecture.mtp


def test_deepseek_v3_published_sizes():
    """DeepSeek-V3 Technical Report (arXiv 2412.19437), sec. 1 and 4.2: 671B total, 37B activated per token.
    The model card (huggingface.co/deepseek-ai/DeepSeek-V3, README_WEIGHTS.md): the MTP module has 11.5B
    unique parameters besides its copies of the embedding and head (0.9B each); 685B on Hugging Face in all
    (the FP8 block scales, 1 per 128×128 weights, add the last ~0.04B)."""
    cfg = load("deepseek-v3")
    total, active, mtp = count.total(cfg), count.active_total(cfg), cfg.architecture.mtp
    assert total == 671_026_404_352 and f"{total / 1e9:.0f}B" == "671B"
    assert int(active / 1e9) == 37
    assert mtp.depth == 1 and abs(mtp.total / 11.5e9 - 1) < 0.01
    assert mtp.shared_copies == 2 * 129280 * 7168 and f"{mtp.shared_copies / 2e9:.1f}" == "0.9"
    assert abs((total + mtp.stored_total) / 685e9 - 1) < 0.001
    kinds = cfg.architecture.output.kinds()
    assert [(b.is_moe, n) for b, n in kinds] == [(False, 3), (True, 58)]


def test_kimi_k2_published_sizes():
    """Kimi K2 (model card, huggingface.co/moonshotai/Kimi-K2-Instruct: 1T total, 32B activated; the report,
    arXiv 2507.20534: 1.04 trillion total). The exact count equals transformers' build of the config.json
    (test_hf_reference.py): 1,026,408,209,408, 1.3% under the report's 1.04T."""
    cfg = load("kimi-k2")
    total, active = count.total(cfg), count.active_total(cfg)
    assert total == 1_026_408_209_408 and f"{total / 1e12:.0f}T" == "1T" and abs(total / 1.04e12 - 1) < 0.015
    assert f"{active / 1e9:.0f}B" == "33B" and abs(active / 32e9 - 1) < 0.03
    assert [(b.is_moe, n) for b, n in cfg.architecture.output.kinds()] == [(False, 1), (True, 60)]
    assert cfg.architecture.mtp is None


def test_deepseek_v2_lite_published_sizes(tmp_path):
    """DeepSeek-V2 (arXiv 2405.04434), Appendix B: DeepSeek-V2-Lite has 15.7B parameters, 2.4B activated.
    tfcalc's active count includes the token-embedding table a token reads (2,661,150,208); DeepSeek's
    "activated" leaves that lookup out: 2,451,435,008 (and DeepSeek-V3's 36.6B, "37B")."""
    cfg = load(_write(tmp_path, DEEPSEEK_V2_LITE))
    lookup = 102400 * 2048
    assert count.total(cfg) == 15_706_484_224 and f"{count.total(cfg) / 1e9:.1f}B" == "15.7B"
    assert count.active_total(cfg) == 2_661_150_208 and int((count.active_total(cfg) - lookup) / 1e8) == 24
    a = cfg.architecture.output.layer(0).attention
    assert a.q_lora_rank is None and a.kv_elements() == 512 + 64


def test_latent_cache_is_the_latent_and_the_rotary_key():
    """The paper's Table 1 (arXiv 2405.04434): MLA caches (d_c + d_h^R)·l elements per token: 576 per layer
    for DeepSeek-V3, against 2·128·(128 + 64)... expanded K and V heads would hold."""
    cfg = load("deepseek-v3")
    assert mem.kv_cache_bytes(cfg, Workload(batch=1, seq=1000, dtype="bf16")) == 1000 * 61 * (512 + 64) * 2
    assert (
        mem.kv_cache_expanded_bytes(cfg, Workload(batch=1, seq=1000, dtype="bf16")) == 1000 * 61 * 128 * (192 + 128) * 2
    )


def test_yarn_scale_and_attention_factor():
    """modeling_deepseek_v3.py: softmax scale (h_n + h_r)^-1/2 · (0.1·mscale_all_dim·ln(factor) + 1)²."""
    import math

    a = load("deepseek-v3").architecture.output.layer(0).attention
    assert a.scale == pytest.approx(192 ** -0.5 * (0.1 * math.log(40) + 1) ** 2)
    assert a.yarn.attention_factor == 1.0  # mscale == mscale_all_dim


def _save(model, folder):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.save_pretrained(folder)
    return folder


def _logits_match(model, folder, seed=3):
    import torch

    import tfcalc

    ids = torch.randint(0, V, (2, 10), generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        ref = model(ids).logits
        got = tfcalc.load_model(str(folder))(ids)
    assert (got - ref).abs().max() <= 1e-4 * ref.abs().max() and ref.abs().max() > 0.1


def test_correction_bias_steers_the_choice_and_is_loaded(tmp_path):
    """e_score_correction_bias: a buffer in transformers (no parameter, not counted), stored in checkpoints;
    a bias large enough to change which experts are picked must give transformers' logits again."""
    import torch

    model = build("deepseek_v3")
    with torch.no_grad():
        for name, b in model.named_buffers():
            if name.endswith("e_score_correction_bias"):
                b.copy_(torch.linspace(-0.5, 0.5, b.numel()))
    folder = _save(model, tmp_path / "biased")
    _logits_match(model, folder)
    cfg = load(str(folder / "config.json"))
    assert count.total(cfg) == sum(p.numel() for p in model.parameters())


def test_kimi_k2_model_type_is_the_deepseek_v3_architecture(tmp_path):
    model = build("deepseek_v3")
    folder = _save(model, tmp_path / "kimi")
    raw = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**raw, "model_type": "kimi_k2"}))
    cfg = load(str(folder / "config.json"))
    assert "model_type kimi_k2" in cfg.source and count.total(cfg) == sum(p.numel() for p in model.parameters())
    _logits_match(model, folder)


@pytest.mark.parametrize("name", ["deepseek_v3", "deepseek_v2"])
def test_kv_cache_equals_what_transformers_allocates(tmp_path, name):
    """transformers 5 caches the latent and the rotary key (modeling_deepseek_v3.py: "Cache read / write is
    performed while latent KV is still compressed"): the bytes tfcalc counts, and tfcalc's own cache."""
    import torch

    import tfcalc

    model = build(name)
    folder = _save(model, tmp_path / name)
    cfg = load(str(folder / "config.json"))
    ids = torch.randint(0, V, (2, 9))
    with torch.no_grad():
        cache = model(ids, use_cache=True).past_key_values
    hf = sum(t.numel() * t.element_size() for layer in cache.layers for t in (layer.keys, layer.values))
    assert hf == mem.kv_cache_bytes(cfg, Workload(batch=2, seq=9, dtype="fp32"))
    ours = tfcalc.load_model(str(folder)).new_cache(2, 9)
    assert ours.nbytes == hf
    a = cfg.architecture.output.layer(0).attention
    assert (
        mem.kv_cache_expanded_bytes(cfg, Workload(batch=2, seq=9, dtype="fp32"))
        == 2 * 9 * 3 * a.n_head * (a.head_dim + a.v_dim) * 4
    )


def test_prompt_then_decode_steps_give_transformers_logits(tmp_path):
    """tfcalc's static cache of latents: a prompt then one-token steps reproduce transformers' full forward."""
    import torch

    import tfcalc

    model = build("deepseek_v3")
    ours = tfcalc.load_model(str(_save(model, tmp_path / "m")))
    ids = torch.randint(0, V, (2, 10))
    with torch.no_grad():
        full = model(ids).logits
        cache = ours.new_cache(2, 10)
        steps = [ours.prefill(ids[:, :4], cache, last_only=False)]
        steps += [ours.decode(ids[:, t:t + 1], cache) for t in range(4, 10)]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, rtol=1e-4, atol=1e-4)


def test_naive_decode_step_flops_expand_the_whole_context(tmp_path):
    """The naive form transformers runs (tfcalc's module with ``absorb = False``): a decode step expands every
    cached latent through W_kvb, so its FLOPs are the analytic fold with W_kvb's rows = the context
    (tfcalc.architecture.latent)."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    import tfcalc
    from tfcalc.model.latent import LatentAttention

    ours = tfcalc.load_model(str(_save(build("deepseek_v3-plain"), tmp_path / "m")))
    cfg = load(str(tmp_path / "m" / "config.json"))
    ids = torch.randint(0, V, (2, 8))
    for m in ours.modules():
        if isinstance(m, LatentAttention):
            m.absorb = False
    with torch.no_grad():
        cache = ours.new_cache(2, 9)
        ours.prefill(ids, cache)
        with FlopCounterMode(display=False) as counter:
            ours.decode(ids[:, :1], cache)
    entries = flops_count.matmul_entries(cfg, 2, 1, 9)
    assert counter.get_total_flops() == sum(e.total for e in entries)
    kv_b = next(e for e in entries if e.component == "attn_kv_b")
    assert kv_b.shape[0] == 2 * 9  # every position of the context, not the one new token


@pytest.mark.parametrize("name", ["deepseek_v3", "deepseek_v3-plain", "deepseek_v2"])
def test_decode_step_flops_are_the_absorbed_form(tmp_path, name):
    """A decode step runs (and counts) the absorbed form: FlopCounterMode over the real module's step equals
    decode_flops, and over tfcalc.model.latent_absorbed on one layer's weights the hand-derived terms
    (tfcalc.architecture.latent, step 6: 2·H·h_n·c and 2·H·c·h_v per token, 2·H·(c + h_r) + 2·H·c per key)."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    import tfcalc
    from tfcalc.model.latent_absorbed import absorbed_attention

    ours = tfcalc.load_model(str(_save(build(name), tmp_path / "m")))
    cfg = load(str(tmp_path / "m" / "config.json"))
    B, S = 2, 9
    ids = torch.randint(0, V, (B, S - 1))
    with torch.no_grad():
        cache = ours.new_cache(B, S)
        ours.prefill(ids, cache)
        with FlopCounterMode(display=False) as counter:
            ours.decode(ids[:, :1], cache)
    w = Workload(batch=B, seq=S)
    assert counter.get_total_flops() == flops_count.decode_flops(cfg, w)
    entries = {e.component: e for e in flops_count.decode_entries(cfg, w)}
    assert "attn_kv_b" not in entries  # no expansion of the cached latents
    a = cfg.architecture.output.layer(0).attention
    H, hn, hr, hv, c = a.n_head, a.qk_nope_head_dim, a.qk_rope_head_dim, a.v_head_dim, a.kv_lora_rank
    hand = {"attn_uk": 2 * B * H * hn * c, "attn_uv": 2 * B * H * c * hv, "attn_qk": 2 * B * H * S * (c + hr),
            "attn_av": 2 * B * H * S * c}
    assert {k: entries[k].per_copy for k in hand} == hand
    layer = ours.blocks[0].attn
    with torch.no_grad(), FlopCounterMode(display=False) as one:
        absorbed_attention(torch.randn(B, 1, H, hn), torch.randn(B, 1, H, hr), torch.randn(B, S, c),
                           torch.randn(B, S, hr), layer.kv_b.weight, layer.scale)
    assert one.get_total_flops() == sum(hand.values())


def test_the_absorbed_decode_reads_w_kvb_once_and_the_latent_cache_once():
    """The roofline of a DeepSeek-V3 decode step: W_kvb's bytes read once, split between W_UK's and W_UV's
    rows by their rows (H·h_n and H·h_v: half each); the weights read in all as the naive form read them;
    FLOPs the absorbed ones; the cache read once (c_kv + h_r per key and layer)."""
    from tfcalc.count.model import quant
    from tfcalc.count.serving.roofline import decode_step, verify_step
    from tfcalc.count.serving.serving_tp import shard_step

    cfg = load("deepseek-v3", ["stored_quant=null"])  # bf16 weights: 2 bytes each (the preset stores fp8)
    step = decode_step(cfg, 2, 1000, quant.plain("bf16"), "bf16")
    rows = {r.component: r for r in step.rows}
    kv_b = count.breakdown(cfg)["attn_kv_b_weight"] * 2
    assert rows["attn_uk"].weight_bytes == rows["attn_uv"].weight_bytes == kv_b // 2 and "attn_kv_b" not in rows
    naive = verify_step(cfg, 2, 1, 1000, quant.plain("bf16"), "bf16")  # one query in the naive form
    assert step.weight_bytes == naive.weight_bytes and step.kv_bytes == naive.kv_bytes
    assert {r.component: r.weight_bytes for r in naive.rows}["attn_kv_b"] == kv_b
    assert step.flops == flops_count.decode_flops(cfg, Workload(batch=2, seq=1000))
    assert rows["attn_qk"].flops == 61 * 2 * 2 * 128 * 1000 * (512 + 64)  # layers · 2 · B · H · S · (c + h_r)
    assert rows["attn_qk"].kv_bytes == 2 * 1000 * 61 * 576 * 2 and rows["attn_av"].kv_bytes == 0
    assert rows["attn_uk"].activation_bytes == 61 * 2 * 128 * 2 * (128 + 512)  # layers · bytes · H · B · (h_n + c)
    half = {r.component: r for r in shard_step(step, cfg, 2, 0).rows}
    assert half["attn_uk"].flops * 2 == rows["attn_uk"].flops and half["attn_uv"].count == 128 // 2  # heads / T


def test_flops_json_names_the_absorbed_decode_beside_the_naive_one(cli):
    """`flops --decode --json`: DeepSeek-V3 at 4,096 keys, per layer the naive step's W_kvb over the keys and
    full-width scores, 2·S·512·128·256 + 2·128·S·(192 + 128), against the absorbed 2·2·128·128·512 +
    2·128·S·(576 + 512) (tfcalc.architecture.latent, step 6); a model without latent attention: one form."""
    S = 4096
    decode = cli("flops", "deepseek-v3", "--decode", "--seq", str(S), "--json").json()["decode"]
    naive = 2 * S * 512 * 128 * 256 + 2 * 128 * S * (192 + 128)
    absorbed = 2 * 2 * 128 * 128 * 512 + 2 * 128 * S * (576 + 512)
    assert decode["attention_form"] == "absorbed" and decode["flops_naive"] - decode["flops"] == 61 * (naive - absorbed)
    plain = cli("flops", "llama2-7b", "--decode", "--json").json()["decode"]
    assert plain["attention_form"] == "standard" and plain["flops_naive"] == plain["flops"]
    assert cli("infer", "deepseek-v3", "--json").json()["decode_attention_form"] == "absorbed"
    assert cli("infer", "llama2-7b", "--json").json()["decode_attention_form"] == "standard"


def test_checkpoint_counts_mtp_and_fp8_scales_apart(tmp_path, cli):
    """A published DeepSeek-V3 checkpoint also stores the MTP module (model.layers.61.*) and FP8 block scales
    (weight_scale_inv): every element is in checkpoint_total, the parameters still match the config."""
    import torch
    from safetensors.torch import load_file, save_file

    folder = _save(build("deepseek_v3"), tmp_path / "m")
    tensors = load_file(str(folder / "model.safetensors"))
    tensors["model.layers.3.enorm.weight"] = torch.ones(32)
    tensors["model.layers.3.eh_proj.weight"] = torch.ones(32, 64)
    tensors["model.layers.0.self_attn.kv_b_proj.weight_scale_inv"] = torch.ones(1, 1)
    save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})
    r = cli("params", str(folder), "--json")
    assert r.code == 0, r.err
    data = r.json()
    stored = sum(t.numel() for t in tensors.values())
    assert data["checkpoint_total"] == stored and data["checkpoint"]["agree"]
    assert data["checkpoint"]["mtp_module"] == 32 + 32 * 64
    assert data["checkpoint"]["parameters_matched"] == data["analytic_total"]


def test_every_case_feature_is_switched_on():
    """The tiny cases cover q_lora on and off, YaRN, grouped routing of both kinds, dense-first layers."""
    kinds = [CASES[name].kwargs for name in CASES if name.startswith("deepseek")]
    assert any(k.get("q_lora_rank") for k in kinds) and any(k.get("q_lora_rank") is None for k in kinds)
    assert any("rope_parameters" in k for k in kinds) and any(k.get("n_group", 1) > 1 for k in kinds)
    assert any(k.get("first_k_dense_replace") for k in kinds) and any(k.get("rope_interleave") is False for k in kinds)


def test_v3_and_kimi_config_json_read_as_published(tmp_path):
    v3 = load(_write(tmp_path, DEEPSEEK_V3, "v3"))
    assert (v3.router_scoring, v3.router_groups, v3.router_topk_groups, v3.routed_scaling) == ("sigmoid", 8, 4, 2.5)
    yarn = (v3.rope_scaling, v3.rope_scaling_factor, v3.rope_original_max_seq_len, v3.mtp_layers)
    assert yarn == ("yarn", 40, 4096, 1)
    kimi = load(_write(tmp_path, KIMI_K2, "kimi"))
    assert (kimi.n_expert, kimi.n_head, kimi.first_dense_layers, kimi.routed_scaling) == (384, 64, 1, 2.827)


def test_params_shows_dense_and_moe_layers_apart_and_the_mtp_module(cli):
    r = cli("params", "deepseek-v3", "--no-measure", "--json")
    assert r.code == 0, r.err
    data = r.json()
    kinds = {k["label"]: k for k in data["layer_kinds"]}
    assert (kinds["dense"]["layers"], kinds["MoE"]["layers"]) == (3, 58)
    assert sum(k["params"] for k in kinds.values()) + 2 * 926_679_040 + 7168 == data["analytic_total"]
    assert data["mtp_module"]["params"] == load("deepseek-v3").architecture.mtp.total
    text = cli("params", "deepseek-v3", "--no-measure").out
    assert "3 dense layers" in text and "58 MoE layers" in text and "MTP module ×1, beside: not in the total" in text


def test_memory_and_infer_name_the_expanded_cache_beside_the_latent(cli):
    cfg = load("deepseek-v3")
    m = cli("memory", "deepseek-v3", "--seq", "4096", "--json").json()
    assert (
        m["kv_cache_bytes"] == mem.kv_cache_bytes(cfg, Workload(batch=1, seq=4096, dtype="bf16")) == 4096 * 61 * 576 * 2
    )
    assert m["kv_cache_expanded_bytes"] == 4096 * 61 * 128 * (192 + 128) * 2
    assert "KV cache, latent (MLA)" in cli("memory", "deepseek-v3", "--seq", "4096").out
    i = cli("infer", "deepseek-v3", "--seq", "4096", "--gen", "16", "--json").json()
    i = i[0] if isinstance(i, list) else i
    assert i["kv_cache_bytes"] == 4112 * 61 * 576 * 2 and i["kv_cache_expanded_bytes"] == 4112 * 61 * 40960 * 2
    plain = cli("memory", "llama2-7b", "--json").json()
    assert plain["kv_cache_expanded_bytes"] == plain["kv_cache_bytes"]


def test_a_decode_step_reads_the_latent_cache_once():
    """The roofline's KV bytes of a decode step: each layer's latent and rotary key, read once (not the
    expanded heads), equal to the cache at that context."""
    from tfcalc.count.model import quant
    from tfcalc.count.serving.roofline import decode_step

    cfg = load("deepseek-v3", ["stored_quant=null"])  # bf16 weights: 2 bytes each (the preset stores fp8)
    step = decode_step(cfg, 2, 1000, quant.plain("bf16"), "bf16")
    assert (
        sum(r.kv_bytes for r in step.rows)
        == mem.kv_cache_bytes(cfg, Workload(batch=2, seq=1000, dtype="bf16"))
        == 2 * 1000 * 61 * 576 * 2
    )


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(latent_configs(), st.integers(1, 2), st.data())
def test_random_latent_models_hold_every_count(cfg, batch, data):
    """Parameters (numel on meta, the breakdown, a plan's shards), FLOPs (FlopCounterMode on CPU, group by
    group) and the cache the module allocates all equal the folds over the description."""
    from tfcalc.count.training.shard import check_tp, stage_tensors, tp_local_shape
    from tfcalc.measure.flops import measure_flops
    from tfcalc.measure.params import measured_breakdown, measured_total
    from tfcalc.model import build_model
    from tfcalc.workload import Workload

    model = build_model(cfg, "meta")
    assert measured_total(model) == count.total(cfg) and measured_breakdown(model) == count.breakdown(cfg)
    tp = data.draw(st.sampled_from([1, 2]), label="tp")
    try:
        check_tp(cfg, tp)
    except InputError:
        tp = 1
    # a plan's tensors on one stage, each split one summed over its TP ranks (test_architecture_property.py)
    shards = sum(copies * sum(math.prod(tp_local_shape(t, tp, r)) for r in (range(tp) if t.tp_split else [0]))
                 for t, copies in stage_tensors(cfg, 1, 0))
    assert shards == count.total(cfg)
    seq = data.draw(st.integers(1, cfg.max_seq_len), label="seq")
    m, b = (
        measure_flops(cfg, Workload(batch=batch, seq=seq), "cpu"),
        flops_count.breakdown(cfg, Workload(batch=batch, seq=seq)),
    )
    assert m.total == b.forward
    assert m.groups == dict({g: n for g, n in b.totals().items() if g != "embeddings"}, other=0)
    cache = model.new_cache(batch, seq)
    assert cache.nbytes == mem.kv_cache_bytes(cfg, Workload(batch=batch, seq=seq, dtype="fp32"))


def test_the_memory_warm_up_copy_keeps_a_dense_and_a_moe_layer():
    from tfcalc.measure.memory import _warmup_config

    small, warm = _warmup_config(load("deepseek-v3"))  # one of each kind: the first dense layer, then a MoE one
    assert [b.is_moe for b in warm.output.layers()] == [False, True] and small.vocab_size == 64 + 129280 % 16
    assert _warmup_config(load("mixtral-8x7b"))[1].output.n_layer == 1
    assert _warmup_config(load("gpt2"))[1].output.n_layer == 1


@pytest.mark.parametrize("name", ["deepseek_v3", "deepseek_v2"])
def test_forward_flops_equal_flop_counter_mode_with_batched_experts(tmp_path, name):
    """transformers' batched_mm experts (one bmm over the routed rows: the top-k experts per token) count
    what tfcalc counts, as the per-expert loop does (test_hf_models.py)."""
    import torch
    import transformers
    from hf_tiny import inputs
    from torch.utils.flop_counter import FlopCounterMode

    case = CASES[name]
    config = getattr(transformers, case.config)(**case.kwargs)
    config._attn_implementation, config._experts_implementation = "eager", "batched_mm"
    model = getattr(transformers, case.model)(config).eval()
    cfg = load(str(_save(model, tmp_path / name) / "config.json"))
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        model(**inputs(name))
    rotary = sum(sum(ops.values()) for path, ops in counter.get_flop_counts().items() if path.endswith("rotary_emb"))
    assert counter.get_total_flops() - rotary == flops_count.forward_flops(cfg, Workload(batch=2, seq=10))
