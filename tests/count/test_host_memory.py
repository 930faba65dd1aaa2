"""Offload fills a node's host memory (issue 32): every node has it, the search keeps only layouts whose node
holds what its ranks offload, and a device file may state its own."""

from __future__ import annotations

import dataclasses

import pytest

from tfcalc import devices
from tfcalc.count.training.layout import Layout
from tfcalc.count.training.plan import make_plan, search
from tfcalc.errors import InputError
from tfcalc.presets import load
from tfcalc.report.plan import hardware

TiB = 2**40


def test_every_table_node_has_host_memory_with_a_source():
    for spec in devices.SPECS:
        assert spec.host_memory_bytes and spec.host_memory_bytes >= 64 * 2**30, spec.key
        assert spec.host_memory_source, spec.key
    # NVIDIA DGX H100 datasheet: 2 TB of system memory, 32 × 64 GB DIMMs
    assert devices.by_key("h100-sxm").host_memory_bytes == 32 * 64 * 2**30 == 2 * TiB


def test_optimizer_offload_host_bytes_per_node_by_hand():
    """ZeRO-Offload (Ren et al. 2021, sec. 4.1): the host holds the shard's fp32 master weights, Adam m and v
    (12 bytes a parameter) and its fp32 gradients (4): 16·Ψ/8 a rank of a ZeRO-3 dp 8 layout, 8 ranks a node."""
    cfg = load("llama3-70b")
    hw = hardware(devices.by_key("h100-sxm"), "bf16")
    layout = Layout(tp=1, pp=1, dp=8, seq=8192, global_batch=512, micro_batch=1, zero=3, recompute="full",
                    offload_optimizer=True)
    plan = make_plan(cfg, layout, hw, None)
    psi = 70_553_706_496  # llama3-70b's parameters (Meta's model card: 70.6B)
    assert plan.memory.host == pytest.approx(16 * psi / 8, rel=1e-3)  # rows padded to the shard: a hair more
    assert plan.ranks_per_node == 8 and plan.host_per_node == 8 * plan.memory.host
    assert plan.host_fits == (plan.host_per_node <= 2 * TiB)


def test_the_search_keeps_only_layouts_whose_host_memory_fits():
    """llama3-70b on 8 H100s fits only with offload; without the host check 569 layouts 'fit' (issue 32), some
    needing 2.85 TB a node. With it: exactly those whose node holds its ranks' offload."""
    cfg = load("llama3-70b")
    hw = hardware(devices.by_key("h100-sxm"), "bf16")
    base = Layout(tp=1, pp=1, dp=1, seq=8192, global_batch=512, micro_batch=1)
    from tfcalc.count.training.search_space import SearchSpace

    space = SearchSpace()
    checked = search(cfg, 8, base, hw, None, space=space)
    unchecked = search(cfg, 8, base, dataclasses.replace(hw, host_memory_bytes=None), None, space=space)
    assert checked and len(checked) < len(unchecked)
    assert all(p.host_per_node <= 2 * TiB and p.memory.total <= hw.memory_bytes for p in checked)
    over = [p for p in unchecked if p.memory.host * 8 > 2 * TiB]
    assert over and len(checked) == len(unchecked) - len(over)
    assert max(p.memory.host for p in over) * 8 > 2.8e12  # the 2.85 TB a node of the issue is among them


HOST_FILE = ("name: Small host\npeak_flops: {bf16: 989.0e12}\nbandwidth_bytes_per_s: 3.35e12\nmemory_bytes: 84.0e9\n"
             "intra_node_bytes_per_s: 450.0e9\ninter_node_bytes_per_s: 50.0e9\ngpus_per_node: 8\n")


def test_a_device_file_states_its_nodes_host_memory(tmp_path):
    path = tmp_path / "node.yaml"
    path.write_text(HOST_FILE + "host_memory_bytes: 1.0e12\n")
    spec = devices.load_spec(path)
    assert spec.host_memory_bytes == 10**12 and devices.spec_from_mapping(devices.as_dict(spec), path) == spec
    path.write_text(HOST_FILE)
    assert devices.load_spec(path).host_memory_bytes is None  # optional: not checked, and said so


@pytest.mark.parametrize("value, message", [
    ("-1", "must be a positive number"), ("0", "must be a positive number"), ("lots", "must be a positive number"),
    ("true", "must be a positive number"), ("[1, 2]", "must be a positive number"), ("1.0e30", "must be at most"),
    ("2", "must be at least"), (".nan", "must be a positive number"), ("'2TiB'", "must be a positive number"),
    ("1" * 400, "must be at most"),
])
def test_hostile_host_memory_fields_are_one_line_errors(tmp_path, value, message):
    path = tmp_path / "node.yaml"
    path.write_text(HOST_FILE + f"host_memory_bytes: {value}\n")
    with pytest.raises(InputError, match=message) as e:
        devices.load_spec(path)
    assert "host_memory_bytes" in str(e.value) and "\n" not in str(e.value)
