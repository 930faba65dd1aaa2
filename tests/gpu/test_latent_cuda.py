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
