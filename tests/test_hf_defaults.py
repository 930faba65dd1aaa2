"""A config.json that leaves a key out takes the default of its model type's transformers config class
(tfcalc.hf_config's contract): each supported type with a causal-LM class, given only the keys tfcalc requires (their
values the class's defaults), counts the parameters transformers 5.24 builds from the same file on meta. It found
the types whose num_key_value_heads default is a number of its own (Mistral's 8, Qwen3-MoE's 4, ...), not the
heads: tfcalc had read an absent num_key_value_heads as the heads (full multi-head attention)."""

from __future__ import annotations

import json
import re
import warnings

import pytest

from tfcalc.count.model import params as count
from tfcalc.errors import InputError
from tfcalc.hf_config import REGISTRY
from tfcalc.presets import load

pytestmark = pytest.mark.filterwarnings("ignore")
transformers = pytest.importorskip("transformers")
from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES  # noqa: E402
from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES  # noqa: E402

# where tfcalc's count of the class defaults differs from transformers' by a stated convention (each module's
# docstring), or the defaults build no model tfcalc counts
APART = {
    "ernie4_5_moe": "the correction bias, an nn.Parameter no optimizer updates, is counted as a buffer",
    "longcat_flash": "transformers allocates a gate_up slice for the zero experts that it never reads",
    "glm4_moe": "96 heads do not divide 4096 and no head_dim is given: refused (transformers floors 4096 / 96)",
    "gemma3": "Gemma3Config's causal-LM class is built over the composite config; the file counts its text model",
}
TYPES = sorted(t for t in REGISTRY if t in CONFIG_MAPPING_NAMES and t in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES
               and t not in APART and t not in ("gemma3n", "llama4", "qwen3_5", "qwen3_5_moe", "lfm2_moe",
                                                 "deepseek_v2"))


def required_only(tmp_path, model_type: str) -> tuple[dict, object]:
    """The smallest file tfcalc reads for model_type: each key it names as missing added from the class defaults."""
    default = transformers.AutoConfig.for_model(model_type).to_dict()
    data = {"model_type": model_type, "architectures": [MODEL_FOR_CAUSAL_LM_MAPPING_NAMES[model_type]]}
    path = tmp_path / "config.json"
    for _ in range(10):
        path.write_text(json.dumps(data))
        try:
            return data, load(str(path))
        except InputError as e:
            missing = re.search(r"missing required field '(\w+)'", str(e))
            assert missing and missing.group(1) in default, str(e)
            data[missing.group(1)] = default[missing.group(1)]
    raise AssertionError(f"{model_type}: more than 10 required keys")


def transformers_total(data: dict) -> int:
    import torch
    from transformers.initialization import no_init_weights

    config = transformers.AutoConfig.for_model(data["model_type"], **{k: v for k, v in data.items()
                                                                      if k != "model_type"})
    with warnings.catch_warnings(), torch.device("meta"), no_init_weights():
        warnings.simplefilter("ignore")
        model = getattr(transformers, data["architectures"][0])(config)
    model.tie_weights()
    return sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("model_type", TYPES)
def test_the_class_defaults_count_as_transformers_builds_them(tmp_path, model_type):
    data, cfg = required_only(tmp_path, model_type)
    assert "num_key_value_heads" not in data
    assert count.total(cfg) == transformers_total(data)


@pytest.mark.parametrize("model_type, kv", [("mistral", 8), ("qwen3_moe", 4), ("nemotron_h", 8), ("gemma2", 4),
                                            ("qwen3_5_moe_text", 2), ("ernie4_5_moe", 4), ("seed_oss", 8),
                                            ("exaone4", 32)])
def test_an_absent_num_key_value_heads_is_the_class_default(tmp_path, model_type, kv):
    """Whatever the heads: 48 query heads over Mistral's 8 K/V heads, as MistralConfig(num_attention_heads=48)."""
    data, _ = required_only(tmp_path, model_type)
    heads = 6 * kv
    path = tmp_path / "heads.json"
    path.write_text(json.dumps(dict(data, num_attention_heads=heads, head_dim=64)))
    cfg = load(str(path))
    expected = transformers.AutoConfig.for_model(model_type, num_attention_heads=heads, head_dim=64).num_key_value_heads
    assert (cfg.n_head, cfg.kv_heads) == (heads, kv) and expected == kv


@pytest.mark.parametrize("model_type, heads, kv", [("mistral", 12, 8), ("qwen3_moe", 6, 4), ("glm4", 3, 2)])
def test_heads_the_class_default_kv_heads_do_not_divide_are_one_line(tmp_path, model_type, heads, kv):
    """The class's K/V heads read for an absent key, then held to the heads: 12 query heads over Mistral's 8 are
    refused in one line naming both (transformers would build 12 // 8 = 1 query head per K/V head)."""
    data, _ = required_only(tmp_path, model_type)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(dict(data, num_attention_heads=heads, head_dim=64)))
    with pytest.raises(InputError, match=rf"n_head \({heads}\) must be a multiple of n_kv_head \({kv}\)") as info:
        load(str(path))
    assert "\n" not in str(info.value)
