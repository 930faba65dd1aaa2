"""Lightning attention's decode on a GPU, marked ``gpu`` (skipped where torch.cuda.is_available() is false; its
fixed shapes and the absence of host syncs are proved on the CPU in tests/model/test_state_static.py, its numbers
against transformers in tests/test_minimax.py): a MiniMax-shaped hybrid (lightning layers, a softmax layer, the
residual after the norm, experts) decoded with its steps captured in CUDA graphs gives the eager steps' tokens,
and in fp32 the uncached forward's."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")

FIELDS = ["n_layer=4", "layer_pattern=(lightning*3, full)", "lightning_block_size=16", "n_expert=4",
          "n_expert_active=2", "norm_placement=normed_residual", "residual_alpha=1.5"]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_graph_decode_gives_the_eager_tokens(dtype):
    from tfcalc.model import build_model, generate
    from tfcalc.presets import load

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    cfg = load("llama2-7b", [*FIELDS, "d_model=256", "n_head=4", "d_ff=512"])
    torch.manual_seed(0)
    model = build_model(cfg, "cuda", dtype)
    prompt = torch.randint(0, cfg.vocab_size, (2, 40), device="cuda")  # two whole blocks of 16 and one of 8
    graph = generate(model, prompt, 30, mode="graph")
    eager = generate(model, prompt, 30, mode="eager")
    assert torch.equal(graph, eager)
    if dtype == torch.float32:
        from tfcalc.model.generate import next_token

        idx = prompt
        with torch.no_grad():
            for _ in range(30):
                idx = torch.cat([idx, next_token(model(idx))], dim=1)
        assert torch.equal(graph, idx[:, 40:])
