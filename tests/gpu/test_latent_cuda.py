"""Latent attention's absorbed decode on a GPU (tfcalc.model.latent_absorbed), DeepSeek-V3's attention shapes
in bf16: the same output as the naive form within bf16's rounding, and faster than it (the naive step expands
4,096 cached latents per sequence through W_kvb: ~0.55 TFLOP at batch 4; the absorbed one does not). Marked
``gpu``: skipped where torch.cuda.is_available() is false (tests/conftest.py); the CPU checks of the same
code are tests/model/test_latent_absorbed.py."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")


def _layer_and_step(dtype):
    from tfcalc.architecture import LatentAttention as Spec
    from tfcalc.model.latent import LatentAttention

    torch.manual_seed(0)
    spec = Spec(d_model=7168, n_head=128, kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64,
                v_head_dim=128, q_lora_rank=1536)
    m = LatentAttention(spec).to("cuda")
    with torch.no_grad():  # drawn in fp32, then rounded: the same weights and inputs in every dtype
        for p in m.parameters():
            p.normal_(0, 0.02)
    m = m.to(dtype)
    B, S = 4, 4096
    x, latent, k_rot = (torch.randn(*shape, device="cuda").to(dtype)
                        for shape in ((B, 1, 7168), (B, 1, S, 512), (B, 1, S, 64)))

    def step(absorb: bool) -> torch.Tensor:
        m.absorb = absorb
        with torch.no_grad():  # the cache holds S positions already; the new one's slot is the last
            return m(x, None, None, store=lambda lat, rot: (latent, k_rot))

    return step


def _median_ms(fn, n: int = 20) -> float:
    fn()
    times = []
    for _ in range(n):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return sorted(times)[n // 2]


def test_absorbed_decode_matches_the_naive_form_and_is_faster_in_bf16():
    step = _layer_and_step(torch.bfloat16)
    ref = _layer_and_step(torch.float32)(False)
    absorbed, naive = step(True).float(), step(False).float()
    scale = ref.abs().max()
    # each bf16 form against the fp32 naive output: the absorbed one no further from it than the naive one, plus
    # bf16's half-ulp slack on the output's scale
    assert (absorbed - ref).abs().max() <= 2 * (naive - ref).abs().max() + 2 ** -8 * scale
    naive_ms, absorbed_ms = _median_ms(lambda: step(False)), _median_ms(lambda: step(True))
    print(f"DeepSeek-V3 attention, bf16, batch 4, 4,096 keys: naive {naive_ms:.3f} ms, absorbed {absorbed_ms:.3f} ms")
    assert absorbed_ms < naive_ms


def test_the_packed_state_is_read_without_a_copy_and_no_slower():
    """The state as tfcalc.model.attention_state allocates it for latent attention: one (B, 1, S, c + h_r)
    buffer, the latent and rotary key views of it; the absorbed step reads its keys as a view (no concatenation
    of the 4,096-slot cache) and gives the output of the same step over separate tensors, no slower."""
    from tfcalc.architecture import LatentAttention as Spec
    from tfcalc.model.latent import LatentAttention

    torch.manual_seed(0)
    spec = Spec(d_model=7168, n_head=128, kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64,
                v_head_dim=128, q_lora_rank=1536)
    m = LatentAttention(spec).to("cuda")
    with torch.no_grad():
        for p in m.parameters():
            p.normal_(0, 0.02)
    m = m.to(torch.bfloat16)
    B, S = 4, 4096
    x = torch.randn(B, 1, 7168, device="cuda", dtype=torch.bfloat16)
    packed = torch.randn(B, 1, S, 576, device="cuda", dtype=torch.bfloat16)
    apart = (packed[..., :512].contiguous(), packed[..., 512:].contiguous())

    def step(state) -> torch.Tensor:
        with torch.no_grad():
            return m(x, None, None, store=lambda lat, rot: state)

    views = (packed[..., :512], packed[..., 512:])
    torch.testing.assert_close(step(views), step(apart), rtol=2e-2, atol=2e-2)
    packed_ms, apart_ms = _median_ms(lambda: step(views)), _median_ms(lambda: step(apart))
    print(f"DeepSeek-V3 absorbed step, bf16, batch 4, 4,096 slots: packed state {packed_ms:.3f} ms, "
          f"latent and rotary key apart (concatenated each step) {apart_ms:.3f} ms")
    assert packed_ms <= 1.05 * apart_ms


def test_a_latent_model_generates_the_same_tokens_captured_and_eager():
    """The packed latent state under the CUDA-graph decoder (one graph per bucket, the state's views captured):
    the same greedy tokens as the eager loop, across a bucket edge (positions past 64)."""
    from conftest import tiny

    from tfcalc.model import build_model, generate

    cfg = tiny(max_seq_len=128, d_model=256, n_head=8, pos_encoding="rope", norm="rmsnorm", norm_bias=False,
               gated_ffn=True, activation="silu", tie_embeddings=False, kv_lora_rank=64, qk_nope_head_dim=32,
               qk_rope_head_dim=16, v_head_dim=32, q_lora_rank=96, vocab_size=512)
    torch.manual_seed(0)
    model = build_model(cfg, "cuda", torch.bfloat16)
    prompt = torch.randint(0, cfg.vocab_size, (2, 40), device="cuda")
    assert torch.equal(generate(model, prompt, 40, mode="graph"), generate(model, prompt, 40, mode="eager"))
