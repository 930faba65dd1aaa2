"""Real checkpoints read by their headers: a small model's tensors written with Hugging Face names by
safetensors (one file, and sharded with an index), counted back; a missing and an extra tensor named;
hostile files refused in one line, exit 2."""

from __future__ import annotations

import json
import struct

import pytest
import torch
from conftest import assert_one_line_error
from safetensors.torch import save_file

from tfcalc.checkpoint import count_checkpoint, read_headers
from tfcalc.config import ConfigError
from tfcalc.count.model import params as count
from tfcalc.presets import load

LLAMA = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "num_hidden_layers": 2, "hidden_size": 32,
         "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 48, "vocab_size": 61,
         "max_position_embeddings": 16}


def llama_tensors(dtype=torch.float32) -> dict[str, torch.Tensor]:
    """A tiny Llama's state dict under transformers' names (LlamaForCausalLM), written by hand."""
    out = {"model.embed_tokens.weight": torch.randn(61, 32), "model.norm.weight": torch.ones(32),
           "lm_head.weight": torch.randn(61, 32)}
    for i in range(2):
        p = f"model.layers.{i}."
        out.update({p + "input_layernorm.weight": torch.ones(32), p + "post_attention_layernorm.weight": torch.ones(32),
                    p + "self_attn.q_proj.weight": torch.randn(32, 32),
                    p + "self_attn.k_proj.weight": torch.randn(16, 32),
                    p + "self_attn.v_proj.weight": torch.randn(16, 32),
                    p + "self_attn.o_proj.weight": torch.randn(32, 32),
                    p + "mlp.gate_proj.weight": torch.randn(48, 32), p + "mlp.up_proj.weight": torch.randn(48, 32),
                    p + "mlp.down_proj.weight": torch.randn(32, 48)})
    return {k: v.to(dtype) for k, v in out.items()}


def write(folder, tensors, config=LLAMA, shards=1):
    folder.mkdir(exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config))
    if shards == 1:
        save_file(tensors, str(folder / "model.safetensors"))
        return folder
    names = list(tensors)
    weight_map = {}
    for s in range(shards):
        file = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
        part = {n: tensors[n] for n in names[s::shards]}
        save_file(part, str(folder / file))
        weight_map.update(dict.fromkeys(part, file))
    (folder / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    return folder


def test_one_file_counts_as_the_config(tmp_path):
    folder = write(tmp_path / "m", llama_tensors())
    cfg = load(str(folder))
    c = count_checkpoint(cfg, folder)
    assert c.agrees and c.total == c.matched == count.total(cfg) and c.breakdown == {
        k: v for k, v in count.breakdown(cfg).items() if v}
    assert c.by_dtype == {"F32": {"tensors": 21, "elements": c.total, "bytes": 4 * c.total}}
    assert count_checkpoint(cfg, folder / "model.safetensors").total == c.total  # the file alone, config beside


def test_sharded_with_an_index_and_two_dtypes(tmp_path):
    tensors = llama_tensors()
    tensors["model.embed_tokens.weight"] = tensors["model.embed_tokens.weight"].to(torch.bfloat16)
    folder = write(tmp_path / "m", tensors, shards=3)
    cfg = load(str(folder))
    c = count_checkpoint(cfg, folder)
    assert c.agrees and len(c.files) == 3 and c.matched == count.total(cfg)
    assert c.by_dtype["BF16"] == {"tensors": 1, "elements": 61 * 32, "bytes": 2 * 61 * 32}


def test_a_missing_and_an_extra_tensor_are_named(tmp_path):
    tensors = llama_tensors()
    del tensors["model.layers.1.mlp.up_proj.weight"]
    tensors["model.layers.0.mlp.extra_proj.weight"] = torch.zeros(4, 4)
    folder = write(tmp_path / "m", tensors)
    c = count_checkpoint(load(str(folder)), folder)
    assert c.unexplained == ("model.layers.0.mlp.extra_proj.weight",)
    assert c.missing == {"ffn_up_weight": 48 * 32} and not c.agrees
    assert c.total == c.matched + 16


def test_tied_copies_and_buffers_are_named_not_counted_as_parameters(tmp_path):
    gpt2 = {"model_type": "gpt2", "n_layer": 1, "n_embd": 8, "n_head": 2, "n_positions": 4, "vocab_size": 11}
    tensors = {"transformer.wte.weight": torch.randn(11, 8), "transformer.wpe.weight": torch.randn(4, 8),
               "lm_head.weight": torch.randn(11, 8), "transformer.h.0.attn.bias": torch.ones(1, 1, 4, 4),
               "transformer.ln_f.weight": torch.ones(8), "transformer.ln_f.bias": torch.zeros(8)}
    for name, shape in (("ln_1", (8,)), ("ln_2", (8,))):
        tensors.update({f"transformer.h.0.{name}.weight": torch.ones(shape),
                        f"transformer.h.0.{name}.bias": torch.zeros(shape)})
    conv1d = (("attn.c_attn", (8, 24)), ("attn.c_proj", (8, 8)), ("mlp.c_fc", (8, 32)), ("mlp.c_proj", (32, 8)))
    for name, (i, o) in conv1d:
        tensors.update({f"transformer.h.0.{name}.weight": torch.randn(i, o),
                        f"transformer.h.0.{name}.bias": torch.zeros(o)})
    folder = write(tmp_path / "g", tensors, gpt2)
    cfg = load(str(folder))
    c = count_checkpoint(cfg, folder)
    assert c.agrees and c.matched == count.total(cfg)
    assert c.tied_copies == {"lm_head.weight": 88} and c.buffers == {"transformer.h.0.attn.bias": 16}


def test_params_cli_reports_checkpoint_total(tmp_path, cli):
    folder = write(tmp_path / "m", llama_tensors())
    r = cli("params", str(folder), "--json")
    data = r.json()
    assert r.code == 0 and data["checkpoint_total"] == data["analytic_total"] == data["empirical_total"]
    assert data["checkpoint"]["agree"] and data["checkpoint"]["by_dtype"]["F32"]["tensors"] == 21
    assert cli("params", "gpt2", "--json").json()["checkpoint_total"] is None


def test_params_cli_exits_1_naming_what_disagrees(tmp_path, cli):
    tensors = llama_tensors()
    del tensors["model.norm.weight"]
    tensors["model.surprise"] = torch.zeros(3)
    r = cli("params", str(write(tmp_path / "m", tensors)))
    assert r.code == 1 and "unexplained tensor model.surprise" in r.err and "final_norm_weight lacks 32" in r.err
    assert "Total, checkpoint" in r.out


def _raw_file(path, header: bytes, length: int | None = None, data: bytes = b""):
    path.write_bytes(struct.pack("<Q", len(header) if length is None else length) + header + data)
    return path


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda d: _raw_file(d / "model.safetensors", b"{}", length=2**62), "header too large"),
        (lambda d: _raw_file(d / "model.safetensors", b"{not json"), "invalid JSON in header"),
        (lambda d: (d / "model.safetensors").write_bytes(b"\x01"), "header too small"),
        (lambda d: _raw_file(d / "model.safetensors", json.dumps(
            {"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}).encode()), "not fully covered"),
        (lambda d: (d / "model.safetensors.index.json").write_text(json.dumps(
            {"weight_map": {"a": "../outside.safetensors"}})), "is not a file name in the checkpoint's folder"),
        (lambda d: (d / "model.safetensors.index.json").write_text(json.dumps(
            {"weight_map": {"a": "/etc/passwd"}})), "is not a file name in the checkpoint's folder"),
        (lambda d: (d / "model.safetensors.index.json").write_text(json.dumps(
            {"weight_map": {"a": "model-00001-of-00002.safetensors"}})), "which is not in"),
        (lambda d: (d / "model.safetensors.index.json").write_text("{"), "not valid JSON"),
        (lambda d: (d / "model.safetensors.index.json").write_text(json.dumps({"weight_map": [1]})), "no 'weight_map'"),
        (lambda d: (d / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"a": 3}})),
         "must name a shard file"),
        (lambda d: (d / "pytorch_model.bin").write_bytes(b"pickle"), "pickled weights"),
    ],
    ids=["huge-header", "bad-json", "short-file", "offsets-past-end", "index-outside", "index-absolute",
         "missing-shard", "index-not-json", "weight-map-type", "shard-not-a-name", "pickle-only"],
)
def test_hostile_checkpoints_are_one_line_exit_2(tmp_path, cli, make, message):
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(LLAMA))
    make(folder)
    with pytest.raises(ConfigError, match=message):
        read_headers(folder)
    assert_one_line_error(cli("params", str(folder)), message)


def test_a_tensor_missing_from_its_shard_is_named(tmp_path):
    folder = write(tmp_path / "m", llama_tensors(), shards=2)
    index = json.loads((folder / "model.safetensors.index.json").read_text())
    index["weight_map"]["model.ghost.weight"] = "model-00001-of-00002.safetensors"
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(ConfigError, match="tensor 'model.ghost.weight' is not in its shard"):
        read_headers(folder)


def test_folder_without_config_and_missing_file(tmp_path, cli):
    bare = tmp_path / "bare"
    bare.mkdir()
    save_file({"a": torch.zeros(2)}, str(bare / "model.safetensors"))
    assert_one_line_error(cli("params", str(bare)), "no config.json in")
    assert_one_line_error(cli("params", str(tmp_path / "nope.safetensors")), "no such file")


# ---------- loading: every element written once, or refused ----------


def test_load_model_fills_every_parameter_or_names_what_is_missing(tmp_path):
    from tfcalc.model.load import load_model

    tensors = llama_tensors()
    model = load_model(write(tmp_path / "ok", tensors))
    assert torch.equal(model.blocks[1].attn.qkv.weight[32:48], tensors["model.layers.1.self_attn.k_proj.weight"])
    assert torch.equal(model.blocks[0].ffn.up.weight[48:], tensors["model.layers.0.mlp.up_proj.weight"])
    del tensors["model.layers.1.mlp.up_proj.weight"]
    with pytest.raises(ConfigError, match=r"does not fill blocks\.1\.ffn\.up\.weight"):
        load_model(write(tmp_path / "missing", tensors))
    tensors = llama_tensors()
    tensors["model.layers.0.self_attn.k_proj.weight"] = torch.zeros(20, 32)
    with pytest.raises(ConfigError, match=r"shape \[20, 32\] does not fit blocks\.0\.attn\.qkv\.weight rows 32:48"):
        load_model(write(tmp_path / "wrong", tensors))


def test_load_model_refuses_what_changes_outputs_but_no_count(tmp_path):
    from tfcalc.model.load import load_model

    # proportional RoPE is built now (tests/test_hf_rope_scaling.py, tests/test_gemma4.py): GPT-2's scaling remains
    folder = write(tmp_path / "m", llama_tensors(), {**LLAMA, "scale_attn_by_inverse_layer_idx": True})
    with pytest.raises(ConfigError, match="'scale_attn_by_inverse_layer_idx' is not built"):
        load_model(folder)
    assert count_checkpoint(load(str(folder)), folder).agrees  # counting it is fine
