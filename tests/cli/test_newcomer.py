"""What a newcomer meets first (issue 32): the same device memory in `devices`, `plan` and `infer`; infer's
defaults within the context; honest fits with host memory; commands that name what they assumed."""

from __future__ import annotations

import pytest

from tfcalc import devices

# torch.cuda.get_device_properties(0).total_memory on an "NVIDIA H100 80GB HBM3" is 81089 MiB (printed in
# public logs, e.g. stas00/ml-engineering's network benchmarks): the reference for the driver's figure.
H100_DRIVER_BYTES = 81089 * 2**20


def test_devices_shows_the_drivers_memory_plan_and_infer_use(cli):
    table = {d["key"]: d for d in cli("devices", "--json").json()}
    h100 = table["h100-sxm"]
    assert abs(h100["driver_memory_bytes"] - H100_DRIVER_BYTES) < 2**20  # 79.19 GiB, not 80e9 B = 74.51 GiB
    assert h100["memory_bytes"] == 80e9  # the datasheet figure, the field a device file takes, kept
    for key in ("h100-sxm", "a100-40gb", "l4"):
        plan = cli("plan", "gpt2", "--gpus", "1", "--device-spec", key, "--json").json()
        infer = cli("infer", "gpt2", "--device-spec", key, "--seq", "64", "--gen", "8", "--json").json()
        assert table[key]["driver_memory_bytes"] == plan["device_driver_bytes"] == infer["driver_memory_bytes"]
        assert table[key]["usable_memory_bytes"] == infer["memory_bytes"]  # one GPU: less the CUDA context


@pytest.mark.parametrize("columns", [60, 80, 120, 200])
def test_devices_table_shows_79_gib_for_an_h100(cli, monkeypatch, columns):
    monkeypatch.setenv("COLUMNS", str(columns))
    r = cli("devices")
    assert r.code == 0, r.err
    row = next(line for line in r.out.splitlines() if line.startswith("h100-sxm"))
    assert "79.19 GiB" in row and "74.51" not in r.out


def test_driver_bytes_is_the_one_function_and_takes_a_users_file_as_given(tmp_path):
    assert abs(devices.driver_bytes(devices.by_key("h100-sxm")) - H100_DRIVER_BYTES) < 2**20
    path = tmp_path / "mine.yaml"
    path.write_text("name: Mine\npeak_flops: {bf16: 1.0e14}\nbandwidth_bytes_per_s: 1.0e12\nmemory_bytes: 4.0e10\n")
    spec = devices.load_spec(path)
    assert devices.driver_bytes(spec) == devices.usable_bytes(spec) == 40_000_000_000
