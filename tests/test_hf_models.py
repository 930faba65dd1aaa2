"""Every supported Hugging Face model type, held against transformers itself: a tiny model built by
transformers from a config object (random weights, nothing downloaded), saved with save_pretrained; its
config.json read by tfcalc. The parameter count must equal transformers' own, and tfcalc's analytic
forward FLOPs must equal what FlopCounterMode counts on transformers' forward (eager attention, so the
scores are two explicit matmuls over the full square, tfcalc's convention)."""

from __future__ import annotations

import warnings

import pytest

from hf_tiny import CASES, SOURCE, T, build, inputs
from tfcalc.count import flops as flops_count
from tfcalc.count import params as count
from tfcalc.hf_config import SUPPORTED_MODEL_TYPES
from tfcalc.measure.params import measure_params
from tfcalc.presets import load

pytestmark = pytest.mark.filterwarnings("ignore")


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """name -> (transformers model, folder it was saved to), built once per case."""
    made = {}

    def get(name: str):
        if name not in made:
            model = build(name)
            folder = tmp_path_factory.mktemp(name)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                model.save_pretrained(folder)
            made[name] = model, folder
        return made[name]

    return get


def test_every_supported_type_has_a_case():
    types = {CASES[name].config for name in CASES}
    assert len(SUPPORTED_MODEL_TYPES) == 15 and len(types) == 15


@pytest.mark.parametrize("name", list(CASES))
def test_parameters_equal_transformers(saved, name):
    model, folder = saved(name)
    cfg = load(str(folder / "config.json"))
    hf_total = sum(p.numel() for p in model.parameters())  # unique tensors: a tied head counts once
    assert count.total(cfg) == hf_total
    total, breakdown = measure_params(cfg)
    assert total == hf_total and breakdown == count.breakdown(cfg)


def _hf_flops(name: str, model) -> int:
    """FlopCounterMode on transformers' forward, less its rotary-table matmul (inv_freq @ positions:
    tfcalc precomputes those tables and counts no FLOPs for them, a position encoding)."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        model(**inputs(name))
    counts = {path: sum(ops.values()) for path, ops in counter.get_flop_counts().items()}
    rotary = sum(n for path, n in counts.items() if path.endswith(("rotary_emb", "rotary_embedding")))
    return counter.get_total_flops() - rotary


@pytest.mark.parametrize("name", list(CASES))
def test_forward_flops_equal_flop_counter_mode(saved, name):
    model, folder = saved(name)
    cfg = load(str(folder / "config.json"))
    src = SOURCE if CASES[name].inputs in ("seq2seq", "cross") else None
    assert flops_count.forward_flops(cfg, 2, T, src_seq=src) == _hf_flops(name, model)
