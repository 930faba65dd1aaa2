"""Latent attention's absorbed decode (tfcalc.model.latent_absorbed) against the naive form the module ran
before (tfcalc.model.latent, ``absorb = False``: every cached latent expanded through W_kvb, what transformers
runs): the same outputs in fp32 and float64, the same greedy tokens, and the FLOPs the absorbed form claims."""

from __future__ import annotations

import pytest
import torch
from conftest import tiny
from deepseek_configs import latent_configs
from hypothesis import HealthCheck, given, settings, strategies as st
from torch.utils.flop_counter import FlopCounterMode

from tfcalc.architecture import LatentAttention as LatentSpec
from tfcalc.architecture.latent import Yarn
from tfcalc.count.model.flops import decode_flops
from tfcalc.model import build_model, generate
from tfcalc.model.latent import LatentAttention
from tfcalc.model.latent_absorbed import absorbed_attention, cache_keys
from tfcalc.workload import Workload

# DeepSeek-V3-like (a compressed Q) and V2-Lite-like (a plain Q, YaRN's mscale 0.707), and one with no
# no-position channels at all (h_n = 0: the scores are the rotary part only)
SPECS = {
    "v3-like": dict(d_model=32, n_head=4, kv_lora_rank=12, qk_nope_head_dim=8, qk_rope_head_dim=4, v_head_dim=6,
                    q_lora_rank=16, yarn=Yarn(40.0, 64, mscale=1.0, mscale_all_dim=1.0)),
    "v2-lite-like": dict(d_model=24, n_head=3, kv_lora_rank=10, qk_nope_head_dim=6, qk_rope_head_dim=4, v_head_dim=8,
                         yarn=Yarn(40.0, 64, mscale=0.707, mscale_all_dim=0.707)),
    "no-nope-biased": dict(d_model=16, n_head=2, kv_lora_rank=8, qk_nope_head_dim=0, qk_rope_head_dim=2,
                           v_head_dim=3, bias=True),
}
LATENT = dict(pos_encoding="rope", norm="rmsnorm", norm_bias=False, gated_ffn=True, activation="silu",
              tie_embeddings=False, kv_lora_rank=12, qk_nope_head_dim=8, qk_rope_head_dim=4, v_head_dim=8)
MODELS = {"v3-like": dict(LATENT, q_lora_rank=16, n_expert=4, n_expert_active=2, first_dense_layers=1),
          "v2-lite-like": dict(LATENT, n_head=2)}


def _module(spec: dict, dtype=torch.float32) -> LatentAttention:
    torch.manual_seed(0)
    m = LatentAttention(LatentSpec(**spec)).to(dtype)
    with torch.no_grad():
        for p in m.parameters():  # tfcalc's Linear leaves its weights unset (build_model fills them)
            p.normal_(0, 0.3)
    return m


def _rope(T: int, r: int, factor: float, dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """(T, r) cos and sin in the rotate-half layout, scaled by YaRN's attention factor as the model's are."""
    angles = torch.rand(T, r // 2, dtype=dtype) * 6
    return tuple(torch.cat([f(angles), f(angles)], dim=-1) * factor for f in (torch.cos, torch.sin))


def _step(m: LatentAttention, x, past_latent, past_rot, rope, mask, absorb: bool):
    """One decode step of the module against a cache of past latents (B, 1, S - 1, c) and rotary keys."""
    def store(latent, k_rot):
        return torch.cat([past_latent, latent], dim=2), torch.cat([past_rot, k_rot], dim=2)

    m.absorb = absorb
    with torch.no_grad():
        return m(x, rope, mask, store=store)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("S", [1, 2, 7, 33])
@pytest.mark.parametrize("name", list(SPECS))
def test_absorbed_decode_equals_the_naive_form(name, S, dtype):
    spec = SPECS[name]
    m = _module(spec, dtype)
    B, c, r = 3, spec["kv_lora_rank"], spec["qk_rope_head_dim"]
    x = torch.randn(B, 1, spec["d_model"], dtype=dtype)
    past_latent, past_rot = torch.randn(B, 1, S - 1, c, dtype=dtype), torch.randn(B, 1, S - 1, r, dtype=dtype)
    factor = spec["yarn"].attention_factor if "yarn" in spec else 1.0
    rope = _rope(1, r, factor, dtype)
    # an additive mask over the slots: row 1 sees only its last slot (empty slots before it), row 2 half of them
    mask = torch.zeros(B, 1, 1, S, dtype=dtype)
    mask[1, ..., :-1] = float("-inf")
    mask[2, ..., : S // 2] = float("-inf")
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == torch.float32 else dict(rtol=1e-12, atol=1e-12)
    for each in (None, mask, mask == 0):  # no mask, additive, boolean (True: attend)
        naive = _step(m, x, past_latent, past_rot, rope, each, absorb=False)
        absorbed = _step(m, x, past_latent, past_rot, rope, each, absorb=True)
        torch.testing.assert_close(absorbed, naive, **tol)
    assert m.scale != LatentSpec(**spec).head_dim ** -0.5 or "yarn" not in spec  # YaRN's mscale² is in play


def test_a_masked_slot_changes_nothing_and_a_visible_one_does():
    """Empty slots under the mask: any values there leave the output as it is."""
    spec = SPECS["v3-like"]
    m = _module(spec)
    B, S, c, r = 2, 6, spec["kv_lora_rank"], spec["qk_rope_head_dim"]
    x, rope = torch.randn(B, 1, 32), _rope(1, r, 1.0, torch.float32)
    latent, rot = torch.randn(B, 1, S - 1, c), torch.randn(B, 1, S - 1, r)
    mask = torch.ones(B, 1, 1, S, dtype=torch.bool)
    mask[:, ..., 1:3] = False
    base = _step(m, x, latent, rot, rope, mask, absorb=True)
    garbage = latent.clone()
    garbage[:, :, 1:3] = 1e4
    torch.testing.assert_close(_step(m, x, garbage, rot, rope, mask, absorb=True), base)
    garbage[:, :, 0] = 3.0
    assert not torch.allclose(_step(m, x, garbage, rot, rope, mask, absorb=True), base)


def test_per_head_and_per_query_masks_are_laid_on_their_rows():
    """A mask that differs by head and by query (a verify step's causal mask, ALiBi-like biases): the rows of
    the multi-query layout (query t, head h) each get their own, as the naive form applies them."""
    spec = SPECS["v2-lite-like"]
    m = _module(spec, torch.float64)
    B, T, S, H = 2, 3, 5, spec["n_head"]
    c, r, hn = spec["kv_lora_rank"], spec["qk_rope_head_dim"], spec["qk_nope_head_dim"]
    q_nope, q_rot = torch.randn(B, T, H, hn, dtype=torch.float64), torch.randn(B, T, H, r, dtype=torch.float64)
    latent, k_rot = torch.randn(B, S, c, dtype=torch.float64), torch.randn(B, S, r, dtype=torch.float64)
    bias = torch.randn(H, T, S, dtype=torch.float64).masked_fill(torch.ones(T, S).triu(S - T + 1).bool(), -torch.inf)
    # the naive form written out: expanded keys and values, full-width heads
    kv = m.kv_b(latent).view(B, S, H, -1)
    k = torch.cat([kv[..., :hn], k_rot[:, :, None].expand(B, S, H, r)], dim=-1)  # (B, S, H, h_n + h_r)
    q = torch.cat([q_nope, q_rot], dim=-1)  # (B, T, H, h_n + h_r)
    scores = torch.einsum("bthi,bshi->bhts", q, k) * m.scale + bias
    want = torch.einsum("bhts,bshv->bthv", scores.softmax(-1), kv[..., hn:])
    with torch.no_grad():
        got = absorbed_attention(q_nope, q_rot, latent, k_rot, m.kv_b.weight, m.scale, bias)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


def test_a_cache_of_rows_latent_then_rotary_key_is_read_as_a_view():
    """Keys [c | k_r] from one buffer's rows: no copy of the cache (a view of its storage); apart: concatenated."""
    buf = torch.randn(2, 9, 12 + 4)
    keys = cache_keys(buf[..., :12], buf[..., 12:])
    assert keys.data_ptr() == buf.data_ptr() and torch.equal(keys, buf)
    apart = cache_keys(torch.randn(2, 9, 12), torch.randn(2, 9, 4))
    assert apart.shape == (2, 9, 16) and apart.is_contiguous()
    short = buf[:, :, :10]  # not the whole row: a copy, never a view past the latent's rows
    assert torch.equal(cache_keys(short[..., :6], short[..., 6:]), short)


@pytest.mark.parametrize("name", list(MODELS))
def test_greedy_generation_is_unchanged(name):
    """A tiny DeepSeek-like model: the same greedy tokens, and decode logits within fp32 tolerance, absorbed
    or naive, at batch 2 over a dozen steps."""
    cfg = tiny(max_seq_len=24, **MODELS[name])
    torch.manual_seed(1)
    model = build_model(cfg, "cpu")
    latents = [m for m in model.modules() if isinstance(m, LatentAttention)]
    assert len(latents) == cfg.n_layer
    prompt = torch.randint(0, cfg.vocab_size, (2, 5))
    runs = {}
    for absorb in (False, True):
        for m in latents:
            m.absorb = absorb
        with torch.inference_mode():
            tokens = generate(model, prompt, 12)
            cache = model.new_cache(2, 5 + 11)
            logits = [model.prefill(prompt, cache)] + [model.decode(tokens[:, i:i + 1], cache) for i in range(11)]
        runs[absorb] = tokens, torch.cat(logits, dim=1)
    assert torch.equal(runs[True][0], runs[False][0])
    torch.testing.assert_close(runs[True][1], runs[False][1], rtol=1e-4, atol=1e-5)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(latent_configs(), st.integers(1, 3), st.integers(1, 8))
def test_random_latent_models_decode_absorbed_as_counted(cfg, batch, prompt):
    """Random DeepSeek-shaped models (a compressed Q or not, h_n = 0 or more, biases, YaRN, dense and MoE
    layers): a decode step's FlopCounterMode count equals decode_flops, and its logits the naive form's."""
    prompt = min(prompt, cfg.max_seq_len - 1)
    torch.manual_seed(0)
    model = build_model(cfg, "cpu", torch.float64)
    ids = torch.randint(0, cfg.vocab_size, (batch, prompt + 1))
    logits = {}
    for absorb in (True, False):
        for m in model.modules():
            if isinstance(m, LatentAttention):
                m.absorb = absorb
        with torch.no_grad():
            cache = model.new_cache(batch, prompt + 1)
            model.prefill(ids[:, :prompt], cache)
            with FlopCounterMode(display=False) as counter:
                logits[absorb] = model.decode(ids[:, prompt:], cache)
        if absorb:
            assert counter.get_total_flops() == decode_flops(cfg, Workload(batch=batch, seq=prompt + 1))
    torch.testing.assert_close(logits[True], logits[False], rtol=1e-9, atol=1e-9)


def test_the_state_is_one_buffer_of_rows_and_a_step_concatenates_no_cache():
    """The state of each latent layer: one (B, 1, slots, c + h_r) buffer whose rows are [c | k_r], the latent and
    the rotary key views of it, its bytes the count's (kv_cache_bytes). A decode step, recorded op by op by a
    TorchDispatchMode: no op reads a tensor of the cache's length and writes a new one of c + h_r channels (a
    concatenation of the cache); the only concatenations join the step's own rows (T = 1)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    from tfcalc.count.model.memory import kv_cache_bytes

    cfg = tiny(max_seq_len=40, **MODELS["v3-like"])
    torch.manual_seed(1)
    model = build_model(cfg, "cpu")
    cache = model.new_cache(2, 40)
    for state in cache.states:
        buffer = state.packed
        assert tuple(buffer.shape) == (2, 1, 40, 12 + 4) and buffer.is_contiguous()
        assert [t.data_ptr() for t in state.tensors] == [buffer.data_ptr(), buffer.data_ptr() + 12 * 4]
    assert cache.nbytes == kv_cache_bytes(cfg, Workload(batch=2, seq=40, dtype="fp32"))
    cats = []

    class Cats(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            if func.overloadpacket.__name__ in ("cat", "stack", "clone", "contiguous"):
                cats.append(tuple(out.shape))
            return out

    prompt = torch.randint(0, cfg.vocab_size, (2, 20))
    with torch.inference_mode():
        model.prefill(prompt, cache)
        with Cats():
            logits = model.decode(prompt[:, -1:], cache)  # position 20: a bucket of 32 slots read
    assert cats and all(32 not in shape for shape in cats), cats  # none over the slots read
    with torch.inference_mode():  # the step's output: the uncached forward's last position
        want = model(torch.cat([prompt, prompt[:, -1:]], dim=1))[:, -1:]
    torch.testing.assert_close(logits, want, rtol=1e-4, atol=1e-5)
