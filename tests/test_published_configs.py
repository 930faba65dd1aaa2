"""Published config.json files (or exact transcriptions of them) of issue 30's families that no other test holds:
each read by tfcalc and built by transformers 5.24 on the meta device from the same file (no memory, no init), the
parameters equal to the single one, and the generation state at 4,096 tokens (bf16) equal to the bytes of the cache
transformers' forward over 4,096 tokens holds. The files and where each was read:
tests/fixtures/published_configs/README.md. Counts that a model card states are held to it (within the rounding of
the card's figure)."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest

from tfcalc.count.model import params as count
from tfcalc.presets import load

pytestmark = pytest.mark.filterwarnings("ignore")
FOLDER = Path(__file__).parent / "fixtures" / "published_configs"
FILES = sorted(FOLDER.glob("*.json"))
# the figure each model card states (total parameters), as printed, and the rounding it is printed to
CARDS = {
    "granitemoehybrid-h-small": (32e9, 0.5e9), "granitemoehybrid-h-tiny": (7e9, 0.5e9),
    "granitemoehybrid-h-micro": (3e9, 0.5e9), "granitemoehybrid-h-1b": (1.5e9, 0.05e9),
    "granitemoehybrid-h-350m": (340e6, 5e6), "qwen3_5_moe-122b-a10b": (122e9, 0.5e9),
    "qwen3_5_moe-35b-a3b": (35e9, 0.5e9), "nemotron_h-8b": (8e9, 0.5e9), "nemotron_h-4b": (4e9, 0.05e9),
    "lfm2-350m": (350e6, 5e6), "lfm2-2.6b": (2.6e9, 0.05e9), "jamba-1.5-mini": (52e9, 0.5e9),
    "falcon_h1-1.5b": (1.55e9, 0.005e9), "falcon_h1-0.5b": (0.5e9, 0.05e9), "longcat_flash-chat": (560e9, 1e9),
}
# the presets whose source is one of these files: the same count, component by component
PRESETS = {"granitemoehybrid-h-small": "granite-4.0-h-small", "longcat_flash-chat": "longcat-flash-chat"}


def transformers_model(data: dict):
    """The model transformers builds from this config.json on meta: its ``architectures`` class, the config class its
    ``model_type`` names, weights tied as the file says."""
    import torch
    import transformers
    from transformers.initialization import no_init_weights

    keys = {k: v for k, v in data.items() if k != "model_type"}
    config = transformers.AutoConfig.for_model(data["model_type"], **keys)
    with warnings.catch_warnings(), torch.device("meta"), no_init_weights():
        warnings.simplefilter("ignore")
        model = getattr(transformers, data["architectures"][0])(config)
    model.tie_weights()
    return model


def transformers_total(data: dict) -> int:
    model = transformers_model(data)
    total = sum(p.numel() for p in model.parameters())
    if data["model_type"] == "longcat_flash":  # the zero experts' gate_up rows transformers allocates and never
        total -= sum(layer.mlp.experts.gate_up_proj[layer.mlp.experts.num_routed_experts:].numel()  # reads
                     for layer in model.model.layers)  # (tests/test_longcat_flash.py, _phantom)
    return total


def test_every_file_is_named_in_the_readme():
    readme = (FOLDER / "README.md").read_text()
    assert FILES and all(f"| {path.name} |" in readme for path in FILES)


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_parameters_equal_transformers_on_meta(path):
    data = json.loads(path.read_text())
    cfg = load(str(path))
    total = count.total(cfg) + (cfg.vision_params or 0)
    assert total == transformers_total(data)
    if path.stem in CARDS:
        stated, rounding = CARDS[path.stem]
        assert abs(count.total(cfg) - stated) <= rounding


# transformers' forward cannot run on meta here: LongcatFlashMoE reads its routing counts back (torch.nonzero);
# tests/test_longcat_flash.py holds LongCat-Flash's state against transformers' cache on real weights
NO_META_FORWARD = {"longcat_flash-chat"}
FORWARD = [p for p in FILES if p.stem not in NO_META_FORWARD]


@pytest.mark.parametrize("path", FORWARD, ids=[p.stem for p in FORWARD])
def test_state_at_4096_tokens_equals_transformers_cache(path):
    """Every layer's K/V, convolution columns and recurrent state, each in the dtype transformers allocates it
    (bf16 model; Mamba2's and the gated DeltaNet's recurrent state as their modules keep it)."""
    import torch
    from hf_pairs import hf_cache_bytes

    from tfcalc.count.model.memory import kv_cache_bytes
    from tfcalc.workload import Workload

    model = transformers_model(json.loads(path.read_text())).to(torch.bfloat16).eval()
    with torch.no_grad():
        out = model(torch.zeros(1, 4096, dtype=torch.long, device="meta"), use_cache=True)
    cache = getattr(out, "cache", None) or out.past_key_values
    cfg = load(str(path))
    # a sliding window of W: tfcalc counts the ring of W slots a decode step writes into and reads whole (as
    # transformers' StaticSlidingWindowLayer allocates), transformers' dynamic cache keeps the W - 1 earlier
    # tokens (DynamicSlidingWindowLayer, cache_utils.py): one position of K and V per ring layer apart
    rings = sum(b.attention.kv_elements() * (b.attention.kv_positions(4096) < 4096)
                for b in cfg.architecture.output.layers() if hasattr(b.attention, "kv_positions"))
    assert kv_cache_bytes(cfg, Workload(batch=1, seq=4096, kv_dtype="bf16")) - 2 * rings == hf_cache_bytes(cache)


@pytest.mark.parametrize("stem, preset", list(PRESETS.items()))
def test_the_presets_count_their_published_file(stem, preset):
    assert count.breakdown(load(str(FOLDER / f"{stem}.json"))) == count.breakdown(load(preset))
