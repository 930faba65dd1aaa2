"""MiniMax-01 (model_type minimax) and its lightning-attention mixer (tfcalc.architecture.lightning,
tfcalc.model.lightning) held against transformers 5.24 (modeling_minimax.py): MiniMax-Text-01's sizes at full
size on meta (parameters exact, 456,089,655,296 -- the model card's "456B"; the state transformers' MiniMaxCache
holds at 4,096 tokens), FlopCounterMode on transformers' MiniMaxLightningAttention at full width at two lengths
(whole blocks and a shorter last one), the tiny checkpoint of tests/hf_tiny.py ("minimax": lightning and softmax
layers, the residual weights) loaded by load_model and decoded with the fixed state against the uncached forward
and transformers' generate, the saved activations, and the hostile inputs of the new fields.

By hand (module docstring of tfcalc.architecture.lightning): a block of c tokens costs, per head of d channels,
2·c·d·c (Q·Kᵀ) + 2·c·c·d (scores · V) + 2·c·d·d (Q · S) + 2·d·c·d (Kᵀ·V); a decode step 2·d·d (kᵀ·v) + 2·d·d (q·S).
"""

from __future__ import annotations

import json

import pytest
import torch
from hf_pairs import (
    assert_decode_equals,
    assert_rows_decode_alone,
    assert_verify_refused,
    greedy_uncached,
    saved_bytes,
    step_flops,
)

from tfcalc.count.model import flops as count_flops, params as count_params
from tfcalc.count.model.memory import kv_cache_bytes
from tfcalc.errors import InputError
from tfcalc.presets import load
from tfcalc.workload import Workload

pytestmark = pytest.mark.filterwarnings("ignore")

TESTED_TYPES = {"minimax"}
ALPHA = 3.5565588200778455  # layernorm_{full_attention,linear_attention,mlp}_alpha of the published config.json
# MiniMax-Text-01's sizes in transformers' keys (configuration_minimax.py): the model card
# (https://huggingface.co/MiniMaxAI/MiniMax-Text-01: 80 layers, a softmax layer after every 7 lightning ones, 64
# heads of 128, hidden 6144, 32 experts of 9216, top 2, vocabulary 200,064, RoPE base 10,000,000) and, for what
# the card leaves out, the config.json MiniMax published with the same architecture for MiniMax-M1
# (MiniMaxAI/MiniMax-M1-80k: num_key_value_heads 8, rms_norm_eps 1e-05, tie_word_embeddings false, the alphas,
# betas 1.0, max_position_embeddings 10240000), its attn_type_list written as transformers' layer_types
TEXT_01 = {
    "model_type": "minimax", "architectures": ["MiniMaxForCausalLM"], "vocab_size": 200064, "hidden_size": 6144,
    "intermediate_size": 9216, "num_hidden_layers": 80, "num_attention_heads": 64, "num_key_value_heads": 8,
    "head_dim": 128, "hidden_act": "silu", "max_position_embeddings": 10240000, "rms_norm_eps": 1e-05,
    "num_local_experts": 32, "num_experts_per_tok": 2, "tie_word_embeddings": False, "block_size": 256,
    "layer_types": ["full_attention" if (i + 1) % 8 == 0 else "linear_attention" for i in range(80)],
    "rope_parameters": {"rope_type": "default", "rope_theta": 10000000.0},
    "full_attn_alpha_factor": ALPHA, "full_attn_beta_factor": 1.0, "linear_attn_alpha_factor": ALPHA,
    "linear_attn_beta_factor": 1.0, "mlp_alpha_factor": ALPHA, "mlp_beta_factor": 1.0,
}


def _write(tmp_path, raw: dict):
    folder = tmp_path / "minimax"
    folder.mkdir(exist_ok=True)
    (folder / "config.json").write_text(json.dumps(raw))
    return folder / "config.json"


def _hf_config(raw: dict):
    import transformers

    return transformers.MiniMaxConfig(**{k: v for k, v in raw.items() if k not in ("model_type", "architectures")})


@pytest.fixture(scope="module")
def hf_meta():
    import transformers

    with torch.device("meta"):
        return transformers.MiniMaxForCausalLM(_hf_config(TEXT_01))


def test_text_01_parameters_exact(tmp_path, hf_meta):
    """transformers' model at full size on meta holds tfcalc's count (the card's 456B), and tfcalc's module on meta
    the same, group by group; one lightning layer by hand."""
    from tfcalc.measure.params import measure_params

    cfg = load(str(_write(tmp_path, TEXT_01)))
    assert cfg.layer_pattern == "(lightning*7, full)*10" and cfg.norm_placement == "normed_residual"
    hf_total = sum(p.numel() for p in hf_meta.parameters())
    assert count_params.total(cfg) == hf_total == 456_089_655_296
    total, breakdown = measure_params(cfg)
    assert total == hf_total and breakdown == count_params.breakdown(cfg)
    # qkv_proj 6144 × 3·8192, output_gate 6144 × 8192, the norm 8192, out_proj 8192 × 6144
    lightning = 6144 * 3 * 8192 + 6144 * 8192 + 8192 + 8192 * 6144
    assert sum(p.numel() for p in hf_meta.model.layers[0].self_attn.parameters()) == lightning
    assert breakdown["attn_qkv_proj_weight"] == 70 * 6144 * 3 * 8192


def test_text_01_matches_the_model_card(tmp_path):
    """The model card's figures (https://huggingface.co/MiniMaxAI/MiniMax-Text-01): "Total Parameters: 456B",
    "Activated Parameters per Token: 45.9B" -- the latter without the token table and the LM head (200,064 ×
    6,144 each), which tfcalc's active count includes."""
    cfg = load(str(_write(tmp_path, TEXT_01)))
    counts = count_params.breakdown(cfg)
    active = count_params.active_params(cfg, counts) - 2 * 200064 * 6144
    assert round(count_params.total(cfg) / 1e9) == 456 and round(active / 1e8) == 459


@pytest.mark.parametrize("seq", [300, 600])
def test_lightning_flops_equal_flop_counter_mode_on_transformers_layer(seq):
    """transformers' MiniMaxLightningAttention at full width on meta under FlopCounterMode: tfcalc's count of the
    layer (projections and block scan). 300 tokens: a block of 256 and one of 44; 600: two of 256 and one of 88."""
    import transformers.models.minimax.modeling_minimax as m
    from torch.utils.flop_counter import FlopCounterMode

    with torch.device("meta"):
        layer = m.MiniMaxLightningAttention(_hf_config(TEXT_01), 3)
        x = torch.empty(1, seq, 6144)
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        layer(x, None, None)
    from tfcalc.architecture.lightning import Lightning

    mixer = Lightning(6144, 64, 128)
    ours = sum(2 * seq * lin.n_in * lin.n_out for lin in mixer.linears())
    ours += sum(mx.flops for mx in mixer.mixing(seq, seq))
    assert ours == counter.get_total_flops()
    blocks = [256] * (seq // 256) + [seq % 256]
    by_hand = sum(64 * (2 * c * 128 * c * 2 + 2 * c * 128 * 128 * 2) for c in blocks)
    assert ours - 2 * seq * 6144 * (3 * 8192 + 8192 + 8192) == by_hand


def test_lightning_decode_step_flops_equal_flop_counter_mode_on_transformers_cached_path():
    """transformers' MiniMaxLightningAttention at full width on meta, one token over a cache holding S (its
    recurrent path): kᵀ·v and q·S, 2·128·128 FLOPs each per head, beside the projections -- the count's step."""
    import transformers.models.minimax.modeling_minimax as m
    from torch.utils.flop_counter import FlopCounterMode

    from tfcalc.architecture.lightning import Lightning

    with torch.device("meta"):
        layer = m.MiniMaxLightningAttention(_hf_config(TEXT_01), 3)
        cache = m.MiniMaxCache()
        cache.set_linear_cache(3, torch.empty(1, 64, 128, 128))
        x = torch.empty(1, 1, 6144)
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        layer(x, None, None, cache=cache)
    mixer = Lightning(6144, 64, 128)
    ours = sum(2 * lin.n_in * lin.n_out for lin in mixer.linears(step=True))
    ours += sum(mx.flops for mx in mixer.mixing(1, 4096, step=True))
    assert ours == counter.get_total_flops()
    assert sum(mx.flops for mx in mixer.mixing(1, 4096, step=True)) == 64 * 2 * (2 * 128 * 128)


def test_generation_state_at_4096_tokens_is_what_transformers_cache_holds(hf_meta):
    """Every layer of transformers' model on meta over a 4,096-token prompt in bf16 with its MiniMaxCache: K and V
    of the 10 softmax layers, and each of the 70 lightning layers' S (64 × 128 × 128, in bf16: the cache keeps the
    tensor its blocks return, in the activations' dtype) -- tfcalc's generation state at 4,096 tokens."""
    from transformers.models.minimax.modeling_minimax import MiniMaxCache

    model = hf_meta.to(torch.bfloat16)
    cache = MiniMaxCache()
    T = 4096
    x = torch.empty(1, T, 6144, device="meta", dtype=torch.bfloat16)
    cos = sin = torch.empty(1, T, 128, device="meta", dtype=torch.bfloat16)
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn(x, (cos, sin), None, cache=cache)
    held = sum(t.numel() * t.element_size() for lay in cache.layers for t in (lay.keys, lay.values)
               if isinstance(t, torch.Tensor))
    held += sum(t.numel() * t.element_size() for t in cache.linear_cache if isinstance(t, torch.Tensor))
    by_hand = 10 * 2 * T * 8 * 128 * 2 + 70 * 64 * 128 * 128 * 2
    assert held == by_hand


def test_text_01_state_counted(tmp_path):
    """The count's generation state at 4,096 tokens, bf16: the by-hand figure of the test above."""
    cfg = load(str(_write(tmp_path, TEXT_01)))
    T = 4096
    assert kv_cache_bytes(cfg, Workload(batch=1, seq=T, kv_dtype="bf16")) == 10 * 2 * T * 8 * 128 * 2 + \
        70 * 64 * 128 * 128 * 2


# ---------- the tiny checkpoint (tests/hf_tiny.py "minimax"): decode with the fixed state ----------


@pytest.fixture(scope="module")
def tiny(saved):
    import tfcalc

    hf, folder = saved("minimax")
    return hf, tfcalc.load_model(str(folder)), load(str(folder / "config.json"))


def test_tiny_checkpoint_explains_every_stored_tensor(saved, cli):
    """`tfcalc params` of the saved folder: every tensor explained, the parameters matched; save_pretrained also
    writes transformers' four decay buffers per lightning layer (slope_rate (4, 1, 1), query_decay and key_decay
    (4, 4, 1), diagonal_decay (1, 4, 4, 4): 100 elements), stored, counted in checkpoint_total, no parameter."""
    hf, folder = saved("minimax")
    data = cli("params", str(folder), "--json").json()
    params = sum(p.numel() for p in hf.parameters())
    assert data["checkpoint"]["agree"] and data["checkpoint"]["parameters_matched"] == data["analytic_total"] == params
    assert data["checkpoint_total"] == params + 3 * (4 + 16 + 16 + 64)


def test_tiny_logits_across_blocks_equal_transformers(tiny):
    """23 tokens: five whole blocks of 4 and a last one of 3, the state carried between them; the residual weights
    (1.7, 0.6) and each layer's own decay in play."""
    hf, ours, cfg = tiny
    assert cfg.residual_alpha == 1.7 and cfg.residual_multiplier == 0.6 and cfg.lightning_block_size == 4
    ids = torch.randint(0, 61, (2, 23), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        ref, got = hf(input_ids=ids).logits, ours(ids)
    assert (got - ref).abs().max() <= 1e-4 * ref.abs().max() and ref.abs().max() > 0.1


def test_tiny_prefill_then_decode_equals_the_full_forward(tiny):
    """A prompt of 6, 9 new tokens (across block boundaries): the recurrent step continues the block prefill; the
    same tokens as the uncached forward and transformers' generate (its MiniMaxCache); the state is the count's
    bytes, allocated once, and cannot rewind."""
    hf, ours, cfg = tiny
    hf.generation_config.eos_token_id = None  # the tiny model favours token 2, its eos: generate would stop there
    prompt = torch.randint(0, 61, (2, 6), generator=torch.Generator().manual_seed(5))
    cache = ours.new_cache(2, 15)
    assert_decode_equals(ours, hf, prompt, 9, cache)
    assert cache.nbytes == kv_cache_bytes(cfg, Workload(batch=2, seq=6, gen=9, dtype="fp32", kv_dtype="fp32"))
    assert not cache.rewindable


def test_tiny_prefill_logits_then_steps_equal_the_full_forward_logits(tiny):
    """Logits, not only tokens: the prefill of 7 and 5 steps of one token each give the full forward's last rows."""
    _, ours, _ = tiny
    ids = torch.randint(0, 61, (1, 12), generator=torch.Generator().manual_seed(8))
    cache = ours.new_cache(1, 12)
    with torch.no_grad():
        full = ours(ids)
        rows = [ours.prefill(ids[:, :7], cache)[:, -1]]
        from tfcalc.model.generate import Decoder

        decoder = Decoder(ours, cache)
        rows += [decoder.step(ids[:, t:t + 1])[:, -1] for t in range(7, 11)]
    assert torch.allclose(torch.stack(rows, 1), full[:, 6:11], atol=1e-5, rtol=1e-4)


def test_tiny_decode_step_flops_are_counted_and_static(tiny):
    """FlopCounterMode on each decode step equals the count's decode step (the lightning layers' recurrent form is
    fixed in the context; the softmax layer's grows), but for the keys the attention layer's step reads past the
    context: a bucket of 16 slots, hidden by the mask (tfcalc.model.cache), 2·2·H·h FLOPs each (4 heads of 8)."""
    from tfcalc.measure.flops import flop_counter

    _, ours, cfg = tiny
    steps = step_flops(ours, ours.new_cache(1, 32), torch.randint(0, 61, (1, 5)), 11, counter=flop_counter)
    for context, (total, _) in zip(range(6, 17), steps, strict=True):
        masked = 2 * 2 * 4 * 8 * (16 - context)
        assert total == count_flops.decode_flops(cfg, Workload(batch=1, seq=context)) + masked
    assert all(counts == steps[0][1] for _, counts in steps)


@pytest.mark.parametrize("seq", [8, 11])
def test_tiny_forward_flops_with_tfcalcs_counter_equal_the_count(tiny, seq):
    from tfcalc.measure.flops import flop_counter

    _, ours, cfg = tiny
    with torch.no_grad(), flop_counter() as counter:
        ours(torch.randint(0, 61, (2, seq)))
    assert counter.get_total_flops() == count_flops.forward_flops(cfg, Workload(batch=2, seq=seq))


def test_tiny_continuous_batching_rows(tiny):
    _, ours, _ = tiny
    prompts = [torch.randint(0, 61, (1, n), generator=torch.Generator().manual_seed(n)) for n in (3, 7)]
    assert_rows_decode_alone(ours, prompts, max_tokens=16, release=False)


def test_tiny_verify_step_is_refused(tiny):
    assert_verify_refused(tiny[1], 61)


def test_tiny_greedy_uncached_differs_without_the_layer_decays(tiny):
    """Each lightning layer's decay depends on its index (get_slope_rate): told the first layer's index everywhere,
    the model computes other logits (the at_layer hook is load-bearing)."""
    _, ours, _ = tiny
    ids = torch.randint(0, 61, (1, 9), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        before = ours(ids)
        for block in ours.blocks:
            block.attn.at_layer(0, len(ours.blocks))
        after = ours(ids)
        for i, block in enumerate(ours.blocks):
            block.attn.at_layer(i, len(ours.blocks))
        again = ours(ids)
    assert (before - after).abs().max() > 1e-4 and torch.equal(before, again)
    assert greedy_uncached(ours, ids, 2).shape == (1, 2)


@pytest.mark.parametrize("dtype, e", [(torch.float32, 4), (torch.bfloat16, 2)])
def test_saved_activations_equal_what_autograd_keeps(dtype, e):
    """saved_tensors_hooks on tfcalc's lightning module (every floating-point storage packed for backward, once,
    weights and the input excluded) against the component's saved bytes times the tokens, to the byte: one
    block, whole blocks, a short last block, three blocks and more, one and two sequences. Before: 0.7x to 1.4x
    (the decays, the blocks' states and the short last block estimated)."""
    from tfcalc.architecture.lightning import Lightning
    from tfcalc.model.lightning import LightningModule

    for spec in (Lightning(64, 4, 8, block=64), Lightning(64, 2, 16, block=16)):
        module = LightningModule(spec).to(dtype)
        for p in module.parameters():
            torch.nn.init.normal_(p, 0.0, 0.05)
        for batch, T in ((1, 5), (2, 5), (1, 16), (1, 64), (2, 100), (1, 128), (1, 130)):
            x = torch.randn(batch, T, 64, dtype=dtype, requires_grad=True)
            kept = saved_bytes(module, x)
            assert kept == batch * T * sum(spec.saved(batch, T, e, "math", False).values()), (spec.block, batch, T)


# ---------- hostile inputs ----------


@pytest.mark.parametrize("changes, message", [
    (dict(layer_types=["linear_attention"] * 3), "lists 3 layers"),
    (dict(layer_types=["linear_attention", "sliding_attention"] * 40), "must be a list of linear_attention"),
    (dict(layer_types="linear_attention"), "must be a list"),
    (dict(layer_types=None, attn_type_list=[0, 2] * 40), "'attn_type_list' must list 0"),
    (dict(layer_types=None, attn_type_list=[0, 1]), "'attn_type_list' lists 2 layers"),
    (dict(layer_types=None, attn_type_list=[True, False] * 40), "'attn_type_list' must list 0"),
    (dict(block_size=0), "'block_size' must be a positive integer"),
    (dict(block_size=2.5), "'block_size' must be an integer"),
    (dict(block_size="256"), "'block_size' must be an integer"),
    (dict(hidden_act="gelu"), "with SiLU only"),
    (dict(sliding_window=4096), "'sliding_window' 4096 is not built"),
    (dict(mlp_alpha_factor=2.0), "the residual alpha factors differ"),
    (dict(full_attn_beta_factor=0.5), "the residual beta factors differ"),
    (dict(linear_attn_alpha_factor=-1.0), "'linear_attn_alpha_factor' must be a positive finite number"),
    (dict(linear_attn_alpha_factor="big"), "'linear_attn_alpha_factor' must be a number"),
    (dict(num_local_experts=None), "num_local_experts"),
    (dict(num_hidden_layers=2**41), "num_hidden_layers|n_layer"),
])
def test_hostile_config_json(tmp_path, changes, message):
    with pytest.raises(InputError, match=message):
        load(str(_write(tmp_path, {**TEXT_01, **changes})))


def test_layer_lists_and_defaults(tmp_path):
    """attn_type_list where layer_types is absent (the original files'), else MiniMaxConfig's alternation; factors
    of 1 (or absent) build plain weights; no lightning layer: no pattern."""
    listed = load(str(_write(tmp_path, {**TEXT_01, "layer_types": None, "num_hidden_layers": 16,
                                        "attn_type_list": [0] * 7 + [1] + [0] * 7 + [1]})))
    assert listed.layer_pattern == "(lightning*7, full)*2"
    alternating = load(str(_write(tmp_path, {**TEXT_01, "layer_types": None, "num_hidden_layers": 4})))
    assert alternating.layer_pattern == "(full, lightning)*2"
    plain = {k: v for k, v in TEXT_01.items() if not k.endswith("_factor")}
    cfg = load(str(_write(tmp_path, plain)))
    assert cfg.residual_alpha is None and cfg.residual_multiplier is None
    full = load(str(_write(tmp_path, {**TEXT_01, "num_hidden_layers": 2, "layer_types": ["full_attention"] * 2})))
    assert full.layer_pattern is None and full.lightning_block_size is None


@pytest.mark.parametrize("overrides, message", [
    (dict(lightning_block_size=0), "lightning_block_size. must be positive"),
    (dict(lightning_block_size="x"), "lightning_block_size"),
    (dict(residual_alpha=0), "residual_alpha"),
    (dict(residual_alpha="inf"), "residual_alpha"),
    (dict(residual_alpha=2.0), "residual_alpha scales the normed residual of norm_placement normed_residual"),
    (dict(layer_pattern="(lightning*3, full)*2"), "describes 8 layers, fewer"),
    (dict(residual_alpha="1e999"), "residual_alpha. must be a number"),
    (dict(layer_pattern="(lightning*3, full)*8", arch="encoder"), "causally|lightning"),
    (dict(norm_placement="normed"), "norm_placement"),
])
def test_hostile_flat_fields(overrides, message):
    with pytest.raises(InputError, match=message):
        load("llama2-7b", [f"{k}={v}" for k, v in overrides.items()])


def test_flat_fields_build_the_hybrid():
    cfg = load("llama2-7b", ["layer_pattern=(lightning*3, full)*8", "lightning_block_size=128",
                             "norm_placement=normed_residual", "residual_alpha=2.5"])
    kinds = [(type(b.mixer).__name__, n) for b, n in cfg.architecture.output.kinds()]
    assert kinds == [("Lightning", 24), ("Attention", 8)]
    block = cfg.architecture.output.layer(0)
    assert block.mixer.block == 128 and block.residual_alpha == 2.5 and block.placement == "normed_residual"


def test_residual_alpha_reaches_every_block_layout():
    """A one-letter-per-layer hybrid (hybrid_pattern, Nemotron-H's layout) takes the weights too: its blocks, mixer
    alone and FFN alone, each scale their normed residual; refused where the placement is not normed_residual."""
    from tfcalc.config import from_mapping

    base = dict(n_layer=2, d_model=32, n_head=4, vocab_size=61, max_seq_len=64, pos_encoding="none", norm="rmsnorm",
                hybrid_pattern="M-", ssm_heads=4, ssm_head_dim=16, ssm_groups=2, ssm_state_size=8, ssm_chunk_size=4,
                residual_alpha=1.5)
    cfg = from_mapping({**base, "norm_placement": "normed_residual"})
    assert [b.residual_alpha for b in cfg.architecture.output.layers()] == [1.5, 1.5]
    with pytest.raises(InputError, match="residual_alpha scales the normed residual"):
        assert from_mapping(base).architecture is None  # never reached: the block refuses


def test_residual_alpha_is_one_more_product_a_sub_layer():
    """Non-matmul FLOPs (tfcalc.count.model.non_matmul): residual_alpha adds 1 FLOP per element of each
    sub-layer's residual, B·T·d·2 per block."""
    from tfcalc.count.model.non_matmul import non_matmul_entries

    base = dict(n_layer=3, d_model=32, n_head=4, vocab_size=61, max_seq_len=64, norm_placement="normed_residual")
    from tfcalc.config import from_mapping

    scaled, plain = (sum(e.total for e in non_matmul_entries(from_mapping(dict(base, **extra)), 2, 8))
                     for extra in ({"residual_alpha": 2.0}, {}))
    assert scaled - plain == 3 * 2 * 8 * 32 * 2


def test_measured_flops_on_meta_put_the_scan_with_the_mixing(tmp_path):
    """tfcalc.measure.flops on meta at full size (`tfcalc flops --measure`): the lightning projections in
    attention_proj, its block scan in attention_scores, group by group as counted."""
    from tfcalc.measure.flops import measure_flops

    cfg, w = load(str(_write(tmp_path, TEXT_01))), Workload(batch=1, seq=300)
    m = measure_flops(cfg, w)
    b = count_flops.breakdown(cfg, w)
    assert m.groups == dict({g: n for g, n in b.totals().items() if g != "embeddings" or n}, other=0)
    assert m.total == count_flops.forward_flops(cfg, w)
