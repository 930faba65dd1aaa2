"""Full-size Hugging Face configs (the Hub's config.json of each supported type) against transformers
itself: the model transformers builds from the same file, on the meta device (no memory, no init), has
exactly the parameters tfcalc counts. The presets built from the same shapes count the same."""

from __future__ import annotations

import json
import warnings

import pytest
from deepseek_configs import DEEPSEEK_FILES
from hub_dense import OPT_350M
from test_hf_config import HUB, NO_PRESET

from tfcalc.count.model import params as count
from tfcalc.presets import load

pytestmark = pytest.mark.filterwarnings("ignore")
CLASSES = {"gpt2": "GPT2", "llama": "Llama", "mistral": "Mistral", "mixtral": "Mixtral", "bert": "Bert",
           "qwen2": "Qwen2", "qwen2_moe": "Qwen2Moe", "qwen3": "Qwen3", "gemma": "Gemma", "gemma2": "Gemma2",
           "phi3": "Phi3", "gpt_neox": "GPTNeoX", "falcon": "Falcon", "opt": "OPT", "t5": "T5",
           "gpt_oss": "GptOss", "qwen3_moe": "Qwen3Moe",
           "deepseek_v3": "DeepseekV3", "kimi_k2": "DeepseekV3", "deepseek_v2": "DeepseekV2",
           # issue 22's dense types (their files: tests/hub_dense.py)
           "phi": "Phi", "starcoder2": "Starcoder2", "cohere": "Cohere", "granite": "Granite",
           "gpt_bigcode": "GPTBigCode", "bloom": "Bloom", "roberta": "Roberta"}
FILES = {**{t: data for t, (data, _) in HUB.items()}, **NO_PRESET, "opt-350m": OPT_350M,
         **{t: data for t, (data, _) in DEEPSEEK_FILES.items()}}


def transformers_total(data: dict) -> int:
    """Parameters of the model transformers builds from this config.json (its architectures entry)."""
    import torch
    import transformers
    from transformers.initialization import no_init_weights

    prefix = CLASSES[data["model_type"]]
    config = getattr(transformers, f"{prefix}Config").from_dict(data)
    with warnings.catch_warnings(), torch.device("meta"), no_init_weights():
        warnings.simplefilter("ignore")
        model = getattr(transformers, data["architectures"][0])(config)
    model.tie_weights()
    return sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("model_type", list(FILES))
def test_full_size_counts_equal_transformers(tmp_path, model_type):
    data = FILES[model_type]
    path = tmp_path / "config.json"
    path.write_text(json.dumps(data))
    cfg = load(str(path))
    assert count.total(cfg) == transformers_total(data)
    if model_type in HUB:
        assert count.total(load(HUB[model_type][1])) == count.total(cfg)
