"""gpt-oss and Qwen3-MoE against transformers and against their published figures: the released
config.json files counted exactly as transformers builds them (on meta) and within rounding of the
totals and active counts their papers print; the tiny cases of hf_tiny.py counted, timed in FLOPs
(``experts_implementation="batched_mm"``, which multiplies each token's top-k experts) and cached (the
K/V tensors transformers' DynamicCache holds after a forward pass), and their checkpoints counted."""

from __future__ import annotations

import json

import pytest
from hf_tiny import T, inputs
from hub_moe import PUBLISHED
from test_hf_reference import transformers_total

from tfcalc.checkpoint import count_checkpoint
from tfcalc.count.model import flops as flops_count, memory, params as count
from tfcalc.presets import load
from tfcalc.workload import Workload

pytestmark = pytest.mark.filterwarnings("ignore")
TINY = ("qwen3_moe", "qwen3_moe-mixed", "gpt_oss")


def _write(tmp_path, data) -> str:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(data))
    return str(path)


@pytest.mark.parametrize("preset", list(PUBLISHED))
def test_published_configs_count_as_transformers_and_the_papers(tmp_path, preset):
    """Total exact against transformers; total and active within the rounding of the published figures
    (the gpt-oss card's active count leaves out the input embedding, a lookup: subtracted here)."""
    data, total, active, left_out = PUBLISHED[preset]
    cfg = load(_write(tmp_path, data))
    exact = count.total(cfg)
    assert exact == transformers_total(data) == count.total(load(preset))
    # the last printed digit: gpt-oss 116.83B; Qwen3 30.5B and 3.3B (3,353,032,704 active: the card's
    # 3.3B is cut, not rounded, so one unit of the last digit), 235B and 22B
    digits = 0.005e9 if preset.startswith("gpt-oss") else 0.1e9 if preset == "qwen3-30b-a3b" else 0.5e9
    assert abs(exact - total) <= digits
    assert abs(count.active_total(cfg) - left_out - active) <= digits
    assert count.active_total(cfg) == count.active_total(load(preset))


def test_qwen3_moe_dense_layers_are_the_listed_ones(tmp_path):
    data = {**PUBLISHED["qwen3-30b-a3b"][0], "mlp_only_layers": [3, 7], "decoder_sparse_step": 2}
    cfg = load(_write(tmp_path, data))
    moe = [b.is_moe for b in cfg.architecture.output.layers()]
    # modeling_qwen3_moe.py: experts where i not in mlp_only_layers and (i + 1) % step == 0
    assert moe == [i not in (3, 7) and (i + 1) % 2 == 0 for i in range(48)]
    assert cfg.dense_layers == (3, 7) and cfg.moe_every == 2 and cfg.dense_d_ff == 6144
    assert count.total(cfg) == transformers_total(data)


@pytest.mark.parametrize("name", TINY)
def test_forward_flops_equal_batched_mm(saved, name):
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    model, folder = saved(name)
    model.config._experts_implementation = "batched_mm"
    try:
        with torch.no_grad(), FlopCounterMode(display=False) as counter:
            model(**inputs(name))
    finally:
        model.config._experts_implementation = "eager"
    counts = {path: sum(ops.values()) for path, ops in counter.get_flop_counts().items()}
    rotary = sum(n for path, n in counts.items() if path.endswith("rotary_emb"))
    assert (
        flops_count.forward_flops(load(str(folder / "config.json")), Workload(batch=2, seq=T))
        == counter.get_total_flops() - rotary
    )


@pytest.mark.parametrize("name", TINY)  # gpt-oss windows: a ring of W, as transformers' StaticCache allocates
def test_kv_bytes_equal_the_cache_transformers_allocates(saved, name):
    import torch
    import transformers

    model, folder = saved(name)
    with torch.no_grad():
        cache = transformers.StaticCache(config=model.config, max_cache_len=T)
        model(**inputs(name), past_key_values=cache, use_cache=True)
    held = sum(t.numel() * t.element_size() for layer in cache.layers for t in (layer.keys, layer.values))
    assert memory.kv_cache_bytes(load(str(folder / "config.json")), Workload(batch=2, seq=T, dtype="fp32")) == held


@pytest.mark.parametrize("name", TINY)
def test_checkpoint_total_is_the_elements_in_the_files(saved, name):
    from safetensors import safe_open

    model, folder = saved(name)
    cfg = load(str(folder / "config.json"))
    c = count_checkpoint(cfg, folder)
    with safe_open(str(folder / "model.safetensors"), framework="pt") as f:
        elements = sum(_numel(f.get_slice(k).get_shape()) for k in f.keys())
    assert c.total == elements == c.matched == count.total(cfg) == sum(p.numel() for p in model.parameters())
    assert c.agrees


def _numel(shape) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


@pytest.mark.parametrize("name", TINY)
def test_decoding_with_the_static_cache_gives_transformers_logits(saved, name):
    """tfcalc's prefill then decode steps (its static cache: windows as a ring buffer, sinks in each step's
    softmax, experts routed token by token) against transformers' forward over the whole sequence, the
    logits of every decoded position within 1e-4 of the largest."""
    import torch

    import tfcalc

    model, folder = saved(name)
    ours = tfcalc.load_model(str(folder))
    ids = inputs(name, seed=3)["input_ids"]  # (2, T)
    prompt = 4
    with torch.no_grad():
        expected = model(input_ids=ids).logits  # (2, T, V)
        cache = ours.new_cache(ids.shape[0], ids.shape[1])
        got = [ours.prefill(ids[:, :prompt], cache)[:, -1]]
        for t in range(prompt, ids.shape[1]):
            got.append(ours.decode(ids[:, t:t + 1], cache)[:, -1])
    got = torch.stack(got[:-1], dim=1)  # positions prompt-1 .. T-2
    want = expected[:, prompt - 1:-1]
    assert (got - want).abs().max() <= 1e-4 * want.abs().max()


@pytest.mark.parametrize("first, every, listed, window", [
    (None, None, (2,), None), (1, None, (3, 4), 2), (None, 2, (0, 5), 3), (2, 3, (1, 7), None), (4, None, (1,), 2)])
def test_listed_dense_layers_with_the_other_patterns(first, every, listed, window):
    """Layer by layer, the flat front end's closed form (tfcalc.architecture.flat) against the rule:
    dense when listed, below first_dense_layers or off the moe_every beat; windowed unless every k-th."""
    from conftest import tiny

    cfg = tiny(n_layer=11, n_expert=4, n_expert_active=2, first_dense_layers=first, moe_every=every,
               dense_layers=list(listed), dense_d_ff=6, sliding_window=3 if window else None,
               full_attention_every=window)
    for i, block in enumerate(cfg.architecture.output.layers()):
        moe = i not in listed and i >= (first or 0) and (every is None or (i + 1) % every == 0)
        assert block.is_moe == moe and (block.ffn.expert if moe else block.ffn).d_ff == (cfg.ffn_dim if moe else 6), i
        assert block.attention.window == (None if window is None or (i + 1) % window == 0 else 3), i
