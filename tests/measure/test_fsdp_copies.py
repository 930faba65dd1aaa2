"""FSDP2's copy kernels measured on 2 gloo ranks (tests/measure/fsdp_copy_rank.py: bf16 parameters, fp32
reduction) against tfcalc.count.training.overlap_costs' derivation: the all-gather's copy-out reads and writes
its payload, its copy-in reads and writes payload / N, the reduce-scatter's copy-in writes its payload in the
reduce dtype and reads the same (unpadded) elements in the parameter dtype."""

import json
import sys
from pathlib import Path

import pytest

from tfcalc.count.training.comm import Collective
from tfcalc.count.training.overlap_costs import NCCL_HBM_PASSES, dp_hbm_bytes
from tfcalc.measure.launch import run_ranks

RANK = Path(__file__).with_name("fsdp_copy_rank.py")


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    folder = tmp_path_factory.mktemp("fsdp_copies")
    out, logs = folder / "out.json", [str(folder / f"rank{r}.log") for r in range(2)]
    run_ranks([sys.executable, str(RANK), str(out)], 2, logs, 180)
    return json.loads(out.read_text())


def test_fsdp2_copies_are_the_derivations(measured):
    rows, n = measured["rows"], measured["world"]
    gathers = [Collective("zero_params", "all_gather", "dp", n, p, 1) for k, p, _ in rows if k == "all_gather"]
    scatters = [Collective("dp_grads", "reduce_scatter", "dp", n, p, 1) for k, p, _ in rows if k == "reduce_scatter"]
    assert len(gathers) == 4 and len(scatters) == 2  # two layers, resharded after forward: gathered twice each
    derived = dp_hbm_bytes(gathers + scatters, zero=3, weight_bytes=2, grad_bytes=4)
    copy_out = sum(r + w for k, r, w in rows if k == "copy_out")
    copy_in_ag = sum(r + w for k, r, w in rows if k == "copy_in_ag")
    rs_read = sum(r for k, r, _ in rows if k == "copy_in_rs")
    rs_written = sum(w for k, _, w in rows if k == "copy_in_rs")
    assert copy_out == sum(2 * c.payload_bytes for c in gathers)  # exact
    assert copy_in_ag == sum(2 * c.payload_bytes // n for c in gathers)  # exact
    assert rs_written == sum(c.payload_bytes for c in scatters)  # exact, padding included
    # read: the gradients as computed, without FSDP2's padding (a row of 33 on 2 ranks pads to 34)
    derived_read = sum(c.payload_bytes // 2 for c in scatters)
    assert 0.95 * derived_read <= rs_read <= derived_read
    assert derived.exposed == copy_out + rs_written + derived_read
    assert derived.copy_calls == len(gathers) + len(scatters)
    sent = sum(c.sent_bytes for c in gathers + scatters)
    assert derived.overlapped == NCCL_HBM_PASSES * sent + copy_in_ag
