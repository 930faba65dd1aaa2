"""Experts as grouped tensors (tfcalc.model.experts) against both ways checkpoints name them: transformers
4's per-expert tensors (``experts.<e>.w1.weight``, what save_pretrained still writes for mixtral) and
transformers 5's grouped ``experts.gate_up_proj`` (E, 2f, d) and ``experts.down_proj`` (E, d, f)
(modeling_mixtral.py, MixtralExperts). The same weights, named either way, load into the same model and
count the same; a grouped tensor of the wrong number of experts, or an expert index past them, is named."""

from __future__ import annotations

import re
import shutil
import warnings

import pytest
import torch
from hf_tiny import build, inputs, output
from safetensors.torch import load_file, save_file

import tfcalc
from tfcalc.checkpoint import count_checkpoint
from tfcalc.count.model import params as count
from tfcalc.errors import InputError
from tfcalc.presets import load

pytestmark = pytest.mark.filterwarnings("ignore")
PER_EXPERT = re.compile(r"(.*\.experts)\.(\d+)\.(w[123])\.weight")


@pytest.fixture(scope="module")
def mixtral(tmp_path_factory):
    """(transformers model, folder with per-expert names, folder with grouped names)."""
    model = build("mixtral")
    per = tmp_path_factory.mktemp("per_expert")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.save_pretrained(per)
    tensors = load_file(str(per / "model.safetensors"))
    assert any(PER_EXPERT.fullmatch(k) for k in tensors)  # what save_pretrained writes today
    grouped, experts = {}, {}
    for name, t in tensors.items():
        m = PER_EXPERT.fullmatch(name)
        if m:
            experts.setdefault(m.group(1), {}).setdefault(int(m.group(2)), {})[m.group(3)] = t
        else:
            grouped[name] = t
    for prefix, by_expert in experts.items():
        order = sorted(by_expert)
        grouped[f"{prefix}.gate_up_proj"] = torch.stack([torch.cat([by_expert[e]["w1"], by_expert[e]["w3"]])
                                                         for e in order])  # (E, 2f, d): [gate | up]
        grouped[f"{prefix}.down_proj"] = torch.stack([by_expert[e]["w2"] for e in order])  # (E, d, f)
    folder = tmp_path_factory.mktemp("grouped")
    shutil.copy(per / "config.json", folder / "config.json")
    save_file(grouped, str(folder / "model.safetensors"))
    return model, per, folder


def test_both_namings_load_to_transformers_logits(mixtral):
    model, per, grouped = mixtral
    kw = inputs("mixtral", seed=7)
    with torch.no_grad():
        expected = output("mixtral", model(**kw))
        for folder in (per, grouped):
            got = tfcalc.load_model(str(folder))(kw["input_ids"])
            assert (got - expected).abs().max() <= 1e-4 * expected.abs().max()


def test_both_namings_count_as_the_config(mixtral):
    model, per, grouped = mixtral
    cfg = load(str(per / "config.json"))
    hf_total = sum(p.numel() for p in model.parameters())
    for folder in (per, grouped):
        c = count_checkpoint(cfg, folder)
        assert c.agrees and c.total == c.matched == count.total(cfg) == hf_total
        assert c.breakdown == {k: v for k, v in count.breakdown(cfg).items() if v}


def test_a_grouped_tensor_of_other_experts_is_a_misfit(mixtral, tmp_path):
    _, _, grouped = mixtral
    tensors = load_file(str(grouped / "model.safetensors"))
    name = next(k for k in tensors if k.endswith("experts.down_proj"))
    tensors[name] = tensors[name][:3]  # 3 of the config's 4 experts
    shutil.copy(grouped / "config.json", tmp_path / "config.json")
    save_file(tensors, str(tmp_path / "model.safetensors"))
    c = count_checkpoint(load(str(tmp_path / "config.json")), tmp_path)
    assert not c.agrees and any(m.startswith(name) for m in c.misfits)
    with pytest.raises(InputError, match="does not fit"):
        tfcalc.load_model(str(tmp_path))


def test_an_expert_past_the_config_is_named(mixtral, tmp_path):
    _, per, _ = mixtral
    tensors = load_file(str(per / "model.safetensors"))
    name = "model.layers.0.block_sparse_moe.experts.3.w2.weight"
    tensors[name.replace(".3.", ".9.")] = tensors.pop(name)
    shutil.copy(per / "config.json", tmp_path / "config.json")
    save_file(tensors, str(tmp_path / "model.safetensors"))
    c = count_checkpoint(load(str(tmp_path / "config.json")), tmp_path)
    assert any("experts.9.w2" in m for m in c.misfits) and c.missing
    with pytest.raises(InputError, match="expert 9 is past the 4 experts"):
        tfcalc.load_model(str(tmp_path))
