"""A new Hugging Face family's checkpoint names live in its own mapping module (issue 29; docs/contributing.md,
"Where a change goes"): tfcalc.checkpoint is the generic machinery (headers, matching, counting) and names no
family. The family below is defined in this file only -- its config.json reader and its ``checkpoint_names``
-- and registered by a ``REGISTRY`` row the test adds and removes; no file of tfcalc/ knows it.

The toy spells a Llama's tensors its own way (``backbone.cells.<i>.mix.query`` for ``self_attn.q_proj``, ...).
The reference is transformers: a tiny LlamaForCausalLM (tests/hf_tiny.py, random weights) whose state dict
is saved under the toy's names. tfcalc must count every stored element as a parameter of the config and, once
loaded, compute the logits transformers computes.
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest
from hf_tiny import LLAMA_LIKE, build, inputs

from tfcalc import hf_config
from tfcalc.architecture import Architecture
from tfcalc.config import ConfigError
from tfcalc.hf_config.llama_like import base_fields
from tfcalc.hf_config.names import Rule, tied_head
from tfcalc.hf_config.reader import Reader

pytestmark = pytest.mark.filterwarnings("ignore")
TYPE = "toy_llama"
CELL = r"backbone\.cells\.(\d+)\."


def toy_llama(r: Reader) -> None:
    """The toy's config.json: Llama's keys (LlamaConfig's defaults), biases on the attention projections."""
    base_fields(r, dict(max_position_embeddings=2048, rms_norm_eps=1e-6, rope_theta=10000.0))
    r.take("attention_bias", "attn_bias", False)


def checkpoint_names(arch: Architecture, model_type: str) -> list[Rule]:
    """The toy's tensor names -> tfcalc's parameters, in the rule format of tfcalc.hf_config.names."""
    return [
        (r"backbone\.vocab\.table", "tok_emb.weight"),
        (r"backbone\.out_scale", "final_norm.weight"),
        (r"readout", tied_head(arch)),
        (CELL + r"pre_mix_scale", "blocks.{0}.attn_norm.weight"),
        (CELL + r"pre_mlp_scale", "blocks.{0}.ffn_norm.weight"),
        (CELL + r"mix\.(query|key|value)\.(weight|bias)", "blocks.{0}.attn.qkv.{2}|{1}"),
        (CELL + r"mix\.merge\.(weight|bias)", "blocks.{0}.attn.out.{1}"),
        (CELL + r"mlp\.(gate|up)", "blocks.{0}.ffn.up.weight|{1}"),
        (CELL + r"mlp\.down", "blocks.{0}.ffn.down.weight"),
    ]


# transformers' Llama names -> the toy's (the test's own renaming: what a checkpoint of the toy family stores)
RENAME = [
    (r"model\.embed_tokens\.weight", "backbone.vocab.table"), (r"model\.norm\.weight", "backbone.out_scale"),
    (r"lm_head\.weight", "readout"),
    (r"model\.layers\.(\d+)\.input_layernorm\.weight", r"backbone.cells.\1.pre_mix_scale"),
    (r"model\.layers\.(\d+)\.post_attention_layernorm\.weight", r"backbone.cells.\1.pre_mlp_scale"),
    (r"model\.layers\.(\d+)\.self_attn\.q_proj\.(\w+)", r"backbone.cells.\1.mix.query.\2"),
    (r"model\.layers\.(\d+)\.self_attn\.k_proj\.(\w+)", r"backbone.cells.\1.mix.key.\2"),
    (r"model\.layers\.(\d+)\.self_attn\.v_proj\.(\w+)", r"backbone.cells.\1.mix.value.\2"),
    (r"model\.layers\.(\d+)\.self_attn\.o_proj\.(\w+)", r"backbone.cells.\1.mix.merge.\2"),
    (r"model\.layers\.(\d+)\.mlp\.(gate|up|down)_proj\.weight", r"backbone.cells.\1.mlp.\2"),
]


def toy_name(name: str) -> str:
    for pattern, replacement in RENAME:
        if re.fullmatch(pattern, name):
            return re.sub(pattern, replacement, name)
    raise AssertionError(f"{name}: no renaming (a Llama tensor the toy does not spell)")


@pytest.fixture
def toy(tmp_path, monkeypatch):
    """(transformers' model, the folder of the toy's checkpoint), the toy registered for the test only."""
    import torch
    from safetensors.torch import save_file

    monkeypatch.setitem(hf_config.REGISTRY, TYPE, (__name__, "toy_llama"))
    model = build("llama")
    tensors = {toy_name(k): v.contiguous() for k, v in model.state_dict().items()}
    assert len(tensors) == len(model.state_dict())  # the renaming is one-to-one
    save_file(tensors, str(tmp_path / "model.safetensors"))
    config = dict(LLAMA_LIKE, model_type=TYPE, architectures=["ToyLlamaForCausalLM"], attention_bias=True,
                  rope_theta=500.0, tie_word_embeddings=False, torch_dtype="float32")
    (tmp_path / "config.json").write_text(json.dumps(config))
    assert not torch.equal(model.lm_head.weight, model.model.embed_tokens.weight)  # the head is its own tensor
    return model, tmp_path


def test_a_family_defined_in_its_own_module_counts_its_checkpoint(toy):
    """Every stored tensor is explained by the toy's rules, and the elements stored are the parameters of the
    config read from its config.json: transformers' count of its own model."""
    from tfcalc.checkpoint import count_checkpoint
    from tfcalc.presets import load

    model, folder = toy
    cfg = load(str(folder / "config.json"))
    counted = count_checkpoint(cfg, folder)
    assert counted.unexplained == () and counted.misfits == ()
    assert counted.missing == {} and counted.surplus == {} and counted.agrees
    assert counted.total == sum(p.numel() for p in model.parameters())


def test_a_family_defined_in_its_own_module_loads_to_transformers_logits(toy):
    """load_model places each toy-named tensor by the toy's rules: in fp32 tfcalc's logits are transformers'
    within 1e-4 (a q row in k's place, or a transposed matrix, would show)."""
    import torch

    import tfcalc

    model, folder = toy
    ours = tfcalc.load_model(str(folder))
    ids = inputs("llama", seed=7)["input_ids"]
    with torch.no_grad():
        expected, got = model(input_ids=ids).logits, ours(ids)
    assert got.shape == expected.shape
    assert (got - expected).abs().max() <= 1e-4
    assert expected.abs().max() > 0.1


def test_once_unregistered_the_family_is_refused_in_one_line(toy, monkeypatch):
    from tfcalc.checkpoint.names import rules
    from tfcalc.presets import load

    _, folder = toy
    cfg = load(str(folder / "config.json"))
    monkeypatch.delitem(hf_config.REGISTRY, TYPE)
    with pytest.raises(ConfigError, match=f"model_type '{TYPE}' is not supported") as e:
        rules(cfg, TYPE)
    assert "\n" not in str(e.value)
    with pytest.raises(ConfigError, match="is not supported"):
        load(str(folder / "config.json"))


@pytest.mark.parametrize("model_type", sorted(hf_config.REGISTRY))
def test_every_registered_family_names_its_checkpoint_tensors(model_type):
    """Each family module defines checkpoint_names, valid regexes onto targets of the rule format."""
    from tfcalc.presets import load

    arch = load("llama2-7b").architecture  # any description: the rules read it only for what names mean
    table = hf_config.checkpoint_names(arch, model_type)
    assert table
    for pattern, target in table:
        re.compile(pattern)
        assert isinstance(target, str) and target


def test_no_file_of_tfcalc_checkpoint_names_a_family():
    """The generic machinery spells no model_type: a new family edits no file of tfcalc/checkpoint/."""
    folder = Path(hf_config.__file__).resolve().parent.parent / "checkpoint"
    types = set(hf_config.REGISTRY)
    for path in sorted(folder.glob("*.py")):
        strings = {node.value for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
                   if isinstance(node, ast.Constant) and isinstance(node.value, str)}
        assert not strings & types, f"{path.name} names {sorted(strings & types)}"
