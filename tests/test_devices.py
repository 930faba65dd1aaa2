"""The device table: every entry complete and sourced, lookups by key and by torch's name, user YAML specs."""

from __future__ import annotations

import pytest

from tfcalc import devices
from tfcalc.errors import InputError

ISSUE_KEYS = ("h100-sxm", "h100-pcie", "h100-nvl", "h200", "a100-40gb", "a100-80gb", "l40s", "l4", "a10g",
              "rtx-4090", "mi300x", "b200")


@pytest.mark.parametrize("key", ISSUE_KEYS)
def test_every_asked_for_device_is_in_the_table(key):
    spec = devices.by_key(key)
    assert spec.key == key and spec.source and spec.node
    assert spec.peak("bf16") > spec.peak("fp32") > 0
    assert spec.bandwidth_bytes_per_s > 1e11 and spec.memory_bytes >= 16e9
    assert spec.intra_node_bytes_per_s > spec.inter_node_bytes_per_s > 0
    assert spec.gpus_per_node >= 1


def test_keys_are_unique_and_lowercase():
    keys = devices.keys()
    assert len(keys) == len(set(keys)) and all(k == k.lower() for k in keys)


@pytest.mark.parametrize("torch_name, key", [
    ("NVIDIA H100 80GB HBM3", "h100-sxm"), ("NVIDIA H100 PCIe", "h100-pcie"), ("NVIDIA H100 NVL", "h100-nvl"),
    ("NVIDIA H200", "h200"), ("NVIDIA A100-SXM4-40GB", "a100-40gb"), ("NVIDIA A100-SXM4-80GB", "a100-80gb"),
    ("NVIDIA A100 80GB PCIe", "a100-pcie"), ("NVIDIA L40S", "l40s"), ("NVIDIA L4", "l4"), ("NVIDIA A10G", "a10g"),
    ("NVIDIA GeForce RTX 4090", "rtx-4090"), ("AMD Instinct MI300X", "mi300x"), ("NVIDIA B200", "b200"),
    ("Tesla T4", "t4"), ("Tesla V100-SXM2-32GB", "v100"),
])
def test_lookup_by_the_name_torch_reports(torch_name, key):
    assert devices.lookup(torch_name).key == key


@pytest.mark.parametrize("name", ["AMD EPYC 7B13", "NVIDIA L40", "NVIDIA A10", "cpu (2 threads)"])
def test_unknown_devices_get_no_spec(name):
    assert devices.lookup(name) is None  # L40 and A10 are not L40S / L4 / A10G: whole tokens only


def test_hopper_datasheet_figures_and_ridge():
    h100 = devices.by_key("h100-sxm")
    assert h100.peak("bf16") == 989e12 and h100.bandwidth_bytes_per_s == 3.35e12
    assert h100.ridge("bf16") == pytest.approx(295.2, abs=0.1)  # reference.md: ridge ≈ 295
    assert h100.intra_node_bytes_per_s == 450e9  # NVLink 4: 900 GB/s bidirectional
    assert devices.by_key("h200").peak_flops == h100.peak_flops
    assert devices.by_key("h200").bandwidth_bytes_per_s == 4.8e12


def test_tf32_mode_and_missing_dtypes():
    a100 = devices.by_key("a100-80gb")
    assert a100.peak("fp32", tf32_enabled=True) == 156e12 and a100.peak("fp32") == 19.5e12
    assert a100.peak("fp8") is None and a100.ridge("fp8") is None


def test_unknown_key_is_one_line_with_a_suggestion():
    with pytest.raises(InputError, match="did you mean 'h100-sxm'"):
        devices.by_key("h100-sxn")


def test_user_spec_from_yaml(tmp_path):
    path = tmp_path / "my-gpu.yaml"
    path.write_text("name: My GPU\npeak_flops: {bf16: 200e12, fp32: '50e12'}\n"
                    "bandwidth_bytes_per_s: 1.0e12\nmemory_bytes: 48e9\n")
    spec = devices.resolve(str(path))
    assert spec.key == "my-gpu" and spec.peak("bf16") == 200e12 and spec.peak("fp32") == 50e12
    assert spec.memory_bytes == 48_000_000_000 and spec.intra_node_bytes_per_s is None and spec.gpus_per_node == 1
    assert devices.spec_from_mapping(devices.as_dict(spec), path) == spec  # the JSON form reads back


@pytest.mark.parametrize("text, message", [
    ("name: x\npeak_flops: {bf16: 1.0}\nbandwidth_bytes_per_s: 1.0\n", "missing required field 'memory_bytes'"),
    ("name: x\npeak_flops: {bf17: 1.0}\nbandwidth_bytes_per_s: 1.0\nmemory_bytes: 1\n", "unknown dtype 'bf17'"),
    ("name: x\npeak_flops: {bf16: -1.0}\nbandwidth_bytes_per_s: 1.0\nmemory_bytes: 1\n", "peak_flops.bf16"),
    ("name: x\npeak_flops: {bf16: 1.0}\nbandwidth_bytes_per_s: fast\nmemory_bytes: 1\n", "bandwidth_bytes_per_s"),
    ("name: x\npeak_flops: {bf16: 1.0}\nbandwith_bytes_per_s: 1.0\nmemory_bytes: 1\n", "did you mean"),
    ("name: x\npeak_flops: []\nbandwidth_bytes_per_s: 1.0\nmemory_bytes: 1\n", "must map dtypes"),
])
def test_bad_user_specs_are_one_line_errors(tmp_path, text, message):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(InputError, match=message):
        devices.load_spec(path)


def test_rated_dtypes_are_the_counted_ones():
    from tfcalc.count.model.dtypes import DTYPES

    assert devices.RATED_DTYPES == DTYPES  # devices sits below count, so it names them itself


def test_unreadable_spec_files(tmp_path):
    with pytest.raises(InputError, match="no such file"):
        devices.resolve(str(tmp_path / "absent.yaml"))
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: [unclosed\n")
    with pytest.raises(InputError, match="not valid YAML"):
        devices.resolve(str(bad))
    bad.write_text("- a list\n")
    with pytest.raises(InputError, match="expected a mapping"):
        devices.resolve(str(bad))
