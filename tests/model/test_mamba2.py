"""The Mamba2 mixer (tfcalc.architecture.mamba2, tfcalc.model.mamba2) and the mamba2 family against transformers
5.24 (models/mamba2/modeling_mamba2.py): Codestral Mamba's published config.json at full size on meta
(parameters exact; forward FLOPs equal to FlopCounterMode on transformers' torch path at two lengths, less the
one named term; the generation state at 4,096 tokens equal to transformers' cache bytes); a tiny checkpoint
written by transformers and loaded by load_model (logits within 1e-4, fp32); the decode over the fixed state
against the uncached forward and its FLOPs against FlopCounterMode.
"""

from __future__ import annotations

import json

import pytest
import torch
from hf_pairs import assert_decode_equals, assert_logits_close, assert_rows_decode_alone, nudge, saved_pair, step_flops
from torch.utils.flop_counter import FlopCounterMode

from tfcalc.count.model import flops as count_flops, params as count_params
from tfcalc.count.model.memory import kv_cache_bytes
from tfcalc.presets import load
from tfcalc.workload import Workload

transformers = pytest.importorskip("transformers")

# mistralai/Mamba-Codestral-7B-v0.1, config.json (https://huggingface.co/mistralai/Mamba-Codestral-7B-v0.1/blob/
# main/config.json), as published; "time_step_limit" [0.0, Infinity] there
CODESTRAL = {
    "architectures": ["Mamba2ForCausalLM"], "bos_token_id": 0, "chunk_size": 256, "conv_kernel": 4,
    "eos_token_id": 0, "expand": 2, "head_dim": 64, "hidden_act": "silu", "hidden_size": 4096,
    "initializer_range": 0.1, "intermediate_size": 8192, "layer_norm_epsilon": 1e-05, "model_type": "mamba2",
    "n_groups": 8, "norm_before_gate": True, "num_heads": 128, "num_hidden_layers": 64, "pad_token_id": 0,
    "rescale_prenorm_residual": False, "residual_in_fp32": True, "rms_norm": True, "state_size": 128,
    "tie_word_embeddings": False, "time_step_floor": 0.0001, "time_step_init_scheme": "random",
    "time_step_limit": [0.0, float("inf")], "time_step_max": 0.1, "time_step_min": 0.001, "time_step_rank": 256,
    "time_step_scale": 1.0, "torch_dtype": "bfloat16", "use_bias": False, "use_cache": True, "use_conv_bias": True,
    "vocab_size": 32768,
}


def _write(tmp_path, raw: dict):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(raw))
    return path


def _hf(raw: dict, device="meta", dtype=torch.float32):
    keys = {k: v for k, v in raw.items() if k not in ("architectures", "model_type", "torch_dtype")}
    with torch.device(device):
        return transformers.Mamba2ForCausalLM(transformers.Mamba2Config(**keys)).to(dtype).eval()


@pytest.fixture(scope="module")
def codestral(tmp_path_factory):
    return load(str(_write(tmp_path_factory.mktemp("codestral"), CODESTRAL)))


@pytest.fixture(scope="module")
def hf_codestral():
    return _hf(CODESTRAL)


def test_codestral_parameters_equal_transformers_on_meta(codestral, hf_codestral):
    hf = sum(p.numel() for p in hf_codestral.parameters())
    # by hand: per layer in_proj 4096 -> 2·8192 + 2·8·128 + 128 = 18,560; conv over 8192 + 2,048 channels, 4 taps
    # and a bias; dt_bias, A_log, D (128 each); gated norm 8,192; out_proj 8192 -> 4096; the layer's norm 4,096
    conv = 8192 + 2 * 8 * 128
    layer = 4096 * 18560 + conv * 4 + conv + 3 * 128 + 8192 + 8192 * 4096 + 4096
    by_hand = 64 * layer + 2 * 32768 * 4096 + 4096
    assert count_params.total(codestral) == hf == by_hand == 7_285_403_648


@pytest.mark.parametrize("seq", [300, 512])
def test_codestral_forward_flops_equal_flop_counter_on_transformers(codestral, hf_codestral, seq):
    """FlopCounterMode over transformers' torch path (chunk 256: 300 tokens pad to 2 chunks, 512 are 2 whole)
    equals the count plus the one named term: transformers' convolution pads K - 1 on both sides and computes
    K - 1 outputs it drops, 2·conv_dim·K·(K - 1) FLOPs per layer and sequence that tfcalc's module does not run."""
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        hf_codestral(torch.zeros(1, seq, dtype=torch.long, device="meta"), use_cache=False)
    conv_dim, K = 8192 + 2 * 8 * 128, 4
    dropped = 64 * 2 * conv_dim * K * (K - 1)
    counted = count_flops.forward_flops(codestral, Workload(batch=1, seq=seq))
    assert counter.get_total_flops() == counted + dropped
    # the scan's five matmuls by hand (tfcalc.architecture.mamba2, a-e): c chunks of 256, H 128, P 64, N 128
    c, C, H, P, N = -(-seq // 256), 256, 128, 64, 128
    scan = 2 * c * H * C * C * N + 2 * c * H * C * C * P + 2 * 2 * c * H * C * P * N + 2 * H * (c + 1) ** 2 * P * N
    by_hand = 64 * (2 * seq * 4096 * 18560 + 2 * seq * 8192 * 4096 + 2 * seq * conv_dim * K + scan) \
        + 2 * seq * 4096 * 32768
    assert counted == by_hand


def test_codestral_state_at_4096_tokens_equals_transformers_cache(codestral):
    """transformers' cache after a 4,096-token prompt in bf16: per layer the convolution's K columns (bf16) and
    the SSM state (fp32, as its chunked scan computes it); tfcalc's count is the same, whatever the length."""
    hf = _hf(CODESTRAL, dtype=torch.bfloat16)
    with torch.no_grad():
        out = hf(torch.zeros(1, 4096, dtype=torch.long, device="meta"), use_cache=True)
    cache = out.cache
    tensors = [t for i in range(64) for t in (cache.layers[i].conv_states[0], cache.layers[i].recurrent_states[0])]
    hf_bytes = sum(t.numel() * t.element_size() for t in tensors)
    assert {t.dtype for t in tensors} == {torch.bfloat16, torch.float32}
    by_hand = 64 * ((8192 + 2048) * 4 * 2 + 128 * 64 * 128 * 4)
    for seq in (4096, 100_000):
        assert kv_cache_bytes(codestral, Workload(batch=1, seq=seq, kv_dtype="bf16")) == hf_bytes == by_hand


# a tiny Mamba2: 3 layers, 8 heads of 8 in 2 groups, state 6, chunks of 4 (11 tokens: 3 chunks, the last padded)
TINY = dict(vocab_size=61, hidden_size=32, num_hidden_layers=3, num_heads=8, head_dim=8, n_groups=2, state_size=6,
            conv_kernel=4, chunk_size=4, expand=2, use_conv_bias=True, tie_word_embeddings=False)


@pytest.fixture(scope="module")
def tiny_pair(tmp_path_factory):
    torch.manual_seed(0)
    hf = _hf(TINY, device="cpu")
    nudge(hf)
    return saved_pair(hf, tmp_path_factory.mktemp("tiny_mamba2"))


def test_tiny_checkpoint_logits_equal_transformers(tiny_pair):
    hf, model = tiny_pair
    assert_logits_close(hf, model, torch.randint(0, 61, (2, 11)))


def test_decode_over_the_fixed_state_equals_the_uncached_forward(tiny_pair):
    hf, model = tiny_pair
    prompt, new = torch.randint(0, 61, (2, 6)), 8
    cache = model.new_cache(2, 6 + new)
    assert_decode_equals(model, hf, prompt, new, cache)
    # the state allocated once, at the shapes and dtypes the component says: conv (B, 8·8 + 2·2·6, 4) in the
    # model's dtype, SSM (B, 8, 8, 6) in fp32
    assert [(tuple(s.conv.shape), tuple(s.ssm.shape), s.ssm.dtype) for s in cache.states] == \
        [((2, 88, 4), (2, 8, 8, 6), torch.float32)] * 3


def test_continuous_batching_rows_decode_the_mamba2_state(tiny_pair):
    """Rows joining and leaving (tfcalc.model.slots): each row's conv and SSM state is its own sequence's."""
    _, model = tiny_pair
    assert_rows_decode_alone(model, [torch.randint(0, 61, (1, n)) for n in (3, 6)], max_tokens=14)


def test_a_decode_step_runs_the_counted_flops_and_the_same_shapes_at_every_context(tiny_pair):
    _, model = tiny_pair
    cfg = model.cfg
    steps = step_flops(model, model.new_cache(1, 20), torch.randint(0, 61, (1, 5)), 14)
    for context, (total, _) in zip(range(6, 20), steps, strict=True):
        assert total == count_flops.decode_flops(cfg, Workload(batch=1, seq=context))
    assert all(counts == steps[0][1] for _, counts in steps)


# ---------- hostile input: the new fields, the pattern's letters, the mamba2 file's keys ----------
def _yaml_cfg(**changes):
    from tfcalc.config import from_mapping

    base = dict(n_layer=2, d_model=32, n_head=4, vocab_size=61, max_seq_len=64, pos_encoding="none", norm="rmsnorm",
                hybrid_pattern="MM", ssm_heads=4, ssm_head_dim=16, ssm_groups=2, ssm_state_size=8, ssm_chunk_size=4)
    return from_mapping({**base, **changes})


@pytest.mark.parametrize("changes, message", [
    (dict(hybrid_pattern="M"), "one letter per layer"),
    (dict(hybrid_pattern="MMM"), "one letter per layer"),
    (dict(hybrid_pattern="MX"), "letter 'X' is none of"),
    (dict(hybrid_pattern="m*"), "letter 'm' is none of"),
    (dict(hybrid_pattern="ME"), "give n_expert"),
    (dict(ssm_heads=None), "give ssm_heads and ssm_head_dim"),
    (dict(ssm_heads=5), "multiple of ssm_groups"),
    (dict(ssm_heads=0), "'ssm_heads' must be positive"),
    (dict(ssm_state_size=0), "'ssm_state_size' must be positive"),
    (dict(ssm_chunk_size=-4), "'ssm_chunk_size' must be positive"),
    (dict(ssm_conv_kernel=0), "'ssm_conv_kernel' must be positive"),
    (dict(ssm_head_dim=2.5), "ssm_head_dim"),
    (dict(ssm_state_dtype="int8"), "ssm_state_dtype"),
    (dict(hybrid_pattern=7), "hybrid_pattern"),
    (dict(arch="encoder"), "arch decoder"),
    (dict(hybrid_pattern="M-", hybrid_with_ffn=True), "no - or E"),
    (dict(hybrid_with_ffn="yes"), "hybrid_with_ffn"),
])
def test_bad_mamba2_fields_are_one_clear_line(changes, message):
    from tfcalc.errors import InputError

    with pytest.raises(InputError, match=message):
        _yaml_cfg(**changes)


def test_the_pattern_letters_build_one_sub_layer_each():
    """M: a Mamba2 mixer alone (its norm, no FFN norm); *: attention alone; -: the dense FFN alone (no mixer norm)."""
    cfg = _yaml_cfg(n_layer=4, hybrid_pattern="M*-M", d_ff=24, activation="relu", gated_ffn=False, ffn_bias=False,
                    attn_bias=False, tie_embeddings=True)
    layers = list(cfg.architecture.output.layers())
    assert [[n for n, _ in b.norms()] for b in layers] == [["attn_norm"], ["attn_norm"], ["ffn_norm"], ["attn_norm"]]
    assert layers[0] is layers[3]
    d, w = 32, 4 * 16  # per layer by hand: Mamba2 (in_proj 32 -> 2·64 + 2·2·8 + 4, conv 96 × 4 + 96, dt/A/D, norm
    mamba = d * 164 + 96 * 4 + 96 + 3 * 4 + w + w * d + d  # 64, out_proj) and its norm
    attention = 4 * d * d + d  # Q, K, V, O (4 heads of 8) and its norm
    ffn = 2 * d * 24 + d
    assert count_params.total(cfg) == 2 * mamba + attention + ffn + 61 * d + d  # tied head


@pytest.mark.parametrize("key, value, message", [
    ("hidden_size", 33, "must equal num_heads·head_dim"),
    ("n_groups", 3, "multiple of 'n_groups'"),
    ("num_heads", 0, "'num_heads' must be a positive integer"),
    ("state_size", "128", "'state_size' must be a positive integer"),
    ("time_step_limit", [0.0, 1.0], "time_step_limit"),
    ("time_step_limit", "x", "time_step_limit"),
    ("hidden_act", "gelu", "activation 'gelu' is not built"),
    ("use_bias", "yes", "'use_bias' must be true or false"),
])
def test_bad_mamba2_config_json_is_one_line(tmp_path, key, value, message):
    from tfcalc.errors import InputError

    raw = dict(CODESTRAL, **{key: value})
    with pytest.raises(InputError, match=message):
        load(str(_write(tmp_path, raw)))


def test_the_preset_is_the_published_config_json(codestral):
    preset = load("codestral-mamba-7b")
    assert count_params.breakdown(codestral) == count_params.breakdown(preset)
    w = Workload(batch=1, seq=4096, kv_dtype="bf16")
    assert count_flops.forward_flops(codestral, w) == count_flops.forward_flops(preset, w)
    assert kv_cache_bytes(codestral, w) == kv_cache_bytes(preset, w)


@pytest.mark.parametrize("pattern", ["MM", "M-", "M*"])
@pytest.mark.parametrize("seq", [33, 64, 100, 200])
def test_saved_activations_equal_what_autograd_keeps(pattern, seq):
    """fp32, CPU, chunks of 32 (two to seven here): the count's bytes kept for backward are autograd's saved
    tensors' bytes (tfcalc.measure.memory.forward_loss) to the byte -- each sequence's bytes whole (the per-token
    terms are exact fractions of them) and the two H-wide fp32 tensors a Mamba2 layer keeps whatever the tokens
    (A = -exp(A_log): exp's result and its negation, 8·H bytes). Before: low by up to 16·H + 4·seq bytes a layer."""
    from tfcalc.count.model import memory as mem
    from tfcalc.measure.memory import forward_loss
    from tfcalc.model import build_model

    cfg = _yaml_cfg(d_model=64, hybrid_pattern=pattern, ssm_heads=8, ssm_head_dim=16, ssm_state_size=8,
                    ssm_chunk_size=32, max_seq_len=256, d_ff=48, gated_ffn=False, activation="relu", vocab_size=97)
    torch.manual_seed(0)
    model = build_model(cfg, "cpu").train()
    _, saved = forward_loss(model, torch.randint(0, 97, (2, seq)), count_saved=True)
    counted = mem.activations(cfg, Workload(batch=2, seq=seq, dtype="fp32")).stored
    mamba_layers = pattern.count("M")
    assert saved == counted, (saved - counted, mamba_layers)


@pytest.mark.parametrize("groups", [1, 2])
@pytest.mark.parametrize("batch", [1, 2])
def test_saved_activations_of_a_single_chunk_equal_what_autograd_keeps(groups, batch):
    """One chunk (T <= C_) and one sequence: the scan's matmuls read x·dt, the entering state and (of one sequence)
    B and C as views, not the copies of two chunks or more (Mamba2.saved); at 64 tokens, two whole chunks. fp32, to
    the byte. Before: up to 4 % high over one chunk."""
    from tfcalc.count.model import memory as mem
    from tfcalc.measure.memory import forward_loss
    from tfcalc.model import build_model

    cfg = _yaml_cfg(d_model=64, ssm_heads=8, ssm_head_dim=16, ssm_groups=groups, ssm_state_size=8, ssm_chunk_size=32,
                    max_seq_len=256, vocab_size=97)
    torch.manual_seed(0)
    model = build_model(cfg, "cpu").train()
    for seq in (2, 16, 32, 64):
        _, saved = forward_loss(model, torch.randint(0, 97, (batch, seq)), count_saved=True)
        assert saved == mem.activations(cfg, Workload(batch=batch, seq=seq, dtype="fp32")).stored, seq
