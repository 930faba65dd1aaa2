"""plan names the link between a node's GPUs by its kind (issue 20, part G, point 3): the PCIe nodes of the
device table (h100-pcie, a100-pcie) were labelled NVLink in the communication table and the notes, while
the step time already priced their collectives at PCIe's rate, latency and bus efficiency."""

from __future__ import annotations

import pytest

from tfcalc import devices


@pytest.mark.parametrize(("spec", "kind", "name"), [
    ("h100-pcie", "pcie", "PCIe"), ("a100-pcie", "pcie", "PCIe"), ("l40s", "pcie", "PCIe"),
    ("h100-sxm", "nvlink", "NVLink"), ("a100-80gb", "nvlink", "NVLink"), ("mi300x", "nvlink", "Infinity Fabric"),
])
def test_the_intra_node_link_is_named_by_its_kind(cli, spec, kind, name):
    assert devices.intra_link(devices.by_key(spec)) == kind
    assert devices.intra_link_name(devices.by_key(spec)) == name
    r = cli("plan", "llama2-7b", "--tp", "8", "--device-spec", spec, "--seq", "1024")
    assert r.code == 0, r.err
    text = " ".join(r.out.split())
    assert f"tp ×8, {name}" in text  # the TP collectives' group, inside one node
    assert f"GB on the datasheet, {name} " in text  # the notes' interconnect line
    others = {"PCIe", "NVLink", "Infinity Fabric"} - {name}
    assert not any(f"tp ×8, {o}" in text for o in others)
    j = cli("plan", "llama2-7b", "--tp", "8", "--device-spec", spec, "--seq", "1024", "--json").json()
    assert j["intra_link"] == kind and j["intra_link_name"] == name


def test_the_groups_across_nodes_say_network(cli):
    # 16 GPUs of tp 8 × dp 2 on 8-GPU PCIe nodes: TP inside a node (PCIe), DP across (the network)
    text = " ".join(cli("plan", "llama2-7b", "--tp", "8", "--dp", "2", "--device-spec", "h100-pcie",
                        "--seq", "1024").out.split())
    assert "tp ×8, PCIe" in text and "dp ×2, network" in text and "NVLink" not in text


def test_a_users_device_names_pcie_or_says_intra_node(tmp_path):
    base = "name: My GPU\npeak_flops: {bf16: 100.0e12}\nbandwidth_bytes_per_s: 1.0e12\nmemory_bytes: 24.0e9\n" \
           "inter_node_bytes_per_s: 12.5e9\ngpus_per_node: 4\n"
    pcie, other = tmp_path / "pcie.yaml", tmp_path / "other.yaml"
    pcie.write_text(base + "intra_node_bytes_per_s: 64.0e9\n")  # PCIe Gen5 x16, one direction
    other.write_text(base + "intra_node_bytes_per_s: 200.0e9\n")
    assert devices.intra_link_name(devices.resolve(str(pcie))) == "PCIe"
    assert devices.intra_link_name(devices.resolve(str(other))) == "intra-node link"  # the file does not say
