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
def test_devices_table_shows_79_gib_for_an_h100(cli, monkeypatch, columns, width):
    width(columns)
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
def test_infer_says_which_batch_does_not_fit_at_any_width(cli, monkeypatch, columns, width):
    width(columns)
    r = cli("infer", "llama2-7b", "--batch", "1,8,64", "--seq", "3k")
    assert r.code == 0, r.err
    words = " ".join(r.out.split())
    # weights 13,476,831,232 B + 64 sequences × 3,328 positions × 2 (K, V) × 32 layers × 4,096 × 2 B = 124.3 GiB
    # past 78.52 GiB; 40 sequences of 3,328 positions fit: (84,313,309,184 − 13,476,831,232) // 1,744,830,464 = 40
    assert "Batch 64 does not fit: weights + KV cache past the 78.52 GiB usable; the largest that fits is 40" in words
    fine = cli("infer", "llama2-7b", "--batch", "1,8", "--seq", "3k")
    assert "does not fit" not in fine.out


@pytest.mark.parametrize("columns", [60, 80, 120, 200])
def test_plan_says_in_words_that_it_needs_offload_and_the_host_memory(cli, monkeypatch, columns, width):
    width(columns)
    r = cli("plan", "llama3-70b", "--gpus", "8")
    assert r.code == 0, r.err
    words = " ".join(r.out.split())
    assert "llama3-70b does not fit 8 GPUs without offload; with optimizer and activation offload it needs" in words
    assert "of host memory per node (8 ranks ×" in words and "the node has 2 TiB)" in words
    assert "Host memory per node: fits" in words


def test_plan_json_counts_host_memory_per_node_and_auto_agrees(cli):
    data = cli("plan", "llama3-70b", "--gpus", "8", "--json").json()
    host = data["host"]
    assert host["node_bytes"] == 2**41 and host["ranks_per_node"] == 8 and host["fits"] and data["fits"]
    assert host["bytes_per_node"] == 8 * data["per_rank"]["host_bytes"] <= 2**41
    assert data["search"]["offload_needed"]
    auto = cli("plan", "llama3-70b", "--json").json()  # --gpus auto: the fewest without offload first
    assert auto["gpus"] == 16 and not auto["search"]["offload_needed"] and auto["host"]["bytes_per_node"] == 0


def test_plan_refuses_offload_a_small_host_cannot_hold(cli, tmp_path):
    path = tmp_path / "small-host.yaml"
    path.write_text("name: H100 with a small host\npeak_flops: {bf16: 989.0e12}\nbandwidth_bytes_per_s: 3.35e12\n"
                    "memory_bytes: 84.0e9\nintra_node_bytes_per_s: 450.0e9\ninter_node_bytes_per_s: 50.0e9\n"
                    "gpus_per_node: 8\nhost_memory_bytes: 256.0e9\n")
    r = cli("plan", "llama3-70b", "--gpus", "8", "--device-spec", str(path))
    assert r.code == 2 and r.out == "" and r.err.count("\n") == 1
    assert "without offload; with optimizer offload it needs at least" in r.err
    assert "of host memory per node, more than the node's 238.4 GiB" in r.err
    given = cli("plan", "llama3-70b", "--dp", "8", "--zero", "3", "--offload", "optimizer", "--device-spec", str(path),
                "--json").json()
    assert given["host"]["fits"] is False and given["fits"] is False


def test_devices_lists_each_nodes_host_memory(cli, width):
    width(200)
    table = {d["key"]: d for d in cli("devices", "--json").json()}
    assert table["h100-sxm"]["host_memory_bytes"] == 2**41 and all(d["host_memory_bytes"] for d in table.values())
    row = next(line for line in cli("devices").out.splitlines() if line.startswith("h100-sxm"))
    assert row.rstrip().endswith("2 TiB")
