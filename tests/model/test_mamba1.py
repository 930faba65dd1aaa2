"""The Mamba-1 mixer (tfcalc.architecture.mamba1, tfcalc.model.mamba1) and the mamba and falcon_mamba families against
transformers 5.24 (models/mamba/modeling_mamba.py, models/falcon_mamba/modeling_falcon_mamba.py): Falcon-Mamba-7B's
published config.json at full size on meta (parameters exact; forward FLOPs equal to FlopCounterMode on
transformers' torch path at two lengths, less and plus the named terms; the generation state at 4,096 tokens equal
to transformers' cache bytes); tiny checkpoints written by transformers and loaded by load_model (logits within
1e-4, fp32); the decode over the fixed state against the uncached forward and transformers' generate, and its
FLOPs against FlopCounterMode; what autograd keeps against the count.
"""

from __future__ import annotations

import pytest
import torch
from hf_pairs import (
    assert_decode_equals,
    assert_logits_close,
    assert_rows_decode_alone,
    config_json,
    nudge,
    saved_bytes,
    saved_pair,
    step_flops,
)
from torch.utils.flop_counter import FlopCounterMode

from tfcalc.count.model import flops as count_flops, params as count_params
from tfcalc.count.model.memory import kv_cache_bytes
from tfcalc.errors import InputError
from tfcalc.presets import load
from tfcalc.workload import Workload

transformers = pytest.importorskip("transformers")

# tiiuae/falcon-mamba-7b, config.json as published (https://huggingface.co/tiiuae/falcon-mamba-7b/raw/main/
# config.json): "expand" 16 beside "intermediate_size" 8192 -- transformers keeps the latter (the weights are 8192
# wide); no "mixer_rms_eps" (FalconMambaConfig's default, 1e-6)
FALCON_MAMBA_7B = {
    "_name_or_path": "./", "architectures": ["FalconMambaForCausalLM"], "bos_token_id": 0, "conv_kernel": 4,
    "eos_token_id": 11, "expand": 16, "hidden_act": "silu", "hidden_size": 4096, "initializer_range": 0.1,
    "intermediate_size": 8192, "layer_norm_epsilon": 1e-05, "model_type": "falcon_mamba", "num_hidden_layers": 64,
    "pad_token_id": 11, "rescale_prenorm_residual": False, "residual_in_fp32": True, "state_size": 16,
    "tie_word_embeddings": False, "time_step_floor": 0.0001, "time_step_init_scheme": "random", "time_step_max": 0.1,
    "time_step_min": 0.001, "time_step_rank": 256, "time_step_scale": 1.0, "torch_dtype": "bfloat16",
    "transformers_version": "4.43.0.dev0", "use_bias": False, "use_cache": True, "use_conv_bias": True,
    "vocab_size": 65024,
}
CLASSES = {"mamba": ("MambaConfig", "MambaForCausalLM"),
           "falcon_mamba": ("FalconMambaConfig", "FalconMambaForCausalLM")}


def _hf(raw: dict, device="meta", dtype=torch.float32):
    config, model = CLASSES[raw.get("model_type", "mamba")]
    keys = {k: v for k, v in raw.items() if k not in ("architectures", "model_type", "torch_dtype", "_name_or_path",
                                                      "transformers_version")}
    with torch.device(device):
        return getattr(transformers, model)(getattr(transformers, config)(**keys)).to(dtype).eval()


@pytest.fixture(scope="module")
def falcon(tmp_path_factory):
    return config_json(tmp_path_factory.mktemp("falcon_mamba"), FALCON_MAMBA_7B)


@pytest.fixture(scope="module")
def hf_falcon():
    return _hf(FALCON_MAMBA_7B)


# per layer, by hand (I = 8192, R = 256, N = 16, K = 4, d = 4096): in_proj d -> 2I; conv I × K and its bias; x_proj
# I -> R + 2N; dt_proj R -> I and its bias; A_log I × N; D; out_proj I -> d; the layer's norm d
I_, R, N, K, D = 8192, 256, 16, 4, 4096
LAYER = D * 2 * I_ + I_ * K + I_ + I_ * (R + 2 * N) + R * I_ + I_ + I_ * N + I_ + I_ * D + D


def test_falcon_mamba_7b_parameters_equal_transformers_on_meta(falcon, hf_falcon):
    hf = sum(p.numel() for p in hf_falcon.parameters())  # the weightless norms' ones are buffers, not parameters
    by_hand = 64 * LAYER + 2 * 65024 * D + D  # untied head, final norm
    assert count_params.total(falcon) == hf == by_hand == 7_272_665_088


@pytest.mark.parametrize("seq", [7, 64])
def test_falcon_mamba_7b_forward_flops_equal_flop_counter_on_transformers(falcon, hf_falcon, seq):
    """FlopCounterMode over transformers' torch path (the position-by-position scan) equals the count less the
    state update it runs elementwise, (dt·x)·Bᵀ, 2·I·N per token and layer, counted here by hand, plus the K - 1
    convolution outputs it computes and drops, 2·I·K·(K - 1) per layer (tfcalc.architecture.mamba1)."""
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        hf_falcon(torch.zeros(1, seq, dtype=torch.long, device="meta"), use_cache=False)
    update, dropped = 64 * 2 * I_ * N * seq, 64 * 2 * I_ * K * (K - 1)
    counted = count_flops.forward_flops(falcon, Workload(batch=1, seq=seq))
    assert counter.get_total_flops() == counted - update + dropped
    # by hand: the four projections, the convolution, the update and the read (2·I·N each) per token, the head
    per_token = 2 * (D * 2 * I_ + I_ * (R + 2 * N) + R * I_ + I_ * D) + 2 * I_ * K + 2 * 2 * I_ * N
    assert counted == 64 * seq * per_token + 2 * seq * D * 65024


def test_falcon_mamba_7b_state_at_4096_tokens_equals_transformers_cache(falcon):
    """transformers' cache after a 4,096-token prompt in bf16: per layer the convolution's K columns (bf16) and the
    I × N SSM state (fp32: its scan computes the state from an fp32 A); tfcalc's count is the same at any length.
    transformers' model is built with one of the 64 identical layers (its scan runs position by position: 64
    layers on meta take minutes) and its cache bytes taken 64 times."""
    hf = _hf(dict(FALCON_MAMBA_7B, num_hidden_layers=1), dtype=torch.bfloat16)
    with torch.no_grad():
        cache = hf(torch.zeros(1, 4096, dtype=torch.long, device="meta"), use_cache=True).cache
    tensors = [cache.layers[0].conv_states[0], cache.layers[0].recurrent_states[0]]
    assert [(tuple(t.shape), t.dtype) for t in tensors] == [((1, I_, K), torch.bfloat16), ((1, I_, N), torch.float32)]
    hf_bytes = 64 * sum(t.numel() * t.element_size() for t in tensors)
    by_hand = 64 * (I_ * K * 2 + I_ * N * 4)
    for seq in (4096, 100_000):
        assert kv_cache_bytes(falcon, Workload(batch=1, seq=seq, kv_dtype="bf16")) == hf_bytes == by_hand


# tiny models: 3 layers, d 32, I 64 (expand 2), N 6, R 5; falcon_mamba with its norms on dt, B and C
TINY = dict(vocab_size=61, hidden_size=32, num_hidden_layers=3, state_size=6, expand=2, conv_kernel=4,
            time_step_rank=5, tie_word_embeddings=False)


@pytest.fixture(scope="module", params=["mamba", "falcon_mamba"])
def tiny_pair(request, tmp_path_factory):
    torch.manual_seed(0)
    hf = _hf(dict(TINY, model_type=request.param), device="cpu")
    nudge(hf)
    return saved_pair(hf, tmp_path_factory.mktemp(request.param))


def test_tiny_checkpoint_parameters_and_logits_equal_transformers(tiny_pair):
    hf, model = tiny_pair
    assert count_params.total(model.cfg) == sum(p.numel() for p in hf.parameters()) \
        == sum(p.numel() for p in model.parameters())
    assert_logits_close(hf, model, torch.randint(0, 61, (2, 11)))


def test_tiny_forward_flops_equal_flop_counter(tiny_pair):
    """On tfcalc's module FlopCounterMode sees exactly the count; on transformers', the count less the update it
    runs elementwise plus the dropped convolution outputs (as at full size)."""
    hf, model = tiny_pair
    idx = torch.randint(0, 61, (2, 11))
    counted = count_flops.forward_flops(model.cfg, Workload(batch=2, seq=11))
    with FlopCounterMode(display=False) as ours, torch.no_grad():
        model(idx)
    with FlopCounterMode(display=False) as theirs, torch.no_grad():
        hf(idx, use_cache=False)
    assert ours.get_total_flops() == counted
    assert theirs.get_total_flops() == counted - 3 * 2 * (2 * 64 * 6 * 11) + 3 * 2 * (2 * 64 * 4 * 3)


def test_decode_over_the_fixed_state_equals_the_uncached_forward(tiny_pair):
    hf, model = tiny_pair
    prompt, new = torch.randint(0, 61, (2, 6)), 8
    cache = model.new_cache(2, 6 + new)
    assert_decode_equals(model, hf, prompt, new, cache)
    # the state allocated once, at the shapes and dtypes the component says: conv (B, I, K) in the model's dtype,
    # SSM (B, I, N) in fp32
    assert [(tuple(s.conv.shape), s.conv.dtype, tuple(s.ssm.shape), s.ssm.dtype) for s in cache.states] == \
        [((2, 64, 4), torch.float32, (2, 64, 6), torch.float32)] * 3
    assert cache.nbytes == kv_cache_bytes(model.cfg, Workload(batch=2, seq=14, dtype="fp32", kv_dtype="fp32"))


def test_continuous_batching_rows_decode_the_mamba1_state(tiny_pair):
    """Rows joining and leaving (tfcalc.model.slots): each row's conv and SSM state is its own sequence's."""
    _, model = tiny_pair
    assert_rows_decode_alone(model, [torch.randint(0, 61, (1, n)) for n in (3, 6)], max_tokens=14)


def test_a_decode_step_runs_the_counted_flops_and_the_same_shapes_at_every_context(tiny_pair):
    _, model = tiny_pair
    steps = step_flops(model, model.new_cache(1, 20), torch.randint(0, 61, (1, 5)), 14)
    for context, (total, _) in zip(range(6, 20), steps, strict=True):
        assert total == count_flops.decode_flops(model.cfg, Workload(batch=1, seq=context))
    assert all(counts == steps[0][1] for _, counts in steps)


def test_bf16_state_dtypes_follow_transformers(tiny_pair, tmp_path):
    """In bf16 the conv ring is bf16 and the SSM state fp32, as transformers' cache keeps them."""
    hf, model = tiny_pair
    hf16 = _hf(dict(TINY, model_type=hf.config.model_type), device="cpu", dtype=torch.bfloat16)
    with torch.no_grad():
        cache = hf16(torch.randint(0, 61, (1, 5)), use_cache=True).cache
    layer = cache.layers[0]
    assert (layer.conv_states[0].dtype, layer.recurrent_states[0].dtype) == (torch.bfloat16, torch.float32)
    ours = model.to(torch.bfloat16).new_cache(1, 8).states[0]
    model.float()
    assert (ours.conv.dtype, ours.ssm.dtype) == (torch.bfloat16, torch.float32)


# ---------- what autograd keeps: the count's saved activations against the module's, fp32 ----------
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("norm", ["none", "weightless", "weighted"])
@pytest.mark.parametrize("seq", [5, 24])
def test_saved_activations_equal_what_autograd_keeps(norm, seq, dtype):
    """One mixer module: the bytes autograd keeps (its parameters and input left out) equal the count's per-token
    terms times the tokens to the byte: the per-sequence convolution input and the per-layer tensors kept whatever
    the tokens (exp(A_log) and A, F·I·N each, and below fp32 D's fp32 copy, F·I) are fractions of a token there."""
    from tfcalc.architecture.mamba1 import Mamba1
    from tfcalc.model.mamba1 import Mamba1Mixer

    spec = Mamba1(32, 64, 5, 6, 4, bcdt_norm=norm)
    torch.manual_seed(0)
    module = Mamba1Mixer(spec).to(dtype)
    for p in module.parameters():
        torch.nn.init.normal_(p, std=0.2)
    x = torch.randn(2, seq, 32, dtype=dtype, requires_grad=True)
    kept = saved_bytes(module, x)
    e = dtype.itemsize
    counted = 2 * seq * sum(spec.saved(2, seq, e, "flash", False).values())
    assert kept == counted


def test_saved_activations_of_a_mamba_model_follow_the_mixer(tmp_path):
    """A whole mamba model (tfcalc.measure.memory.forward_loss, fp32): the count's stored activations equal what
    autograd keeps, to the byte."""
    from tfcalc.count.model import memory as mem
    from tfcalc.measure.memory import forward_loss
    from tfcalc.model import build_model

    cfg = config_json(tmp_path, dict(TINY, model_type="mamba"))
    torch.manual_seed(0)
    model = build_model(cfg, "cpu").train()
    _, saved = forward_loss(model, torch.randint(0, 61, (2, 16)), count_saved=True)
    counted = mem.activations(cfg, Workload(batch=2, seq=16, dtype="fp32")).stored
    assert saved == counted


# ---------- hostile input: the new fields and the two families' keys ----------
def _yaml_cfg(**changes):
    from tfcalc.config import from_mapping

    base = dict(n_layer=2, d_model=32, n_head=4, vocab_size=61, max_seq_len=64, pos_encoding="none", norm="rmsnorm",
                hybrid_pattern="MM", hybrid_m_mixer="mamba_one", ssm_inner=64, ssm_state_size=8)
    return from_mapping({**base, **changes})


@pytest.mark.parametrize("changes, message", [
    (dict(ssm_inner=None), "give ssm_inner"),
    (dict(ssm_inner=0), "'ssm_inner' must be positive"),
    (dict(ssm_inner=-64), "'ssm_inner' must be positive"),
    (dict(ssm_inner=2.5), "ssm_inner"),
    (dict(ssm_inner="64"), "ssm_inner"),
    (dict(ssm_inner=2**41), "ssm_inner"),
    (dict(ssm_dt_rank=0), "'ssm_dt_rank' must be positive"),
    (dict(ssm_dt_rank=-1), "'ssm_dt_rank' must be positive"),
    (dict(ssm_dt_rank=True), "ssm_dt_rank"),
    (dict(ssm_bcdt_norm="layer"), "ssm_bcdt_norm"),
    (dict(ssm_bcdt_norm=1), "ssm_bcdt_norm"),
    (dict(ssm_bcdt_norm_eps=0), "'ssm_bcdt_norm_eps' must be positive"),
    (dict(ssm_bcdt_norm_eps=-1e-6), "'ssm_bcdt_norm_eps' must be positive"),
    (dict(ssm_bcdt_norm_eps=2.0), "ssm_bcdt_norm_eps"),
    (dict(ssm_bcdt_norm_eps="tiny"), "ssm_bcdt_norm_eps"),
    (dict(hybrid_m_mixer="mamba3"), "hybrid_m_mixer"),
    (dict(hybrid_m_mixer=1), "hybrid_m_mixer"),
    (dict(arch="encoder"), "arch decoder"),
    (dict(hybrid_pattern=None, layer_pattern="mamba_one, full", ssm_inner=None), "give ssm_inner"),
    (dict(hybrid_pattern=None, layer_pattern="mamba_uno, full"), "layer_pattern"),
    (dict(hybrid_pattern=None, layer_pattern="mamba_one, full", arch="encoder"), "scans causally"),
])
def test_bad_mamba1_fields_are_one_clear_line(changes, message):
    with pytest.raises(InputError, match=message):
        _yaml_cfg(**changes)


def test_the_fields_build_a_mamba1_model_by_hand():
    """hybrid_pattern's M with hybrid_m_mixer mamba_one: a Mamba-1 mixer alone beside its norm, R = ceil(d/16)."""
    cfg = _yaml_cfg(tie_embeddings=True)
    d, i, n, r = 32, 64, 8, 2
    layer = d * 2 * i + i * 4 + i + i * (r + 2 * n) + r * i + i + i * n + i + i * d + d
    assert count_params.total(cfg) == 2 * layer + 61 * d + d


@pytest.mark.parametrize("key, value, message", [
    ("hidden_size", 0, "'d_model' must be positive"),
    ("intermediate_size", 0, "'intermediate_size' must be a positive integer"),
    ("intermediate_size", "8192", "'intermediate_size' must be a positive integer"),
    ("expand", -2, "'expand' must be a positive integer"),
    ("state_size", 16.5, "'state_size' must be a positive integer"),
    ("conv_kernel", 0, "'conv_kernel' must be a positive integer"),
    ("time_step_rank", "big", "'time_step_rank' must be \"auto\" or a positive integer"),
    ("time_step_rank", 0, "'time_step_rank' must be \"auto\" or a positive integer"),
    ("time_step_rank", 2**41, "ssm_dt_rank"),
    ("hidden_act", "gelu", "activation 'gelu' is not built"),
    ("use_bias", "yes", "'use_bias' must be true or false"),
    ("mixer_rms_eps", -1, "'mixer_rms_eps' must be a positive number"),
    ("mixer_rms_eps", "x", "'mixer_rms_eps' must be a number"),
    ("mixer_rms_eps", 3.0, "'mixer_rms_eps' must be below 1"),
    ("mixer_rms_eps", float("nan"), "'mixer_rms_eps' must be a positive number"),
    ("num_hidden_layers", -1, "'n_layer' must be positive"),
    ("num_hidden_layers", 2**50, "n_layer"),
])
def test_bad_mamba_config_json_is_one_line(tmp_path, key, value, message):
    with pytest.raises(InputError, match=message):
        config_json(tmp_path, dict(FALCON_MAMBA_7B, **{key: value}))


def test_time_step_rank_auto_is_ceil_of_hidden_over_16(tmp_path):
    cfg = config_json(tmp_path, dict(TINY, model_type="mamba", hidden_size=40, time_step_rank="auto"))
    hf = _hf(dict(TINY, hidden_size=40, time_step_rank="auto"))
    assert hf.config.time_step_rank == 3
    assert count_params.total(cfg) == sum(p.numel() for p in hf.parameters())


def test_the_preset_is_the_published_config_json(falcon):
    preset = load("falcon-mamba-7b")
    assert count_params.breakdown(falcon) == count_params.breakdown(preset)
    w = Workload(batch=1, seq=4096, kv_dtype="bf16")
    assert count_flops.forward_flops(falcon, w) == count_flops.forward_flops(preset, w)
    assert kv_cache_bytes(falcon, w) == kv_cache_bytes(preset, w)


def test_a_tied_checkpoint_with_the_older_embedding_name_loads(tmp_path):
    """A tied head (mamba's default: no lm_head tensor stored) and ``backbone.embedding.weight``, as older files
    name the table (MambaModel.load_hook renames it): load_model gives transformers' logits."""
    from safetensors.torch import load_file, save_file

    torch.manual_seed(1)
    hf = _hf(dict(TINY, model_type="mamba", tie_word_embeddings=True), device="cpu")
    nudge(hf)
    hf.save_pretrained(tmp_path)
    tensors = load_file(tmp_path / "model.safetensors")
    assert "lm_head.weight" not in tensors
    tensors["backbone.embedding.weight"] = tensors.pop("backbone.embeddings.weight")
    save_file(tensors, tmp_path / "model.safetensors", metadata={"format": "pt"})
    from tfcalc.model.load import load_model

    model = load_model(tmp_path)
    assert count_params.total(model.cfg) == sum(p.numel() for p in hf.parameters())
    assert_logits_close(hf, model, torch.randint(0, 61, (2, 9)))


# ---------- a prompt's chunked scan (tfcalc.model.mamba1.chunked_scan) ----------
@pytest.fixture(scope="module", params=["mamba", "falcon_mamba"])
def scan_pair(request, tmp_path_factory):
    """tiny_pair's, built apart: a test above round-trips tiny_pair's tfcalc model through bf16."""
    torch.manual_seed(0)
    hf = _hf(dict(TINY, model_type=request.param), device="cpu")
    nudge(hf)
    return saved_pair(hf, tmp_path_factory.mktemp(request.param + "_scan"))


@pytest.mark.parametrize("T", [2, 4, 16, 37, 64, 90])
def test_chunked_prefill_equals_transformers_loop(scan_pair, T):
    """Out of autograd a prompt runs the chunked scan (c chunks of floor(sqrt(T)) and a tail): logits within 1e-4 of
    transformers' sequential loop (MambaMixer.slow_forward, FalconMambaMixer's), and the state it leaves equal to
    transformers' cache after the same prompt; under autograd the loop itself runs: the same logits."""
    hf, model = scan_pair
    idx = torch.randint(0, 61, (2, T), generator=torch.Generator().manual_seed(T))
    assert_logits_close(hf, model, idx)
    with torch.no_grad():
        want = [layer.recurrent_states[0] for layer in hf(idx, use_cache=True).cache.layers]
        cache = model.new_cache(2, T + 1)
        model.prefill(idx, cache)
    for layer, state in zip(want, cache.states, strict=True):
        assert (layer - state.ssm).abs().max() <= 1e-4 * layer.abs().max()
    with torch.enable_grad():
        trained = model(idx)
    with torch.no_grad():
        assert (trained - model(idx)).abs().max() <= 1e-5 * trained.abs().max()


@pytest.mark.parametrize("lengths", [(16, 90), (37, 64)])
def test_chunked_prefill_runs_the_counted_kernels(scan_pair, lengths):
    """The kernels a prompt's forward dispatches (every aten op under a TorchDispatchMode, views and allocations
    left out) grow from one length to the other by what the count says the scan adds a layer (scan_kernels:
    about 3·sqrt(T), where the loop ran 3·T), and the performance model's kernel count by the same."""
    from torch.utils._python_dispatch import TorchDispatchMode

    from tfcalc.architecture.mamba1 import scan_kernels
    from tfcalc.count.perf.inference import kernel_count

    hf, model = scan_pair
    free = {"view", "_unsafe_view", "unflatten", "slice", "select", "expand", "unsqueeze", "squeeze", "split",
            "split_with_sizes", "chunk", "t", "transpose", "permute", "detach", "alias", "empty_like", "empty",
            "as_strided", "lift_fresh", "_to_copy", "to"}

    class Ops(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.n = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.n += func.__name__.split(".")[0] not in free
            return func(*args, **(kwargs or {}))

    ran = []
    for T in lengths:
        with torch.no_grad(), Ops() as ops:
            model(torch.randint(0, 61, (1, T)))
        ran.append(ops.n)
    layers = model.cfg.n_layer
    grows = layers * (scan_kernels(lengths[1]) - scan_kernels(lengths[0]))
    assert ran[1] - ran[0] == grows
    assert kernel_count(model.cfg, 1, lengths[1], lengths[1]) - kernel_count(model.cfg, 1, lengths[0], lengths[0]) \
        == grows
    assert scan_kernels(4096) == 192 < 3 * 4096  # 2 + 63 + 63 + 64, where the loop ran 12,288 a layer


@pytest.mark.parametrize("lengths", [(16, 90), (37, 81)])  # T = I = 64 would take (B, T, N) tensors for (I, N) ones
def test_chunked_prefill_moves_the_counted_bytes(scan_pair, lengths):
    """The bytes the scan's ops read and write over the (..., I, N) fp32 tensors (every aten op's tensor inputs read,
    its outputs written, under a TorchDispatchMode; views moving nothing) grow from one length to the other by
    what the performance model's traffic says (scan_passes × 4·I·N a sequence and layer)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    from tfcalc.count.model.non_matmul import non_matmul_entries
    from tfcalc.count.perf import elementwise

    hf, model = scan_pair
    spec = model.cfg.architecture.output.layer(0).mixer
    i, n = spec.inner, spec.state_size
    views = {"view", "_unsafe_view", "unflatten", "slice", "select", "expand", "unsqueeze", "squeeze", "t",
             "transpose", "permute", "detach", "alias", "empty_like", "empty", "as_strided", "lift_fresh"}

    def moved(tensors) -> int:
        return sum(t.numel() * t.element_size() for t in tensors
                   if isinstance(t, torch.Tensor) and t.dim() >= 3 and tuple(t.shape[-2:]) == (i, n))

    class Bytes(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.n = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            name = func.__name__.split(".")[0]
            if name not in views:  # what it reads: its inputs, not an out= tensor nor copy_'s destination
                read = [*args[name == "copy_":], *(v for k, v in (kwargs or {}).items() if k != "out")]
                self.n += moved(read) + moved(out if isinstance(out, tuple) else [out])
            return out

    ran, counted = [], []
    for T in lengths:
        with torch.no_grad(), Bytes() as ops:
            model(torch.randint(0, 61, (1, T)))
        ran.append(ops.n)
        scan = [e for e in non_matmul_entries(model.cfg, 1, T) if "exp(dt·A)" in e.label]
        counted.append(elementwise.forward_traffic(scan, 4))
    assert ran[1] - ran[0] == counted[1] - counted[0]
