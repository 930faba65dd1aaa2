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


def test_infer_defaults_stay_within_the_context(cli):
    """The default prompt is the context less --gen: llama3-70b's 8,192 holds 7,936 + 256 (issue 32)."""
    r = cli("infer", "llama3-70b", "--device-spec", "h100-sxm", "--json")
    assert r.code == 0 and r.err == "", r.err
    data = r.json()
    assert data["seq"] + data["gen"] == 8192 and not data["beyond_context"]
    assert cli("infer", "llama3-70b", "--gen", "1k", "--json").json()["seq"] == 8192 - 1024
    table = cli("infer", "llama3-70b", "--device-spec", "h100-sxm")
    assert "context" not in table.err and "go past" not in table.out
    assert "prompt 7,936 + 256" in " ".join(table.out.split())


@pytest.mark.parametrize("columns", [60, 80, 120, 200])
def test_infer_says_which_batch_does_not_fit_at_any_width(cli, monkeypatch, columns):
    monkeypatch.setenv("COLUMNS", str(columns))
    r = cli("infer", "llama2-7b", "--batch", "1,8,64", "--seq", "3k")
    assert r.code == 0, r.err
    words = " ".join(r.out.split())
    # weights 13,476,831,232 B + 64 sequences × 3,328 positions × 2 (K, V) × 32 layers × 4,096 × 2 B = 124.3 GiB
    # past 78.69 GiB; 40 sequences of 3,328 positions fit: (84,491,108,352 − 13,476,831,232) // 1,744,830,464 = 40
    assert "Batch 64 does not fit: weights + KV cache past the 78.69 GiB usable; the largest that fits is 40" in words
    fine = cli("infer", "llama2-7b", "--batch", "1,8", "--seq", "3k")
    assert "does not fit" not in fine.out
