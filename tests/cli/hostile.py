"""Hostile-but-realistic inputs, written once into a folder: the files the table in test_hostile.py names.

Each is small on disk; what makes it hostile is what a naive reader does with it (expands it, recurses
into it, blocks on it, or takes it at its word)."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import hostile_runs
from deepseek_configs import HOSTILE_FILES as DEEPSEEK_FILES
from hostile_cfg import CHECKPOINTS as CFG_CHECKPOINTS, FILES as CFG_FILES

TINY = "n_layer: 2\nd_model: 32\nn_head: 4\nvocab_size: 61\nmax_seq_len: 16\n"


def alias_bomb(levels: int = 9, width: int = 9) -> str:
    """A 'billion laughs' in a typed field: `levels` levels of `width` aliases each (9^9 items expanded)."""
    rows = [f"[&a0 [{', '.join(['x'] * width)}]]"]
    rows += [f"[&a{i} [{', '.join([f'*a{i - 1}'] * width)}]]" for i in range(1, levels)]
    rows.append(f"[{', '.join([f'*a{levels - 1}'] * width)}]")
    return TINY + f"source: [{', '.join(rows)}]\n"


def hf(model_type="llama", **changes) -> str:
    fields = dict(model_type=model_type, num_hidden_layers=2, hidden_size=32, num_attention_heads=4,
                  intermediate_size=64, vocab_size=61)
    fields.update(changes)
    return json.dumps(fields)


def snapshot(entries) -> str:
    return json.dumps({"tfcalc_version": "0", "format": 1, "conventions": {}, "entries": entries})


DEVICE = ("name: My GPU\npeak_flops: {bf16: 200.0e12}\nbandwidth_bytes_per_s: 1.0e12\nmemory_bytes: 48.0e9\n"
          "intra_node_bytes_per_s: 1.0e11\ninter_node_bytes_per_s: 1.0e10\n")


def device(**changes) -> str:
    """A device file (tfcalc.devices.load_spec) with some fields' text replaced."""
    text = DEVICE
    for name, value in changes.items():
        lines = [line for line in text.splitlines() if not line.startswith(f"{name}:")]
        text = "\n".join(lines + [f"{name}: {value}"]) + "\n"
    return text


FILES = {
    "tiny.yaml": TINY,
    "bomb.yaml": alias_bomb(),
    "bomb7.yaml": alias_bomb(levels=7),
    "cycle.yaml": TINY + "source: &a [1, *a]\n",
    "deep.yaml": "a: " + "[" * 100_000 + "]" * 100_000 + "\n",
    "deep70.yaml": TINY + "source: " + "[" * 70 + "]" * 70 + "\n",
    "dup.yaml": TINY + "n_layer: 3\n",
    "dup_nested.yaml": TINY + "source: {a: 1, a: 2}\n",
    "long_int.yaml": TINY.replace("n_layer: 2", "n_layer: " + "9" * 5000),
    "wide_int.yaml": TINY.replace("n_layer: 2", "n_layer: " + "9" * 4000),
    "too_big_int.yaml": TINY.replace("n_layer: 2", f"n_layer: {2**41}"),
    "huge_ffn_mult.yaml": TINY + "ffn_mult: 1.0e+308\n",
    "inf_layers.yaml": TINY.replace("n_layer: 2", "n_layer: 1e400"),
    "nan_layers.yaml": TINY.replace("n_layer: 2", "n_layer: .nan"),
    "bool_width.yaml": TINY.replace("d_model: 32", "d_model: true"),
    "name_list.yaml": TINY + "name: [a, b]\n",
    "name_bytes.yaml": TINY + "name: !!binary aGVsbG8=\n",
    "long_key.yaml": TINY + "? " + "x" * 10_000 + "\n: 1\n",
    "long_plain_key.yaml": TINY + "x" * 10_000 + ": 1\n",
    "python_tag.yaml": TINY + "name: !!python/object/apply:os.system ['true']\n",
    "list.yaml": "- 1\n- 2\n",
    "empty.yaml": "",
    "bad_syntax.yaml": "n_layer: [1,\n",
    "tab.yaml": "n_layer:\t\t- 2\n\t- x\n",
    "huge_experts.yaml": TINY + "n_expert: 100000\nn_expert_active: 2\n",
    "deep_model.yaml": TINY.replace("n_layer: 2", "n_layer: 100000"),
    "list_type/config.json": hf(["llama"]),
    "dict_type/config.json": hf({"llama": 1}),
    "list_act/config.json": hf(hidden_act=["silu"]),
    "list_pos/config.json": hf("bert", max_position_embeddings=16, position_embedding_type=["absolute"]),
    "dup_key/config.json": hf()[:-1] + ', "vocab_size": 62}',
    "long_number/config.json": hf()[:-1] + ', "num_key_value_heads": ' + "7" * 5000 + "}",
    "nan_layers/config.json": hf(num_hidden_layers=float("nan")),
    "deep/config.json": "[" * 100_000 + "]" * 100_000,
    "deep70/config.json": hf()[:-1] + ', "x": ' + "[" * 70 + "]" * 70 + "}",
    "top_list/config.json": "[1, 2]",
    "not_json/config.json": "{model_type: llama",
    "snap_overrides_ints.json": snapshot([{"spec": "gpt2", "overrides": [1]}]),
    "snap_preset_dict.json": snapshot([{"spec": "gpt2", "preset": {"a": 1}}]),
    "snap_spec_list.json": snapshot([{"spec": ["gpt2"]}]),
    "snap_figures_list.json": snapshot([{"spec": "gpt2", "params": [1]}]),
    "snap_empty.json": snapshot([]),
    "snap_entries_dict.json": json.dumps({"format": 1, "entries": {"a": 1}}),
    "snap_format2.json": json.dumps({"format": 2, "entries": [{"spec": "gpt2"}]}),
    "snap_deep.json": '{"format": 1, "entries": [' + "[" * 100_000 + "]" * 100_000 + "]}",
    "snap_dup.json": '{"format": 1, "format": 1, "entries": [{"spec": "gpt2"}]}',
    "snap_long_format.json": '{"format": ' + "1" * 5000 + ', "entries": []}',
    "name[v2].yaml": TINY + 'name: "m[bold]x[/]"\nsource: "[fp16] src [/]"\n',
    "dollar.yaml": TINY + 'name: "cost $5 \\\\frac{a $x^"\n',
    "dev_half.yaml": device(memory_bytes="0.5"),
    "dev_400_digits.yaml": device(memory_bytes="9" * 400),
    "dev_5000_digits.yaml": device(bandwidth_bytes_per_s="9" * 5000),
    "dev_dup.yaml": DEVICE + "memory_bytes: 1\n",
    "dev_gpus_per_node.yaml": device(gpus_per_node="1e9"),
    "dev_tiny_rates.yaml": device(peak_flops="{bf16: 1.0e-300}"),
    "dev_name_list.yaml": device(name="[a, b]"),
    "dev_escape.yaml": device(name='"\\e[2J\\e]0;pwned\\a"'),
    **DEEPSEEK_FILES,  # DeepSeek's configs (tests/deepseek_configs.py)
    **CFG_FILES,  # issue 33's per-layer lists and scales (tests/hostile_cfg.py)
}


def write(folder: Path) -> Path:
    """Write every file of FILES into folder, and the special ones: a FIFO, a 1 MiB + 1 byte YAML, bytes
    that are not UTF-8, a folder named like a config, and a symlink to /dev/null."""
    for name, text in FILES.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    (folder / "big.yaml").write_text(TINY + "# " + "x" * (1 << 20) + "\n", encoding="utf-8")
    (folder / "latin1.yaml").write_bytes(TINY.encode() + b"source: caf\xe9\n")
    (folder / "folder.yaml").mkdir()
    os.mkfifo(folder / "fifo.yaml")
    os.mkfifo(folder / "fifo.json")
    os.mkfifo(folder / "fifo.png")
    (folder / "old.png").write_bytes(b"\x89PNG old plot")
    (folder / "null-link.json").symlink_to("/dev/null")
    (folder / "snap_bomb.json").write_text(snapshot([{"spec": str(folder / "bomb.yaml")}]), encoding="utf-8")
    _checkpoints(folder)
    hostile_runs.write(folder)
    for name, files in CFG_CHECKPOINTS.items():  # issue 33's gpt-oss folders (tests/hostile_cfg.py)
        (folder / name).mkdir()
        for file, content in files.items():
            path = folder / name / file
            path.write_bytes(content) if isinstance(content, bytes) else path.write_text(content, encoding="utf-8")
    return folder


def _checkpoints(folder: Path) -> None:
    """Model folders (a config.json each) whose weights are hostile: a FIFO named like a safetensors file
    or an index, an index that nests, repeats a key or points outside, bytes that are not safetensors, and
    a header that claims 2^60 bytes."""
    def model(name: str) -> Path:
        path = folder / name
        path.mkdir()
        (path / "config.json").write_text(hf(), encoding="utf-8")
        return path

    os.mkfifo(model("ckpt_fifo") / "model.safetensors")
    os.mkfifo(model("ckpt_index_fifo") / "model.safetensors.index.json")
    index = "model.safetensors.index.json"
    (model("ckpt_index_deep") / index).write_text('{"weight_map": ' + "[" * 100_000 + "]" * 100_000 + "}")
    (model("ckpt_index_dup") / index).write_text('{"weight_map": {"a": "x.safetensors"}, "weight_map": {}}')
    (model("ckpt_index_escape") / index).write_text('{"weight_map": {"a": "/etc/passwd"}}')
    (model("ckpt_garbage") / "model.safetensors").write_bytes(b"\x00" * 64)
    (model("ckpt_huge_header") / "model.safetensors").write_bytes((1 << 60).to_bytes(8, "little") + b"{}")
    (model("ckpt_tiny") / "model.safetensors").write_bytes(safetensors_bytes({"model.embed_tokens.weight": [61, 32]}))
    wrong = model("ckpt_wrong_shape")  # a GPT-2 config whose embedding is 16 wide in the weights, 32 in the config
    (wrong / "config.json").write_text(json.dumps(dict(model_type="gpt2", n_layer=1, n_embd=32, n_head=4,
                                                       n_positions=16, vocab_size=61)), encoding="utf-8")
    (wrong / "model.safetensors").write_bytes(safetensors_bytes({"wte.weight": [61, 16]}))


def safetensors_bytes(shapes: dict[str, list[int]]) -> bytes:
    """A safetensors file of zero-filled F32 tensors (the format: an 8-byte header length, a JSON header of
    dtype, shape and data offsets, then the data), written without torch."""
    header, offset = {}, 0
    for name, shape in shapes.items():
        size = 4 * math.prod(shape)
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    return len(text).to_bytes(8, "little") + text + b"\x00" * offset
