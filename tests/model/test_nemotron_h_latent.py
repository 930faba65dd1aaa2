"""Nemotron-H's latent MoE (moe_latent_size; Nemotron 3 Super) against transformers 5.24
(models/nemotron_h/modeling_nemotron_h.py, NemotronHMoE): the router and the shared expert on the d-wide input,
fc1_latent_proj d -> L on the routed input, the routed experts (up (E, I, L), down (E, L, I)) in L, fc2_latent_proj
L -> d on their sum. Parameters exact on meta (a tiny config and a Nemotron-3-Super-like size); forward FLOPs equal
to FlopCounterMode on transformers' module at two lengths; a tiny checkpoint (M, *, -, E) loaded by load_model gives
transformers' logits; the all-to-all under expert parallelism moves L-wide rows; bad sizes one line each.
"""

from __future__ import annotations

import pytest
import torch
from hf_pairs import assert_decode_equals, assert_logits_close, config_json, eager_flops, nudge, saved_pair
from test_nemotron_h import TINY, _hf

from tfcalc.config import replace
from tfcalc.count.model import flops as count_flops, params as count_params
from tfcalc.workload import Workload

transformers = pytest.importorskip("transformers")

LATENT = dict(TINY, moe_latent_size=16)  # the experts in 16 of the 32 model widths
# Nemotron-3-Super-like widths (not a published file: its config.json is not in this repository): d 4096, 512
# experts of 2,688 in a 1,024-wide latent, top 22, a 5,376-wide shared expert; a few layers of every letter
SUPER = {"model_type": "nemotron_h", "architectures": ["NemotronHForCausalLM"], "hidden_size": 4096,
         "hybrid_override_pattern": "MEM*E-", "num_attention_heads": 32, "num_key_value_heads": 2, "head_dim": 128,
         "mamba_num_heads": 128, "mamba_head_dim": 64, "n_groups": 8, "ssm_state_size": 128, "conv_kernel": 4,
         "chunk_size": 128, "intermediate_size": 10240, "moe_intermediate_size": 2688,
         "moe_shared_expert_intermediate_size": 5376, "moe_latent_size": 1024, "n_routed_experts": 512,
         "num_experts_per_tok": 22, "n_group": 1, "topk_group": 1, "routed_scaling_factor": 5.0,
         "vocab_size": 131072, "mlp_hidden_act": "relu2", "mlp_bias": False, "use_bias": False}


def _raw(keys):
    return dict(keys, model_type="nemotron_h", architectures=["NemotronHForCausalLM"])


@pytest.mark.parametrize("raw", [_raw(LATENT), _raw(dict(LATENT, moe_latent_size=48)), SUPER],
                         ids=["tiny", "tiny-wider-than-d", "super-like"])
def test_parameters_equal_transformers_on_meta(tmp_path, raw):
    assert count_params.total(config_json(tmp_path, raw)) == sum(p.numel() for p in _hf(raw).parameters())


def test_super_like_moe_layer_by_hand(tmp_path):
    """One E layer by hand: experts up (f, L) and down (L, f) each, the router (E, d), the shared expert's up and
    down, the two projections (L, d) and (d, L), the norm; the latent config against the same without it."""
    d, L, E, f, S = 4096, 1024, 512, 2688, 5376
    with_latent = count_params.total(config_json(tmp_path, SUPER))
    without = count_params.total(config_json(tmp_path, {k: v for k, v in SUPER.items() if k != "moe_latent_size"}))
    assert with_latent - without == 2 * (E * 2 * f * L + 2 * d * L - E * 2 * f * d)  # two E layers
    moe = E * 2 * f * L + E * d + 2 * d * S + 2 * d * L + d
    mamba_in = 2 * 128 * 64 + 2 * 8 * 128 + 128
    conv = 128 * 64 + 2 * 8 * 128
    mamba = d * mamba_in + conv * 4 + conv + 3 * 128 + 128 * 64 + 128 * 64 * d + d
    attention = d * 32 * 128 * 2 + 2 * d * 2 * 128 + d
    mlp = 2 * d * 10240 + d
    assert with_latent == 2 * mamba + 2 * moe + attention + mlp + 2 * 131072 * d + d
    # a token runs the router, 22 experts, the shared one and both projections of each E layer
    active_moe = E * d + 22 * 2 * f * L + 2 * d * S + 2 * d * L + d
    assert count_params.active_total(config_json(tmp_path, SUPER)) == with_latent - 2 * moe + 2 * active_moe


@pytest.fixture(scope="module")
def latent_pair(tmp_path_factory):
    torch.manual_seed(0)
    hf = _hf(LATENT, device="cpu")
    nudge(hf, "gate.weight")
    with torch.no_grad():
        for name, b in hf.named_buffers():
            if "e_score_correction_bias" in name:
                b.normal_(0.0, 0.1)
    return saved_pair(hf, tmp_path_factory.mktemp("tiny_nemotron_h_latent"))


def test_tiny_latent_checkpoint_logits_equal_transformers(latent_pair):
    hf, model = latent_pair
    assert model.cfg.moe_latent_dim == 16
    assert_logits_close(hf, model, torch.randint(0, 61, (2, 11)))


def test_tiny_latent_decode_over_the_hybrid_cache_equals_the_uncached_forward(latent_pair):
    hf, model = latent_pair
    assert_decode_equals(model, hf, torch.randint(0, 61, (2, 5)), 8, model.new_cache(2, 13))


@pytest.mark.parametrize("T", [11, 37])
def test_tiny_latent_forward_flops_equal_flop_counter_on_transformers(latent_pair, T):
    """Every letter, on real weights, two lengths: the latent projections once per token (2·N·d·L each), the
    experts' top-2 rows at L (transformers' loop runs each token's chosen rows). Less the named term of
    test_nemotron_h: the K - 1 convolution outputs transformers computes and drops."""
    hf, model = latent_pair
    measured = eager_flops(hf, torch.randint(0, 61, (1, T)))
    conv_dim, K = 64 + 2 * 2 * 6, 4
    dropped = 2 * 2 * conv_dim * K * (K - 1)
    counted = count_flops.forward_flops(model.cfg, Workload(batch=1, seq=T))
    assert measured == counted + dropped
    projections, experts_saved = 2 * 2 * T * 32 * 16, 2 * 2 * T * 2 * 12 * (32 - 16)
    plain = count_flops.forward_flops(replace(model.cfg, moe_latent_dim=None), Workload(batch=1, seq=T))
    assert counted - plain == projections - experts_saved  # by hand, beside the counter


def test_expert_parallel_all_to_all_moves_latent_rows(tmp_path):
    """Megatron-Core's latent MoE (moe_latent_size: the routed tokens projected before the dispatch, so the
    all-to-all carries L-wide rows) and NemotronHMoE, which projects before its experts. EP 4 on one H100 node
    (tests/count/test_serving_ep's links), bf16, 2 tokens a GPU: of a token's 22 copies 22·3/4 = 16.5 leave the
    GPU, each 1,024 values of 2 bytes each way, at each of the 2 E layers."""
    from tfcalc.count.serving import expert_parallel as ep

    lay = ep.ExpertLayout(4, 1, 4, 0, 8, "nvlink", 450e9, 2e-6, 0.8, 50e9, 6e-6, 0.9)
    cfg = config_json(tmp_path, SUPER)
    a = ep.all_to_all(cfg, lay, 2, 2, fp8=False)
    assert a.dispatch_bytes_per_token == a.combine_bytes_per_token == 16.5 * 1024 * 2
    assert a.intra_bytes == 2 * 2 * 2 * 16.5 * 1024 * 2
    full = ep.all_to_all(replace(cfg, moe_latent_dim=None), lay, 2, 2, fp8=False)
    assert full.dispatch_bytes_per_token == 16.5 * 4096 * 2  # without the latent: d-wide rows


@pytest.mark.parametrize("value, message", [
    (0, "'moe_latent_size' must be a positive integer"),
    (-8, "'moe_latent_size' must be a positive integer"),
    (16.5, "'moe_latent_size' must be an integer"),
    ("16", "'moe_latent_size' must be an integer"),
])
def test_bad_moe_latent_size_is_one_line(tmp_path, value, message):
    from tfcalc.errors import InputError

    with pytest.raises(InputError, match=message):
        config_json(tmp_path, _raw(dict(LATENT, moe_latent_size=value)))


def test_moe_latent_dim_needs_experts():
    from tfcalc.errors import InputError
    from tfcalc.presets import load

    with pytest.raises(InputError, match="moe_latent_dim applies to a mixture of experts only"):
        load("gpt2", ["moe_latent_dim=16"])
    with pytest.raises(InputError, match="moe_latent_dim"):  # the experts' width from --set, held positive
        load("qwen3-30b-a3b", ["moe_latent_dim=0"])
    cfg = load("qwen3-30b-a3b", ["moe_latent_dim=512"])  # any MoE takes it: 2·d·L per layer beside the narrower experts
    base = load("qwen3-30b-a3b")
    assert count_params.total(cfg) - count_params.total(base) == 48 * (2 * 2048 * 512 - 128 * 3 * 768 * (2048 - 512))


def _ffn_saved(cfg, T):
    """(autograd's bytes for tfcalc's MoE module of the first E layer on T tokens in fp32, the count's)."""
    from hf_pairs import saved_bytes

    from tfcalc.count.model.activation_terms import capacity_terms, layer_terms
    from tfcalc.model import build_model

    torch.manual_seed(0)
    model = build_model(cfg, "cpu", torch.float32)
    i, block = next((i, b) for i, b in enumerate(cfg.architecture.output.layers()) if b.is_moe)
    got = saved_bytes(model.blocks[i].ffn, torch.randn(1, T, cfg.d_model, requires_grad=True))
    terms = {k: T * v for k, v in layer_terms(block, 1, T, 4, "math").items()}
    if block.ffn.capacity_factor is not None:
        capacity_terms(block.ffn, terms, T, 4)
    return got, sum(terms[k] for k in ("ffn_hidden", "moe_routing", "shared_expert") if k in terms)


@pytest.mark.parametrize("T", [5, 16])
def test_saved_activations_of_the_latent_moe_against_autograd(tmp_path, T):
    """What autograd packs for the MoE module (hf_pairs.saved_bytes), the count's step 8 with L-wide routed rows and
    the L -> d projection's input: dropless (Nemotron-H) and with a capacity (a flat config, --set)."""
    got, counted = _ffn_saved(config_json(tmp_path, _raw(LATENT)), T)
    assert got == counted
    plain_got, plain = _ffn_saved(config_json(tmp_path, _raw(TINY)), T)
    assert plain_got == plain and counted < plain  # the routed rows 16 wide, not 32
    from tfcalc.presets import load

    flat = load("gpt2", ["n_layer=1", "d_model=32", "n_head=4", "d_ff=12", "n_expert=4", "n_expert_active=2",
                         "expert_capacity_factor=1.25", "moe_latent_dim=16", "vocab_size=61", "max_seq_len=64"])
    got, counted = _ffn_saved(flat, T)
    assert got == counted
