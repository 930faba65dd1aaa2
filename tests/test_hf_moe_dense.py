"""Qwen MoE config.json files in which no layer has the experts (modeling_qwen2_moe.py and
modeling_qwen3_moe.py: layer i has them when i is not in mlp_only_layers and num_experts > 0 and (i + 1) %
decoder_sparse_step == 0): read as the dense models they are, counted exactly as transformers builds them
on meta; once refused ("with every layer dense, leave out n_expert", "n_expert must be positive")."""

from __future__ import annotations

import json

import pytest
from hub_moe import PUBLISHED
from test_hf_config import QWEN15_MOE
from test_hf_reference import transformers_total

from tfcalc.count.model import params as count
from tfcalc.errors import InputError
from tfcalc.presets import load

pytestmark = pytest.mark.filterwarnings("ignore")
QWEN3 = PUBLISHED["qwen3-30b-a3b"][0]
DEPTH2, DEPTH3 = QWEN15_MOE["num_hidden_layers"], QWEN3["num_hidden_layers"]
CASES = {
    "qwen2_moe-every-layer-listed": {**QWEN15_MOE, "mlp_only_layers": list(range(DEPTH2))},
    "qwen2_moe-no-experts": {**QWEN15_MOE, "num_experts": 0},
    "qwen2_moe-step-past-the-depth": {**QWEN15_MOE, "decoder_sparse_step": DEPTH2 + 1},
    "qwen3_moe-every-layer-listed": {**QWEN3, "mlp_only_layers": list(range(DEPTH3))},
    "qwen3_moe-no-experts": {**QWEN3, "num_experts": 0},
    # the sparse layers of step 2 (1, 3, 5, ...) are exactly the listed ones
    "qwen3_moe-listed-where-sparse": {**QWEN3, "decoder_sparse_step": 2,
                                      "mlp_only_layers": list(range(1, DEPTH3, 2))},
}


def _load(tmp_path, data):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(data))
    return load(str(path))


@pytest.mark.parametrize("name", CASES)
def test_all_dense_qwen_moe_is_the_dense_model_transformers_builds(tmp_path, name):
    data = CASES[name]
    cfg = _load(tmp_path, data)
    assert cfg.n_expert is None and not cfg.architecture.has_moe
    assert cfg.d_ff == data["intermediate_size"]  # every layer's MLP, not moe_intermediate_size
    assert count.total(cfg) == transformers_total(data)
    assert count.active_total(cfg) == count.total(cfg)


def test_one_sparse_layer_left_keeps_the_experts(tmp_path):
    data = {**QWEN3, "mlp_only_layers": list(range(DEPTH3 - 1))}  # the last layer sparse
    cfg = _load(tmp_path, data)
    assert [b.is_moe for b in cfg.architecture.output.layers()] == [False] * (DEPTH3 - 1) + [True]
    assert count.total(cfg) == transformers_total(data)


@pytest.mark.parametrize("step", [0, -2])
def test_a_step_below_one_is_refused_in_one_line(tmp_path, step):
    with pytest.raises(InputError, match="'decoder_sparse_step' must be a positive integer") as e:
        _load(tmp_path, {**QWEN3, "decoder_sparse_step": step})
    assert "\n" not in str(e.value)
